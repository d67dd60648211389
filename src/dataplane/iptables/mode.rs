//! The iptables mode's parts for the command line ([`crate::dataplane::mode::Mode`]).

use super::{
    Flavour, IptablesCommand, IptablesDataplane, ModeConfig, plan_all, render_from_scratch,
};
use crate::cluster::Snapshot;
use crate::config::Config;
use crate::conntrack::{Translation, reconcile};
use crate::dataplane::cleanup::Report;
use crate::dataplane::leftovers::{Kind, State};
use crate::dataplane::mode::{self, Mode, StartError, Started};
use crate::dataplane::monitor::{Drift, Watch};
use crate::dataplane::node;
use crate::dataplane::tool::Launcher;
use crate::metrics::SyncSeries;

/// See the module doc.
pub struct Iptables;

impl Mode for Iptables {
    /// Upstream's iptables mode's restore failures and rule counts.
    fn sync_series(&self) -> SyncSeries {
        SyncSeries::Iptables
    }

    /// Its rules are upstream's `KUBE-*` chains.
    fn owns(&self) -> &'static [State] {
        &[super::leftovers::KUBE_CHAINS]
    }

    /// The `KUBE-*` chains, of every flavour.
    fn leftovers(&self) -> &'static [&'static dyn Kind] {
        &[&super::leftovers::Chains]
    }

    /// On the nft back end, its chains in the `ip`/`ip6` mangle, nat and filter tables.
    fn watch(&self) -> Option<&'static dyn Watch> {
        Some(&super::notifications::IptablesNft)
    }

    fn render_plan(&self, config: &Config, snapshot: &Snapshot) -> Result<String, node::Error> {
        let rulesets = plan_all(snapshot, &ModeConfig::new(config)?);
        Ok(format!(
            "\n# iptables: the restore input this node would apply on a node without our rules\n{}",
            render_from_scratch(&rulesets)
        ))
    }

    /// Localhost NodePorts (IPv4) need `route_localnet`, so packets to 127.0.0.1 may be DNATed
    /// to a pod; upstream sets it at start-up too, next to the rule against CVE-2020-8558 the
    /// planner adds. Best effort: a refusal is one warning.
    fn set_up_host(&self, config: &Config) {
        let cfg = match ModeConfig::new(config) {
            Ok(c) => c,
            Err(_) => return, // reported when the dataplane is built
        };
        if !cfg.localhost_node_ports_active() {
            return;
        }
        let path = "/proc/sys/net/ipv4/conf/all/route_localnet";
        #[allow(
            clippy::disallowed_methods,
            reason = "start-up host setup, beside the conntrack sysctls"
        )]
        match std::fs::write(path, "1\n") {
            Ok(()) => tracing::info!(
                sysctl = path,
                value = 1,
                "set sysctl for localhost NodePorts"
            ),
            Err(error) => tracing::warn!(sysctl = path, %error,
                "cannot set sysctl; localhost NodePorts will not reach pods"),
        }
    }

    /// The families whose tools work; on the nft back end the monitor watches our chains
    /// (iptables-nft rules are nf_tables objects), on legacy only the canary check at each sync
    /// notices another program deleting them.
    fn start(&self, config: &Config) -> Result<Started, StartError> {
        let cfg = ModeConfig::new(config)?;
        let flavour = IptablesCommand::detect(&[]);
        tracing::info!(flavour = flavour.as_str(), "iptables back end chosen");
        let backend = IptablesCommand::new(flavour);
        let mut dataplane = IptablesDataplane::new(cfg, backend);
        dataplane.keep_usable_families()?;
        let monitor = (flavour == Flavour::Nft).then(|| {
            let drift = Drift::new();
            dataplane.watched_by(drift.clone());
            drift
        });
        Ok(Started {
            monitor,
            tasks: vec![mode::conntrack_reconciler(
                config.sync_period,
                reconcile::fixed(Translation::ToEndpoint),
            )],
            ..Started::alone(Box::new(dataplane))
        })
    }

    /// Its [`ModeConfig`].
    fn check_config(&self, config: &Config) -> Result<(), node::Error> {
        ModeConfig::new(config).map(drop)
    }

    /// `iptables-save` output.
    fn fuzz_targets(&self) -> &'static [crate::fuzzing::Target] {
        super::fuzz::TARGETS
    }

    fn inspect(&self) -> &'static dyn crate::dataplane::inspect::Inspect {
        &super::inspect::Inspect
    }

    /// Every `KUBE-*` chain of kube-proxy's (ours have upstream's names) in each iptables
    /// flavour and family whose tools run.
    fn clean_up(&self, tools: &Launcher, _: Option<&Config>, report: &mut Report) {
        super::cleanup::remove(tools, report);
    }
}
