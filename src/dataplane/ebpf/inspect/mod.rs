//! The eBPF mode's part in `explain` and `status`: its maps planned or read from the pins,
//! walked by its tracer (the socket programs' path, or the tc programs' for a packet from
//! outside), told in their own words, and the `kp_aff` entries the programs wrote.

pub mod pinned;
pub mod socket_lb;
pub mod tc_lb;

use crate::cluster::{IpFamily, Snapshot};
use crate::config::{Config, NodePortAddresses};
use crate::dataplane::ebpf::trace::{Fate, Hook, Remembered};
use crate::dataplane::ebpf::{self, diff::Maps};
use crate::dataplane::inspect::{
    self, Destination, Frontend, Origin, Outcome, Packet, Share, Told, Verdict,
};
use crate::dataplane::node::NodePolicy;
use crate::nft;

/// The mode's inspection.
pub struct Inspect;

impl inspect::Inspect for Inspect {
    fn plan(
        &self,
        config: &Config,
        snapshot: &Snapshot,
        _offline: bool,
    ) -> Result<(Box<dyn inspect::Plan>, NodePolicy), inspect::Error> {
        let node = NodePolicy::new(config)?;
        Ok((
            Box::new(Planned::new(snapshot, &config.node_port_addresses)),
            node,
        ))
    }
}

/// The maps (both families share them), planned or read from the pins, and the `kp_aff`
/// entry the tc programs keep for the packet's client from outside, when one was read (the
/// socket programs' entries are a namespace's, listed beside the trace).
#[derive(Debug, Default)]
pub struct MapRules {
    pub maps: Maps,
    pub remembered: Option<Remembered>,
}

/// The mode's plan, and the maps it fills when written into empty ones (what the tracer
/// walks; one for both families).
#[derive(Debug)]
pub struct Planned {
    pub plan: ebpf::plan::Plan,
    pub rules: MapRules,
}

impl Planned {
    /// The map contents, NodePorts on what `npa` selects of the node's addresses (as the
    /// sync plans them).
    pub fn new(snapshot: &Snapshot, npa: &NodePortAddresses) -> Planned {
        let node_ports = ebpf::plan::node_ports(npa, &snapshot.node);
        let plan = ebpf::plan::plan(snapshot, &node_ports);
        let maps = ebpf::trace::planned_maps(&plan);
        Planned {
            plan,
            rules: MapRules {
                maps,
                remembered: None,
            },
        }
    }
}

impl inspect::Plan for Planned {
    fn rules(&self, _family: IpFamily) -> &dyn inspect::Rules {
        &self.rules
    }

    fn read(
        &self,
        config: &Config,
        _snapshot: &Snapshot,
        _family: IpFamily,
        _packet: Option<&Destination>,
    ) -> Result<Box<dyn inspect::Read>, inspect::Error> {
        let pin_root = ebpf::mode::pin_root(config);
        let read = pinned::read(&pin_root)?;
        let drift = pinned::drift(read.as_ref(), &self.plan, &pin_root);
        Ok(Box::new(Read {
            rules: MapRules {
                maps: read.unwrap_or_default(),
                remembered: None,
            },
            drift,
        }))
    }
}

impl inspect::Rules for MapRules {
    fn mode(&self) -> &'static str {
        ebpf::apply::MODE
    }

    /// The mode has maps, not rules.
    fn noun(&self) -> &'static str {
        "maps"
    }

    fn walk(&self, packet: &Packet) -> Outcome {
        let t = socket_lb::trace(&self.maps, self.remembered.as_ref(), packet);
        let verdict = match &t.fate {
            Fate::Translated { .. } if t.has_missing_slots() => Verdict::Mixed,
            Fate::Translated { .. } => Verdict::Forwarded,
            Fate::Refused => Verdict::Rejected,
            Fate::TimedOut | Fate::Dropped(_) => Verdict::Dropped,
            Fate::Untouched | Fate::NotSeen(_) => Verdict::Untouched,
        };
        // A socket is the backend's: no packet is rewritten. From outside the tc
        // program rewrites the source to the node's when the entry says so.
        let snat = t.hooks.contains(&Hook::TcIngress) && t.entry.is_some_and(|e| e.snat);
        Outcome {
            verdict,
            endpoints: t
                .backends()
                .into_iter()
                .map(|(endpoint, share)| Share { endpoint, share })
                .collect(),
            masquerade: Some(snat),
        }
    }

    /// The programs that act for the call, and why the walk ends so in their words, before
    /// the model's reasons.
    fn told(&self, packet: &Packet, frontend: Option<Frontend>, _: &Outcome) -> Option<Told> {
        let t = socket_lb::trace(&self.maps, self.remembered.as_ref(), packet);
        let first = if packet.origin == Origin::Outside {
            tc_lb::reasons(&t, packet, frontend == Some(Frontend::ClusterIp))
        } else {
            socket_lb::reasons(&t, packet, frontend)
        };
        Some(Told {
            hooks: t.hooks.iter().map(|h| h.as_str()).collect(),
            first,
            last: Vec::new(),
        })
    }

    /// Socket load balancing acts for this node's own sockets only: its external frontends
    /// are programmed for them.
    fn external_from_node(&self) -> bool {
        true
    }
}

/// The pinned maps (empty when none are pinned).
#[derive(Debug)]
struct Read {
    rules: MapRules,
    drift: Vec<String>,
}

impl inspect::Read for Read {
    fn rules(&self) -> &dyn inspect::Rules {
        &self.rules
    }

    fn drift(&self) -> &[String] {
        &self.drift
    }

    /// The socket programs key their entries by network namespace, not address: they are
    /// listed after the trace, not matched to the client. The tc programs key a client from
    /// outside by its address: its entry goes to the tracer.
    fn remember(
        &mut self,
        config: &Config,
        _snapshot: &Snapshot,
        packet: &Packet,
    ) -> Result<inspect::Remembered, inspect::Error> {
        if packet.origin != Origin::Outside {
            return Ok(match pinned::affinity(config, &self.rules.maps, packet) {
                Ok(later) => inspect::Remembered {
                    later,
                    ..Default::default()
                },
                Err(why) => inspect::Remembered {
                    unread: vec![format!(
                        "affinity entries not read: {}",
                        crate::causes::one_line(&why)
                    )],
                    ..Default::default()
                },
            });
        }
        let pin_root = ebpf::mode::pin_root(config);
        let Some(found) = pinned::client_entry(&self.rules.maps, &pin_root, packet)? else {
            return Ok(inspect::Remembered::default());
        };
        self.rules.remembered = found.entry;
        if let Some(line) = found.ignored {
            // There is an entry, but the program would not follow it: not "no entry".
            return Ok(inspect::Remembered {
                later: vec![line],
                ..Default::default()
            });
        }
        Ok(inspect::Remembered::endpoints(Some(found.followed)))
    }

    /// Nothing of the mode's is in nf_tables: the programs act on the socket before any packet
    /// exists, or at tc ingress before netfilter.
    fn beside(&self) -> Option<Option<&nft::Ruleset>> {
        None
    }
}
