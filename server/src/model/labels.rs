//! Label sets, built once per object and searched by binary search.

use std::collections::BTreeMap;
use std::sync::Arc;

/// An object's labels, sorted by key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Labels(Box<[(Arc<str>, Arc<str>)]>);

impl Labels {
    /// Copies a Kubernetes label map (already sorted: it is a `BTreeMap`).
    pub fn from_map(map: Option<&BTreeMap<String, String>>) -> Self {
        Self(
            map.into_iter()
                .flatten()
                .map(|(k, v)| (Arc::from(k.as_str()), Arc::from(v.as_str())))
                .collect(),
        )
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.get_shared(key).map(|v| &**v)
    }

    /// The value of `key`, shared, if present.
    pub fn get_shared(&self, key: &str) -> Option<&Arc<str>> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &self.0[i].1)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// All labels, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }

    /// The number of labels.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no labels.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup() {
        let map: BTreeMap<String, String> = [("zone", "a"), ("app", "web"), ("tier", "fe")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let l = Labels::from_map(Some(&map));
        assert_eq!(l.get("app"), Some("web"));
        assert_eq!(l.get("zone"), Some("a"));
        assert_eq!(l.get("nope"), None);
        assert_eq!(l.len(), 3);
        assert!(Labels::from_map(None).is_empty());
    }
}
