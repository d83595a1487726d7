//! `--feature-gates` through the real berthd: what stops startup, what the
//! log and `/metrics` say.

use anyhow::Result;
use berth_e2e::{Berthd, berthd_path, http_get, message};

fn refused(flag: &str) -> Result<String> {
    let out = std::process::Command::new(berthd_path()?)
        .args(["--empty-cluster", "--listen", "127.0.0.1:0"])
        .arg(flag)
        .env("RUST_BACKTRACE", "0")
        .output()?;
    assert!(!out.status.success(), "{flag} was accepted");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("serving gRPC on"), "{stderr}");
    Ok(stderr)
}

#[tokio::test]
async fn a_bad_gate_stops_startup_naming_it() -> Result<()> {
    let cases = [
        (
            "--feature-gates=NoSuchGate=true",
            "invalid argument \"NoSuchGate=true\" for \"--feature-gates\" flag: unrecognized feature gate: NoSuchGate",
        ),
        (
            "--feature-gates=StorageCapacityScoring=yes",
            "invalid value of StorageCapacityScoring=yes, err: strconv.ParseBool: parsing \"yes\": invalid syntax",
        ),
        (
            "--feature-gates=DRAExtendedResource=false",
            "cannot set feature gate DRAExtendedResource to false, feature is locked to true",
        ),
        (
            "--feature-gates=PodGroupPreemptionPolicy=true",
            "feature gate PodGroupPreemptionPolicy=true is not implemented by berth",
        ),
    ];
    for (flag, want) in cases {
        let stderr = refused(flag)?;
        assert!(stderr.contains(want), "{flag}: {stderr}");
    }
    Ok(())
}

fn gauge(text: &str, name: &str) -> Option<String> {
    text.lines()
        .find(|l| l.starts_with(&format!("kubernetes_feature_enabled{{name=\"{name}\",")))
        .map(str::to_string)
}

#[tokio::test]
async fn the_gates_in_force_are_logged_once_and_served_in_metrics() -> Result<()> {
    let b = Berthd::start(&[
        "--empty-cluster",
        "--http-listen",
        "127.0.0.1:0",
        "--feature-gates",
        "StorageCapacityScoring=false",
        "--feature-gates=OpportunisticBatching=false",
    ])
    .await?;
    let logged: Vec<_> = b
        .seen
        .iter()
        .filter(|l| message(l).starts_with("feature gates in force"))
        .cloned()
        .collect();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(
        message(&logged[0]),
        "feature gates in force: kube-scheduler v1.37's defaults, berth's newest (the embedded cluster has no API server to follow)"
    );
    let fields = &logged[0]["fields"];
    assert_eq!(fields["release"], "v1.37");
    assert_eq!(
        fields["set"],
        "OpportunisticBatching=false,StorageCapacityScoring=false"
    );
    let all = fields["gates"].as_str().unwrap_or_default();
    assert!(all.contains("VolumeLimitScaling=true"), "{all}");
    assert!(all.contains("StorageCapacityScoring=false"), "{all}");

    let (status, text) = http_get(&b.http_addr()?, "/metrics").await?;
    assert_eq!(status, 200);
    assert!(
        text.contains("# TYPE kubernetes_feature_enabled gauge"),
        "{text}"
    );
    assert_eq!(
        gauge(&text, "StorageCapacityScoring").as_deref(),
        Some("kubernetes_feature_enabled{name=\"StorageCapacityScoring\",stage=\"BETA\"} 0")
    );
    assert_eq!(
        gauge(&text, "VolumeLimitScaling").as_deref(),
        Some("kubernetes_feature_enabled{name=\"VolumeLimitScaling\",stage=\"BETA\"} 1")
    );
    assert_eq!(
        gauge(&text, "DRADeviceTaintRules").as_deref(),
        Some("kubernetes_feature_enabled{name=\"DRADeviceTaintRules\",stage=\"\"} 1")
    );
    assert_eq!(
        gauge(&text, "GenericWorkload").as_deref(),
        Some("kubernetes_feature_enabled{name=\"GenericWorkload\",stage=\"BETA\"} 0")
    );
    assert_eq!(
        gauge(&text, "AllAlpha").as_deref(),
        Some("kubernetes_feature_enabled{name=\"AllAlpha\",stage=\"ALPHA\"} 0")
    );
    b.stop().await?;
    Ok(())
}

/// One cluster, scheduled by berthd with v1.37's gates and with v1.36's:
/// n1 is emptier (so it wins when nothing else decides), but its CSINode
/// lacks the driver of pod `vol`'s volume, whose CSIDriver asks for it
/// (VolumeLimitScaling), and a DeviceTaintRule taints its GPU
/// (DRADeviceTaintRules); pod `data` provisions a volume whose class has
/// room on both nodes, more on n2 (StorageCapacityScoring).
const SCENARIO: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {kubernetes.io/hostname: n1, zone: a}}
status: {allocatable: {cpu: "8", memory: 16Gi, pods: "110"}}
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {kubernetes.io/hostname: n2, zone: b}}
status: {allocatable: {cpu: "8", memory: 16Gi, pods: "110"}}
---
apiVersion: v1
kind: Pod
metadata: {name: busy, namespace: default}
spec:
  nodeName: n2
  containers: [{name: c, image: x, resources: {requests: {cpu: "4", memory: 8Gi}}}]
