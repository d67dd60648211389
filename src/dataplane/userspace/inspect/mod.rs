//! The userspace mode's part in `explain` and `status`: the redirect rules of our nftables
//! table (planned on stand-in listener ports, or read back) and the listeners they lead to,
//! walked by its tracer; on a live node, the listeners nobody listens on.

pub mod sockets;

use std::collections::BTreeMap;

use crate::cluster::{IpFamily, Snapshot};
use crate::config::Config;
use crate::dataplane::inspect::table::{OurTable, drift};
use crate::dataplane::inspect::{
    self, Destination, Frontend, Outcome, Packet, Told, Verdict, from_branches,
};
use crate::dataplane::node::NodePolicy;
use crate::dataplane::userspace::trace::RelayPorts;
use crate::dataplane::userspace::{plan, redirect, trace};
use crate::nft::{self, Ruleset};

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
        let settings = redirect::Settings::of(config, &node);
        Ok((Box::new(Planned::new(snapshot, settings)), node))
    }
}

/// One family's redirect rules and the listeners they lead to.
#[derive(Debug)]
pub struct RelayRules {
    pub tables: Ruleset,
    pub relay: RelayPorts,
}

/// The redirect rules on stand-in listener ports (the running proxy's are the kernel's
/// choice), the listeners they lead to, and what a live reading needs to plan them again.
#[derive(Debug)]
pub struct Planned {
    pub rules: [RelayRules; 2],
    pub listeners: plan::Listeners,
    pub settings: redirect::Settings,
}

impl Planned {
    /// The listeners and redirect rules, each listener on a stand-in port (its place in plan
    /// order, from 1): which port is the kernel's choice, and `explain` does not print it.
    pub fn new(snapshot: &Snapshot, settings: redirect::Settings) -> Planned {
        let listeners = plan::plan(snapshot);
        let open: BTreeMap<_, _> = listeners
            .iter()
            .zip(1..=u16::MAX)
            .map(|((key, spec), port)| {
                let serving = !spec.endpoints.is_empty();
                (key.clone(), redirect::Listening { port, serving })
            })
            .collect();
        let [t4, t6] = redirect::plan(snapshot, &open, &settings);
        let relay = || RelayPorts::planned(&listeners, &open);
        Planned {
            rules: [
                RelayRules {
                    tables: t4,
                    relay: relay(),
                },
                RelayRules {
                    tables: t6,
                    relay: relay(),
                },
            ],
            listeners,
            settings,
        }
    }
}

impl inspect::Plan for Planned {
    fn rules(&self, family: IpFamily) -> &dyn inspect::Rules {
        &self.rules[family.index()]
    }

    fn read(
        &self,
        config: &Config,
        snapshot: &Snapshot,
        family: IpFamily,
        _packet: Option<&Destination>,
    ) -> Result<Box<dyn inspect::Read>, inspect::Error> {
        let table = OurTable::read(config.nftables_encoder, family)?;
        let (relay, drift) = match table.found() {
            Some(t) => {
                let read = RelayPorts::read(t, snapshot, &self.listeners, &self.settings, family);
                let mut drift = drift(Some(t), &read.want);
                drift.extend(sockets::not_listening(&read.ports)?);
                (read.relay, drift)
            }
            None => (RelayPorts::default(), drift(None, &table.rules)),
        };
        Ok(Box::new(Read {
            table_read: table.found,
            rules: RelayRules {
                tables: table.rules,
                relay,
            },
            drift,
        }))
    }
}

impl inspect::Rules for RelayRules {
    fn mode(&self) -> &'static str {
        "userspace"
    }

    fn walk(&self, packet: &Packet) -> Outcome {
        from_branches(&trace::trace(
            &self.tables,
            &self.relay,
            &packet.nft(),
            &packet.local,
        ))
    }

    /// The relay dials every endpoint from the node: no NAT rule decides the source.
    fn told(&self, _: &Packet, _: Option<Frontend>, outcome: &Outcome) -> Option<Told> {
        Some(Told {
            last: relay_reasons(outcome),
            ..Told::default()
        })
    }
}

/// Userspace mode: why the endpoint sees the node's address, whatever the policies say.
fn relay_reasons(outcome: &Outcome) -> Vec<String> {
    if outcome.verdict != Verdict::Forwarded {
        return Vec::new();
    }
    vec![
        "relayed by the proxy (userspace mode): it accepts the connection and dials the endpoint \
         from the node's address, so the endpoint never sees the client's (not even under \
         externalTrafficPolicy Local)"
            .to_string(),
    ]
}

/// The redirect rules as the kernel holds them, and the listeners they lead to.
#[derive(Debug)]
struct Read {
    rules: RelayRules,
    /// Whether our nftables table is in the kernel (its rules are empty when not).
    table_read: bool,
    drift: Vec<String>,
}

impl inspect::Read for Read {
    fn rules(&self) -> &dyn inspect::Rules {
        &self.rules
    }

    fn drift(&self) -> &[String] {
        &self.drift
    }

    // The relay keeps its ClientIP affinity in its own memory, which no reader sees: the
    // default `remember` finds nothing.

    fn beside(&self) -> Option<Option<&nft::Ruleset>> {
        Some(self.table_read.then_some(&self.rules.tables))
    }
}
