//! Sets `BERTH_RUSTC_VERSION` (`rustc 1.x.y (...)`), which
//! `kubernetes_build_info` serves in its `go_version` label.

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::process::Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "rustc".into());
    println!("cargo:rustc-env=BERTH_RUSTC_VERSION={version}");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RUSTC");
    println!("cargo:rerun-if-env-changed=BERTH_GIT_COMMIT");
    println!("cargo:rerun-if-env-changed=BERTH_GIT_TREE_STATE");
    println!("cargo:rerun-if-env-changed=BERTH_BUILD_DATE");
}
