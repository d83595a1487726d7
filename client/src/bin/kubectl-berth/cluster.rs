//! The cluster side of `kubectl berth`: the kubeconfig and context chosen
//! as kubectl chooses them, pods read from the API server, and berthd
//! reached through it: a port-forward to a pod of the berth Service (the
//! leader's when the Lease names a ready one), as `kubectl port-forward
//! svc/NAME` does, over the API server's `pods/portforward` WebSocket.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use berth_client::Client;
use futures::FutureExt;
use futures::future::BoxFuture;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use parking_lot::Mutex;
use tonic::transport::Endpoint;

/// How to reach the cluster, as kubectl's flags say.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// `--kubeconfig` (default: `KUBECONFIG`, then `~/.kube/config`, then
    /// the in-cluster service account).
    pub kubeconfig: Option<PathBuf>,
    /// `--context` (default: the kubeconfig's current context).
    pub context: Option<String>,
}

/// Where a kubeconfig is looked for without `--kubeconfig`, as kubectl and
/// `kube::Config::infer` look: the files `KUBECONFIG` lists, else
/// `~/.kube/config`, else the pod's service account (in a cluster).
pub struct Search {
    /// Whether one of them is there.
    pub found: bool,
    /// What was looked at, for errors: "KUBECONFIG (not set),
    /// /home/me/.kube/config (absent), the in-cluster service account
    /// (KUBERNETES_SERVICE_HOST not set)".
    pub tried: String,
}

impl Search {
    /// Looks now.
    pub fn now() -> Self {
        let mut tried = Vec::new();
        // KUBECONFIG with at least one non-empty path is read (and must be
        // readable); empty, it is as if unset.
        let listed = std::env::var_os("KUBECONFIG")
            .is_some_and(|v| std::env::split_paths(&v).any(|p| !p.as_os_str().is_empty()));
        if listed {
            return Self {
                found: true,
                tried: "KUBECONFIG".into(),
            };
        }
        tried.push("KUBECONFIG (not set)".to_string());
        match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
            Some(home) => {
                let path = PathBuf::from(home).join(".kube").join("config");
                if path.exists() {
                    return Self {
                        found: true,
                        tried: path.display().to_string(),
                    };
                }
                tried.push(format!("{} (absent)", path.display()));
            }
            None => tried.push("~/.kube/config (HOME not set)".into()),
        }
        if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
            return Self {
                found: true,
                tried: "the in-cluster service account".into(),
            };
        }
        tried.push("the in-cluster service account (KUBERNETES_SERVICE_HOST not set)".into());
        Self {
            found: false,
            tried: tried.join(", "),
        }
    }
}

/// A client of the API server and the namespace the context names.
pub struct Cluster {
    client: kube::Client,
    /// The context's namespace, or `default`.
    pub namespace: String,
}

/// `NAMESPACE/NAME` of an object.
#[derive(Debug, Clone)]
pub struct ObjectName {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl std::str::FromStr for ObjectName {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(Self {
                    namespace: ns.into(),
                    name: name.into(),
                })
            }
            _ => Err(format!("{s:?}: expected NAMESPACE/NAME")),
        }
    }
}

