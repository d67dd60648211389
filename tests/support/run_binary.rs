//! The built binary run as an operator runs it, from the repository's root (where
//! `examples/cluster` is), and the config files such runs are given. Used by `cli.rs`
//! and `version_and_logs.rs`.

use std::path::Path;
use std::process::{Command, Output};

/// The binary run with `args` to its end.
pub fn run(args: &[&str]) -> Output {
    Command::new(crate::layout::kube_proxy_rs_binary())
        .args(args)
        .current_dir(crate::layout::repo_root())
        .output()
        .expect("the binary runs")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The lines every config file begins with.
pub const CONFIG_HEAD: &str =
    "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";

/// The log (stderr) of a run, which must succeed, under a config file of `config` (the lines
/// after [`CONFIG_HEAD`]) with `--masquerade-all` beside it: a flag the binary ignores with a
/// warning. The run writes its config into `dir` (`--write-config-to`), so nothing touches the
/// host.
pub fn log_of_ignored_flag(dir: &Path, config: &str) -> String {
    let cfg = config_file(dir, "c.yaml", &format!("{CONFIG_HEAD}{config}"));
    let written = dir.join("out.yaml").display().to_string();
    let out = run(&[
        "--config",
        &cfg,
        "--masquerade-all",
        "--write-config-to",
        &written,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    stderr(&out)
}

/// Writes `body` to `dir/name`; returns the path as the binary's arguments name it.
pub fn config_file(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path.display().to_string()
}
