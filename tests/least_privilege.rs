//! Each mode with only the capabilities the deploy overlays give it (root): the binary runs as
//! root through `setpriv --bounding-set=-all,+CAP…` (util-linux), which leaves it exactly
//! those capabilities, effective and permitted, as a container with `drop: [ALL]` and
//! `add: [CAP…]` has them (its `CapEff` is checked). It follows a manifest directory as node-a
//! in a node namespace with a pod namespace behind a veth; it must sync (`/debug/status`:
//! the kernel matches the plan), serve (a client on the node reaches the pod through the
//! ClusterIP) and log no refusal by the kernel. Then, for each capability of the mode's set,
//! a run without it must fail, which shows each one is needed. The set is
//! `support/capabilities.rs`. IPVS mode runs in the User-mode Linux guest (`support/uml.rs`:
//! this host's kernel has no IPVS), where the test re-runs itself; there the kernel's virtual
//! services read back with `ipvsadm` stand for the traffic.
//!
//! Isolation: everything lives in the test's namespaces (and, for eBPF, a cgroup v2 child and
//! a private bpffs instance), removed on drop; the proxy's sysctls are the namespace's own.

#![allow(
    clippy::disallowed_methods,
    reason = "a kernel test: starts the binary under setpriv, writes manifests, reads /proc"
)]

use support::capabilities;
use support::ebpf_host;
use support::relay_pods;
use support::uml;
use support::veth_pod;
use support::web_cluster;

use std::process::Command;
use std::time::{Duration, Instant};

use capabilities::{BPF, Cap, NET_ADMIN, PERFMON, bounding_set, needed};
use ebpf_host::{BpfFs, Cgroup};
use relay_pods::host::{self, ChildGuard, NetNs};
use veth_pod::{CLIENT, VethPod};

/// `/debug/status` from the proxy's metrics address, or what went wrong.
const STATUS: &str = r#"
import urllib.request
try:
    print(urllib.request.urlopen("http://127.0.0.1:10249/debug/status", timeout=2).read().decode())
except Exception as e:
    print("failed: %s" % e)
"#;

/// A node namespace with a pod namespace behind a veth (the pod serving on 8080), the
/// manifest directory, and for eBPF mode its cgroup and bpffs.
struct Node {
    veth: VethPod,
    dir: tempfile::TempDir,
    ebpf: Option<(Cgroup, BpfFs)>,
}

impl Node {
    fn new(mode: &str) -> Node {
        let veth = VethPod::new(&format!("lp-{mode}"), "lp-pod", "pod-a");
        let dir = tempfile::tempdir().expect("tempdir");
        web_cluster::write(dir.path(), false);
        let ebpf = (mode == "ebpf").then(|| (Cgroup::new(), BpfFs::new()));
        Node { veth, dir, ebpf }
    }

    /// The proxy in `mode` with exactly `caps`.
    fn proxy(&self, mode: &str, caps: &[Cap]) -> ChildGuard {
        let mut cmd = match &self.ebpf {
            // `nsenter --net`, not `ip netns exec`, whose private /sys hides the cgroup tree.
            Some(_) => {
                let mut cmd = Command::new("nsenter");
                cmd.arg(format!("--net=/var/run/netns/{}", self.veth.node.name))
                    .arg("setpriv");
                cmd
            }
            None => self.veth.node.command("setpriv"),
        };
        cmd.arg(format!("--bounding-set={}", bounding_set(caps)))
            .args(["--inh-caps=-all", "--"])
            .arg(env!("CARGO_BIN_EXE_kube-proxy-rs"))
            .arg(format!("--proxy-mode={mode}"))
            .arg("--manifests")
            .arg(self.dir.path())
            .args([
                "--hostname-override=node-a",
                "--cluster-cidr=10.244.0.0/16",
                // nf_conntrack_max is the host's, not the namespace's.
                "--conntrack-max-per-core=0",
                "--metrics-bind-address=127.0.0.1:10249",
                "--healthz-bind-address=127.0.0.1:10256",
            ]);
        if let Some((cgroup, fs)) = &self.ebpf {
            let settings = fs.settings(cgroup);
            cmd.arg("--bpf-cgroup")
                .arg(&settings.cgroup)
                .arg("--bpf-pin-root")
                .arg(&settings.pin_root);
        }
        ChildGuard::spawn(&format!("{}-proxy", self.veth.node.name), &mut cmd)
    }

