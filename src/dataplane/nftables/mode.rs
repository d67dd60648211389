//! The nftables mode's parts for the command line ([`crate::dataplane::mode::Mode`]).

use super::{ModeConfig, NftablesDataplane, plan_all};
use crate::cluster::Snapshot;
use crate::config::{Config, NftablesEncoder};
use crate::conntrack::{Translation, reconcile};
use crate::dataplane::cleanup::Report;
use crate::dataplane::leftovers::{Kind, OUR_TABLE, State};
use crate::dataplane::mode::{self, Mode, StartError, Started};
use crate::dataplane::monitor::{Drift, OurTable, Watch};
use crate::dataplane::node;
use crate::dataplane::tool::Launcher;
use crate::metrics::SyncSeries;
use crate::nft::render_from_scratch;

/// See the module doc.
pub struct Nftables;

impl Mode for Nftables {
    /// Upstream's nftables mode's failure counters.
    fn sync_series(&self) -> SyncSeries {
        SyncSeries::Nftables
    }

    /// Its rules live in our table.
    fn owns(&self) -> &'static [State] {
        &[OUR_TABLE]
    }

    /// Upstream's table and ours, which the ipvs and userspace modes use too.
    fn leftovers(&self) -> &'static [&'static dyn Kind] {
        &[&super::leftovers::Tables]
    }

    fn watch(&self) -> Option<&'static dyn Watch> {
        Some(&OurTable)
    }

    fn render_plan(&self, config: &Config, snapshot: &Snapshot) -> Result<String, node::Error> {
        let rulesets = plan_all(snapshot, &ModeConfig::new(config)?);
        Ok(format!(
            "\n# nftables: the ruleset this node would program (nft -f -)\n{}",
            render_from_scratch(&rulesets)
        ))
    }

    /// The monitor watches our table and the conntrack reconciler follows the rules.
    fn start(&self, config: &Config) -> Result<Started, StartError> {
        let drift = Drift::new();
        let backend = crate::nft::backend::for_encoder(config.nftables_encoder, None);
        let encoder = match config.nftables_encoder {
            NftablesEncoder::Netlink => "netlink",
            NftablesEncoder::Nft => "nft",
        };
        tracing::info!(encoder, "nftables encoder");
        let dataplane = NftablesDataplane::new(ModeConfig::new(config)?, backend, drift.clone());
        Ok(Started {
            monitor: Some(drift),
            tasks: vec![mode::conntrack_reconciler(
                config.sync_period,
                reconcile::fixed(Translation::ToEndpoint),
            )],
            ..Started::alone(Box::new(dataplane))
        })
    }

    /// Upstream's nftables mode does not serve loopback NodePorts (it would need
    /// `route_localnet`); ours serves them through the relay's listeners.
    fn relays_loopback_node_ports(&self) -> bool {
        true
    }

    /// Its [`ModeConfig`].
    fn check_config(&self, config: &Config) -> Result<(), node::Error> {
        ModeConfig::new(config).map(drop)
    }

    fn inspect(&self) -> &'static dyn crate::dataplane::inspect::Inspect {
        &super::inspect::Inspect
    }

    /// Our tables and upstream's, of both families; the ipvs and userspace modes' rules live
    /// in ours too.
    fn clean_up(&self, tools: &Launcher, _: Option<&Config>, report: &mut Report) {
        super::cleanup::remove(tools, report);
    }
}
