//! A fresh node for one proxy run: a node network namespace, a pod namespace behind a veth with
//! an echo server on both pod addresses, the API server bridged in, and the proxy process.
//!
//! ```text
//!   node namespace                                   pod namespace
//!   lo 192.168.210.2/32 (the node's IP)              eth0 100.127.255.10/32, .11/32
//!   lo 100.127.255.1/32 (pod gateway)       ── vp ── default via 100.127.255.1
//!   routes: pod /32s dev vp; default dev vp          local 10.96.0.0/12 (refuses at once
//!   127.0.0.1:<api> (testenv bridge), :10249 metrics   what no rule redirected)
//! ```
//!
//! Traffic to a ClusterIP from the node leaves through `vp`. With the proxy's rules it is DNATed
//! to the pod's echo server, which answers with the address it was reached on; without them the
//! pod refuses it at once (a local route for the whole service range), so a probe never waits
//! for a timeout. Nothing is linked to the host's namespace.
//!
//! Drop order is cleanup order: the proxy, its bridge, the echo server, then both namespaces.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::helper::{RESULT_PREFIX, SelfExec, Spec};
use super::metrics::METRICS_ADDR;
use super::objects::{CLUSTER_CIDR, NODE_IP, POD_A, POD_B, TARGET_PORT, node_name};
use super::options::{Implementation, IptablesFlavour, Options, ProxyKind};
use crate::testenv::{ChildGuard, NetNs, TestEnv, bridge_apiserver};

/// The pods' gateway on the node's `lo`.
const POD_GATEWAY: &str = "100.127.255.1";
/// `iptables`, `iptables-save`, … linked to their legacy tools, first in upstream's `PATH`
/// when the run uses iptables-legacy.
const LEGACY_TOOLS_DIR: &str = "/tmp/kprs-scale-iptables-legacy";
/// The cluster's service range: the pod refuses all of it locally.
const SERVICE_RANGE: &str = "10.96.0.0/12";

/// One proxy's node. Field order is drop order.
pub struct Node {
    proxy: Option<ChildGuard>,
    bridge: Option<ChildGuard>,
    /// The eBPF mode's cgroup and bpffs; after the proxy, which runs inside the cgroup.
    ebpf: Option<EbpfNode>,
    _echo: ChildGuard,
    _pod: NetNs,
    pub ns: NetNs,
}

impl Node {
    /// Builds the namespaces and starts the echo server; no proxy yet.
    pub fn build(exec: &SelfExec) -> Result<Node, String> {
        let ns = NetNs::new("ks-node");
        let pod = NetNs::new("ks-pod");
        let node_ip = format!("{NODE_IP}/32");
        let gw = format!("{POD_GATEWAY}/32");
        let src_node = NODE_IP.to_string();
        for args in [
            &["addr", "add", &node_ip, "dev", "lo"][..],
            &["addr", "add", &gw, "dev", "lo"],
            &[
                "link", "add", "vp", "type", "veth", "peer", "name", "eth0", "netns", &pod.name,
            ],
            &["link", "set", "vp", "up"],
            &["route", "add", "default", "dev", "vp", "src", &src_node],
        ] {
            ip(&ns, args)?;
        }
        for addr in [POD_A, POD_B] {
            let host = format!("{addr}/32");
            ip(
                &ns,
                &["route", "add", &host, "dev", "vp", "src", POD_GATEWAY],
            )?;
            ip(&pod, &["addr", "add", &host, "dev", "eth0"])?;
        }
        for args in [
            &["link", "set", "eth0", "up"][..],
            &["route", "add", POD_GATEWAY, "dev", "eth0", "scope", "link"],
            &["route", "add", "default", "via", POD_GATEWAY, "dev", "eth0"],
            &["route", "add", "local", SERVICE_RANGE, "dev", "lo"],
        ] {
            ip(&pod, args)?;
        }
        let echo = ChildGuard::spawn(
            &format!("echo-{}", pod.name),
            &mut exec.command(&pod.name, &Spec::Echo { port: TARGET_PORT }),
        );
        wait_for_line(&echo.log, &format!("{RESULT_PREFIX}ready"))?;
        Ok(Node {
            proxy: None,
            bridge: None,
            ebpf: None,
            _echo: echo,
            _pod: pod,
            ns,
        })
    }

