//! Behaviour of the whole module: pflag-style parsing, defaults, upstream's layering, every
//! error message, and the `--write-config-to` round trip.

mod file;
mod flags;
mod render;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use clap::Parser;

use super::*;

#[derive(Debug, Parser)]
#[command(name = "kube-proxy-rs")]
struct Cli {
    #[command(flatten)]
    flags: Flags,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    Plan {
        #[command(flatten)]
        flags: Flags,
    },
}

fn parse(args: &[&str]) -> Flags {
    let argv = std::iter::once("kube-proxy-rs").chain(args.iter().copied());
    Cli::try_parse_from(argv)
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
        .flags
}

fn from_flags(args: &[&str]) -> Result<Resolved, Error> {
    resolve(&parse(args), None)
}

const HEADER: &str = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";

fn from_file(flags: &[&str], text: &str) -> Result<Resolved, Error> {
    resolve(&parse(flags), Some((Path::new("/etc/kp.yaml"), text)))
}

fn file_body(body: &str) -> Result<Resolved, Error> {
    from_file(&[], &format!("{HEADER}{body}"))
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn the_file_replaces_flags_except_the_ones_upstream_honours() {
    let text = format!(
        "{HEADER}mode: nftables\nhostnameOverride: from-file\nlogging:\n  verbosity: 2\n  format: json\n"
    );
    let r = from_file(
        &[
            "--proxy-mode=ipvs",
            "--masquerade-all",
            "--hostname-override=From-Flag",
            "-v=5",
            "--logging-format=text",
            "--cleanup",
            "--config=/etc/kp.yaml",
        ],
        &text,
    )
    .unwrap();
    let c = &r.config;
    assert_eq!(c.mode, ProxyMode::Nftables);
    assert!(!c.masquerade_all);
    assert_eq!(c.hostname_override.as_deref(), Some("from-flag"));
    assert_eq!(
        (c.logging.verbosity, c.logging.format),
        (5, LogFormat::Text)
    );
    assert!(c.cleanup);
    assert_eq!(c.config_file.as_deref(), Some(Path::new("/etc/kp.yaml")));
    assert_eq!(
        r.warnings
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        [
            "--masquerade-all is ignored: --config is given and the file replaces it",
            "--proxy-mode is ignored: --config is given and the file replaces it",
        ]
    );
    let r = from_file(&[], &text).unwrap();
    assert_eq!(r.config.hostname_override.as_deref(), Some("from-file"));
    assert_eq!(
        (r.config.logging.verbosity, r.config.logging.format),
        (2, LogFormat::Json)
    );
}

#[test]
fn the_mode_override_replaces_the_file_s_mode_and_picks_that_mode_s_section() {
    // kubeadm writes `mode: ""` and every section; the override alone makes it nftables mode,
    // with the nftables section's periods, and keeps the rest of the file.
    let text = format!(
        "{HEADER}mode: \"\"\nclusterCIDR: 10.244.0.0/16\niptables:\n  syncPeriod: 1m\nnftables:\n  syncPeriod: 45s\n"
    );
    let r = from_file(
        &["--config=/etc/kp.yaml", "--proxy-mode-override=nftables"],
        &text,
    )
    .unwrap();
    let c = &r.config;
    assert_eq!((c.mode, c.mode_explicit), (ProxyMode::Nftables, true));
    assert_eq!(c.sync_period, secs(45));
    assert_eq!(
        c.cluster_cidrs
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["10.244.0.0/16"]
    );
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);

    // Empty (a DaemonSet whose ConfigMap names no mode): the file's mode stands.
    let r = from_file(
        &["--config=/etc/kp.yaml", "--proxy-mode-override="],
        &format!("{HEADER}mode: ipvs\n"),
    )
    .unwrap();
    assert_eq!(r.config.mode, ProxyMode::Ipvs);

    // Without a file it wins over --proxy-mode too.
    let r = from_flags(&["--proxy-mode=iptables", "--proxy-mode-override=ipvs"]).unwrap();
    assert_eq!(r.config.mode, ProxyMode::Ipvs);

    assert_eq!(
        from_flags(&["--proxy-mode-override=xdp"])
            .unwrap_err()
            .to_string(),
        "--proxy-mode-override: must be iptables, ipvs, nftables, userspace, ebpf or empty (iptables), got \"xdp\""
    );
}
