//! Every mode's plan of a snapshot for the `explain` and `status` tests, and the packet a
//! request resolves to, for the modes' own inspection tests.

use crate::cli::explain::{self, Packet, Plan, Request};
use crate::cluster::Snapshot;
use crate::dataplane::node::NodePolicy;
use crate::dataplane::{ebpf, iptables, ipvs, nftables, userspace};

/// The plans of nftables, iptables and ipvs, in that order, with the default configuration
/// beside `node`: for checks that must hold in every NAT mode.
pub fn every_mode(snapshot: &Snapshot, node: &NodePolicy) -> [Box<dyn Plan>; 3] {
    [
        Box::new(nftables::inspect::Planned::with_policy(snapshot, node)),
        Box::new(iptables::inspect::Planned::with_policy(snapshot, node)),
        Box::new(ipvs::inspect::Planned::with_policy(snapshot, node)),
    ]
}

/// The three of [`every_mode`], then userspace mode's (binding every address, NodePorts on
/// all of them) and the eBPF mode's.
pub fn all_modes(snapshot: &Snapshot, node: &NodePolicy) -> Vec<Box<dyn Plan>> {
    let settings = userspace::redirect::Settings {
        bind: "0.0.0.0".parse().expect("an address"),
        node_ports: crate::config::NodePortAddresses {
            all: true,
            ..Default::default()
        },
        detect_local: node.detect_local.clone(),
    };
    let ebpf = ebpf::inspect::Planned::new(snapshot, &settings.node_ports);
    let mut all = Vec::from(every_mode(snapshot, node));
    all.push(Box::new(userspace::inspect::Planned::new(
        snapshot, settings,
    )));
    all.push(Box::new(ebpf));
    all
}

/// The packet `to` from `from` (`None`: a pod) is on the node of `snapshot`, as `explain`
/// resolves it.
pub fn packet(snapshot: &Snapshot, node: &NodePolicy, to: &str, from: Option<&str>) -> Packet {
    let request = Request::parse(to, from, None).expect("a valid request");
    explain::packet(snapshot, node, &request).expect("a source on this node")
}

/// The nftables mode's planned table of `family`.
pub fn nftables_table(
    snapshot: &Snapshot,
    node: &NodePolicy,
    family: crate::cluster::IpFamily,
) -> crate::nft::Ruleset {
    let [v4, v6] = nftables::inspect::Planned::with_policy(snapshot, node).0;
    match family {
        crate::cluster::IpFamily::V4 => v4,
        crate::cluster::IpFamily::V6 => v6,
    }
}
