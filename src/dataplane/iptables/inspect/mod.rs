//! The iptables mode's part in `explain` and `status`: its chains planned or read back with
//! `iptables-save` (or, for one packet on iptables-nft, only the chains its path can take),
//! walked rule by rule, and the clients its `recent` lists remember.

pub mod recent;
pub mod saved;
pub mod scoped;

#[cfg(test)]
mod hostile_tests;

use std::collections::BTreeSet;
use std::net::SocketAddr;

use crate::cluster::{IpFamily, Snapshot};
use crate::config::Config;
use crate::dataplane::inspect::clock::read_clock;
use crate::dataplane::inspect::{self, Destination, Outcome, Packet, Verdict, shares};
use crate::dataplane::iptables::{self, ModeConfig, Ruleset, trace};
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
        let mode = ModeConfig::new(config)?;
        Ok((Box::new(Planned::new(snapshot, &mode)), mode.node))
    }
}

/// Both families' planned chains.
#[derive(Debug)]
pub struct Planned(pub [Ruleset; 2]);

impl Planned {
    pub fn new(snapshot: &Snapshot, cfg: &ModeConfig) -> Planned {
        Planned(iptables::plan_all(snapshot, cfg))
    }

    /// The plan with the default configuration beside `node`.
    pub fn with_policy(snapshot: &Snapshot, node: &NodePolicy) -> Planned {
        Planned::new(
            snapshot,
            &ModeConfig {
                node: node.clone(),
                ..ModeConfig::default()
            },
        )
    }
}

impl inspect::Plan for Planned {
    fn rules(&self, family: IpFamily) -> &dyn inspect::Rules {
        &self.0[family.index()]
    }

    fn read(
        &self,
        _config: &Config,
        _snapshot: &Snapshot,
        family: IpFamily,
        packet: Option<&Destination>,
    ) -> Result<Box<dyn inspect::Read>, inspect::Error> {
        let packet = packet.map(|d| scoped::Packet {
            to: d.to.ip(),
            port: d.to.port(),
            protocol: d.protocol,
        });
        let read = saved::read_iptables(None, family, &self.0[family.index()], packet.as_ref())?;
        Ok(Box::new(Read {
            chains: read.rules.unwrap_or_else(|| Ruleset::empty(family)),
            drift: read.drift,
        }))
    }
}

impl inspect::Rules for Ruleset {
    fn mode(&self) -> &'static str {
        "iptables"
    }

    fn walk(&self, packet: &Packet) -> Outcome {
        let p = trace::Packet {
            protocol: packet.protocol,
            source: packet.source,
            destination: packet.to.ip(),
            port: packet.to.port(),
            from_node: packet.interface.is_none(),
            in_interface: packet.interface.clone(),
        };
        let t = trace::trace(self, &p, &packet.local);
        let (verdict, endpoints) = match t.outcome {
            trace::Outcome::Endpoints(set) => {
                let eps: BTreeSet<SocketAddr> = set.iter().filter_map(|e| e.parse().ok()).collect();
                (Verdict::Forwarded, eps)
            }
            trace::Outcome::Reject => (Verdict::Rejected, BTreeSet::new()),
            trace::Outcome::Drop => (Verdict::Dropped, BTreeSet::new()),
            trace::Outcome::Untouched => (Verdict::Untouched, BTreeSet::new()),
        };
        Outcome {
            verdict,
            endpoints: shares(endpoints),
            masquerade: Some(t.masquerade),
        }
    }

    /// The tracer walks KUBE-SERVICES rule by rule: every frontend of a large node traced
    /// twice takes minutes (benches/explain.rs).
    fn traces_whole_node(&self) -> bool {
        false
    }
}

/// Our chains as the kernel holds them (empty when they are not there).
#[derive(Debug)]
struct Read {
    chains: Ruleset,
    drift: Vec<String>,
}

impl inspect::Read for Read {
    fn rules(&self) -> &dyn inspect::Rules {
        &self.chains
    }

    fn drift(&self) -> &[String] {
        &self.drift
    }

    fn remember(
        &mut self,
        _config: &Config,
        snapshot: &Snapshot,
        packet: &Packet,
    ) -> Result<inspect::Remembered, inspect::Error> {
        let endpoints = recent::add_entries(
            snapshot,
            packet,
            &mut self.chains,
            &mut recent::ProcLists,
            read_clock(),
        )?;
        Ok(inspect::Remembered::endpoints(endpoints))
    }

    /// Our rules live in iptables-nft's own tables (or outside nf_tables, with legacy): another
    /// table's base chain has no "ours" to stand before or after, so none is named.
    fn beside(&self) -> Option<Option<&nft::Ruleset>> {
        None
    }
}