    /// What one connection from the node to the ClusterIP got (in eBPF mode from a process
    /// in the programs' cgroup).
    fn connect(&self) -> String {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#"if [ -n "$1" ]; then echo $$ > "$1/cgroup.procs" || exit 9; fi; shift; exec "$@""#)
            .arg("sh")
            .arg(self.ebpf.as_ref().map(|(c, _)| c.0.clone()).unwrap_or_default())
            .args(["ip", "netns", "exec", &self.veth.node.name, "python3", "-c", CLIENT])
            .args(["10.96.1.10", "80", "1", "once"]);
        host::stdout_of(&mut cmd).trim().to_owned()
    }

    fn status(&self) -> String {
        self.veth.node.output("python3", &["-c", STATUS])
    }

    /// Whether, within `limit`, the proxy synced (the kernel matches its plan) and serves.
    fn serves_within(&self, proxy: &mut ChildGuard, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.status().contains("kernel: matches the plan") && self.connect() == "pod-a" {
                return true;
            }
            if proxy.exited().is_some() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        false
    }
}

/// The effective capabilities (`CapEff`, hex) of process `pid`: the proxy, once `setpriv`
/// has exec'd it.
fn effective(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .expect("CapEff line")
        .trim();
    u64::from_str_radix(hex, 16).unwrap()
}

/// The log's lines where the kernel refused something, but the one refusal this host always
/// gives: lowering `oom_score_adj` needs CAP_SYS_RESOURCE, which no mode is given.
fn refusals(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains("not permitted") || l.contains("Permission denied"))
        .filter(|l| !l.contains("cannot set oom_score_adj"))
        .collect()
}

/// Runs `mode` with its set: it syncs, serves and is refused nothing; returns the node for
/// the caller's own checks after.
fn passes_with_its_set(mode: &str) -> Node {
    let node = Node::new(mode);
    let caps = needed(mode);
    let mut proxy = node.proxy(mode, caps);
    assert!(
        node.serves_within(&mut proxy, Duration::from_secs(30)),
        "{mode} with {caps:?}: never served; status:\n{}\nlog:\n{}",
        node.status(),
        proxy.log_tail(30)
    );
    assert_eq!(
        effective(proxy.pid()),
        capabilities::mask(caps),
        "{mode}: exactly {caps:?}"
    );
    let log = proxy.log_tail(10_000);
    assert_eq!(refusals(&log), Vec::<&str>::new(), "{mode}: refused");
    node
}

/// Runs `mode` with its set but `without`: it must not serve within 10 s, and the log must
/// say the kernel refused.
fn fails_without(mode: &str, without: Cap) {
    let node = Node::new(mode);
    let caps: Vec<Cap> = needed(mode)
        .iter()
        .copied()
        .filter(|c| *c != without)
        .collect();
    let mut proxy = node.proxy(mode, &caps);
    assert!(
        !node.serves_within(&mut proxy, Duration::from_secs(10)),
        "{mode} served without {}: it is not needed",
        without.name
    );
    let log = proxy.log_tail(10_000);
    assert!(
        !refusals(&log).is_empty(),
        "{mode} without {}: no refusal logged\n{}",
        without.name,
        proxy.log_tail(30)
    );
}

#[test]
fn nftables_mode_needs_net_admin_alone() {
    passes_with_its_set("nftables");
    fails_without("nftables", NET_ADMIN);
}

#[test]
fn userspace_mode_needs_net_admin_alone() {
    passes_with_its_set("userspace");
    fails_without("userspace", NET_ADMIN);
}

