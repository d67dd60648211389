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
