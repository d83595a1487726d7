//! Loading Kubernetes objects from YAML (or JSON): multi-document files and
//! `List`s, as `kubectl apply -f` takes them.

use std::path::Path;

use serde::Deserialize;

/// A document that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A document is not valid YAML or not an object.
    #[error("{origin}: {message}")]
    Invalid {
        /// `file: document N` (and the object, when known).
        origin: String,
        /// What is wrong.
        message: String,
    },
}

/// An object read from a document, with where it came from.
#[derive(Debug, Clone)]
pub struct LoadedObject {
    /// `file: document N` or `file: document N, items[i]`.
    pub origin: String,
    /// The object.
    pub value: serde_json::Value,
}

/// Reads every object of a YAML/JSON text. `List` documents contribute
/// their items; empty documents are skipped.
pub fn parse_objects(text: &str, source: &str) -> Result<Vec<LoadedObject>, LoadError> {
    let mut out = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let origin = format!("{source}: document {}", i + 1);
        let value = serde_json::Value::deserialize(doc).map_err(|e| LoadError::Invalid {
            origin: origin.clone(),
            message: e.to_string(),
        })?;
        match value {
            serde_json::Value::Null => continue,
            serde_json::Value::Object(ref map) => {
                let kind = map.get("kind").and_then(|k| k.as_str()).unwrap_or("");
                if kind == "List" || kind.ends_with("List") && map.contains_key("items") {
                    let items = map
                        .get("items")
                        .and_then(|i| i.as_array())
                        .cloned()
                        .unwrap_or_default();
                    for (j, item) in items.into_iter().enumerate() {
                        out.push(LoadedObject {
                            origin: format!("{origin}, items[{j}]"),
                            value: item,
                        });
                    }
                } else {
                    out.push(LoadedObject { origin, value });
                }
            }
            other => {
                return Err(LoadError::Invalid {
                    origin,
                    message: format!("expected a Kubernetes object, got {other}"),
                });
            }
        }
    }
    Ok(out)
}

/// Reads every object of a file, or of every `.yaml`/`.yml`/`.json` file in
/// a directory (sorted by name).
pub fn read_objects(path: &Path) -> Result<Vec<LoadedObject>, LoadError> {
    let io = |source| LoadError::Io {
        path: path.display().to_string(),
        source,
    };
    if path.is_dir() {
        let mut files: Vec<_> = std::fs::read_dir(path)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("yaml" | "yml" | "json")
                )
            })
            .collect();
        files.sort();
        let mut out = Vec::new();
        for f in files {
            out.extend(read_objects(&f)?);
        }
        return Ok(out);
    }
    let text = std::fs::read_to_string(path).map_err(io)?;
    parse_objects(&text, &path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_document_and_lists() {
        let text = r#"
apiVersion: v1
kind: Node
metadata: {name: n1}
---
---
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Pod, metadata: {name: a}}
- {apiVersion: v1, kind: Pod, metadata: {name: b}}
---
{"apiVersion": "v1", "kind": "PodList", "items": [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "c"}}]}
"#;
        let objs = parse_objects(text, "f.yaml").unwrap();
        let names: Vec<&str> = objs
            .iter()
            .map(|o| o.value["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["n1", "a", "b", "c"]);
        assert_eq!(objs[2].origin, "f.yaml: document 3, items[1]");
    }

    #[test]
    fn bad_documents_are_located() {
        let err = parse_objects("kind: Node\n---\n- 1\n- 2\n", "f.yaml").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("f.yaml: document 2: expected a Kubernetes object"),
            "{err}"
        );
        let err = parse_objects("a: [\n", "f.yaml").unwrap_err();
        assert!(err.to_string().starts_with("f.yaml: document 1:"), "{err}");
    }
}

#[cfg(test)]
mod bomb_tests {
    use super::*;

    #[test]
    fn alias_expansion_is_bounded() {
        // 9 levels of 9 aliases each: 387 million strings if expanded.
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let refs = vec![format!("*a{}", i - 1); 9].join(", ");
            text.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        text.push_str("kind: Pod\n");
        let err = parse_objects(&text, "bomb.yaml").unwrap_err().to_string();
        assert!(err.starts_with("bomb.yaml: document 1: "), "{err}");
        assert!(err.contains("repetition limit exceeded"), "{err}");
    }
}
