//! The lab's wiring: node namespaces on an underlay bridge, an external client on the same
//! underlay, and host-gateway routes between the nodes' pod CIDRs. Dual-stack: every address
//! below has an IPv6 twin, and IPv6 is routed the same way.
//!
//! ```text
//!        ┌─────── <p>-net: bridge br0 192.168.200.1, fd00:200::1 (the nodes' default gateway) ──────┐
//!        │ n1              n2              n3              cl                                      │
//!        └─┼───────────────┼───────────────┼───────────────┼───────────────────────────────────────┘
//!   <p>-n1 eth0 .11     <p>-n2 eth0 .12  <p>-n3 eth0 .13  <p>-client eth0 .100 (+ .101)
//!          fd00:200::11    fd00:200::12     fd00:200::13         fd00:200::100
//!      lo 10.244.1.1/32    10.244.2.1       10.244.3.1      routes: 203.0.113.0/24 (external IPs)
//!         fd00:244:1::1    fd00:244:2::1    fd00:244:3::1           198.51.100.0/24 (LB VIPs)
//!      pods 10.244.1.0/24  10.244.2.0/24    10.244.3.0/24           both via node 1
//!           fd00:244:1::/64 fd00:244:2::/64 fd00:244:3::/64
//!      10.244.j.0/24 via 192.168.200.1j, fd00:244:j::/64 via fd00:200::1j (host-gw)
//! ```
//!
//! The underlay is outside the service CIDRs (10.96.0.0/12, fd00:10:96::/108) on purpose:
//! upstream drops forwarded traffic to unallocated addresses in those ranges. Nodes have a
//! default route in both families, like real nodes, so a packet to a ClusterIP reaches the
//! proxy's forward-path rules (a reject for a Service without endpoints, say) instead of failing
//! route lookup first. Their gateway is the underlay namespace, which rejects whatever is not for
//! a lab address: a packet no proxy captured ends there at once, as "host unreachable" (ICMPv6
//! "address unreachable"), never "refused", which is what a proxy's reject says.
//!
//! Every link is created with both ends inside lab namespaces (`ip -n A link add … peer … netns
//! B`), so nothing is ever added to the host's namespace and no lab packet can leave the lab.
//! Nodes forward both families (`ip_forward=1`, IPv6 `forwarding=1`) with reverse-path filtering
//! off, as a CNI's host-gateway mode would set them up. IPv6 addresses are added without
//! duplicate address detection (`nodad`), so they are usable at once instead of after a second of
//! "tentative".

use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::Command;

use crate::testenv::{NetNs, stdout_of};

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
/// The cluster's IPv4 pod network.
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
/// The cluster's IPv6 pod network: a /32, so that it holds the nodes' `fd00:244:<i>::/64`
/// (whose node number is the third group).
pub const CLUSTER_CIDR6: &str = "fd00:244::/32";
/// The IPv6 underlay subnet's prefix length.
pub const UNDERLAY6_PREFIX: u8 = 64;
/// The underlay router's IPv6 address: the nodes' IPv6 default gateway.
pub const ROUTER_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 0, 0, 0, 0, 0, 0x1);
/// The external client's IPv6 address.
pub const CLIENT_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 0, 0, 0, 0, 0, 0x100);
/// The link-local address every node has on each pod veth: the pods' IPv6 default gateway (the
/// node's global pod gateway address is on `lo`, and a node answers neighbour solicitations only
/// for addresses on the interface they arrive on).
pub const POD_LINK_GATEWAY6: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0x1);

/// Node `index` (0-based) underlay address: 192.168.200.11, .12, …
pub fn node_ip(index: usize) -> Ipv4Addr {
    Ipv4Addr::new(192, 168, 200, 11 + u8::try_from(index).expect("few nodes"))
}

/// Node `index` pod gateway (on its `lo`): 10.244.1.1, 10.244.2.1, …
pub fn pod_gateway(index: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 244, 1 + u8::try_from(index).expect("few nodes"), 1)
}

/// Node `index` (0-based) IPv6 underlay address: fd00:200::11, ::12, …
pub fn node_ip6(index: usize) -> Ipv6Addr {
    let last = 0x11 + u16::try_from(index).expect("few nodes");
    Ipv6Addr::new(0xfd00, 0x200, 0, 0, 0, 0, 0, last)
}

/// Node `index` IPv6 pod gateway (on its `lo`): fd00:244:1::1, fd00:244:2::1, …
pub fn pod_gateway6(index: usize) -> Ipv6Addr {
    let subnet = 1 + u16::try_from(index).expect("few nodes");
    Ipv6Addr::new(0xfd00, 0x244, subnet, 0, 0, 0, 0, 1)
}

/// One node's network namespace and addresses.
pub struct NodeNet {
    pub index: usize,
    pub ns: NetNs,
    pub ip: Ipv4Addr,
    pub ip6: Ipv6Addr,
    pub pod_gateway: Ipv4Addr,
    pub pod_gateway6: Ipv6Addr,
}

impl NodeNet {
    /// `10.244.<index+1>.0/24`
    pub fn pod_cidr(&self) -> String {
        let [a, b, c, _] = self.pod_gateway.octets();
        format!("{a}.{b}.{c}.0/24")
    }

