//! Every mode's plan of a snapshot for the `explain` and `status` tests, each through the mode
//! registry as `explain` plans it offline, and the packet a request resolves to, for the
//! modes' own inspection tests.

use crate::cli::explain::{self, Packet, Plan, Request};
use crate::cluster::Snapshot;
use crate::config::{Config, NodePortAddresses, ProxyMode};
use crate::dataplane::modes;
use crate::dataplane::node::NodePolicy;

/// `mode`'s plan of `snapshot` for `config`, offline: the Node object's addresses stand in
/// for the host's.
fn plan(mode: ProxyMode, snapshot: &Snapshot, config: &Config) -> Box<dyn Plan> {
    let (plan, _) = modes::of(mode)
        .inspect()
        .plan(config, snapshot, true)
        .expect("a configuration every mode plans with");
    plan
}

/// The plans of nftables, iptables and ipvs, in that order, for `config`: for checks that
/// must hold in every NAT mode.
pub fn every_mode(snapshot: &Snapshot, config: &Config) -> [Box<dyn Plan>; 3] {
    [ProxyMode::Nftables, ProxyMode::Iptables, ProxyMode::Ipvs]
        .map(|mode| plan(mode, snapshot, config))
}

/// The three of [`every_mode`], then the userspace mode's and the eBPF mode's, those two
/// with NodePorts on every address (and the userspace relay binding `config`'s address).
pub fn all_modes(snapshot: &Snapshot, config: &Config) -> Vec<Box<dyn Plan>> {
    let every_address = Config {
        node_port_addresses: NodePortAddresses {
            all: true,
            ..Default::default()
        },
        ..config.clone()
    };
    let mut all = Vec::from(every_mode(snapshot, config));
    for mode in [ProxyMode::Userspace, ProxyMode::Ebpf] {
        all.push(plan(mode, snapshot, &every_address));
    }
    all
}

/// The packet `to` from `from` (`None`: a pod) is on the node of `snapshot`, as `explain`
/// resolves it.
pub fn packet(snapshot: &Snapshot, node: &NodePolicy, to: &str, from: Option<&str>) -> Packet {
    let request = Request::parse(to, from, None).expect("a valid request");
    explain::packet(snapshot, node, &request).expect("a source on this node")
}