/// A node whose kubelet uses iptables-legacy (its marker chain there): the proxy must follow
/// it, which takes NET_RAW to read and write legacy's tables at all.
#[test]
fn iptables_mode_needs_net_admin_and_net_raw_for_a_legacy_node() {
    let legacy_rules = |node: &Node| {
        node.veth
            .node
            .output("iptables-legacy-save", &["-t", "nat"])
            .contains("-A KUBE-SERVICES")
    };
    let mark_legacy = |node: &Node| {
        node.veth.node.output(
            "iptables-legacy",
            &["-t", "mangle", "-N", "KUBE-IPTABLES-HINT"],
        );
    };

    // On an nft node.
    passes_with_its_set("iptables");
    fails_without("iptables", NET_ADMIN);

    // On a legacy node: the rules go to legacy's tables.
    let node = Node::new("iptables");
    mark_legacy(&node);
    let mut proxy = node.proxy("iptables", needed("iptables"));
    assert!(
        node.serves_within(&mut proxy, Duration::from_secs(30)),
        "{}",
        proxy.log_tail(30)
    );
    assert!(legacy_rules(&node), "{}", proxy.log_tail(30));
    assert_eq!(refusals(&proxy.log_tail(10_000)), Vec::<&str>::new());
    drop(proxy);

    // Without NET_RAW the legacy tables cannot be read: the proxy takes the node for an nft
    // one and its rules miss the kubelet's tables.
    let node = Node::new("iptables");
    mark_legacy(&node);
    let mut proxy = node.proxy("iptables", &[NET_ADMIN]);
    node.serves_within(&mut proxy, Duration::from_secs(30));
    assert!(!legacy_rules(&node), "legacy written without NET_RAW");
    // The log says why.
    let log = proxy.log_tail(10_000);
    assert!(
        log.lines().any(|l| l.starts_with('W')
            && l.contains("cannot read this flavour's rules")
            && l.contains("iptables-legacy-save")
            && l.contains("Permission denied")),
        "{log}"
    );
}

/// eBPF: BPF, NET_ADMIN and PERFMON load and attach the programs (a tc program on the
/// node's veth) and program the maps; SYS_ADMIN, which implies the other two for bpf(),
/// enters pods' namespaces for the UDP socket reconciler, so each of the three is shown
/// needed in a run without SYS_ADMIN.
#[test]
fn ebpf_mode_needs_bpf_net_admin_perfmon_and_sys_admin() {
    passes_with_its_set("ebpf");
    let core = [BPF, NET_ADMIN, PERFMON];
    let node = Node::new("ebpf");
    let mut proxy = node.proxy("ebpf", &core);
    assert!(
        node.serves_within(&mut proxy, Duration::from_secs(30)),
        "without SYS_ADMIN: {}",
        proxy.log_tail(30)
    );
    drop(proxy);
    drop(node);
    for without in core {
        let node = Node::new("ebpf");
        let caps: Vec<Cap> = core.iter().copied().filter(|c| *c != without).collect();
        let mut proxy = node.proxy("ebpf", &caps);
        assert!(
            !node.serves_within(&mut proxy, Duration::from_secs(10)),
            "served without {} (and SYS_ADMIN)",
            without.name
        );
        // The programs do not load or attach: the proxy exits naming the kernel's reason
        // (without PERFMON the verifier gives up on the speculative paths it then checks).
        let status = proxy.exited().expect("the proxy exits");
        assert_eq!(status.code(), Some(1), "without {}", without.name);
        let log = proxy.log_tail(10_000);
        // The error (`error: eBPF: …`, with the verifier's log when it has one) ends the
        // output with the kernel's errno.
        assert!(
            log.lines().last().is_some_and(|l| l.contains("(os error ")),
            "without {}: one error line with the kernel's reason\n{}",
            without.name,
            proxy.log_tail(5)
        );
    }
}