    /// Starts `kind` in the node namespace as node 0, reading the API server through a bridge.
    /// Returns the proxy's pid.
    pub fn start_proxy(&mut self, env: &TestEnv, kind: ProxyKind, opts: &Options) -> u32 {
        // Once per node: a restarted proxy reaches the API server through the same bridge.
        if self.bridge.is_none() {
            self.bridge = Some(bridge_apiserver(env, &self.ns));
        }
        let (name, program) = match kind.implementation {
            Implementation::Upstream => ("kube-proxy", env.bin("kube-proxy")),
            Implementation::Ours => ("kube-proxy-rs", opts.ours_bin.clone()),
        };
        let mut cmd = if kind.mode == "ebpf" {
            // `ip netns exec` mounts a /sys of its own, where the cgroup hierarchy the
            // programs attach to is not: enter only the network namespace.
            let mut cmd = Command::new("nsenter");
            cmd.arg(format!("--net=/run/netns/{}", self.ns.name))
                .arg(program);
            cmd
        } else {
            self.ns.command(program)
        };
        if kind.mode == "iptables"
            && opts.iptables_flavour == IptablesFlavour::Legacy
            && let Err(e) = self.use_iptables_legacy(&mut cmd)
        {
            eprintln!(
                "scale: cannot set up iptables-legacy in {}: {e}",
                self.ns.name
            );
        }
        cmd.arg(format!(
            "--kubeconfig={}",
            env.kube_proxy_kubeconfig.display()
        ))
        .arg(format!("--hostname-override={}", node_name(0)))
        .arg(format!("--proxy-mode={}", kind.mode))
        .arg(format!("--cluster-cidr={CLUSTER_CIDR}"))
        // nf_conntrack_max cannot be changed inside a network namespace.
        .arg("--conntrack-max-per-core=0")
        .arg(format!("--metrics-bind-address={METRICS_ADDR}"))
        .arg("--healthz-bind-address=127.0.0.1:10256")
        .arg(format!("--v={}", opts.proxy_verbosity));
        if let Some(period) = opts.sync_period {
            // The same for both proxies; which flag counts depends on the mode, as upstream's.
            let flag = if kind.mode == "ipvs" {
                "ipvs-sync-period"
            } else {
                "iptables-sync-period"
            };
            cmd.arg(format!("--{flag}={}s", period.as_secs()));
        }
        if kind.mode == "ebpf" {
            match EbpfNode::join() {
                Ok(e) => {
                    cmd.arg(format!("--bpf-cgroup={}", e.cgroup.display()))
                        .arg(format!(
                            "--bpf-pin-root={}",
                            e.pins.join("kube-proxy-rs").display()
                        ));
                    self.ebpf = Some(e);
                }
                Err(e) => eprintln!("scale: cannot set up the eBPF mode's cgroup: {e}"),
            }
        }
        let child = ChildGuard::spawn(&format!("{name}-{}", self.ns.name), &mut cmd);
        let pid = child.pid();
        self.proxy = Some(child);
        pid
    }

