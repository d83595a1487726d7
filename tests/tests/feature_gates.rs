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
        .filter(|l| message(l) == "feature gates in force")
        .cloned()
        .collect();
    assert_eq!(logged.len(), 1, "{logged:?}");
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
