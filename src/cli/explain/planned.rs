//! Rules planned from a snapshot, for `explain --manifests` (no kernel), in any of our modes.

use crate::cluster::{IpFamily, Snapshot};
use crate::config::NodePortAddresses;
use crate::dataplane::node::NodePolicy;
use crate::dataplane::userspace::{self, trace::RelayPorts};
use crate::dataplane::{ebpf, iptables, ipvs, nftables};
use crate::nft;

use super::Rules;

/// Both families' planned rules of one mode.
#[derive(Debug)]
pub enum Planned {
    Nftables([nft::Ruleset; 2]),
    Iptables([iptables::Ruleset; 2]),
    Ipvs {
        desired: [ipvs::Desired; 2],
        tables: Vec<nft::Ruleset>,
    },
    /// The redirect rules on stand-in listener ports (the running proxy's are the kernel's
    /// choice), the listeners they lead to, and what a live reading needs to plan them again.
    Userspace {
        tables: [nft::Ruleset; 2],
        relay: [RelayPorts; 2],
        listeners: userspace::plan::Listeners,
        settings: userspace::redirect::Settings,
    },
    /// The eBPF mode's plan, and the maps it fills when written into empty ones (what the
    /// tracer walks; one for both families).
    Ebpf {
        plan: ebpf::plan::Plan,
        maps: ebpf::diff::Maps,
    },
}

impl Planned {
    pub fn nftables(snapshot: &Snapshot, cfg: &nftables::ModeConfig) -> Planned {
        Planned::Nftables(nftables::plan_all(snapshot, cfg))
    }

    pub fn iptables(snapshot: &Snapshot, cfg: &iptables::ModeConfig) -> Planned {
        Planned::Iptables(iptables::plan_all(snapshot, cfg))
    }

    /// Offline, the Node object's addresses stand in for the host's (as `plan` does).
    pub fn ipvs(snapshot: &Snapshot, cfg: &ipvs::ModeConfig) -> Planned {
        Planned::ipvs_on(snapshot, cfg, &ipvs::HostAddresses::default())
    }

    /// The plan over the host's addresses outside `kube-ipvs0` (`host`; empty: the Node
    /// object's stand in).
    pub fn ipvs_on(
        snapshot: &Snapshot,
        cfg: &ipvs::ModeConfig,
        host: &ipvs::HostAddresses,
    ) -> Planned {
        let desired = ipvs::plan_all(snapshot, cfg, host);
        let node_ips = if host.0.is_empty() {
            snapshot.node.local_addresses().into_iter().collect()
        } else {
            host.0.clone()
        };
        let bound = ipvs::bound_addresses(&desired, &node_ips);
        let tables = ipvs::rules_all(&desired, cfg, &snapshot.node, &bound);
        Planned::Ipvs { desired, tables }
    }

    /// Userspace mode's listeners and redirect rules, each listener on a stand-in port (its
    /// place in plan order, from 1): which port is the kernel's choice, and `explain` does
    /// not print it.
    pub fn userspace(snapshot: &Snapshot, settings: userspace::redirect::Settings) -> Planned {
        let listeners = userspace::plan::plan(snapshot);
        let open: std::collections::BTreeMap<_, _> = listeners
            .iter()
            .zip(1..=u16::MAX)
            .map(|((key, spec), port)| {
                let serving = !spec.endpoints.is_empty();
                (
                    key.clone(),
                    userspace::redirect::Listening { port, serving },
                )
            })
            .collect();
        let tables = userspace::redirect::plan(snapshot, &open, &settings);
        let relay = IpFamily::ALL.map(|_| RelayPorts::planned(&listeners, &open));
        Planned::Userspace {
            tables,
            relay,
            listeners,
            settings,
        }
    }

    /// The eBPF mode's map contents, NodePorts on what `npa` selects of the node's addresses
    /// (as its sync plans them).
    pub fn ebpf(snapshot: &Snapshot, npa: &NodePortAddresses) -> Planned {
        let node_ports = ebpf::plan::node_ports(npa, &snapshot.node);
        let plan = ebpf::plan::plan(snapshot, &node_ports);
        let maps = ebpf::trace::planned_maps(&plan);
        Planned::Ebpf { plan, maps }
    }

    /// Every mode's plan of `snapshot` with the default configuration beside `node`, in the
    /// order nftables, iptables, ipvs: for checks that must hold in every mode.
    pub fn every_mode(snapshot: &Snapshot, node: &NodePolicy) -> [Planned; 3] {
        [
            Planned::nftables(snapshot, &nftables::ModeConfig { node: node.clone() }),
            Planned::iptables(
                snapshot,
                &iptables::ModeConfig {
                    node: node.clone(),
                    ..iptables::ModeConfig::default()
                },
            ),
            Planned::ipvs(
                snapshot,
                &ipvs::ModeConfig {
                    node: node.clone(),
                    ..ipvs::ModeConfig::default()
                },
            ),
        ]
    }

    /// The rules of `family`.
    pub fn rules(&self, family: IpFamily) -> Rules<'_> {
        let i = family.index();
        match self {
            Planned::Nftables(r) => Rules::Nftables(&r[i]),
            Planned::Iptables(r) => Rules::Iptables(&r[i]),
            Planned::Ipvs { desired, tables } => Rules::Ipvs {
                desired: &desired[i],
                tables: &tables[i],
            },
            Planned::Userspace { tables, relay, .. } => Rules::Userspace {
                tables: &tables[i],
                relay: &relay[i],
            },
            Planned::Ebpf { maps, .. } => Rules::Ebpf {
                maps,
                remembered: None,
            },
        }
    }
}
