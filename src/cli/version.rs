//! What this binary is, as `--version`, `--version=raw` and the start-up line tell it: the
//! fields of upstream's `version.Info` (component-base), filled from the crate's version and
//! what `build.rs` recorded (git commit and tree state, build date, compiler).
//!
//! `--version` prints one line, `kube-proxy-rs v0.1.0` (upstream: `Kubernetes v1.37.2`);
//! `--version=raw` prints the struct as Go's `%#v` does, so a script that reads upstream's raw
//! line reads ours. Ours is not built by Go: `GoVersion` is empty and `Compiler` names rustc.

use crate::config::{Config, VersionStyle};

/// upstream's `version.Info`, field for field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Info {
    pub major: &'static str,
    pub minor: &'static str,
    pub git_version: String,
    pub git_commit: &'static str,
    pub git_tree_state: &'static str,
    pub build_date: &'static str,
    pub compiler: &'static str,
    pub platform: String,
}

/// This binary's.
pub fn info() -> Info {
    Info {
        major: env!("CARGO_PKG_VERSION_MAJOR"),
        minor: env!("CARGO_PKG_VERSION_MINOR"),
        git_version: format!("v{}", env!("CARGO_PKG_VERSION")),
        git_commit: env!("KUBE_PROXY_RS_GIT_COMMIT"),
        git_tree_state: env!("KUBE_PROXY_RS_GIT_TREE_STATE"),
        build_date: env!("KUBE_PROXY_RS_BUILD_DATE"),
        compiler: env!("KUBE_PROXY_RS_RUSTC"),
        platform: platform(std::env::consts::OS, std::env::consts::ARCH),
    }
}

/// Go's `GOOS/GOARCH` spelling of a platform.
fn platform(os: &str, arch: &str) -> String {
    let arch = match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    };
    format!("{os}/{arch}")
}

/// What `--version` (or `--version=raw`) prints, with its newline.
pub fn text(style: VersionStyle, info: &Info) -> String {
    match style {
        VersionStyle::Short => format!("kube-proxy-rs {}\n", info.git_version),
        VersionStyle::Raw => format!(
            "version.Info{{Major:{:?}, Minor:{:?}, EmulationMajor:\"\", EmulationMinor:\"\", \
             MinCompatibilityMajor:\"\", MinCompatibilityMinor:\"\", GitVersion:{:?}, \
             GitCommit:{:?}, GitTreeState:{:?}, BuildDate:{:?}, GoVersion:\"\", Compiler:{:?}, \
             Platform:{:?}}}\n",
            info.major,
            info.minor,
            info.git_version,
            info.git_commit,
            info.git_tree_state,
            info.build_date,
            info.compiler,
            info.platform
        ),
    }
}

/// The start-up line: upstream's "Version info" with the build's fields, the mode and where
/// the configuration came from.
pub fn log_start(config: &Config, node_name: &str) {
    let info = info();
    let source = config
        .config_file
        .as_ref()
        .map_or_else(|| "flags".to_owned(), |p| p.display().to_string());
    tracing::info!(
        version = info.git_version.as_str(),
        gitCommit = info.git_commit,
        gitTreeState = info.git_tree_state,
        buildDate = info.build_date,
        compiler = info.compiler,
        platform = info.platform.as_str(),
        node = node_name,
        mode = config.mode.as_str(),
        config = source.as_str(),
        "Version info"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_prints_upstreams_fields_in_its_order() {
        let info = Info {
            major: "0",
            minor: "1",
            git_version: "v0.1.0".into(),
            git_commit: "0123abcd",
            git_tree_state: "clean",
            build_date: "2026-12-06T12:00:00Z",
            compiler: "rustc 1.95.0",
            platform: "linux/amd64".into(),
        };
        assert_eq!(
            text(VersionStyle::Raw, &info),
            "version.Info{Major:\"0\", Minor:\"1\", EmulationMajor:\"\", EmulationMinor:\"\", \
             MinCompatibilityMajor:\"\", MinCompatibilityMinor:\"\", GitVersion:\"v0.1.0\", \
             GitCommit:\"0123abcd\", GitTreeState:\"clean\", BuildDate:\"2026-12-06T12:00:00Z\", \
             GoVersion:\"\", Compiler:\"rustc 1.95.0\", Platform:\"linux/amd64\"}\n"
        );
        assert_eq!(text(VersionStyle::Short, &info), "kube-proxy-rs v0.1.0\n");
    }

    #[test]
    fn this_builds_fields_are_filled() {
        let info = info();
        assert_eq!(info.git_version, format!("v{}", env!("CARGO_PKG_VERSION")));
        assert!(info.compiler.starts_with("rustc "), "{}", info.compiler);
        let date: Result<k8s_openapi::jiff::Timestamp, _> = info.build_date.parse();
        assert!(date.is_ok(), "{}", info.build_date);
        assert!(matches!(info.git_tree_state, "clean" | "dirty" | ""));
        assert_eq!(platform("linux", "x86_64"), "linux/amd64");
        assert_eq!(platform("linux", "aarch64"), "linux/arm64");
    }
}