impl std::fmt::Display for ObjectName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl Cluster {
    /// Connects as kubectl would with these flags.
    pub async fn connect(access: &Access) -> Result<Self> {
        let options = KubeConfigOptions {
            context: access.context.clone(),
            cluster: None,
            user: None,
        };
        let config = match &access.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path)
                    .with_context(|| format!("--kubeconfig {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .with_context(|| format!("--kubeconfig {}", path.display()))?
            }
            None if access.context.is_some() => kube::Config::from_kubeconfig(&options)
                .await
                .context("reading the kubeconfig")?,
            None => {
                let search = Search::now();
                if !search.found {
                    bail!(
                        "no kubeconfig found (tried {}): give --kubeconfig FILE, or --berth ADDR to ask berthd alone",
                        search.tried
                    );
                }
                kube::Config::infer()
                    .await
                    .with_context(|| format!("reading the kubeconfig (from {})", search.tried))?
            }
        };
        let namespace = config.default_namespace.clone();
        let client = kube::Client::try_from(config).context("the kubeconfig's cluster")?;
        Ok(Self { client, namespace })
    }

    /// The pod `namespace/name` from the API server.
    pub async fn pod(&self, namespace: &str, name: &str) -> Result<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), namespace)
            .get(name)
            .await
            .map_err(|e| api_error(e, &format!("pod {namespace}/{name}")))
    }

    /// Connects to berthd through a port-forward to a ready pod of
    /// `service` (its port `port_name`), preferring the pod that holds
    /// `lease` (the leader: a standby's queue is not the one scheduling).
    pub async fn berthd(
        &self,
        service: &ObjectName,
        port_name: &str,
        lease: &ObjectName,
    ) -> Result<(Client, Forward)> {
        let target = self.forward_target(service, port_name, lease).await?;
        let forward = Forward {
            pod: format!("{}/{}", service.namespace, target.pod),
            port: target.port,
            errors: Arc::default(),
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &service.namespace);
        let (pod, port) = (target.pod.clone(), target.port);
        let seen = forward.errors.clone();
        // Every connection tonic makes is a port-forward of its own, as
        // every connection to `kubectl port-forward`'s local port is.
        let connector = tower::service_fn(move |_: http::Uri| {
            let (pods, pod, seen) = (pods.clone(), pod.clone(), seen.clone());
            async move {
                let mut forwarder = pods.portforward(&pod, &[port]).await.map_err(|e| {
                    std::io::Error::other(format!("port-forward to pod {pod}: {e}"))
                })?;
                let stream = forwarder
                    .take_stream(port)
                    .ok_or_else(|| std::io::Error::other("port-forward: no stream for the port"))?;
                // The kubelet reports on the error channel why a forward
                // failed (nothing listening, ...): kept for the error the
                // call will end with.
                if let Some(error) = forwarder.take_error(port) {
                    seen.lock().push(error.boxed());
                }
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        });
        // The URI only names the target for logs: the connector decides
        // where bytes go.
        let uri = format!("http://{}.{}:{port}", service.name, service.namespace);
        let channel = Endpoint::from_shared(uri)
            .context("the berth Service's name")?
            .connect_with_connector(connector)
            .await
            .map_err(|e| anyhow!("{}: {}", forward.failure(), error_chain(&e)))?;
        Ok((Client::from_channel(channel), forward))
    }

    /// The pod and container port a port-forward to `service` reaches.
    async fn forward_target(
        &self,
        service: &ObjectName,
        port_name: &str,
        lease: &ObjectName,
    ) -> Result<Target> {
        let svc = Api::<Service>::namespaced(self.client.clone(), &service.namespace)
            .get(&service.name)
            .await
            .map_err(|e| {
                api_error(
                    e,
                    &format!("service {service} (berth's; --berth-service, or --berth ADDR)"),
                )
            })?;
        let spec = svc.spec.unwrap_or_default();
        let selector: BTreeMap<String, String> = spec.selector.unwrap_or_default();
        if selector.is_empty() {
            bail!("service {service} has no selector: no pod to forward to");
        }
        let ports = spec.ports.unwrap_or_default();
        let port = ports
            .iter()
            .find(|p| p.name.as_deref() == Some(port_name))
            .or(match ports.as_slice() {
                [only] => Some(only),
                _ => None,
            })
            .ok_or_else(|| {
                anyhow!("service {service} has no port named {port_name:?} (--berth-port)")
            })?;
        let labels = selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let pods = Api::<Pod>::namespaced(self.client.clone(), &service.namespace)
            .list(&ListParams::default().labels(&labels))
            .await
            .map_err(|e| api_error(e, &format!("pods of service {service}")))?;
        let ready: Vec<Pod> = pods.items.into_iter().filter(is_ready).collect();
        if ready.is_empty() {
            bail!(
                "service {service} has no ready pod (selector {labels}): berthd is not running or not ready there (`kubectl get pods -n {ns} -l {labels}`, and its /readyz says why); to reach a berthd without the Service, give its gRPC address with --berth ADDR (e.g. `kubectl port-forward -n {ns} POD 50051` in another shell, then --berth 127.0.0.1:50051)",
                ns = service.namespace
            );
        }
        let leader = self.leader(lease).await;
        let chosen = leader
            .and_then(|l| {
                ready
                    .iter()
                    .find(|p| p.metadata.name.as_deref() == Some(&l))
            })
            .unwrap_or(&ready[0]);
        let name = chosen.metadata.name.clone().unwrap_or_default();
        let number = match &port.target_port {
            None => port.port,
            Some(IntOrString::Int(n)) => *n,
            Some(IntOrString::String(named)) => chosen
                .spec
                .iter()
                .flat_map(|s| &s.containers)
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| p.name.as_deref() == Some(named.as_str()))
                .map(|p| p.container_port)
                .ok_or_else(|| {
                    anyhow!(
                        "pod {}/{name} has no container port named {named:?}",
                        service.namespace
                    )
                })?,
        };
        let port = u16::try_from(number)
            .map_err(|_| anyhow!("service {service}: port {number} is out of range"))?;
        Ok(Target { pod: name, port })
    }

    /// The pod name of the Lease's holder (client-go identities are
    /// `HOSTNAME_UUID`, and a pod's hostname is its name), when the Lease
    /// can be read.
    async fn leader(&self, lease: &ObjectName) -> Option<String> {
        let l = Api::<Lease>::namespaced(self.client.clone(), &lease.namespace)
            .get_opt(&lease.name)
            .await
            .ok()??;
        let holder = l.spec?.holder_identity?;
        let host = holder.split_once('_').map_or(holder.as_str(), |(h, _)| h);
        Some(host.to_string())
    }
}

