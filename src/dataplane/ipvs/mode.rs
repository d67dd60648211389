//! The IPVS mode's parts for the command line ([`crate::dataplane::mode::Mode`]).

use std::sync::Arc;

use super::apply::{self, IpvsDataplane, KernelBackend, MonotonicClock};
use super::{HostAddresses, ModeConfig, bound_addresses, plan_all, render_all, rules_all};
use crate::cluster::Snapshot;
use crate::config::Config;
use crate::conntrack::{Translation, reconcile};
use crate::dataplane::cleanup::Report;
use crate::dataplane::leftovers::{Kind, OUR_TABLE, State};
use crate::dataplane::mode::{self, Mode, StartError, Started};
use crate::dataplane::monitor::{Drift, OurTable, Watch};
use crate::dataplane::node;
use crate::dataplane::tool::Launcher;
use crate::metrics::SyncSeries;
use crate::nft;

/// See the module doc.
pub struct Ipvs;

/// The kernel cannot run the IPVS mode as configured (no `ip_vs`, no such scheduler).
#[derive(Debug, thiserror::Error)]
#[error("IPVS: {0}")]
pub struct Unusable(#[from] apply::Error);

impl Mode for Ipvs {
    /// `kube-ipvs0`, which holds every ClusterIP and external address.
    fn service_address_link(&self) -> Option<&'static str> {
        Some(super::names::LINK)
    }

    /// Upstream's IPVS mode counts a failed sync as a failed iptables restore.
    fn sync_series(&self) -> SyncSeries {
        SyncSeries::IptablesRestore
    }

    /// `kube-ipvs0` and the helper rules in our table.
    fn owns(&self) -> &'static [State] {
        &[OUR_TABLE, super::leftovers::LINK]
    }

    /// `kube-ipvs0`, with every virtual service.
    fn leftovers(&self) -> &'static [&'static dyn Kind] {
        &[&super::leftovers::Link]
    }

    /// The helper rules' table.
    fn watch(&self) -> Option<&'static dyn Watch> {
        Some(&OurTable)
    }

    /// The virtual services, then the helper rules in our nftables table.
    fn render_plan(&self, config: &Config, snapshot: &Snapshot) -> Result<String, node::Error> {
        let mode = ModeConfig::new(config)?;
        let states = plan_all(snapshot, &mode, &HostAddresses::default());
        let mut text = String::from(
            "\n# ipvs: the virtual services this node would program (as ipvsadm -Sn lists them)\n",
        );
        text.push_str(&render_all(&states));
        let node_ips = snapshot.node.local_addresses().into_iter().collect();
        let bound = bound_addresses(&states, &node_ips);
        let tables = rules_all(&states, &mode, &snapshot.node, &bound);
        text.push_str(
            "\n# ipvs: the helper rules this node would program in our nftables table (nft -f -)\n",
        );
        text.push_str(&nft::render_from_scratch(&tables));
        Ok(text)
    }

    /// With `--init-only`: loads `ip_vs` (an IPVS socket resolves its generic netlink family,
    /// which the kernel loads on demand; its sysctls exist only then) and sets the sysctls.
    /// The proxy sets them again at its start, but unprivileged its `/proc/sys` is read-only;
    /// values already in place are not written again, so it then has nothing to do. A failure
    /// is a warning: the proxy tries again itself.
    fn set_up_host(&self, config: &Config) {
        if !config.init_only {
            return;
        }
        if let Err(error) = super::backend::netlink::Client::open(None) {
            tracing::warn!(%error, "cannot load IPVS; the proxy will try again at start");
        }
        set_sysctls(config.ipvs.strict_arp);
    }

    /// After checking the scheduler, sets the sysctls and the connection timeouts. The
    /// monitor watches the helper rules' table, the IPVS watch probes the virtual services
    /// (IPVS notifies no one of a flush), and the conntrack reconciler follows the rules.
    fn start(&self, config: &Config) -> Result<Started, StartError> {
        let cfg = ModeConfig::new(config)?;
        let mut backend = KernelBackend::new(None);
        apply::check_scheduler(&mut backend, &cfg).map_err(Unusable)?;
        set_sysctls(config.ipvs.strict_arp);
        apply::set_timeouts(&mut backend, &cfg).map_err(Unusable)?;
        tracing::info!(scheduler = cfg.scheduler.as_str(), "IPVS mode");
        let drift = Drift::new();
        let rules = nft::backend::for_encoder(config.nftables_encoder, None);
        let dataplane = IpvsDataplane::new(cfg, backend, rules, MonotonicClock, drift.clone());
        let traffic = super::traffic::KernelTraffic::new(None, dataplane.owners());
        let (owners, watch_drift) = (dataplane.owners(), drift.clone());
        Ok(Started {
            monitor: Some(drift),
            traffic: Some(Arc::new(traffic)),
            tasks: vec![
                Box::new(move |_| super::watch::spawn(owners, watch_drift)),
                mode::conntrack_reconciler(
                    config.sync_period,
                    reconcile::fixed(Translation::ToEndpoint),
                ),
            ],
            ..Started::alone(Box::new(dataplane))
        })
    }

    /// Its [`ModeConfig`].
    fn check_config(&self, config: &Config) -> Result<(), node::Error> {
        ModeConfig::new(config).map(drop)
    }

    /// Its IPVS and rtnetlink answers.
    fn fuzz_targets(&self) -> &'static [crate::fuzzing::Target] {
        super::fuzz::TARGETS
    }

    fn inspect(&self) -> &'static dyn crate::dataplane::inspect::Inspect {
        &super::inspect::Inspect
    }

    /// Every virtual service of the namespace and `kube-ipvs0`.
    fn clean_up(&self, tools: &Launcher, _: Option<&Config>, report: &mut Report) {
        super::cleanup::remove(tools.netns(), report);
    }
}

/// The sysctls the IPVS mode needs; one the kernel refuses is one warning, and start-up goes on
/// (upstream logs and goes on too).
fn set_sysctls(strict_arp: bool) {
    let applied = super::sysctls::apply(std::path::Path::new("/proc/sys"), strict_arp);
    for w in &applied.written {
        tracing::info!(sysctl = w.path, value = w.value, "set IPVS sysctl");
    }
    for (w, error) in &applied.refused {
        tracing::warn!(sysctl = w.path, value = w.value, %error,
            "cannot set IPVS sysctl; going on with the kernel's value");
    }
}
