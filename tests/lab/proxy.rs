//! Which proxy runs on the lab's nodes: upstream kube-proxy (the reference) or ours, in a mode.
//! One process per node namespace, started with the same upstream flags, as that node; ours
//! with only its mode's capabilities (`setpriv`), as the deploy overlays give them.
//!
//! Both read the API server through a per-node `testenv bridge`, with the `system:kube-proxy`
//! credentials a real kube-proxy has. (The lab also mirrors every object into a manifest
//! directory, for running ours with `--manifests` by hand.)

use std::path::Path;

use super::topology::{CLUSTER_CIDR, CLUSTER_CIDR6, NodeNet};
use crate::testenv::{ChildGuard, TestEnv, bridge_apiserver, bridge_apiserver_at};

/// Why every scenario is expected to fail for our binary in a mode, or `None` once that mode
/// programs rules: the suite then holds ours to every scenario upstream passes.
pub fn ours_known_gap(mode: Mode) -> Option<&'static str> {
    match mode {
        Mode::Nftables | Mode::Iptables | Mode::Ipvs | Mode::Userspace | Mode::Ebpf => None,
    }
}

/// Why upstream's ipvs mode is not held to the settle times: it runs only in the UML guest
/// (`lab_uml.rs`), on one CPU with two more proxies and the API server, where each of its syncs
/// execs `ipset` (once per entry) and `iptables-restore` and takes seconds. Every scenario
/// passes on some runs, but a different few miss their time on each, so its verdicts are
/// reported, not gating.
pub const UPSTREAM_IPVS_IN_UML: &str = "upstream's ipvs mode in the UML guest: its syncs take \
     seconds there (ipset once per entry, iptables-restore, one CPU for three proxies and the \
     API server), and which scenarios miss their time differs from run to run";

/// Why a scenario is not run for upstream in userspace mode: upstream removed that mode in 1.26.
pub const UPSTREAM_HAS_NO_USERSPACE: &str = "upstream removed its userspace mode in 1.26";

/// Why a scenario is not run for upstream in eBPF mode: upstream has none.
pub const UPSTREAM_HAS_NO_EBPF: &str = "upstream kube-proxy has no eBPF mode";

/// A dataplane mode, spelled as `--proxy-mode` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Nftables,
    Iptables,
    /// Needs a kernel with IPVS: runs in the UML guest (`lab_uml.rs`).
    Ipvs,
    /// Ours only: the proxy relays each connection itself (upstream removed the mode in 1.26).
    Userspace,
    /// Ours only: cgroup socket programs balance each connection when it connects. Each node
    /// has a cgroup of its own, which its clients join (`socket_lb.rs`).
    Ebpf,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Nftables => "nftables",
            Mode::Iptables => "iptables",
            Mode::Ipvs => "ipvs",
            Mode::Userspace => "userspace",
            Mode::Ebpf => "ebpf",
        }
    }
}

/// The proxy under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proxy {
    /// `testenv/bin/kube-proxy`: upstream, unchanged.
    Upstream { mode: Mode },
    /// The `kube-proxy-rs` binary of this crate.
    Ours { mode: Mode },
}

impl Proxy {
    pub fn mode(self) -> Mode {
        match self {
            Proxy::Upstream { mode } | Proxy::Ours { mode } => mode,
        }
    }

    /// `upstream/nftables`, `ours/nftables`, …
    pub fn label(self) -> String {
        match self {
            Proxy::Upstream { mode } => format!("upstream/{}", mode.as_str()),
            Proxy::Ours { mode } => format!("ours/{}", mode.as_str()),
        }
    }

    /// What is expected of this proxy where a scenario expects a pass: a pass, or for
    /// upstream's ipvs mode [`UPSTREAM_IPVS_IN_UML`]'s either.
    pub fn held_to(
        self,
        scenario: super::scenarios::report::Expect,
    ) -> super::scenarios::report::Expect {
        use super::scenarios::report::Expect;
        match (self, scenario) {
            (Proxy::Upstream { mode: Mode::Ipvs }, Expect::Pass) => {
                Expect::Either(UPSTREAM_IPVS_IN_UML)
            }
            (_, expect) => expect,
        }
    }

