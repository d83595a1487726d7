//! `berthctl apply` and `berthctl delete`: changing the embedded cluster.

use crate::pb::{ApplyAction, ApplyResponse, DeleteResponse, ObjectReference};
use crate::{Client, ClientError};
use anyhow::{Result, anyhow, bail};
use serde_json::Value;

use crate::cli::files::{Doc, Source};
use crate::cli::output::{Output, dynamic, emit, emit_proto, render};
use crate::cli::{Rpc, RpcError};

/// `kind/namespace/name`, or `kind/name` for cluster-scoped objects, the
/// kind in lower case as kubectl prints it.
pub fn reference(r: &ObjectReference) -> String {
    let kind = r.kind.to_ascii_lowercase();
    if r.namespace.is_empty() {
        format!("{kind}/{}", r.name)
    } else {
        format!("{kind}/{}/{}", r.namespace, r.name)
    }
}

type Key = (String, String, String);

/// kubectl's word for what an apply did.
fn verb(r: &ObjectReference) -> &'static str {
    match ApplyAction::try_from(r.action) {
        Ok(ApplyAction::Created) => "created",
        Ok(ApplyAction::Unchanged) => "unchanged",
        _ => "configured",
    }
}

/// Names the file and document in the server's "yaml: document 2: ..." or
/// "objects[1]: ..." messages.
fn locate(message: &str, file: &str, docs: &[Doc]) -> String {
    if let Some(rest) = message.strip_prefix("yaml: ") {
        return format!("{file}: {rest}");
    }
    if let Some(rest) = message.strip_prefix("objects[")
        && let Some((index, rest)) = rest.split_once(']')
        && let Some(doc) = index.parse::<usize>().ok().and_then(|i| docs.get(i))
    {
        return format!("{}{rest}", doc.origin);
    }
    message.to_string()
}

/// `berthctl apply -f FILE...`: every file is read and parsed first; then
/// each is applied in one request (all of its objects or none).
pub async fn apply(
    client: &mut Client,
    format: Output,
    inputs: &[(Source, Vec<Doc>)],
) -> Result<()> {
    let mut all = Vec::new();
    for (src, docs) in inputs {
        if docs.is_empty() {
            bail!("{}: no objects to apply", src.name);
        }
        let result = if src.is_json() {
            let values: Vec<Value> = docs.iter().map(|d| d.value.clone()).collect();
            client.apply(&values, "").await
        } else {
            client.apply(&[], &src.text).await
        };
        let applied = match result {
            Ok(refs) => refs,
            Err(ClientError::Status(s)) => {
                return Err(RpcError {
                    code: s.code(),
                    message: locate(s.message(), &src.name, docs),
                }
                .into());
            }
            Err(e) => return Err(e).rpc(),
        };
        if format == Output::Table {
            let mut text = String::new();
            for r in &applied {
                text.push_str(&format!("{} {}\n", reference(r), verb(r)));
            }
            emit(&text)?;
        }
        all.extend(applied);
    }
    if format != Output::Table {
        emit_proto(format, &ApplyResponse { applied: all })?;
    }
    Ok(())
}

/// What `berthctl delete` was asked to delete.
pub enum Targets {
    /// `delete KIND NAME`.
    One {
        /// The kind.
        kind: String,
        /// The name.
        name: String,
    },
    /// `delete -f FILE...`: the files, read.
    Files(Vec<(Source, Vec<Doc>)>),
}

/// `berthctl delete KIND NAME` / `berthctl delete -f FILE...`. With files,
/// every object is tried; those that fail are reported and make the
/// command fail at the end.
pub async fn delete(
    client: &mut Client,
    format: Output,
    targets: Targets,
    namespace: &str,
    ignore_not_found: bool,
) -> Result<()> {
    let (single, list): (bool, Vec<(String, Key)>) = match targets {
        Targets::One { kind, name } => (
            true,
            vec![(String::new(), (kind, namespace.to_string(), name))],
        ),
        Targets::Files(inputs) => {
            let names: Vec<String> = inputs.iter().map(|(s, _)| s.name.clone()).collect();
            let mut list = Vec::new();
            for (_, docs) in inputs {
                for d in docs {
                    let ns = Some(d.namespace())
                        .filter(|n| !n.is_empty())
                        .unwrap_or(namespace);
                    let k = (d.kind()?.to_string(), ns.to_string(), d.name()?.to_string());
                    list.push((d.origin, k));
                }
            }
            if list.is_empty() {
                bail!("{}: no objects to delete", names.join(", "));
            }
            (false, list)
        }
    };
    let mut deleted = Vec::new();
    let mut failed = 0;
    for (origin, (kind, ns, name)) in &list {
        match client.delete(kind, ns, name).await {
            Ok(r) => {
                if format == Output::Table {
                    emit(&format!("{} deleted\n", reference(&r)))?;
                }
                deleted.push(DeleteResponse { deleted: Some(r) });
            }
            Err(ClientError::Status(s))
                if ignore_not_found && s.code() == tonic::Code::NotFound => {}
            Err(e) => {
                let err = Err::<(), _>(e).rpc().unwrap_err();
                if single {
                    return Err(err);
                }
                eprintln!("error: {origin}: {err:#}");
                failed += 1;
            }
        }
    }
    if format != Output::Table {
        if single {
            if let Some(d) = deleted.first() {
                emit_proto(format, d)?;
            }
        } else {
            let messages = deleted.iter().map(dynamic).collect::<Result<Vec<_>>>()?;
            emit(&render(format, &messages)?)?;
        }
    }
    if failed > 0 {
        return Err(anyhow!(
            "{failed} of {} object{} not deleted",
            list.len(),
            if list.len() == 1 { "" } else { "s" }
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_read_like_kubectl() {
        let r = |kind: &str, ns: &str| ObjectReference {
            kind: kind.into(),
            namespace: ns.into(),
            name: "x".into(),
            action: ApplyAction::Unchanged as i32,
        };
        assert_eq!(verb(&r("Pod", "default")), "unchanged");
        assert_eq!(reference(&r("Pod", "default")), "pod/default/x");
        assert_eq!(reference(&r("Node", "")), "node/x");
    }

    #[test]
    fn server_messages_name_the_file_and_document() {
        let docs = vec![
            Doc {
                origin: "a.json: document 1".into(),
                value: Value::Null,
            },
            Doc {
                origin: "a.json: document 2, items[0]".into(),
                value: Value::Null,
            },
        ];
        assert_eq!(
            locate("yaml: document 2: spec.x: bad", "a.yaml", &docs),
            "a.yaml: document 2: spec.x: bad"
        );
        assert_eq!(
            locate("objects[1]: spec.x: bad", "a.json", &docs),
            "a.json: document 2, items[0]: spec.x: bad"
        );
        assert_eq!(locate("objects[9]: x", "a.json", &docs), "objects[9]: x");
    }
}