struct Target {
    pod: String,
    port: u16,
}

/// The port-forward berthd is reached through, and what its error channels
/// said.
pub struct Forward {
    pod: String,
    port: u16,
    errors: Arc<Mutex<Vec<BoxFuture<'static, Option<String>>>>>,
}

impl Forward {
    /// What went wrong with the port-forward, for an error that ended a
    /// call: the kubelet's words when it sent them. They are in hand by
    /// then: the forwarder delivers a port's error before it closes the
    /// port's stream, whose end is what fails the call.
    pub fn failure(&self) -> String {
        let said: Vec<String> = self
            .errors
            .lock()
            .iter_mut()
            .filter_map(|e| e.now_or_never().flatten())
            .collect();
        let mut s = format!("port-forward to pod {} port {}", self.pod, self.port);
        if !said.is_empty() {
            s.push_str(&format!(" failed: {}", said.join("; ")));
        }
        s
    }
}

/// Running, Ready and not being deleted.
fn is_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().is_some_and(|s| {
            s.phase.as_deref() == Some("Running")
                && s.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

/// An API error as kubectl words it: `Error from server (NotFound): ...`.
fn api_error(e: kube::Error, what: &str) -> anyhow::Error {
    match e {
        kube::Error::Api(s) => anyhow!("{what}: Error from server ({}): {}", s.reason, s.message),
        other => anyhow!("{what}: {}", error_chain(&other)),
    }
}

/// An error and its causes on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !message.contains(&text) {
            message = format!("{message}: {text}");
        }
        source = s.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_namespace_slash_name() {
        let n: ObjectName = "kube-system/berth".parse().unwrap();
        assert_eq!(
            (n.namespace.as_str(), n.name.as_str()),
            ("kube-system", "berth")
        );
        for bad in ["berth", "/berth", "kube-system/", "a/b/c"] {
            assert!(bad.parse::<ObjectName>().is_err(), "{bad}");
        }
    }
}
