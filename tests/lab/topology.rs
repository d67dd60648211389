//! The lab's wiring: node namespaces on an underlay bridge, an external client on the same
//! underlay, and host-gateway routes between the nodes' pod CIDRs.
//!
//! ```text
//!        ┌─────── <p>-net: bridge br0 192.168.200.1 (the nodes' default gateway) ───────┐
//!        │ n1              n2              n3              cl                          │
//!        └─┼───────────────┼───────────────┼───────────────┼───────────────────────────┘
//!   <p>-n1 eth0 .11     <p>-n2 eth0 .12  <p>-n3 eth0 .13  <p>-client eth0 .100 (+ .101)
//!      lo 10.244.1.1/32    10.244.2.1       10.244.3.1      routes: 203.0.113.0/24 (external IPs)
//!      pods 10.244.1.0/24  10.244.2.0/24    10.244.3.0/24           198.51.100.0/24 (LB VIPs)
//!      10.244.j.0/24 via 192.168.200.1j (host-gw)                   both via node 1
//! ```
//!
//! The underlay is outside the service CIDR (10.96.0.0/12) on purpose: upstream drops forwarded
//! traffic to unallocated addresses in that range. Nodes have a default route, like real nodes,
//! so a packet to a ClusterIP reaches the proxy's forward-path rules (a reject for a Service
//! without endpoints, say) instead of failing route lookup first. Their gateway is the underlay
//! namespace, which rejects whatever is not for a lab address: a packet no proxy captured ends
//! there at once, as "host unreachable" (never "refused", which is what a proxy's reject says).
//!
//! Every link is created with both ends inside lab namespaces (`ip -n A link add … peer … netns
//! B`), so nothing is ever added to the host's namespace and no lab packet can leave the lab.
//! Nodes forward (`ip_forward=1`) with reverse-path filtering off, as a CNI's host-gateway mode
//! would set them up.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

use crate::testenv::NetNs;

/// The underlay subnet every node and the client sit on.
pub const UNDERLAY_PREFIX: u8 = 24;
/// The underlay's router (the underlay namespace's bridge): the nodes' default gateway.
pub const ROUTER_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 200, 1);
/// The external client's address: the one a lab client uses unless it binds another.
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 200, 100);
/// A second address of the external client, for source-range tests.
pub const OTHER_CLIENT_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 200, 101);
/// Where the external client routes external IPs (through node 1, like an upstream router).
pub const EXTERNAL_IP_RANGE: &str = "203.0.113.0/24";
/// Where the external client routes LoadBalancer ingress IPs (through node 1).
pub const LB_IP_RANGE: &str = "198.51.100.0/24";
/// The cluster's pod network, handed to proxies as `--cluster-cidr`.
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";

/// Node `index` (0-based) underlay address: 192.168.200.11, .12, …
pub fn node_ip(index: usize) -> Ipv4Addr {
    Ipv4Addr::new(192, 168, 200, 11 + u8::try_from(index).expect("few nodes"))
}

/// Node `index` pod gateway (on its `lo`): 10.244.1.1, 10.244.2.1, …
pub fn pod_gateway(index: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 244, 1 + u8::try_from(index).expect("few nodes"), 1)
}

/// One node's network namespace and addresses.
pub struct NodeNet {
    pub index: usize,
    pub ns: NetNs,
    pub ip: Ipv4Addr,
    pub pod_gateway: Ipv4Addr,
}

impl NodeNet {
    /// `10.244.<index+1>.0/24`
    pub fn pod_cidr(&self) -> String {
        let [a, b, c, _] = self.pod_gateway.octets();
        format!("{a}.{b}.{c}.0/24")
    }
}

/// The namespaces of a lab and how they are linked. Dropping it deletes every namespace (nodes
/// first, the underlay last); processes inside must already be gone (see `Lab`'s field order).
pub struct Topology {
    pub nodes: Vec<NodeNet>,
    pub client: NetNs,
    pub underlay: NetNs,
}