---
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {name: ebs.csi.aws.com}
spec: {preventPodSchedulingIfMissing: true, storageCapacity: true}
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata: {name: n1}
spec: {drivers: [{name: other.csi, nodeID: n1}]}
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata: {name: n2}
spec: {drivers: [{name: ebs.csi.aws.com, nodeID: n2}]}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-vol}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  csi: {driver: ebs.csi.aws.com, volumeHandle: vol-1}
  claimRef: {namespace: default, name: vol}
status: {phase: Bound}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: vol, namespace: default, annotations: {pv.kubernetes.io/bind-completed: "yes"}}
spec: {accessModes: [ReadWriteOnce], volumeName: pv-vol, resources: {requests: {storage: 1Gi}}}
status: {phase: Bound}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.example.com}
spec: {selectors: [{cel: {expression: "device.driver == 'gpu.example.com'"}}]}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-gpu}
spec: {driver: gpu.example.com, nodeName: n1, pool: {name: n1, generation: 1, resourceSliceCount: 1}, devices: [{name: gpu-0}]}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n2-gpu}
spec: {driver: gpu.example.com, nodeName: n2, pool: {name: n2, generation: 1, resourceSliceCount: 1}, devices: [{name: gpu-0}]}
---
apiVersion: resource.k8s.io/v1
kind: DeviceTaintRule
metadata: {name: n1-maintenance}
spec:
  deviceSelector: {driver: gpu.example.com, pool: n1}
  taint: {key: maintenance, value: "true", effect: NoSchedule}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: gpu, namespace: default}
spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.example.com}}]}}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: fast}
provisioner: ebs.csi.aws.com
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: storage.k8s.io/v1
kind: CSIStorageCapacity
metadata: {name: zone-a, namespace: kube-system}
storageClassName: fast
capacity: 20Gi
nodeTopology: {matchLabels: {zone: a}}
---
apiVersion: storage.k8s.io/v1
kind: CSIStorageCapacity
metadata: {name: zone-b, namespace: kube-system}
storageClassName: fast
capacity: 1Ti
nodeTopology: {matchLabels: {zone: b}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: default}
spec: {storageClassName: fast, accessModes: [ReadWriteOnce], resources: {requests: {storage: 16Gi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: vol, namespace: default}
spec:
  containers: [{name: c, image: x}]
  volumes: [{name: v, persistentVolumeClaim: {claimName: vol}}]
---
apiVersion: v1
kind: Pod
metadata: {name: gpu, namespace: default}
spec:
  containers: [{name: c, image: x}]
  resourceClaims: [{name: gpu, resourceClaimName: gpu}]
---
apiVersion: v1
kind: Pod
metadata: {name: data, namespace: default}
spec:
  containers: [{name: c, image: x}]
  volumes: [{name: v, persistentVolumeClaim: {claimName: data}}]
"#;

async fn placements(extra: &[&str]) -> Result<Vec<(String, String)>> {
    let dir = std::env::temp_dir().join(format!(
        "berth-e2e-gates-{}-{}",
        std::process::id(),
        extra.len()
    ));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("cluster.yaml");
    std::fs::write(&file, SCENARIO)?;
    let path = file.to_string_lossy().into_owned();
    let mut args = vec!["--cluster", path.as_str(), "--seed", "3"];
    args.extend_from_slice(extra);
    let mut b = Berthd::start(&args).await?;
    let mut out = Vec::new();
    for pod in ["vol", "gpu", "data"] {
        let want = format!("default/{pod}");
        let line = match b
            .seen
            .iter()
            .find(|l| message(l) == "scheduled" && l["fields"]["pod"] == want.as_str())
        {
            Some(l) => l.clone(),
            None => {
                b.wait_for(|l| message(l) == "scheduled" && l["fields"]["pod"] == want.as_str())
                    .await?
            }
        };
        out.push((
            pod.to_string(),
            line["fields"]["node"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        ));
    }
    b.stop().await?;
    std::fs::remove_dir_all(&dir)?;
    Ok(out)
}

#[tokio::test]
async fn one_scenario_gives_v1_37_s_placements_and_with_the_flag_v1_36_s() -> Result<()> {
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(p, n)| (p.to_string(), n.to_string()))
            .collect()
    };
    assert_eq!(
        placements(&[]).await?,
        pairs(&[("vol", "n2"), ("gpu", "n2"), ("data", "n2")]),
        "v1.37"
    );
    let flag = format!(
        "--feature-gates={}",
        berth_server::features::previous_release_flag()
    );
    assert_eq!(
        flag,
        "--feature-gates=DRADeviceTaintRules=false,StorageCapacityScoring=false,VolumeLimitScaling=false"
    );
    assert_eq!(
        placements(&[flag.as_str()]).await?,
        pairs(&[("vol", "n1"), ("gpu", "n1"), ("data", "n1")]),
        "v1.36"
    );
    Ok(())
}
