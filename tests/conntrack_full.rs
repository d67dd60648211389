//! The conntrack table full (root, in a User-mode Linux guest: `nf_conntrack_max` belongs to the
//! initial network namespace, which on this host is the host's; the guest's is its own). The
//! binary runs in nftables mode in a node namespace, following a manifest directory: a UDP
//! Service whose endpoint is pod a. The node then opens UDP flows to the Service until the
//! kernel drops a new one for want of a conntrack entry (the table is full of flows to pod a).
//! While it is full, the Service's endpoint moves to pod b:
//! - the sync that follows succeeds (`kubeproxy_sync_proxy_rules_nftables_sync_failures_total`
//!   stays 0 and the last-sync timestamp moves): nothing the proxy does needs a conntrack entry;
//! - its stale-flow cleanup deletes the flows to pod a through ctnetlink, which works on a full
//!   table (`kubeproxy_conntrack_reconciler_deleted_entries_total` counts them), and so frees
//!   the table: a new flow to the Service is answered, by pod b.
//!
//! Everything lives in the guest and dies with it.

#![allow(
    clippy::disallowed_methods,
    reason = "a kernel test: boots a UML guest, runs ip, conntrack and python, writes sysctls"
)]

use support::manifest_yaml;
use support::uml;

use std::process::Command;
use std::time::Duration;

use manifest_yaml::{DNS, Port, documents, node, ready, service, slice};
use uml::host::helper_process::{HelperProcess, RESULT};
use uml::host::{self, ChildGuard, NetNs, metric};

const HELPER: HelperProcess = HelperProcess::new("conntrack_full_helper_process");
const CASES: &[&str] = &["full-table"];

#[test]
fn a_full_conntrack_table_stops_no_sync_and_the_stale_flow_cleanup_frees_it() {
    let found = uml::run_cases(&[], &HELPER, "guest", CASES, Duration::from_secs(300));
    for line in found.unwrap_or_default() {
        println!("{line}");
    }
}

/// Not a test of its own: the case, run inside the guest.
#[test]
fn conntrack_full_helper_process() {
    HELPER.when_requested(|role| {
        assert_eq!(role, "guest", "unknown role");
        full_table();
        println!("{RESULT}full-table ok");
    });
}

/// The Service's ClusterIP and port, and the pods' addresses.
const VIP: &str = "10.96.1.10";
const PORT: u16 = 53;
const POD_A: &str = "10.244.1.10";
const POD_B: &str = "10.244.2.10";
/// Entries the table holds: a few more than the flows the proxy's own work needs.
const TABLE_MAX: u32 = 200;

/// The Node, and the Service `dns` whose one endpoint is `endpoint`.
fn manifests(endpoint: &str) -> String {
    let port = Port { port: PORT, ..DNS };
    documents(&[
        node("node-a", "10.0.0.11", None),
        service("dns", VIP, port, ""),
        slice("dns", port, &ready(endpoint)),
    ])
}

/// A UDP server that answers each datagram with its pod's name.
const SERVER: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 5353))
while True:
    _, peer = s.recvfrom(100)
    s.sendto(sys.argv[1].encode(), peer)
"#;

/// Sends one datagram from each of `argv[3]` fresh sockets to `argv[1]:argv[2]` in turn and
/// prints what each got: the answering pod, `timeout`, or the error (a datagram the node's
/// own rules or conntrack drop fails its `sendto` with `EPERM`).
const FLOWS: &str = r#"
import socket, sys
host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
keep = []
for i in range(count):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.5)
    keep.append(s)
    try:
        s.sendto(b"x", (host, port))
        print(s.recv(100).decode())
    except socket.timeout:
        print("timeout")
    except OSError as e:
        print("error: " + e.strerror)
"#;

/// Fills the table to `argv[3]` entries with assured flows to `argv[1]:argv[2]`: opens as many
/// flows from fresh sockets as there are free entries (`conntrack -C`), then, past the 2 s after
/// which the kernel counts a UDP flow answered both ways as a stream, sends again on each
/// answered one, which marks its entry assured; again until the table is full. Never opening
/// more flows than there is room for keeps the kernel from evicting a flow that is not yet
/// assured to make room for the next (a full table evicts only those). Prints `answered
/// assured`.
const FILL: &str = r#"
import socket, subprocess, sys, time
host, port, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
count = lambda: int(subprocess.check_output(["conntrack", "-C"]))
answered, assured = [], 0
for _ in range(5):
    free = size - count()
    if free <= 0:
        break
    fresh = []
    for i in range(free):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(0.5)
        try:
            s.sendto(b"x", (host, port))
            s.recv(100)
            fresh.append(s)
        except OSError:
            break
    time.sleep(2.5)
    for s in fresh:
        try:
            s.sendto(b"x", (host, port))
            s.recv(100)
            assured += 1
        except OSError:
            pass
    answered += fresh
print(len(answered), assured)
"#;

/// What each flow of one [`FLOWS`] run got.
fn flows(node: &NetNs, count: u32) -> Vec<String> {
    let (count, port) = (count.to_string(), PORT.to_string());
    match node.try_output("python3", &["-c", FLOWS, VIP, &port, &count]) {
        Ok(out) => out.lines().map(str::to_owned).collect(),
        Err(e) => vec![e.to_string()],
    }
}

/// How long the proxy may take to program a change (the guest is slow).
const WAIT: Duration = Duration::from_secs(60);

const FAILURES: &str =
    "kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family=\"IPv4\"}";
const LAST_SYNC: &str = "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"}";
const DELETED: &str = "kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=\"IPv4\"}";

fn ip(ns: &NetNs, args: &str) {
    let words: Vec<&str> = args.split(' ').collect();
    ns.output("ip", &words);
}

