//! The conntrack reconciler against the real kernel (root): in a fresh network namespace, an
//! nftables DNAT rule of our own sends UDP from "ClusterIPs" and a "NodePort" to local UDP
//! servers, making real conntrack entries; then the reconciler runs inside the namespace against
//! a model and must delete exactly the stale entries. Only addresses created here, all inside
//! the namespace.
//!
//! Work that must happen inside the namespace (servers, clients, our netlink code) runs in this
//! test binary re-executed under `ip netns exec` (the `conntrack_helper_process` entry).
//! `UPDATE_GOLDENS=1` also stores the kernel's dump bytes as the codec's fixtures.

#![allow(
    clippy::disallowed_methods,
    reason = "kernel tests run ip, nft and conntrack, re-exec themselves and write manifests"
)]

use support::host;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::time::Duration;

use host::NetNs;
use host::helper_process::{HelperProcess, RESULT};
use kube_proxy_rs::cli::load_manifests;
use kube_proxy_rs::cluster::{Features, IpFamily};
use kube_proxy_rs::conntrack::{Frontends, Socket, reconcile};

/// Endpoint "pods" (local addresses), the node address, and the routes to Service addresses.
const SETUP: &[&str] = &[
    "addr add 10.244.1.1/32 dev lo",
    "addr add 10.244.1.2/32 dev lo",
    "addr add 192.168.50.1/32 dev lo",
    "route add 10.96.0.0/16 dev lo",
    "-6 addr add fd00:244::1/128 dev lo",
    "-6 addr add fd00:244::2/128 dev lo",
    "-6 route add fd00:96::/64 dev lo",
];

/// Our stand-in for a proxy's rules: each client's source port picks its endpoint.
const RULES: &str = r#"
table ip kprs-ct-test {
  chain out {
    type nat hook output priority -100;
    ip daddr 10.96.0.10 udp sport 40001 dnat to 10.244.1.1:5353
    ip daddr 10.96.0.10 udp sport 40002 dnat to 10.244.1.2:5353
    ip daddr 10.96.0.10 udp dport 54 dnat to 10.244.1.1:5353
    ip daddr 10.96.0.10 tcp dport 53 dnat to 10.244.1.1:5353
    ip daddr 192.168.50.1 udp dport 30053 dnat to 10.244.1.1:5353
  }
}
table ip6 kprs-ct-test {
  chain out {
    type nat hook output priority -100;
    ip6 daddr fd00:96::10 udp sport 40007 dnat to [fd00:244::1]:5353
    ip6 daddr fd00:96::10 udp sport 40008 dnat to [fd00:244::2]:5353
  }
}
"#;

/// Stands for the TCP flow, whose source port the kernel picks.
const TCP: u16 = 1;

/// The flows the traffic helper makes: (client source port, family, what it is).
const FLOWS: &[(u16, &str, &str)] = &[
    (40001, "ipv4", "ClusterIP 10.96.0.10:53 → endpoint A"),
    (40002, "ipv4", "ClusterIP 10.96.0.10:53 → endpoint B"),
    (40003, "ipv4", "ClusterIP 10.96.0.12:53, never DNATed"),
    (40004, "ipv4", "NodePort 192.168.50.1:30053 → endpoint A"),
    (40005, "ipv4", "10.96.0.10:54, a port no Service has → A"),
    (40006, "ipv4", "192.168.50.1:30099, no NodePort"),
    (40007, "ipv6", "ClusterIP [fd00:96::10]:53 → endpoint A6"),
    (40008, "ipv6", "ClusterIP [fd00:96::10]:53 → endpoint B6"),
    (
        TCP,
        "ipv4",
        "TCP ClusterIP 10.96.0.10:53 → endpoint A (any source port)",
    ),
];

/// The model: Service dns (dual-stack ClusterIPs, UDP 53 with NodePort 30053, TCP 53) with
/// endpoints `dns_v4` / `dns_v6`; Service late (UDP 10.96.0.12:53) with endpoints `late`.
fn manifests(dns_v4: &[&str], dns_v6: &[&str], late: &[&str]) -> String {
    let eps = |ips: &[&str]| -> String {
        ips.iter()
            .map(|ip| {
                format!(
                    "  - addresses: [\"{ip}\"]\n    conditions: {{ready: true, serving: true, terminating: false}}\n    nodeName: node-a\n"
                )
            })
            .collect()
    };
    let slice = |name: &str, svc: &str, family: &str, ports: &str, ips: &[&str]| {
        format!(
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}\n  namespace: default\n  labels: {{kubernetes.io/service-name: {svc}}}\naddressType: {family}\nports: {ports}\nendpoints:\n{}",
            if ips.is_empty() {
                "  []\n".to_string()
            } else {
                eps(ips)
            }
        )
    };
    let dns_ports =
        "[{name: dns, protocol: UDP, port: 5353}, {name: dns-tcp, protocol: TCP, port: 5353}]";
    format!(
        r#"apiVersion: v1
kind: Node
metadata: {{name: node-a}}
status: {{addresses: [{{type: InternalIP, address: 192.168.50.1}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: dns, namespace: default}}
spec:
  type: NodePort
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10, "fd00:96::10"]
  ipFamilies: [IPv4, IPv6]
  ipFamilyPolicy: RequireDualStack
  ports:
    - {{name: dns, protocol: UDP, port: 53, targetPort: 5353, nodePort: 30053}}
    - {{name: dns-tcp, protocol: TCP, port: 53, targetPort: 5353, nodePort: 30054}}
---
apiVersion: v1
kind: Service
metadata: {{name: late, namespace: default}}
spec:
  type: ClusterIP
  clusterIP: 10.96.0.12
  clusterIPs: [10.96.0.12]
  ipFamilies: [IPv4]
  ports: [{{name: u, protocol: UDP, port: 53, targetPort: 5353}}]
{}{}{}"#,
        slice("dns-v4", "dns", "IPv4", dns_ports, dns_v4),
        slice("dns-v6", "dns", "IPv6", dns_ports, dns_v6),
        slice(
            "late-1",
            "late",
            "IPv4",
            "[{name: u, protocol: UDP, port: 5353}]",
            late
        ),
    )
}