/// The eBPF DaemonSet's privileged init container (`--init-only`) mounts bpffs where the pins
/// go, so the proxy's own container needs no mount reaching the host. `ip netns exec` gives
/// the command a mount namespace with a fresh /sys, where /sys/fs/bpf is not bpffs; that
/// namespace, and the mount, end with it.
#[test]
fn ebpf_init_only_mounts_bpffs_for_the_pins() {
    let ns = NetNs::new("lp-init");
    let script = format!(
        "stat -f -c %T /sys/fs/bpf && {} --init-only --proxy-mode=ebpf \
         --hostname-override=node-a --conntrack-max-per-core=0 >&2 && stat -f -c %T /sys/fs/bpf",
        env!("CARGO_BIN_EXE_kube-proxy-rs")
    );
    let out = ns.output("sh", &["-c", &script]);
    assert_eq!(out.lines().collect::<Vec<_>>(), ["sysfs", "bpf_fs"]);
}

const UML_HELPER: uml::host::helper_process::HelperProcess =
    uml::host::helper_process::HelperProcess::new("least_privilege_uml_helper");

#[test]
fn ipvs_mode_needs_net_admin_alone() {
    uml::run_cases(
        &["dummy", "ip_vs", "ip_vs_rr"],
        &UML_HELPER,
        "guest",
        &["ipvs"],
        Duration::from_secs(300),
    );
}

/// Not a test of its own: the IPVS case, run inside the guest.
#[test]
fn least_privilege_uml_helper() {
    UML_HELPER.when_requested(|role| {
        assert_eq!(role, "guest", "unknown role");
        ipvs_in_guest();
        println!("{}ipvs ok", uml::host::helper_process::RESULT);
    });
}

/// In the guest: a node namespace whose pods' addresses are routed (IPVS takes a unicast
/// destination only), the proxy with NET_ADMIN alone, then without it.
fn ipvs_in_guest() {
    use uml::host::{ChildGuard, NetNs};
    let dir = tempfile::tempdir().expect("tempdir");
    web_cluster::write(dir.path(), false);
    let run = |caps: &[Cap]| {
        let ns = NetNs::new("lp-ipvs");
        ns.output("ip", &["link", "add", "lp-eth", "type", "dummy"]);
        ns.output("ip", &["addr", "add", "10.0.0.11/24", "dev", "lp-eth"]);
        ns.output("ip", &["link", "set", "lp-eth", "up"]);
        ns.output("ip", &["route", "add", "10.244.0.0/16", "dev", "lp-eth"]);
        let mut cmd = ns.command("setpriv");
        cmd.arg(format!("--bounding-set={}", bounding_set(caps)))
            .args(["--inh-caps=-all", "--"])
            .arg(env!("CARGO_BIN_EXE_kube-proxy-rs"))
            .arg("--proxy-mode=ipvs")
            .arg("--manifests")
            .arg(dir.path())
            .args([
                "--hostname-override=node-a",
                "--cluster-cidr=10.244.0.0/16",
                "--conntrack-max-per-core=0",
                "--metrics-bind-address=127.0.0.1:10249",
                "--healthz-bind-address=127.0.0.1:10256",
            ]);
        let mut proxy = ChildGuard::spawn(&format!("{}-proxy", ns.name), &mut cmd);
        let deadline = Instant::now() + Duration::from_secs(if caps.is_empty() { 15 } else { 60 });
        let mut synced = false;
        while Instant::now() < deadline && proxy.exited().is_none() {
            let virtual_services = ns.try_output("ipvsadm", &["-Ln"]).unwrap_or_default();
            if virtual_services.contains("10.96.1.10:80")
                && virtual_services.contains("10.244.1.10:8080")
                && ns
                    .output("python3", &["-c", STATUS])
                    .contains("kernel: matches the plan")
            {
                synced = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let effective = (proxy.exited().is_none()).then(|| effective(proxy.pid()));
        (synced, effective, proxy.log_tail(10_000))
    };

    let caps = needed("ipvs");
    let (synced, caps_held, log) = run(caps);
    assert!(synced, "ipvs with {caps:?}: never synced\n{log}");
    assert_eq!(caps_held, Some(capabilities::mask(caps)));
    assert_eq!(refusals(&log), Vec::<&str>::new(), "ipvs: refused");

    let (synced, _, log) = run(&[]);
    assert!(!synced, "ipvs synced without NET_ADMIN");
    assert!(!refusals(&log).is_empty(), "no refusal logged\n{log}");
}
