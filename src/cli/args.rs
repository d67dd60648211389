//! The command-line shape: upstream's flags at the top level (so an operator can swap binaries)
//! and the `plan` and `explain` subcommands, which take the same flags plus their own.

use clap::{Args, Parser, Subcommand};

use super::OutputFormat;
use crate::config::Flags;

/// kube-proxy-rs: a Kubernetes Service proxy, a drop-in replacement for kube-proxy.
///
/// Without a subcommand it runs the proxy with upstream kube-proxy's flags.
#[derive(Debug, Parser)]
#[command(
    name = "kube-proxy-rs",
    disable_version_flag = true,
    max_term_width = 100
)]
pub struct Cli {
    #[command(flatten)]
    pub flags: Flags,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The help heading of what `plan` needs first.
const PLAN_HEADING: &str = "What to plan";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print every service port with its frontends and the endpoints chosen for cluster, local
    /// and external traffic on this node, and why others were left out. Needs no root and no
    /// cluster: `plan --manifests DIR --hostname-override NODE`.
    Plan(PlanArgs),
    /// Explain where the first packet of a connection goes on this node and why: the Service
    /// port, the endpoints and how one is chosen, masquerading, or why it is refused or
    /// dropped. Reads our rules from this node's kernel (in every mode), or traces the rules
    /// planned from `--manifests DIR --hostname-override NODE`.
    Explain(ExplainArgs),
    /// Ask the running proxy on this node for every service port: frontends, endpoints
    /// programmed and in the model, traffic policies, health check, drift between the kernel
    /// and the plan, and its last sync. Asks the metrics address (`--metrics-bind-address`, or
    /// the one in `--config`).
    Status(StatusArgs),
}

/// The help heading of what `status` asks about.
const STATUS_HEADING: &str = "What to show";

/// `status`'s flags: which Service, how printed, then the proxy's flags (the metrics address
/// comes from them, as the proxy's does).
#[derive(Debug, Args)]
#[command(
    mut_arg("metrics_bind_address", |a| a.help_heading(STATUS_HEADING)),
    mut_arg("config", |a| a.help_heading(STATUS_HEADING))
)]
pub struct StatusArgs {
    /// Only this Service (NAMESPACE/NAME) or Service port (NAMESPACE/NAME:PORT), with every
    /// frontend and what a new connection meets there
    #[arg(long, help_heading = STATUS_HEADING)]
    pub service: Option<String>,
    /// Output format
    #[arg(long, value_enum, default_value_t = OutputFormat::Table, help_heading = STATUS_HEADING)]
    pub output: OutputFormat,
    #[command(
        flatten,
        next_help_heading = "Proxy flags (the metrics address follows them)"
    )]
    pub flags: Flags,
}

/// The help heading of what `explain` asks about.
const EXPLAIN_HEADING: &str = "What to explain";

/// `explain`'s flags: the packet, then the proxy's flags (they shape the rules as they shape
/// the proxy).
#[derive(Debug, Args)]
#[command(
    mut_arg("manifests", |a| a.help_heading(EXPLAIN_HEADING)),
    mut_arg("hostname_override", |a| a.help_heading(EXPLAIN_HEADING)),
    mut_arg("proxy_mode", |a| a.help_heading(EXPLAIN_HEADING)),
    mut_arg("kubeconfig", |a| a.help_heading(EXPLAIN_HEADING)),
    mut_arg("config", |a| a.help_heading(EXPLAIN_HEADING))
)]
pub struct ExplainArgs {
    /// The destination: ADDRESS:PORT[/tcp|udp|sctp] ([ADDRESS]:PORT for IPv6; tcp by default)
    #[arg(long, help_heading = EXPLAIN_HEADING)]
    pub to: String,
    /// The source: pod (a pod on this node, the default), node, outside, or an address
    #[arg(long, help_heading = EXPLAIN_HEADING)]
    pub from: Option<String>,
    /// The interface the packet arrives on (pods and outside clients)
    #[arg(long, help_heading = EXPLAIN_HEADING)]
    pub in_interface: Option<String>,
    /// Output format
    #[arg(long, value_enum, default_value_t = OutputFormat::Table, help_heading = EXPLAIN_HEADING)]
    pub output: OutputFormat,
    #[command(
        flatten,
        next_help_heading = "Proxy flags (the rules follow them as the proxy's do)"
    )]
    pub flags: Flags,
}

