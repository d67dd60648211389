//! What the guest tests (`guest_sctp.rs`, `guest_ipvs.rs`) share: on the host, booting the
//! qemu guest to run the test's node and checking its results; inside the guest, the roles the
//! test binary plays, shell commands, waiting for a probe, a client exchange in a namespace, the
//! node's ICMP count. It runs its guest with `guest.rs`.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::guest::Guest;
use crate::guest::host::helper_process::{self, HelperProcess, RESULT};

/// The node's Node name in the guest's manifests.
pub const NODE_NAME: &str = "guest-node";
/// The node's address on the client's link, where NodePorts are reached.
pub const NODE_IP: &str = "192.168.77.1";
/// The client outside the cluster, in the namespace `client`.
pub const CLIENT_IP: &str = "192.168.77.2";
/// The node's end of every pod veth.
pub const POD_GATEWAY: &str = "10.244.0.1";
/// The ClusterIP of the Service with endpoints.
pub const CLUSTER_IP: &str = "10.96.0.50";
/// The ClusterIP of a Service without endpoints.
pub const NO_ENDPOINTS_IP: &str = "10.96.0.51";

/// Inside the guest: the commands that bring up the node's loopback, the `client` namespace
/// behind a veth (the node at [`NODE_IP`], the client at [`CLIENT_IP`]) and forwarding.
pub fn client_network() -> Vec<String> {
    vec![
        "ip link set lo up".to_owned(),
        "ip netns add client".to_owned(),
        "ip link add vclient type veth peer name eth0 netns client".to_owned(),
        format!("ip addr add {NODE_IP}/24 dev vclient"),
        "ip link set vclient up".to_owned(),
        "ip -n client link set lo up".to_owned(),
        "ip -n client link set eth0 up".to_owned(),
        format!("ip -n client addr add {CLIENT_IP}/24 dev eth0"),
        "sysctl -qw net.ipv4.ip_forward=1".to_owned(),
    ]
}

/// On the host: boots the guest, runs `helper` there as `node`, and checks that it passed and
/// printed a result line for each of `wants`.
pub fn run_node(helper: &HelperProcess, wants: &[String]) {
    let guest = Guest::prepare();
    let command = format!(
        "cd {} && {}",
        crate::layout::repo_root().display(),
        helper.shell_line("node")
    );
    let run = guest.run(&command, Duration::from_secs(600));
    let results = helper_process::results(&run.output);
    assert_eq!(
        run.exit_code,
        Some(0),
        "the guest's test failed (after {:?}):\n{}",
        run.took,
        run.output
    );
    println!("guest ran in {:?}: {results:?}", run.took);
    for want in wants {
        assert!(
            results.iter().any(|r| r == want),
            "missing {want:?} in {results:?}:\n{}",
            run.output
        );
    }
}

/// Starts the real binary on the guest's node in `mode` (`--proxy-mode`), reading the manifests
/// in `dir`, with the flags every guest test gives it (the node's name, the pods' CIDR, the
/// conntrack table left as it is, its servers on loopback) and `extra`; its output goes to
/// `log`.
pub fn start_proxy(
    dir: &std::path::Path,
    mode: &str,
    extra: &[&str],
    log: std::fs::File,
) -> std::process::Child {
    Command::new(crate::layout::kube_proxy_rs_binary())
        .arg(format!("--manifests={}", dir.display()))
        .arg(format!("--hostname-override={NODE_NAME}"))
        .arg(format!("--proxy-mode={mode}"))
        .args([
            "--cluster-cidr=10.244.0.0/16",
            "--conntrack-max-per-core=0",
            "--metrics-bind-address=127.0.0.1:10249",
            "--healthz-bind-address=127.0.0.1:10256",
        ])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("start kube-proxy-rs")
}

/// Declares a guest test's helper: `HELPER`, the test binary re-run as its entry `$entry`, and
/// that entry, a test that plays the roles of [`play_roles`] (and does nothing in an ordinary
/// run). The entry's name is the helper's, so the two cannot drift apart.
#[macro_export]
macro_rules! guest_helper_entry {
    ($entry:ident, $node:expr, $serve:expr, $exchange:expr) => {
        /// The entry below, run inside the guest (`node`) and in its namespaces (`server`,
        /// `client:ADDR:PORT`).
        const HELPER: $crate::helper_process::HelperProcess =
            $crate::helper_process::HelperProcess::new(stringify!($entry));

        /// Not a test of its own: what runs inside the guest and in its namespaces. Without
        /// the environment variable it does nothing.
        #[test]
        fn $entry() {
            $crate::in_guest::play_roles(&HELPER, $node, $serve, $exchange);
        }
    };
}

/// The roles the test binary plays when `helper` re-runs it: `node` inside the guest, `server`
/// and `client:ADDR:PORT` in its namespaces (the client prints `answered <what the server
/// saw>` or `failed <why>` as a result line). Without the environment variable it does nothing.
pub fn play_roles(
    helper: &HelperProcess,
    node: fn(),
    serve: fn(),
    exchange: fn(SocketAddr) -> Result<String, String>,
) {
    helper.when_requested(|role| match role.split_once(':') {
        None if role == "node" => node(),
        None if role == "server" => serve(),
        Some(("client", target)) => {
            let target: SocketAddr = target.parse().expect("client target");
            match exchange(target) {
                Ok(seen) => println!("{RESULT}answered {seen}"),
                Err(e) => println!("{RESULT}failed {e}"),
            }
        }
        _ => panic!("unknown role {role}"),
    });
}

/// Tries `probe` until it answers, for up to 60 s (the guest is emulated and slow).
pub fn eventually(mut probe: impl FnMut() -> Result<String, String>) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match probe() {
            Ok(seen) => return seen,
            Err(e) if Instant::now() > deadline => panic!("no answer within 60 s: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// Runs `helper` as `client:<target>` in network namespace `ns`; its answer is a result line
/// `answered <what the server saw>`, anything else is the error.
pub fn client_in(helper: &HelperProcess, ns: &str, target: &str) -> Result<String, String> {
    let out = helper
        .in_netns(ns, &format!("client:{target}"))
        .output()
        .map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = *helper_process::results(&stdout)
        .first()
        .ok_or_else(|| format!("client printed nothing: {stdout}"))?;
    match line.split_once(' ') {
        Some(("answered", seen)) => Ok(seen.to_owned()),
        _ => Err(line.to_owned()),
    }
}

/// `Icmp: OutDestUnreachs` of this namespace (`/proc/net/snmp`).
pub fn icmp_unreachables_sent() -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").expect("/proc/net/snmp");
    let mut icmp = snmp.lines().filter(|l| l.starts_with("Icmp: "));
    let (names, values) = (icmp.next().unwrap_or(""), icmp.next().unwrap_or(""));
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "OutDestUnreachs")
        .and_then(|(_, v)| v.parse().ok())
        .expect("OutDestUnreachs in /proc/net/snmp")
}

/// Runs a command line split at spaces; fails the test unless it succeeds.
pub fn run(cmd: &str) {
    let words: Vec<&str> = cmd.split(' ').collect();
    let status = Command::new(words[0])
        .args(&words[1..])
        .stdin(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(status.success(), "{cmd}: {status}");
}

/// A command's standard output, or the reason it could not run.
pub fn output(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_else(|e| format!("{cmd}: {e}"))
}
