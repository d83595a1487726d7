//! What any gRPC client finds on berthd's port: health per service, and
//! server reflection in both versions grpcurl uses.

use anyhow::Result;
use berth_e2e::Berthd;
use tonic::transport::Channel;

const SERVICES: [&str; 3] = [
    "berth.v1.Cluster",
    "berth.v1.Scheduler",
    "grpc.health.v1.Health",
];

async fn list_v1(channel: Channel) -> Result<Vec<String>> {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let mut client = ServerReflectionClient::new(channel);
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut stream = client
        .server_reflection_info(tokio_stream::iter([req]))
        .await?
        .into_inner();
    let resp = stream.message().await?.expect("one response");
    match resp.message_response {
        Some(MessageResponse::ListServicesResponse(l)) => {
            Ok(l.service.into_iter().map(|s| s.name).collect())
        }
        other => anyhow::bail!("unexpected {other:?}"),
    }
}

async fn describe_v1alpha(channel: Channel, symbol: &str) -> Result<usize> {
    use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;
    let mut client = ServerReflectionClient::new(channel);
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::FileContainingSymbol(symbol.to_string())),
    };
    let mut stream = client
        .server_reflection_info(tokio_stream::iter([req]))
        .await?
        .into_inner();
    let resp = stream.message().await?.expect("one response");
    match resp.message_response {
        Some(MessageResponse::FileDescriptorResponse(f)) => Ok(f.file_descriptor_proto.len()),
        other => anyhow::bail!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn health_and_reflection_are_served() -> Result<()> {
    let berthd = Berthd::start(&["--empty-cluster"]).await?;
    let client = berthd.client().await?;
    for s in ["", "berth.v1.Scheduler", "berth.v1.Cluster"] {
        assert!(client.health(s).await?, "{s:?} serving");
    }
    let unknown = client
        .health("berth.v1.Nope")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        unknown.starts_with("Not found")
            || unknown.contains("NotFound")
            || unknown.contains("not found"),
        "{unknown}"
    );

    let services = list_v1(client.channel().clone()).await?;
    for s in SERVICES {
        assert!(
            services.iter().any(|x| x == s),
            "{s} listed in {services:?}"
        );
    }
    // Older grpcurl speaks v1alpha; describing a service needs its file and
    // the files it imports.
    assert!(describe_v1alpha(client.channel().clone(), "berth.v1.Scheduler").await? >= 1);
    assert!(describe_v1alpha(client.channel().clone(), "berth.v1.QueuedPod").await? >= 1);

    assert!(berthd.stop().await?.success());
    Ok(())
}

#[tokio::test]
async fn connection_errors_name_the_address() {
    let err = berth_client::Client::connect("127.0.0.1:1")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("cannot connect to berthd at http://127.0.0.1:1:"),
        "{err}"
    );
    assert!(err.contains("Connection refused"), "{err}");
    let err = berth_client::Client::connect("not a uri")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("invalid server address \"not a uri\""),
        "{err}"
    );
}

#[tokio::test]
async fn a_bad_config_stops_startup_naming_the_field() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("berth-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let cfg = dir.join("bad.yaml");
    std::fs::write(
        &cfg,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n  pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      scoringStrategy:\n        type: Foo\n",
    )?;
    let out = std::process::Command::new(berth_e2e::berthd_path()?)
        .args(["--empty-cluster", "--listen", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .output()?;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "profiles[0].pluginConfig[0].args.scoringStrategy.type: unknown strategy \"Foo\""
        ),
        "{stderr}"
    );
    assert!(
        !stderr.contains("serving gRPC on"),
        "claimed to serve before the configuration was accepted: {stderr}"
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

#[tokio::test]
async fn a_bad_cluster_file_stops_startup_naming_the_document_and_field() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("berth-e2e-cluster-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("cluster.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    resources: {requests: {cpu: lots}}\n",
    )?;
    let out = std::process::Command::new(berth_e2e::berthd_path()?)
        .args(["--listen", "127.0.0.1:0", "--cluster"])
        .arg(&file)
        .output()?;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cluster.yaml: document 2: spec.containers[0].resources.requests.cpu: quantities must match"), "{stderr}");
    assert!(!stderr.contains("serving gRPC on"), "{stderr}");
    // A typo is refused as strictly as through the API.
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  nodeSelektor: {a: b}\n  containers: [{name: c}]\n",
    )?;
    let out = std::process::Command::new(berth_e2e::berthd_path()?)
        .args(["--listen", "127.0.0.1:0", "--cluster"])
        .arg(&file)
        .output()?;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "cluster.yaml: document 1: spec.nodeSelektor: unknown field \"nodeSelektor\""
        ),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
