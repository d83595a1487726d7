//! Configuration errors: each names the field at fault.

use std::fmt;

/// A configuration error, e.g.
/// `profiles[0].pluginConfig[1].args.scoringStrategy.type: unknown strategy "Foo"`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The field path, `profiles[0].plugins.filter.enabled[1]`; empty for
    /// the document itself.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl ConfigError {
    /// An error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }

    /// `Invalid value: <value>: <detail>`, as the API's field errors read.
    pub fn invalid(path: impl Into<String>, value: impl fmt::Display, detail: &str) -> Self {
        Self::new(path, format!("Invalid value: {value}: {detail}"))
    }

    /// `Required value`.
    pub fn required(path: impl Into<String>) -> Self {
        Self::new(path, "Required value")
    }

    /// `Duplicate value: "<value>"`.
    pub fn duplicate(path: impl Into<String>, value: &str) -> Self {
        Self::new(path, format!("Duplicate value: {value:?}"))
    }

    /// Wraps a serde error carrying a path relative to `prefix`.
    pub fn from_serde<E: fmt::Display>(prefix: &str, err: serde_path_to_error::Error<E>) -> Self {
        let inner = err.path().to_string();
        let path = join_path(prefix, if inner == "." { "" } else { &inner });
        let mut message = err.into_inner().to_string();
        // YAML errors repeat the path of the enclosing object and end with a
        // location; keep the path once and the location in brackets.
        if let Some((head, rest)) = message.split_once(": ")
            && !head.is_empty()
            && inner.starts_with(head)
        {
            message = rest.to_string();
        }
        if let Some(i) = message.rfind(" at line ") {
            let loc = message[i + " at ".len()..].replace(" column ", ", column ");
            message = format!("{} ({loc})", &message[..i]);
        }
        Self::new(path, message)
    }
}

/// Joins a field path and a relative one (`a.b` + `c[0]` = `a.b.c[0]`).
pub fn join_path(prefix: &str, rest: &str) -> String {
    match (prefix.is_empty(), rest.is_empty()) {
        (true, _) => rest.to_string(),
        (false, true) => prefix.to_string(),
        (false, false) if rest.starts_with('[') => format!("{prefix}{rest}"),
        (false, false) => format!("{prefix}.{rest}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_join() {
        assert_eq!(join_path("", "a"), "a");
        assert_eq!(join_path("a", ""), "a");
        assert_eq!(join_path("a", "b.c"), "a.b.c");
        assert_eq!(join_path("a", "[0].b"), "a[0].b");
        assert_eq!(
            ConfigError::required("x.y").to_string(),
            "x.y: Required value"
        );
        assert_eq!(ConfigError::new("", "bad").to_string(), "bad");
    }
}
