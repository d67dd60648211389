//! The expectations of `explain` over the lab, one row per scenario's main packet (or a few):
//! where it goes, from which client, and what the explanation must name: Service port,
//! outcome, endpoints, masquerade and reason. Shared by every mode of ours; the modes that
//! differ by design read a row through [`super::expected`].

use std::net::Ipv4Addr;

use crate::lab::Proto;

/// Where the packet goes: one of the Service's frontends.
#[derive(Clone, Copy, Debug)]
pub enum To {
    /// The Service's ClusterIP of the family, at `port`.
    ClusterIp(Family, u16, Proto),
    /// Node `node`'s IPv4 underlay address, at the node port of the Service's `index`th port.
    NodePort { node: usize, index: usize },
    /// A fixed address (an externalIP, a LoadBalancer ingress IP) at `port`.
    Address(Ipv4Addr, u16),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

/// Where it comes from.
#[derive(Clone, Copy, Debug)]
pub enum From {
    /// A lab pod, from its address of the destination's family.
    Pod(&'static str),
    /// The node itself.
    Node,
    /// The external client's address.
    Client,
    /// The external client's other address (outside `loadBalancerSourceRanges`).
    OtherClient,
}

/// One scenario's main packet and what `explain` must say of it.
#[derive(Clone, Copy, Debug)]
pub struct Packet {
    pub scenario: u8,
    /// The node (index) whose kernel the packet meets.
    pub node: usize,
    /// The lab Service whose address `to` names.
    pub service: &'static str,
    pub to: To,
    pub from: From,
    /// The Service port `explain` names (`NAME:PORT` in the lab's namespace); `None`: no
    /// Service port has this frontend.
    pub port: Option<&'static str>,
    /// `forwarded`, `rejected`, `dropped` or `untouched`.
    pub verdict: &'static str,
    /// The pods a new connection may reach (when forwarded).
    pub endpoints: &'static [&'static str],
    /// Whether the source is rewritten (checked when forwarded).
    pub masquerade: bool,
    /// Words one of the reasons must contain.
    pub reason: &'static str,
}

const fn packet(scenario: u8, service: &'static str, to: To, from: From) -> Packet {
    Packet {
        scenario,
        node: 0,
        service,
        to,
        from,
        port: None,
        verdict: "forwarded",
        endpoints: &[],
        masquerade: false,
        reason: "",
    }
}

const fn v4(port: u16) -> To {
    To::ClusterIp(Family::V4, port, Proto::Tcp)
}

/// The main packets of the lab's scenarios, as node 1 (index 0) sees them unless `node` says
/// otherwise. Scenarios whose point is timing or state over time (18, 19, 20, 25, 29) are
/// explained in their end state.
pub const PACKETS: &[Packet] = &[
    Packet {
        port: Some("s01:p"),
        endpoints: &["n1-a", "n2-a", "n3-a"],
        reason: "internalTrafficPolicy Cluster: every usable endpoint (3)",
        ..packet(1, "s01", v4(80), From::Pod("n1-b"))
    },
    Packet {
        port: Some("s02:http"),
        endpoints: &["n1-a", "n2-a"],
        reason: "every usable endpoint (2)",
        ..packet(2, "s02", v4(80), From::Pod("n1-b"))
    },
    Packet {
        port: Some("s03:dns-udp"),
        endpoints: &["n1-a", "n2-a"],
        reason: "every usable endpoint (2)",
        ..packet(
            3,
            "s03",
            To::ClusterIp(Family::V4, 53, Proto::Udp),
            From::Pod("n1-b"),
        )
    },
    Packet {
        port: Some("s04:p"),
        endpoints: &["n1-a", "n2-a"],
        masquerade: true,
        reason: "externalTrafficPolicy Cluster: the source is rewritten",
        ..packet(4, "s04", To::NodePort { node: 0, index: 0 }, From::Client)
    },
    Packet {
        port: Some("s05-vip:p"),
        endpoints: &["n2-a"],
        masquerade: true,
        reason: "externalTrafficPolicy Cluster: every usable endpoint (1)",
        ..packet(
            5,
            "s05-vip",
            To::Address(Ipv4Addr::new(198, 51, 100, 10), 80),
            From::Client,
        )
    },
    // ipMode Proxy: the load balancer's address is not the node's to capture.
    Packet {
        verdict: "untouched",
        reason: "is no frontend of any Service port on this node",
        ..packet(
            5,
            "s05-proxy",
            To::Address(Ipv4Addr::new(198, 51, 100, 11), 80),
            From::Client,
        )
    },
    Packet {
        port: Some("s06:p"),
        endpoints: &["n3-a"],
        masquerade: true,
        reason: "externalTrafficPolicy Cluster: every usable endpoint (1)",
        ..packet(
            6,
            "s06",
            To::Address(Ipv4Addr::new(203, 0, 113, 10), 80),
            From::Client,
        )
    },
    Packet {
        port: Some("s07:p"),
        endpoints: &["n1-a", "n2-a", "n3-a"],
        reason: "every usable endpoint (3)",
        ..packet(7, "s07", v4(80), From::Pod("n1-b"))
    },
    Packet {
        port: Some("s08:p"),
        endpoints: &["n2-a"],
        masquerade: true,
        reason: "externalTrafficPolicy Cluster: the source is rewritten",
        ..packet(8, "s08", To::NodePort { node: 0, index: 0 }, From::Client)
    },
    Packet {
        port: Some("s09:p"),
        verdict: "dropped",
        reason: "externalTrafficPolicy Local and no endpoint of",
        ..packet(9, "s09", To::NodePort { node: 0, index: 0 }, From::Client)
    },
    Packet {
        node: 1,
        port: Some("s09:p"),
        endpoints: &["n2-a"],
        reason: "externalTrafficPolicy Local: the client's address is kept",
        ..packet(9, "s09", To::NodePort { node: 1, index: 0 }, From::Client)
    },
    Packet {
        port: Some("s10:p"),
        endpoints: &["n1-a"],
        reason: "internalTrafficPolicy Local: only the endpoints on this node (1)",
        ..packet(10, "s10", v4(80), From::Pod("n1-b"))
    },
    Packet {
        node: 2,
        port: Some("s10:p"),
        verdict: "dropped",
        reason: "internalTrafficPolicy Local and no endpoint of",
        ..packet(10, "s10", v4(80), From::Pod("n3-b"))
    },
    Packet {
        port: Some("s11:p"),
        verdict: "rejected",
        reason: "has no usable endpoint",
        ..packet(11, "s11", v4(80), From::Pod("n1-a"))
    },
    Packet {
        port: Some("s11:u"),
        verdict: "rejected",
        reason: "has no usable endpoint",
        ..packet(
            11,
            "s11",
            To::ClusterIp(Family::V4, 80, Proto::Udp),
            From::Pod("n1-a"),
        )
    },
    Packet {
        port: Some("s12:p"),
        endpoints: &["n2-a"],
        reason: "terminating fallback",
        ..packet(12, "s12", v4(80), From::Pod("n1-b"))
    },
    Packet {
        port: Some("s13:p"),
        endpoints: &["n1-a"],
        reason: "topology: only endpoints hinted for this node's zone",
        ..packet(13, "s13", v4(80), From::Pod("n1-b"))
    },
    Packet {
        node: 1,
        port: Some("s14:p"),
        endpoints: &["n2-a"],
        masquerade: true,
        reason: "hairpin",
        ..packet(14, "s14", v4(80), From::Pod("n2-a"))
    },
    Packet {
        port: Some("s15:p"),
        endpoints: &["n1-a", "n3-a"],
        reason: "every usable endpoint (2)",
        ..packet(15, "s15", v4(80), From::Pod("n1-b"))
    },
    Packet {
        verdict: "untouched",
        reason: "is no frontend of any Service port on this node",
        ..packet(16, "s16", v4(80), From::Pod("n1-a"))
    },
    Packet {
        port: Some("s17:p"),
        verdict: "dropped",
        reason: "is outside the loadBalancerSourceRanges",
        ..packet(
            17,
            "s17",
            To::Address(Ipv4Addr::new(198, 51, 100, 12), 80),
            From::OtherClient,
        )
    },
    Packet {
        port: Some("s17:p"),
        endpoints: &["n2-a"],
        masquerade: true,
        reason: "externalTrafficPolicy Cluster",
        ..packet(
            17,
            "s17",
            To::Address(Ipv4Addr::new(198, 51, 100, 12), 80),
            From::Client,
        )
    },
    Packet {
        port: Some("s18:u"),
        endpoints: &["n3-a"],
        reason: "every usable endpoint (1)",
        ..packet(
            18,
            "s18",
            To::ClusterIp(Family::V4, 53, Proto::Udp),
            From::Pod("n1-b"),
        )
    },
    // After the restart the scenario leaves n3-a alone in the slice.
    Packet {
        port: Some("s19:p"),
        endpoints: &["n3-a"],
        reason: "every usable endpoint (1)",
        ..packet(19, "s19", v4(80), From::Pod("n1-b"))
    },
    Packet {
        port: Some("s29:one"),
        endpoints: &["n3-a"],
        reason: "every usable endpoint (1)",
        ..packet(29, "s29", v4(80), From::Pod("n1-b"))
    },
    Packet {
        port: Some("s21-dual:p"),
        endpoints: &["n2-a", "n3-b"],
        reason: "every usable endpoint (2)",
        ..packet(
            21,
            "s21-dual",
            To::ClusterIp(Family::V6, 80, Proto::Tcp),
            From::Pod("n1-b"),
        )
    },
    Packet {
        port: Some("s21-none:p"),
        verdict: "rejected",
        reason: "has no usable endpoint",
        ..packet(
            21,
            "s21-none",
            To::ClusterIp(Family::V6, 80, Proto::Tcp),
            From::Pod("n1-a"),
        )
    },
    // Labelled for another proxy: not ours to program.
    Packet {
        verdict: "untouched",
        reason: "is no frontend of any Service port on this node",
        ..packet(22, "s22-other", v4(80), From::Pod("n1-b"))
    },
    Packet {
        port: Some("s25:p"),
        verdict: "rejected",
        reason: "has no usable endpoint",
        ..packet(25, "s25", v4(80), From::Node)
    },
    Packet {
        port: Some("s26:p"),
        endpoints: &["n1-a", "n2-a", "n3-a"],
        reason: "every usable endpoint (3)",
        ..packet(26, "s26", v4(80), From::Pod("n1-b"))
    },
    Packet {
        port: Some("s20:p"),
        endpoints: &["n2-a"],
        reason: "every usable endpoint (1)",
        ..packet(20, "s20", v4(80), From::Pod("n1-b"))
    },
    Packet {
        port: Some("s23-a:p"),
        endpoints: &["n2-a", "n2-b"],
        masquerade: true,
        reason: "externalTrafficPolicy Cluster: the source is rewritten",
        ..packet(
            23,
            "s23-a",
            To::NodePort { node: 0, index: 0 },
            From::Client,
        )
    },
    // The lab's detect-local mode (its cluster CIDR): a pod of node 1 keeps its address.
    Packet {
        port: Some("s24-0:p"),
        endpoints: &["n2-a"],
        reason: "not masqueraded: the endpoint sees the client's address",
        ..packet(24, "s24-0", v4(80), From::Pod("n1-a"))
    },
];