/// A pod namespace behind the veth `veth-<name>` of `node`, at `addr`/24 with the node at .1,
/// answering UDP on 5353 with `name`.
fn pod(node: &NetNs, name: &str, addr: &str) -> (NetNs, ChildGuard) {
    let pod = NetNs::new(&format!("ctf-{name}"));
    let veth = format!("veth-{name}");
    host::stdout_of(
        Command::new("ip")
            .args(["link", "add", &veth, "netns", &node.name, "type", "veth"])
            .args(["peer", "name", "eth0", "netns", &pod.name]),
    );
    let gateway = addr.rsplit_once('.').map(|(net, _)| format!("{net}.1"));
    let gateway = gateway.expect("an IPv4 address");
    ip(node, &format!("addr add {gateway}/24 dev {veth}"));
    ip(node, &format!("link set {veth} up"));
    ip(&pod, &format!("addr add {addr}/24 dev eth0"));
    ip(&pod, "link set eth0 up");
    ip(&pod, &format!("route add default via {gateway}"));
    let server = ChildGuard::spawn(
        &format!("{}-udp", pod.name),
        pod.command("python3").args(["-c", SERVER, name]),
    );
    (pod, server)
}

/// Writes `value` to the sysctl at `path`.
fn set(path: &str, value: &str) {
    std::fs::write(path, value).unwrap_or_else(|e| panic!("{path} = {value}: {e}"));
}

fn full_table() {
    let node = NetNs::new("ctf-node");
    ip(&node, "link set lo up");
    ip(&node, "addr add 10.0.0.11/32 dev lo");
    let _a = pod(&node, "a", POD_A);
    let _b = pod(&node, "b", POD_B);
    // The Service range is routed somewhere, as on a node, so a connection gets as far as
    // the rules that translate it.
    ip(&node, "route add 10.96.0.0/12 dev veth-a");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("cluster.yaml");
    std::fs::write(&file, manifests(POD_A)).expect("write manifests");
    let mut proxy = ChildGuard::spawn(
        &format!("{}-proxy", node.name),
        node.command(env!("CARGO_BIN_EXE_kube-proxy-rs"))
            .args(["--proxy-mode=nftables", "--manifests"])
            .arg(dir.path())
            .args([
                "--hostname-override=node-a",
                "--cluster-cidr=10.244.0.0/16",
                // The limit is the test's own.
                "--conntrack-max-per-core=0",
                "--metrics-bind-address=127.0.0.1:10249",
                "--healthz-bind-address=127.0.0.1:10256",
            ]),
    );
    proxy.wait_until("pod a answers through the Service", WAIT, || {
        flows(&node, 1) == ["a"]
    });

    // Read before the table fills: a scrape needs a conntrack entry too.
    let synced_before = metric(&node, LAST_SYNC).expect("a last-sync timestamp");
    let deleted_before = metric(&node, DELETED).unwrap_or(0.0);
    assert_eq!(metric(&node, FAILURES), Some(0.0));

    // Flows stay for the whole case; the table is made small.
    // (The timeouts are the namespace's; the limit is the initial namespace's, the guest's.)
    for timeout in ["udp_timeout", "udp_timeout_stream"] {
        node.output(
            "sysctl",
            &["-qw", &format!("net.netfilter.nf_conntrack_{timeout}=600")],
        );
    }
    // Only the filling flows hold the table: an earlier probe's or scrape's entry, on its
    // shorter timeout, would free a slot while the table is checked full.
    node.output("conntrack", &["-F"]);
    set(
        "/proc/sys/net/netfilter/nf_conntrack_max",
        &TABLE_MAX.to_string(),
    );
    let port = PORT.to_string();
    let size = TABLE_MAX.to_string();
    let filled = node.output("python3", &["-c", FILL, VIP, &port, &size]);
    let [answered, assured]: [u32; 2] = filled
        .split_whitespace()
        .map(|n| n.parse().expect("a count"))
        .collect::<Vec<_>>()
        .try_into()
        .unwrap_or_else(|_| panic!("fill printed {filled:?}"));
    // The count is the namespace's own; the limit is the whole kernel's.
    let count: u32 = node
        .output("conntrack", &["-C"])
        .trim()
        .parse()
        .expect("conntrack -C");
    assert!(
        answered < TABLE_MAX * 2 && assured + 2 >= answered && count + 2 >= TABLE_MAX,
        "the table did not fill: {answered} flows answered, {assured} assured, {count} entries \
         of {TABLE_MAX}"
    );
    println!(
        "{RESULT}filled: {answered} flows to pod a answered ({assured} assured); {count} \
         entries of {TABLE_MAX}"
    );
    let dropped = flows(&node, 3);
    assert!(
        dropped
            .iter()
            .all(|f| f == "timeout" || f.starts_with("error")),
        "a full table drops new flows: {dropped:?}"
    );
    println!("{RESULT}new flows while full: {dropped:?}");

    std::fs::write(&file, manifests(POD_B)).expect("rewrite manifests");
    // Only once the stale flows are gone is there room for a new one (or a scrape).
    proxy.wait_until("a new flow answered by pod b", WAIT, || {
        flows(&node, 1) == ["b"]
    });
    assert!(
        metric(&node, LAST_SYNC).is_some_and(|t| t > synced_before),
        "no sync after the endpoint moved"
    );
    assert_eq!(metric(&node, FAILURES), Some(0.0), "a sync failed");
    let deleted = metric(&node, DELETED).unwrap_or(0.0) - deleted_before;
    assert!(
        deleted >= f64::from(assured),
        "{deleted} stale flows deleted of the {assured} to pod a"
    );
    println!("{RESULT}freed: {deleted} stale flows deleted, a new flow answered by pod b");
    assert!(proxy.exited().is_none(), "{}", proxy.log_tail(30));
}
