//! Reading `-f` files: YAML (several documents, `List`s) or JSON (one value,
//! a stream of them, or an array), `-` meaning stdin. Every error names the
//! file, and the document when it is about one.

use std::io::Read;

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use serde_json::Value;

/// A file's text.
#[derive(Debug, Clone)]
pub struct Source {
    /// The name to use in messages (`<stdin>` for `-`).
    pub name: String,
    /// Its content.
    pub text: String,
}

impl Source {
    /// Reads `path` (`-`: stdin).
    pub fn read(path: &str) -> Result<Self> {
        if path == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading <stdin>")?;
            return Ok(Self {
                name: "<stdin>".into(),
                text,
            });
        }
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
        Ok(Self {
            name: path.to_string(),
            text,
        })
    }

    /// Whether the text is JSON rather than YAML.
    pub fn is_json(&self) -> bool {
        matches!(self.text.trim_start().as_bytes().first(), Some(b'{' | b'['))
            && self.json_values().is_ok()
    }

    fn json_values(&self) -> Result<Vec<Value>, serde_json::Error> {
        serde_json::Deserializer::from_str(&self.text)
            .into_iter::<Value>()
            .collect()
    }

    /// The objects in the file, `List`s and JSON arrays flattened.
    pub fn objects(&self) -> Result<Vec<Doc>> {
        let values: Vec<Value> = if self.is_json() {
            self.json_values()?
        } else {
            let mut values = Vec::new();
            for (i, doc) in serde_yaml::Deserializer::from_str(&self.text).enumerate() {
                let v = Value::deserialize(doc)
                    .with_context(|| format!("{}: document {}", self.name, i + 1))?;
                values.push(v);
            }
            values
        };
        let mut docs = Vec::new();
        for (i, v) in values.into_iter().enumerate() {
            let origin = format!("{}: document {}", self.name, i + 1);
            let items = match v {
                Value::Null => continue,
                Value::Array(items) => items,
                Value::Object(ref m)
                    if m.get("kind")
                        .and_then(Value::as_str)
                        .is_some_and(|k| k.ends_with("List"))
                        && m.get("items").is_some_and(Value::is_array) =>
                {
                    m.get("items")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default()
                }
                Value::Object(_) => {
                    docs.push(Doc { origin, value: v });
                    continue;
                }
                other => bail!("{origin}: expected an object, got {other}"),
            };
            for (j, item) in items.into_iter().enumerate() {
                let origin = format!("{origin}, items[{j}]");
                if !item.is_object() {
                    bail!("{origin}: expected an object, got {item}");
                }
                docs.push(Doc {
                    origin,
                    value: item,
                });
            }
        }
        Ok(docs)
    }
}

/// One object from a file.
#[derive(Debug, Clone, PartialEq)]
pub struct Doc {
    /// `file: document N` (`, items[j]` for a List's item).
    pub origin: String,
    /// The object.
    pub value: Value,
}

impl Doc {
    /// `kind`, required.
    pub fn kind(&self) -> Result<&str> {
        self.value["kind"]
            .as_str()
            .filter(|k| !k.is_empty())
            .with_context(|| format!("{}: kind: Required value", self.origin))
    }

    /// `metadata.name`, required.
    pub fn name(&self) -> Result<&str> {
        self.value["metadata"]["name"]
            .as_str()
            .filter(|k| !k.is_empty())
            .with_context(|| format!("{}: metadata.name: Required value", self.origin))
    }

    /// `metadata.namespace`, or "".
    pub fn namespace(&self) -> &str {
        self.value["metadata"]["namespace"].as_str().unwrap_or("")
    }
}

/// Names the file and document in a server message about request field
/// `field` (`pod`, `pods`): `pod.spec.x: ...` and `pods[1].spec.x: ...`
/// become `web.yaml: document 1: spec.x: ...`, in a list of several
/// errors (`[pod.a: ..., pod.b: ...]`) each one; `docs` are the objects
/// sent, in order (one for `pod`).
pub fn locate_field(message: &str, field: &str, docs: &[&Doc]) -> String {
    let one = |m: &str| -> String {
        let Some(rest) = m.strip_prefix(field) else {
            return m.to_string();
        };
        let (doc, rest) = match rest.strip_prefix('[') {
            Some(r) => match r.split_once(']') {
                Some((i, rest)) => (i.parse::<usize>().ok().and_then(|i| docs.get(i)), rest),
                None => (None, rest),
            },
            None if docs.len() == 1 => (docs.first(), rest),
            None => (None, rest),
        };
        let Some(doc) = doc else {
            return m.to_string();
        };
        match (rest.strip_prefix('.'), rest.strip_prefix(": ")) {
            (Some(path), _) => format!("{}: {path}", doc.origin),
            (_, Some(text)) => format!("{}: {text}", doc.origin),
            _ => format!("{}{rest}", doc.origin),
        }
    };
    match message.strip_prefix('[').and_then(|m| m.strip_suffix(']')) {
        Some(list) => {
            let prefix = format!(", {field}");
            let parts: Vec<String> = list
                .split(prefix.as_str())
                .enumerate()
                .map(|(i, p)| {
                    one(&if i == 0 {
                        p.to_string()
                    } else {
                        format!("{field}{p}")
                    })
                })
                .collect();
            format!("[{}]", parts.join(", "))
        }
        None => one(message),
    }
}