    /// `fd00:244:<index+1>::/64`
    pub fn pod_cidr6(&self) -> String {
        let s = self.pod_gateway6.segments();
        let net = Ipv6Addr::new(s[0], s[1], s[2], 0, 0, 0, 0, 0);
        format!("{net}/64")
    }

    /// Pod address `host` (the last group) in this node's IPv6 pod CIDR.
    pub fn pod_ip6(&self, host: u16) -> Ipv6Addr {
        let s = self.pod_gateway6.segments();
        Ipv6Addr::new(s[0], s[1], s[2], 0, 0, 0, 0, host)
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
        let router6 = format!("{ROUTER_IP6}/{UNDERLAY6_PREFIX}");
        ip(&underlay, &["addr", "add", &router6, "dev", "br0", "nodad"]);
        for setting in [
            "net.ipv4.icmp_ratelimit=0",
            "net.ipv4.ip_forward=1",
            "net.ipv6.icmp.ratelimit=0",
            "net.ipv6.conf.all.forwarding=1",
            "net.bridge.bridge-nf-call-iptables=0",
            "net.bridge.bridge-nf-call-ip6tables=0",
        ] {
            underlay.output("sysctl", &["-qw", setting]);
        }
        ip(&underlay, &["route", "add", "default", "dev", "br0"]);
        ip(&underlay, &["-6", "route", "add", "default", "dev", "br0"]);
        nft(&underlay, ROUTER_RULES);

        let client = NetNs::new(&format!("{prefix}-client"));
        plug(&underlay, &client, "cl");
        for addr in [CLIENT_IP, OTHER_CLIENT_IP] {
            let cidr = format!("{addr}/{UNDERLAY_PREFIX}");
            ip(&client, &["addr", "add", &cidr, "dev", "eth0"]);
        }
        let cidr6 = format!("{CLIENT_IP6}/{UNDERLAY6_PREFIX}");
        ip(&client, &["addr", "add", &cidr6, "dev", "eth0", "nodad"]);
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
                    ("net.ipv6.conf.all.forwarding", "1"),
                    ("net.ipv6.icmp.ratelimit", "0"),
                ] {
                    ns.output("sysctl", &["-qw", &format!("{key}={value}")]);
                }
                let node = NodeNet {
                    index,
                    ns,
                    ip: node_ip(index),
                    ip6: node_ip6(index),
                    pod_gateway: pod_gateway(index),
                    pod_gateway6: pod_gateway6(index),
                };
                plug(&underlay, &node.ns, &format!("n{}", index + 1));
                let cidr = format!("{}/{UNDERLAY_PREFIX}", node.ip);
                ip(&node.ns, &["addr", "add", &cidr, "dev", "eth0"]);
                let cidr6 = format!("{}/{UNDERLAY6_PREFIX}", node.ip6);
                ip(&node.ns, &["addr", "add", &cidr6, "dev", "eth0", "nodad"]);
                ip(&node.ns, &["link", "set", "eth0", "up"]);
                let router = ROUTER_IP.to_string();
                ip(&node.ns, &["route", "add", "default", "via", &router]);
                let router6 = ROUTER_IP6.to_string();
                ip(
                    &node.ns,
                    &["-6", "route", "add", "default", "via", &router6],
                );
                let gw = format!("{}/32", node.pod_gateway);
                ip(&node.ns, &["addr", "add", &gw, "dev", "lo"]);
                let gw6 = format!("{}/128", node.pod_gateway6);
                ip(&node.ns, &["addr", "add", &gw6, "dev", "lo", "nodad"]);
                node
            })
            .collect();
        for node in &nodes {
            // The router knows the pod CIDRs too (for its ICMP errors to reach pods).
            let via = node.ip.to_string();
            ip(&underlay, &["route", "add", &node.pod_cidr(), "via", &via]);
            let via6 = node.ip6.to_string();
            ip(
                &underlay,
                &["route", "add", &node.pod_cidr6(), "via", &via6],
            );
            for other in nodes.iter().filter(|o| o.index != node.index) {
                let via = other.ip.to_string();
                ip(&node.ns, &["route", "add", &other.pod_cidr(), "via", &via]);
                let via6 = other.ip6.to_string();
                ip(
                    &node.ns,
                    &["route", "add", &other.pod_cidr6(), "via", &via6],
                );
            }
        }
        Topology {
            nodes,
            client,
            underlay,
        }
    }
}

/// The underlay router's only rules: reject what the lab has no address for, in each family.
const ROUTER_RULES: &str = "table ip lab-router {
  chain forward {
    type filter hook forward priority 0; policy accept;
    ip daddr != { 192.168.200.0/24, 10.244.0.0/16 } reject with icmp host-unreachable
  }
}
table ip6 lab-router {
  chain forward {
    type filter hook forward priority 0; policy accept;
    ip6 daddr != { fd00:200::/64, fd00:244::/32 } reject with icmpv6 addr-unreachable
  }
}
";

/// `nft -f -` in `ns` with `rules`.
fn nft(ns: &NetNs, rules: &str) {
    ns.output_fed("nft", &["-f", "-"], rules);
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
    stdout_of(Command::new("ip").arg("-n").arg(&ns.name).args(args));
}