/// `plan`'s flags: what to plan (where the objects come from, for which node, in which mode,
/// printed how) first under "Options", then every other proxy flag under its own heading, since
/// they shape the plan as they shape the proxy.
#[derive(Debug, Args)]
#[command(
    mut_arg("manifests", |a| a.help_heading(PLAN_HEADING)),
    mut_arg("hostname_override", |a| a.help_heading(PLAN_HEADING)),
    mut_arg("proxy_mode", |a| a.help_heading(PLAN_HEADING)),
    mut_arg("kubeconfig", |a| a.help_heading(PLAN_HEADING)),
    mut_arg("config", |a| a.help_heading(PLAN_HEADING))
)]
pub struct PlanArgs {
    /// Output format
    #[arg(long, value_enum, default_value_t = OutputFormat::Table, help_heading = PLAN_HEADING)]
    pub output: OutputFormat,
    #[command(
        flatten,
        next_help_heading = "Proxy flags (the plan follows them as the proxy does)"
    )]
    pub flags: Flags,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("kube-proxy-rs").chain(args.iter().copied()))
    }

    #[test]
    fn upstream_flags_parse_pflag_style_at_the_top_level() {
        let cli = parse(&[
            "--proxy-mode=nftables",
            "--masquerade-all",
            "-v=4",
            "--cluster-cidr=10.0.0.0/8,fd00::/8",
        ])
        .unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.flags.proxy_mode.as_deref(), Some("nftables"));
        assert_eq!(cli.flags.masquerade_all, Some(true));
    }

    #[test]
    fn plan_takes_the_same_flags_and_an_output_format() {
        let cli = parse(&[
            "plan",
            "--manifests",
            "examples/cluster",
            "--hostname-override=node-a",
            "--output",
            "json",
        ])
        .unwrap();
        let Some(Command::Plan(plan)) = cli.command else {
            panic!("plan expected")
        };
        assert_eq!(plan.output, OutputFormat::Json);
        assert_eq!(plan.flags.hostname_override.as_deref(), Some("node-a"));
    }

    #[test]
    fn explain_takes_a_packet_and_the_same_flags() {
        let cli = parse(&[
            "explain",
            "--to=10.96.0.10:53/udp",
            "--from",
            "node",
            "--manifests=examples/cluster",
            "--proxy-mode=ipvs",
        ])
        .unwrap();
        let Some(Command::Explain(e)) = cli.command else {
            panic!("explain expected")
        };
        assert_eq!(
            (e.to.as_str(), e.from.as_deref()),
            ("10.96.0.10:53/udp", Some("node"))
        );
        assert_eq!(e.flags.proxy_mode.as_deref(), Some("ipvs"));
        assert!(parse(&["explain"]).is_err(), "--to is required");
    }

    #[test]
    fn status_takes_a_service_and_the_proxy_flags() {
        let cli = parse(&[
            "status",
            "--service=kube-system/kube-dns",
            "--metrics-bind-address=127.0.0.1:9100",
            "--output=json",
        ])
        .unwrap();
        let Some(Command::Status(s)) = cli.command else {
            panic!("status expected")
        };
        assert_eq!(s.service.as_deref(), Some("kube-system/kube-dns"));
        assert_eq!(s.output, OutputFormat::Json);
        assert_eq!(
            s.flags.metrics_bind_address.as_deref(),
            Some("127.0.0.1:9100")
        );
    }

    #[test]
    fn unknown_flags_are_errors() {
        assert!(parse(&["--no-such-flag"]).is_err());
        assert!(parse(&["plan", "--output", "yaml"]).is_err());
    }

    #[test]
    fn the_command_definition_is_consistent() {
        <Cli as clap::CommandFactory>::command().debug_assert();
    }
}