/// Reads every file, failing at the first that cannot be read or parsed.
pub fn read_all(paths: &[String]) -> Result<Vec<(Source, Vec<Doc>)>> {
    paths
        .iter()
        .map(|p| {
            let src = Source::read(p)?;
            let docs = src.objects()?;
            Ok((src, docs))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(text: &str) -> Source {
        Source {
            name: "f.yaml".into(),
            text: text.into(),
        }
    }

    #[test]
    fn yaml_documents_and_lists_flatten() {
        let docs = src("kind: Pod\nmetadata: {name: a}\n---\n---\nkind: List\nitems:\n- {kind: Node, metadata: {name: n}}\n- {kind: Pod, metadata: {name: b, namespace: x}}\n")
            .objects()
            .unwrap();
        let origins: Vec<&str> = docs.iter().map(|d| d.origin.as_str()).collect();
        assert_eq!(
            origins,
            [
                "f.yaml: document 1",
                "f.yaml: document 3, items[0]",
                "f.yaml: document 3, items[1]"
            ]
        );
        assert_eq!(docs[2].name().unwrap(), "b");
        assert_eq!(docs[2].namespace(), "x");
        assert_eq!(docs[1].kind().unwrap(), "Node");
    }

    #[test]
    fn json_values_streams_and_arrays() {
        let s = src("{\"kind\": \"Pod\", \"metadata\": {\"name\": \"a\"}}\n[{\"kind\": \"Node\"}]");
        assert!(s.is_json());
        let docs = s.objects().unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1].origin, "f.yaml: document 2, items[0]");
        assert_eq!(
            docs[1].name().unwrap_err().to_string(),
            "f.yaml: document 2, items[0]: metadata.name: Required value"
        );
        // YAML flow style starts with a brace too.
        let s = src("{kind: Pod, metadata: {name: a}}");
        assert!(!s.is_json());
        assert_eq!(s.objects().unwrap()[0].name().unwrap(), "a");
    }

    #[test]
    fn errors_name_the_file_and_document() {
        let e = src("kind: Pod\n---\nkind: [unclosed\n")
            .objects()
            .unwrap_err();
        assert!(
            format!("{e:#}").starts_with("f.yaml: document 2: "),
            "{e:#}"
        );
        let e = src("just a string\n").objects().unwrap_err();
        assert_eq!(
            e.to_string(),
            "f.yaml: document 1: expected an object, got \"just a string\""
        );
        let e = Source::read("/nonexistent/pod.yaml").unwrap_err();
        assert!(
            format!("{e:#}").starts_with("reading /nonexistent/pod.yaml: "),
            "{e:#}"
        );
    }

    #[test]
    fn request_fields_in_messages_become_the_file_and_document() {
        let doc = |origin: &str| Doc {
            origin: origin.into(),
            value: serde_json::json!({}),
        };
        let (a, b) = (doc("web.yaml: document 1"), doc("web.yaml: document 2"));
        assert_eq!(
            locate_field(
                "pod.spec.nodeSelektor: unknown field \"nodeSelektor\"",
                "pod",
                &[&a]
            ),
            "web.yaml: document 1: spec.nodeSelektor: unknown field \"nodeSelektor\""
        );
        assert_eq!(
            locate_field(
                "[pods[1].spec.containers[0].name: Required value, pods[1].spec.x: y]",
                "pods",
                &[&a, &b]
            ),
            "[web.yaml: document 2: spec.containers[0].name: Required value, web.yaml: document 2: spec.x: y]"
        );
        assert_eq!(
            locate_field("replicas: Invalid value: 9", "pods", &[&a, &b]),
            "replicas: Invalid value: 9"
        );
    }
}
