//! The nftables mode's part in `explain` and `status`: its table planned or read back through
//! the adopting reader, walked by the nftables tracer, and the clients its affinity sets
//! remember.

pub mod affinity;

use crate::cluster::{IpFamily, Snapshot};
use crate::config::Config;
use crate::dataplane::inspect::table::OurTable;
use crate::dataplane::inspect::{self, Destination, Outcome, Packet, from_branches};
use crate::dataplane::nftables::{self, ModeConfig};
use crate::dataplane::node::NodePolicy;
use crate::nft::{self, Ruleset, ruleset::Family};

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

/// Both families' planned tables.
#[derive(Debug)]
pub struct Planned(pub [Ruleset; 2]);

impl Planned {
    pub fn new(snapshot: &Snapshot, cfg: &ModeConfig) -> Planned {
        Planned(nftables::plan_all(snapshot, cfg))
    }

    /// The plan with the default configuration beside `node`.
    pub fn with_policy(snapshot: &Snapshot, node: &NodePolicy) -> Planned {
        Planned::new(snapshot, &ModeConfig { node: node.clone() })
    }
}

impl inspect::Plan for Planned {
    fn rules(&self, family: IpFamily) -> &dyn inspect::Rules {
        &self.0[family.index()]
    }

    fn read(
        &self,
        config: &Config,
        _snapshot: &Snapshot,
        family: IpFamily,
        _packet: Option<&Destination>,
    ) -> Result<Box<dyn inspect::Read>, inspect::Error> {
        let table = OurTable::read(config.nftables_encoder, family)?;
        let drift = table.drift(&self.0[family.index()]);
        Ok(Box::new(Read { table, drift }))
    }
}

/// The whole dataplane of the mode is one table: its rules are the table.
impl inspect::Rules for Ruleset {
    fn mode(&self) -> &'static str {
        "nftables"
    }

    fn walk(&self, packet: &Packet) -> Outcome {
        from_branches(&nft::trace::trace(self, &packet.nft(), &packet.local))
    }
}

/// Our table as the kernel holds it.
#[derive(Debug)]
struct Read {
    table: OurTable,
    drift: Vec<String>,
}

impl inspect::Read for Read {
    fn rules(&self) -> &dyn inspect::Rules {
        &self.table.rules
    }

    fn drift(&self) -> &[String] {
        &self.drift
    }

    fn remember(
        &mut self,
        config: &Config,
        snapshot: &Snapshot,
        packet: &Packet,
    ) -> Result<inspect::Remembered, inspect::Error> {
        if !self.table.found {
            return Ok(inspect::Remembered::default());
        }
        let mut sets = affinity::NftablesSets::new(
            config.nftables_encoder,
            None,
            Family::of(IpFamily::of(&packet.to.ip())),
        );
        let endpoints = affinity::add_entries(snapshot, packet, &mut self.table.rules, &mut sets)?;
        Ok(inspect::Remembered::endpoints(endpoints))
    }

    fn beside(&self) -> Option<Option<&Ruleset>> {
        Some(self.table.found())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::inspect::table::{DRIFT_LINES, drift};
    use crate::testing::snapshots::{node, snapshot, svc};

    #[test]
    fn drift_is_the_repair_in_short() {
        let cfg = nftables::ModeConfig::default();
        let before = snapshot(node(), vec![svc("default/web", "10.96.0.10", 80)]);
        let after = snapshot(
            node(),
            vec![svc("default/web", "10.96.0.10", 80).ep("10.244.1.2", 8080, "node-a")],
        );
        let kernel = nftables::plan::plan(&before, &cfg, IpFamily::V4);
        let planned = nftables::plan::plan(&after, &cfg, IpFamily::V4);
        assert!(drift(Some(&planned), &planned).is_empty());
        let d = drift(Some(&kernel), &planned);
        assert!(
            d[0].contains("operations would bring the kernel to the plan"),
            "{d:?}"
        );
        assert!(d.iter().any(|l| l.contains("10.244.1.2")), "{d:?}");
        assert!(d.len() <= DRIFT_LINES + 2);
        assert!(drift(None, &planned)[0].contains("not in the kernel"));
    }
}