/// A namespace with the addresses, routes and rules above.
fn lab() -> NetNs {
    let ns = NetNs::new("kprs-ct");
    for line in SETUP {
        let words: Vec<&str> = line.split(' ').collect();
        ns.output("ip", &words);
    }
    ns.output_fed("nft", &["-f", "-"], RULES);
    ns
}

/// Runs this binary's helper entry in `ns` with `spec`; returns its `RESULT` lines.
fn helper(ns: &NetNs, spec: &str) -> Vec<String> {
    HELPER.results_in(&ns.name, spec)
}

/// Client source ports of the entries `conntrack -L` lists in `ns` (both families); [`TCP`]
/// for the TCP flow.
fn flows_left(ns: &NetNs) -> Vec<u16> {
    let mut ports: Vec<u16> = ["ipv4", "ipv6"]
        .iter()
        .flat_map(|f| {
            ns.output("conntrack", &["-L", "-f", f])
                .lines()
                .filter_map(|l| {
                    if l.starts_with("tcp ") && l.contains("dst=10.96.0.10 ") {
                        return Some(TCP);
                    }
                    let sport = l.split_whitespace().find(|w| w.starts_with("sport="))?;
                    sport["sport=".len()..].parse::<u16>().ok()
                })
                .collect::<Vec<_>>()
        })
        .filter(|p| FLOWS.iter().any(|(port, ..)| port == p))
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

fn reconcile_with(ns: &NetNs, dir: &Path, manifests: &str) -> Vec<String> {
    std::fs::write(dir.join("cluster.yaml"), manifests).expect("write manifests");
    helper(ns, &format!("reconcile:{}", dir.display()))
}

#[test]
fn reconciler_deletes_exactly_the_stale_udp_flows_and_nothing_still_valid() {
    let ns = lab();
    helper(&ns, "traffic");
    let mut all: Vec<u16> = FLOWS.iter().map(|(p, ..)| *p).collect();
    all.sort_unstable();
    assert_eq!(flows_left(&ns), all, "the traffic made one entry per flow");
    if std::env::var_os("UPDATE_GOLDENS").is_some() {
        let testdata = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/conntrack/testdata");
        helper(&ns, &format!("capture:{}", testdata.display()));
    }
    let dir = tempfile::tempdir().expect("tempdir");

    // Every endpoint still serves, and `late` has none yet: nothing is stale.
    let valid = manifests(
        &["10.244.1.1", "10.244.1.2"],
        &["fd00:244::1", "fd00:244::2"],
        &[],
    );
    let passes = reconcile_with(&ns, dir.path(), &valid);
    assert_eq!(passes, ["IPv4 stale=0 deleted=0", "IPv6 stale=0 deleted=0"]);
    assert_eq!(flows_left(&ns), all, "a valid model deletes nothing");

    // A and A6 are replaced by B and B6; `late` gets its first endpoint.
    let replaced = manifests(&["10.244.1.2"], &["fd00:244::2"], &["10.244.1.2"]);
    let passes = reconcile_with(&ns, dir.path(), &replaced);
    assert_eq!(passes, ["IPv4 stale=3 deleted=3", "IPv6 stale=1 deleted=1"]);
    assert_eq!(
        flows_left(&ns),
        [TCP, 40002, 40005, 40006, 40008],
        "left: flows to B and B6, flows to no frontend, and TCP"
    );

    // Level-triggered: the same model again finds nothing more to do.
    let passes = reconcile_with(&ns, dir.path(), &replaced);
    assert_eq!(passes, ["IPv4 stale=0 deleted=0", "IPv6 stale=0 deleted=0"]);
}

/// The entry below, run in the namespace: `traffic`, `reconcile:DIR` or `capture:DIR`.
const HELPER: HelperProcess = HelperProcess::new("conntrack_helper_process");

/// Not a test of its own: the entry point of the helper processes above. Without the
/// environment variable it does nothing.
#[test]
fn conntrack_helper_process() {
    HELPER.when_requested(|spec| match spec.split_once(':') {
        None if spec == "traffic" => traffic(),
        Some(("reconcile", dir)) => {
            let loaded = load_manifests(Path::new(dir), "node-a", Features::default())
                .expect("manifests load");
            assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
            let frontends = Frontends::from_snapshot(&loaded.snapshot);
            for family in IpFamily::ALL {
                let pass = reconcile::pass_here(&frontends, family, &|| {
                    kube_proxy_rs::conntrack::Translation::ToEndpoint
                })
                .expect("reconcile pass");
                assert!(pass.failed.is_empty(), "{:?}", pass.failed);
                println!(
                    "{RESULT}{family} stale={} deleted={}",
                    pass.stale, pass.deleted
                );
            }
        }
        Some(("capture", dir)) => {
            let mut socket = Socket::open().expect("ctnetlink socket");
            for (family, name) in [
                (IpFamily::V4, "dump_ipv4_conntrack_rs_traffic.bin"),
                (IpFamily::V6, "dump_ipv6_conntrack_rs_traffic.bin"),
            ] {
                let mut bytes = Vec::new();
                socket
                    .dump_raw(family, &mut |d| bytes.extend_from_slice(d))
                    .expect("dump");
                std::fs::write(Path::new(dir).join(name), bytes).expect("write fixture");
            }
            // An entry of its own to delete twice: an acknowledgement, then ENOENT.
            let client = UdpSocket::bind("0.0.0.0:40099").expect("bind");
            client.send_to(b"x", "192.168.50.1:30099").expect("send");
            let mine: Vec<_> = socket
                .dump(IpFamily::V4)
                .expect("dump")
                .flows
                .into_iter()
                .filter(|f| f.original.src_port == 40099)
                .collect();
            assert_eq!(mine.len(), 1, "{mine:?}");
            for (name, want) in [("delete_ack", 1), ("delete_enoent", 0)] {
                let mut bytes = Vec::new();
                let done = socket
                    .delete_raw(mine.clone(), &mut |d| bytes.extend_from_slice(d))
                    .expect("delete");
                assert_eq!(done.deleted, want);
                let file = format!("{name}_conntrack_rs_capture.bin");
                std::fs::write(Path::new(dir).join(file), bytes).expect("write fixture");
            }
        }
        _ => panic!("unknown helper spec {spec}"),
    });
}

/// Echo servers on the endpoints, then one client per flow of [`FLOWS`].
fn traffic() {
    let timeout = Some(Duration::from_secs(2));
    let servers = [
        "10.244.1.1:5353",
        "10.244.1.2:5353",
        "[fd00:244::1]:5353",
        "[fd00:244::2]:5353",
    ];
    for addr in servers {
        let socket = UdpSocket::bind(addr).expect("bind server");
        std::thread::spawn(move || {
            let mut buf = [0; 64];
            while let Ok((n, from)) = socket.recv_from(&mut buf) {
                let _ = socket.send_to(&buf[..n], from);
            }
        });
    }
    let tcp = TcpListener::bind("10.244.1.1:5353").expect("bind tcp server");
    std::thread::spawn(move || {
        for mut conn in tcp.incoming().flatten() {
            let mut b = [0; 1];
            let _ = conn.read_exact(&mut b).and_then(|()| conn.write_all(&b));
        }
    });
    // (source port, destination, whether an answer comes back)
    let clients: [(&str, &str, bool); 8] = [
        ("0.0.0.0:40001", "10.96.0.10:53", true),
        ("0.0.0.0:40002", "10.96.0.10:53", true),
        ("0.0.0.0:40003", "10.96.0.12:53", false),
        ("0.0.0.0:40004", "192.168.50.1:30053", true),
        ("0.0.0.0:40005", "10.96.0.10:54", true),
        ("0.0.0.0:40006", "192.168.50.1:30099", false),
        ("[::]:40007", "[fd00:96::10]:53", true),
        ("[::]:40008", "[fd00:96::10]:53", true),
    ];
    for (bind, to, answered) in clients {
        let socket = UdpSocket::bind(bind).expect("bind client");
        socket.set_read_timeout(timeout).unwrap();
        socket.send_to(b"ping", to).expect("send");
        if answered {
            let mut buf = [0; 64];
            let n = socket
                .recv(&mut buf)
                .unwrap_or_else(|e| panic!("no answer to {bind} → {to}: {e}"));
            assert_eq!(&buf[..n], b"ping");
        }
    }
    let to: SocketAddr = "10.96.0.10:53".parse().unwrap();
    let mut conn = TcpStream::connect_timeout(&to, Duration::from_secs(2)).expect("tcp connect");
    conn.write_all(b"x").unwrap();
    let mut b = [0; 1];
    conn.read_exact(&mut b).expect("tcp echo");
}