    /// Why this proxy fails every scenario today, if it does.
    pub fn known_gap(self) -> Option<&'static str> {
        match self {
            Proxy::Upstream { .. } => None,
            Proxy::Ours { mode } => ours_known_gap(mode),
        }
    }

    /// Whether the proxy reads the API server (and so needs a bridge into the node namespace).
    fn reads_api_server(self) -> bool {
        true
    }

    /// The nftables table this proxy programs (`ip <name>`), in nftables mode.
    pub fn nft_table(self) -> &'static str {
        match self {
            Proxy::Upstream { .. } => "kube-proxy",
            Proxy::Ours { .. } => "kube-proxy-rs",
        }
    }

    /// Starts this proxy in `node`'s namespace as Node `node_name`, with the lab's flags and then
    /// `extra_flags` (which a scenario uses to restart a proxy configured otherwise). Returns the
    /// proxy and, for a proxy that reads the API server, the bridge it reads through (drop the
    /// proxy first).
    pub fn start(
        self,
        env: &TestEnv,
        node: &NodeNet,
        node_name: &str,
        manifests: &Path,
        extra_flags: &[String],
    ) -> (ChildGuard, Option<ChildGuard>) {
        self.start_via(env, node, node_name, manifests, None, extra_flags)
    }

    /// [`Proxy::start`], reading the API server at `127.0.0.1:<api_port>` of the host (`--master`
    /// and a bridge to that port) instead of the shared one when `api_port` is given: for a test
    /// that kills, restarts or slows the proxy's API server while the shared one stays up.
    pub fn start_via(
        self,
        env: &TestEnv,
        node: &NodeNet,
        node_name: &str,
        manifests: &Path,
        api_port: Option<u16>,
        extra_flags: &[String],
    ) -> (ChildGuard, Option<ChildGuard>) {
        let bridge = self.reads_api_server().then(|| match api_port {
            Some(port) => bridge_apiserver_at(env, &node.ns, port),
            None => bridge_apiserver(env, &node.ns),
        });
        let mut cmd = self.command(env, node, manifests);
        cmd.args(self.lab_flags(node_name)).arg("--v=2");
        if let Some(port) = api_port {
            cmd.arg(format!("--master=https://127.0.0.1:{port}"));
        }
        cmd.args(extra_flags);
        let name = match self {
            Proxy::Upstream { .. } => "kube-proxy",
            Proxy::Ours { .. } => "kube-proxy-rs",
        };
        let child = ChildGuard::spawn(&format!("{name}-{}", node.ns.name), &mut cmd);
        (child, bridge)
    }

    /// The lab's flags for this proxy on Node `node_name` (the API server's address aside):
    /// what `explain` on that node is given too, so it plans as the proxy does.
    pub fn lab_flags(self, node_name: &str) -> Vec<String> {
        vec![
            format!("--hostname-override={node_name}"),
            format!("--proxy-mode={}", self.mode().as_str()),
            // Both families: the proxies run dual-stack (the Nodes have an InternalIP of each).
            format!("--cluster-cidr={CLUSTER_CIDR},{CLUSTER_CIDR6}"),
            // nf_conntrack_max cannot be changed inside a network namespace.
            "--conntrack-max-per-core=0".into(),
            "--metrics-bind-address=127.0.0.1:10249".into(),
            "--healthz-bind-address=127.0.0.1:10256".into(),
        ]
    }

    fn command(self, env: &TestEnv, node: &NodeNet, manifests: &Path) -> std::process::Command {
        match self {
            Proxy::Upstream { .. } => {
                let mut cmd = node.ns.command(env.bin("kube-proxy"));
                cmd.arg(format!(
                    "--kubeconfig={}",
                    env.kube_proxy_kubeconfig.display()
                ));
                cmd
            }
            Proxy::Ours { mode } => {
                let _ = manifests;
                let exe = crate::layout::kube_proxy_rs_binary();
                let mut cmd = if mode == Mode::Ebpf {
                    // `nsenter --net`, not `ip netns exec`: the latter's private /sys hides
                    // the cgroup v2 hierarchy the programs attach to.
                    let mut cmd = std::process::Command::new("nsenter");
                    cmd.arg(format!("--net=/var/run/netns/{}", node.ns.name))
                        .arg("setpriv");
                    cmd
                } else {
                    node.ns.command("setpriv")
                };
                // As the DaemonSet runs it: root with only its mode's capabilities.
                let caps = super::capabilities::needed(mode.as_str());
                cmd.arg(format!(
                    "--bounding-set={}",
                    super::capabilities::bounding_set(caps)
                ))
                .args(["--inh-caps=-all", "--"])
                .arg(exe);
                cmd.arg(format!(
                    "--kubeconfig={}",
                    env.kube_proxy_kubeconfig.display()
                ));
                cmd
            }
        }
    }
}