    /// Makes iptables-legacy the node's iptables for the proxy `cmd` will start: the kubelet's
    /// marker chain `KUBE-IPTABLES-HINT` in legacy's mangle table of both families (how ours,
    /// like upstream's image wrapper, picks the flavour), and for upstream's binary, which runs
    /// plain `iptables`, a `PATH` whose `iptables*` are the legacy tools.
    fn use_iptables_legacy(&self, cmd: &mut Command) -> Result<(), String> {
        for tool in ["iptables-legacy", "ip6tables-legacy"] {
            let out = self
                .ns
                .command(tool)
                .args(["-w", "5", "-t", "mangle", "-N", "KUBE-IPTABLES-HINT"])
                .output()
                .map_err(|e| format!("run {tool}: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "{tool} -N KUBE-IPTABLES-HINT: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
        std::fs::create_dir_all(LEGACY_TOOLS_DIR).map_err(|e| e.to_string())?;
        for base in ["iptables", "ip6tables"] {
            for suffix in ["", "-save", "-restore"] {
                let link = Path::new(LEGACY_TOOLS_DIR).join(format!("{base}{suffix}"));
                if !link.exists() {
                    let target = format!("/usr/sbin/{base}-legacy{suffix}");
                    std::os::unix::fs::symlink(&target, &link)
                        .map_err(|e| format!("link {}: {e}", link.display()))?;
                }
            }
        }
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.env(
            "PATH",
            format!("{LEGACY_TOOLS_DIR}:/usr/sbin:/usr/bin:/sbin:/bin:{path}"),
        );
        Ok(())
    }

    /// The proxy's exit status and the end of its log, if it has exited.
    pub fn proxy_exited(&mut self) -> Option<String> {
        let p = self.proxy.as_mut()?;
        let status = p.exited()?;
        Some(format!("{} exited ({status}):\n{}", p.name, p.log_tail(15)))
    }

    /// The proxy's log file.
    pub fn proxy_log(&self) -> String {
        self.proxy
            .as_ref()
            .map(|p| p.log.display().to_string())
            .unwrap_or_default()
    }
}

impl Drop for Node {
    /// Kills the proxy's own children by pid first (an `nft` or `iptables-restore` it started
    /// would otherwise outlive it, keep the namespace alive and burn CPU into the next
    /// measurement), then the fields drop in order.
    fn drop(&mut self) {
        if let Some(p) = &self.proxy {
            // Stopped first, so it starts no new child meanwhile; its guard kills it next.
            let _ = Command::new("kill")
                .args(["-STOP", &p.pid().to_string()])
                .output();
            for child in super::process::children(p.pid()) {
                let _ = Command::new("kill")
                    .args(["-KILL", &child.to_string()])
                    .output();
            }
        }
    }
}

/// The eBPF mode's place on the host: a cgroup v2 child the programs attach to, which this
/// harness process joins (so every probe it starts from now on is balanced by them, as a pod
/// of the node would be) and a private bpffs for the pins. Dropped after the proxy: the
/// harness goes back to the root cgroup, the child is removed, and unmounting the bpffs drops
/// every pin, which detaches every program the proxy left attached.
struct EbpfNode {
    root: std::path::PathBuf,
    cgroup: std::path::PathBuf,
    pins: std::path::PathBuf,
}

impl EbpfNode {
    fn join() -> Result<EbpfNode, String> {
        let root = kube_proxy_rs::dataplane::ebpf::backend::default_cgroup();
        let id = std::process::id();
        let node = EbpfNode {
            cgroup: root.join(format!("kprs-scale-{id}")),
            root,
            pins: std::env::temp_dir().join(format!("kprs-scale-bpf-{id}")),
        };
        std::fs::create_dir_all(&node.cgroup).map_err(|e| format!("create the cgroup: {e}"))?;
        std::fs::create_dir_all(&node.pins)
            .map_err(|e| format!("create {}: {e}", node.pins.display()))?;
        let mounted = Command::new("mount")
            .args(["-t", "bpf", "bpf"])
            .arg(&node.pins)
            .status()
            .map_err(|e| format!("mount: {e}"))?;
        if !mounted.success() {
            return Err(format!("mount a bpffs on {}", node.pins.display()));
        }
        std::fs::write(node.cgroup.join("cgroup.procs"), id.to_string())
            .map_err(|e| format!("join the cgroup: {e}"))?;
        Ok(node)
    }
}

impl Drop for EbpfNode {
    fn drop(&mut self) {
        let _ = std::fs::write(
            self.root.join("cgroup.procs"),
            std::process::id().to_string(),
        );
        // The proxy was killed just before; the kernel may take a moment to empty the cgroup.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.cgroup).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = Command::new("umount").arg(&self.pins).status();
        let _ = std::fs::remove_dir(&self.pins);
    }
}

/// `ip -n NS ARGS…`; `Err` with stderr on failure.
fn ip(ns: &NetNs, args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .arg("-n")
        .arg(&ns.name)
        .args(args)
        .output()
        .map_err(|e| format!("run ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip -n {} {}: {}",
            ns.name,
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn wait_for_line(log: &Path, line: &str) -> Result<(), String> {
    for _ in 0..400 {
        if std::fs::read_to_string(log).is_ok_and(|t| t.contains(line)) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    Err(format!("{} never said {line:?}", log.display()))
}
