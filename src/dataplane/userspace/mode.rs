//! The userspace mode's parts for the command line ([`crate::dataplane::mode::Mode`]).

use std::sync::Arc;

use super::ports::PortRange;
use super::{UserspaceDataplane, loopback, plan, redirect, relay, render};
use crate::cluster::Snapshot;
use crate::config::Config;
use crate::conntrack::Translation;
use crate::dataplane::cleanup::Report;
use crate::dataplane::leftovers::{Kind, OUR_TABLE, State};
use crate::dataplane::mode::{self, Mode, StartError, Started};
use crate::dataplane::monitor::{Drift, OurTable, Watch};
use crate::dataplane::node::{self, NodePolicy};
use crate::dataplane::tool::Launcher;
use crate::metrics::SyncSeries;
use crate::nft;

/// See the module doc.
pub struct Userspace;

/// `portRange` in a form userspace mode cannot read (config validation accepts the same forms,
/// so a validated configuration never gives this).
#[derive(Debug, thiserror::Error)]
#[error("portRange {0:?}: not a port range")]
pub struct BadPortRange(String);

impl Mode for Userspace {
    /// The relay's failures have no upstream counter.
    fn sync_series(&self) -> SyncSeries {
        SyncSeries::Uncounted
    }

    /// The redirect rules live in our table.
    fn owns(&self) -> &'static [State] {
        &[OUR_TABLE]
    }

    /// None of its own: its table is our table, which the nftables mode's kind finds.
    fn leftovers(&self) -> &'static [&'static dyn Kind] {
        &[]
    }

    /// The redirect rules' table.
    fn watch(&self) -> Option<&'static dyn Watch> {
        Some(&OurTable)
    }

    fn render_plan(&self, _: &Config, snapshot: &Snapshot) -> Result<String, node::Error> {
        let listeners = plan::plan(snapshot);
        Ok(format!(
            "\n# userspace: the listeners this node would open\n{}",
            render::render(&listeners)
        ))
    }

    /// The relay's listeners with the redirect rules in our nftables table, which the monitor
    /// watches; `--nodeport-localhost` adds loopback NodePort listeners, counted with the
    /// others. The conntrack reconciler deletes a frontend's flows that no redirect rule
    /// translated, or that one translated to a port no listener holds now
    /// ([`Translation::ToRelay`]); the relay picks each session's endpoint itself.
    fn start(&self, config: &Config) -> Result<Started, StartError> {
        let range = PortRange::parse(&config.port_range)
            .ok_or_else(|| BadPortRange(config.port_range.clone()))?;
        let drift = Drift::new();
        let rules = nft::backend::for_encoder(config.nftables_encoder, None);
        let node = NodePolicy::new(config)?;
        let redirect = redirect::Settings::of(config, &node);
        let dataplane =
            UserspaceDataplane::new(relay::Settings::of(config), range, config.bind_address)
                .with_redirect(rules, redirect, drift.clone());
        let counters = dataplane.listener_counters();
        let relay_ports = dataplane.relay_ports();
        Ok(loopback::beside(
            config,
            Started {
                monitor: Some(drift),
                relay: Some(Arc::new(counters.clone())),
                tasks: vec![mode::conntrack_reconciler(
                    config.sync_period,
                    Arc::new(move || Translation::ToRelay {
                        ports: relay_ports.now(),
                    }),
                )],
                ..Started::alone(Box::new(dataplane))
            },
            Some(counters),
        ))
    }

    fn inspect(&self) -> &'static dyn crate::dataplane::inspect::Inspect {
        &super::inspect::Inspect
    }

    /// Nothing of its own: its rules are in our nftables table, which the nftables mode's
    /// cleanup removes, and its listeners end with the process.
    fn clean_up(&self, _: &Launcher, _: Option<&Config>, _: &mut Report) {}
}