impl Topology {
    /// Builds `nodes` node namespaces, the client and the underlay; names start with `prefix`.
    pub fn build(prefix: &str, nodes: usize) -> Topology {
        let underlay = NetNs::new(&format!("{prefix}-net"));
        ip(&underlay, &["link", "add", "br0", "type", "bridge"]);
        ip(&underlay, &["link", "set", "br0", "up"]);
        let router = format!("{ROUTER_IP}/{UNDERLAY_PREFIX}");
        ip(&underlay, &["addr", "add", &router, "dev", "br0"]);
        // The router answers whatever no proxy captured (any address outside the lab's own) at
        // once with "host unreachable", instead of letting it vanish into a timeout. A rule, not
        // a missing route: the kernel rate-limits its no-route errors (1/s after a burst of 5).
        // The bridge itself is a plain switch: bridged frames must not meet the router's rule.
        for setting in [
            "net.ipv4.icmp_ratelimit=0",
            "net.ipv4.ip_forward=1",
            "net.bridge.bridge-nf-call-iptables=0",
            "net.bridge.bridge-nf-call-ip6tables=0",
        ] {
            underlay.output("sysctl", &["-qw", setting]);
        }
        ip(&underlay, &["route", "add", "default", "dev", "br0"]);
        nft(&underlay, ROUTER_RULES);

        let client = NetNs::new(&format!("{prefix}-client"));
        plug(&underlay, &client, "cl");
        for addr in [CLIENT_IP, OTHER_CLIENT_IP] {
            let cidr = format!("{addr}/{UNDERLAY_PREFIX}");
            ip(&client, &["addr", "add", &cidr, "dev", "eth0"]);
        }
        ip(&client, &["link", "set", "eth0", "up"]);
        for range in [EXTERNAL_IP_RANGE, LB_IP_RANGE] {
            ip(
                &client,
                &["route", "add", range, "via", &node_ip(0).to_string()],
            );
        }

        let nodes: Vec<NodeNet> = (0..nodes)
            .map(|index| {
                let ns = NetNs::new(&format!("{prefix}-n{}", index + 1));
                for (key, value) in [
                    ("net.ipv4.ip_forward", "1"),
                    ("net.ipv4.conf.all.rp_filter", "0"),
                    ("net.ipv4.conf.default.rp_filter", "0"),
                    // Rejects are ICMP errors, which the kernel rate-limits per peer (about six in
                    // a burst, then one a second); probes send more than that.
                    ("net.ipv4.icmp_ratelimit", "0"),
                ] {
                    ns.output("sysctl", &["-qw", &format!("{key}={value}")]);
                }
                let node = NodeNet {
                    index,
                    ns,
                    ip: node_ip(index),
                    pod_gateway: pod_gateway(index),
                };
                plug(&underlay, &node.ns, &format!("n{}", index + 1));
                let cidr = format!("{}/{UNDERLAY_PREFIX}", node.ip);
                ip(&node.ns, &["addr", "add", &cidr, "dev", "eth0"]);
                ip(&node.ns, &["link", "set", "eth0", "up"]);
                let router = ROUTER_IP.to_string();
                ip(&node.ns, &["route", "add", "default", "via", &router]);
                let gw = format!("{}/32", node.pod_gateway);
                ip(&node.ns, &["addr", "add", &gw, "dev", "lo"]);
                node
            })
            .collect();
        for node in &nodes {
            // The router knows the pod CIDRs too (for its ICMP errors to reach pods).
            let via = node.ip.to_string();
            ip(&underlay, &["route", "add", &node.pod_cidr(), "via", &via]);
            for other in nodes.iter().filter(|o| o.index != node.index) {
                let via = other.ip.to_string();
                ip(&node.ns, &["route", "add", &other.pod_cidr(), "via", &via]);
            }
        }
        Topology {
            nodes,
            client,
            underlay,
        }
    }
}

/// The underlay router's only rules: reject what the lab has no address for.
const ROUTER_RULES: &str = "table ip lab-router {
  chain forward {
    type filter hook forward priority 0; policy accept;
    ip daddr != { 192.168.200.0/24, 10.244.0.0/16 } reject with icmp host-unreachable
  }
}
";

/// `nft -f -` in `ns` with `rules`.
fn nft(ns: &NetNs, rules: &str) {
    use std::io::Write;
    let mut child = ns
        .command("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run nft");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(rules.as_bytes())
        .expect("write rules");
    let out = child.wait_with_output().expect("wait for nft");
    assert!(
        out.status.success(),
        "nft -f - in {}: {}",
        ns.name,
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// A veth from `ns` (`eth0`) to the underlay bridge (port `port`).
fn plug(underlay: &NetNs, ns: &NetNs, port: &str) {
    ip(
        ns,
        &[
            "link",
            "add",
            "eth0",
            "type",
            "veth",
            "peer",
            "name",
            port,
            "netns",
            &underlay.name,
        ],
    );
    ip(underlay, &["link", "set", port, "master", "br0"]);
    ip(underlay, &["link", "set", port, "up"]);
}

/// `ip -n NS ARGS…`; panics with stderr on failure.
pub fn ip(ns: &NetNs, args: &[&str]) {
    let out = Command::new("ip")
        .arg("-n")
        .arg(&ns.name)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run ip: {e}"));
    assert!(
        out.status.success(),
        "ip -n {} {}: {}",
        ns.name,
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}
