//! component-base's build and version families, as every Kubernetes
//! component serves them:
//!
//! * `kubernetes_build_info{major, minor, git_version, git_commit,
//!   git_tree_state, build_date, go_version, compiler, platform}` 1: the
//!   kube-scheduler release berth is built to (its newest,
//!   [`RELEASE`]), with berth's own version as build metadata of
//!   `git_version` (`v1.37.0+berth-0.1.0`, as distributions such as k3s
//!   write theirs), the compiler `rustc` and its version in `go_version`
//!   (the label dashboards read a toolchain from). `git_commit`,
//!   `git_tree_state` and `build_date` come from the build's environment
//!   (`BERTH_GIT_COMMIT`, `BERTH_GIT_TREE_STATE`, `BERTH_BUILD_DATE`) when
//!   it sets them, empty otherwise;
//! * `version_info{component, binary, emulation, min_compat}` 1:
//!   component-base's compatibility versions, with `emulation` the release
//!   berth follows (in kube mode, the API server's own:
//!   [`crate::features::follow`]) and `min_compat` the one before it.

use crate::features::RELEASE;
use crate::prom::Exposition;

/// The rustc that built berth (set by `build.rs`).
const RUSTC: &str = env!("BERTH_RUSTC_VERSION");

/// `os/arch` as Go names them.
fn platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    };
    format!("{}/{arch}", std::env::consts::OS)
}

/// Writes both families; `release` is the minor release followed.
pub fn render(e: &mut Exposition, release: u16) {
    let minor = RELEASE.to_string();
    let git_version = format!("v1.{RELEASE}.0+berth-{}", env!("CARGO_PKG_VERSION"));
    let platform = platform();
    e.family(
        "kubernetes_build_info",
        "gauge",
        "A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running.",
    );
    e.sample(
        "kubernetes_build_info",
        &[
            ("build_date", option_env!("BERTH_BUILD_DATE").unwrap_or("")),
            ("compiler", "rustc"),
            ("git_commit", option_env!("BERTH_GIT_COMMIT").unwrap_or("")),
            (
                "git_tree_state",
                option_env!("BERTH_GIT_TREE_STATE").unwrap_or(""),
            ),
            ("git_version", &git_version),
            ("go_version", RUSTC),
            ("major", "1"),
            ("minor", &minor),
            ("platform", &platform),
        ],
        1,
    );
    e.family(
        "version_info",
        "gauge",
        "Provides the compatibility version info of the component. The component label is the name of the component, usually kube, but is relevant for aggregated-apiservers.",
    );
    let binary = format!("1.{RELEASE}");
    let emulation = format!("1.{release}");
    let min_compat = format!("1.{}", release.saturating_sub(1));
    e.sample(
        "version_info",
        &[
            ("binary", &binary),
            ("component", "kube"),
            ("emulation", &emulation),
            ("min_compat", &min_compat),
        ],
        1,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_followed_is_the_emulation_version() {
        let mut e = Exposition::new();
        render(&mut e, 36);
        let text = e.finish();
        assert!(
            text.contains(
                "version_info{binary=\"1.37\",component=\"kube\",emulation=\"1.36\",min_compat=\"1.35\"} 1\n"
            ),
            "{text}"
        );
        let build = text
            .lines()
            .find(|l| l.starts_with("kubernetes_build_info{"))
            .unwrap();
        assert!(build.contains("major=\"1\",minor=\"37\""), "{build}");
        assert!(build.contains("git_version=\"v1.37.0+berth-"), "{build}");
        assert!(build.contains("go_version=\"rustc "), "{build}");
        assert!(build.ends_with("} 1"), "{build}");
    }
}
