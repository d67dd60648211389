//! Applying, the IPVS mode as the sync runner drives it: read the link's addresses and (on full
//! syncs) the kernel's services, plan both families with the incremental [`Planner`] (a steady
//! sync re-plans only the changed service ports and compares only the virtual services they
//! touched, and those draining, with the kernel: [`diff_only`]), apply the helper rules
//! ([`rules`](super::rules)), bind the service addresses, send the requests, and keep what the
//! kernel now holds.
//!
//! The helper rules go first, so a new virtual service is never reachable before its
//! masquerade and guard rules are (upstream writes its iptables rules last, kubernetes#133773).
//! They are one nftables transaction for both families through the nf_tables library's
//! [`Applier`]: adopted from the kernel on full syncs (or when the monitor saw another program
//! change our table), the planner's transaction from the last applied tables otherwise.
//!
//! What the kernel holds is "last programmed": the state read at the last full sync with every
//! accepted request applied to it ([`Kernel::apply`]), so a sync with nothing changed sends
//! nothing at all. A steady sync reads again the destinations of the virtual services it
//! touches (and of those draining) before it diffs them, so a destination another program
//! deleted is put back by the next sync of its Service, not only by the next full one. A sync is full when the runner asks (start-up, the hourly full sync, after a
//! failure) or nothing was programmed yet: then the link's addresses and every virtual service
//! are read back and repaired, and nothing is flushed, so a restart keeps every connection.
//! Draining destinations (graceful termination) are read again on every sync, for their
//! connection counts.
//!
//! IPVS has no transactions: a request the kernel refuses stops the sync after its datagram
//! (the requests the kernel took stay, and are known), and the next sync (full) repairs from a
//! fresh read. The previous virtual services stay in place meanwhile.
//!
//! The one clock in a mode: graceful termination bounds how long a destination may drain
//! ([`ModeConfig::drain_limit`]), so the dataplane is given a [`Clock`] (a fixed one in tests).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use super::adopt::adopt;
use super::backend::link::{self, AddressChanges, Link, LinkAddresses};
use super::backend::netlink::{self as ipvs, Request, ServiceKey};
use super::diff::{Drain, Kernel, diff, diff_only};
use super::mode_config::ModeConfig;
use super::plan::{HostAddresses, Planner, Update};
use super::traffic::Owners;
use crate::cluster::{Changes, IpFamily, Snapshot};
use crate::dataplane::monitor::Drift;
use crate::dataplane::{Dataplane, FamilyReport, SyncError, SyncReport};
use crate::nft::{self, Ruleset, apply::Applier};

const MODE: &str = "ipvs";

mod kernel;

pub use kernel::{Backend, Error, KernelBackend};

/// The virtual service the scheduler check makes and deletes at once: upstream's, in TEST-NET-2
/// (`198.51.100.0:20000`, documentation addresses nobody routes).
const SCHEDULER_PROBE: &str = "198.51.100.0:20000";

/// Whether the kernel has the configured scheduler: adds a probe virtual service with it and
/// deletes it again, as upstream does at start-up, so a scheduler the kernel lacks is one clear
/// error before the first sync (`the kernel has no IPVS scheduler "x" (no module ip_vs_x)`),
/// not a sync loop that fails for ever.
pub fn check_scheduler(backend: &mut impl Backend, cfg: &ModeConfig) -> Result<(), Error> {
    probe_scheduler(backend, cfg.scheduler.as_str(), cfg.scheduler_flags)
}

/// Adds and deletes a probe virtual service with `scheduler`: `UnknownScheduler` when the
/// kernel lacks it.
fn probe_scheduler(
    backend: &mut impl Backend,
    scheduler: &str,
    flags: ipvs::Flags,
) -> Result<(), Error> {
    let key = ServiceKey::Address {
        protocol: ipvs::Protocol::Tcp,
        address: SCHEDULER_PROBE.parse().expect("a socket address"),
    };
    let mut probe = ipvs::Service::new(key, scheduler);
    probe.flags = flags;
    // A probe left by a crashed earlier check is taken away first.
    let _ = backend.send(&Request::DelService(key));
    backend.send(&Request::NewService(probe))?;
    backend.send(&Request::DelService(key))
}

/// Sets the configured connection timeouts, as upstream does at start-up when any is not 0
/// (`ipvsadm --set`); the kernel leaves a 0 one as it is.
pub fn set_timeouts(backend: &mut impl Backend, cfg: &ModeConfig) -> Result<(), Error> {
    let t = cfg.timeouts;
    if t.tcp == 0 && t.tcp_fin == 0 && t.udp == 0 {
        return Ok(());
    }
    backend.send(&Request::SetConfig(t))
}

/// Where the dataplane reads the time (see the module doc).
pub trait Clock: Send {
    fn now(&self) -> Instant;
}

/// The runner's clock: tokio's (which tests can pause and advance).
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }
}

/// What the last successful sync left in the kernel.
struct Programmed {
    link: Link,
    addresses: LinkAddresses,
    /// Per family, in [`IpFamily::ALL`] order.
    kernel: [Kernel; 2],
}

/// See the module doc.
#[doc(alias = "proxier")]
pub struct IpvsDataplane<B = KernelBackend, C = MonotonicClock, R = Box<dyn nft::Backend>> {
    cfg: ModeConfig,
    backend: B,
    clock: C,
    /// The helper rules' applier, over an nf_tables backend (`nft::backend`).
    rules: Applier<R>,
    /// The plan of the last sync: virtual services, addresses and helper tables.
    planner: Planner,
    /// Whether the kernel holds the planner's helper tables (not at start-up, nor after a
    /// failure).
    tables_in_kernel: bool,
    /// Where the nf_tables monitor reports another program's change to our table.
    drift: Arc<Drift>,
    /// Which service port each virtual service serves, for the traffic counters.
    owners: Owners,
    /// `None` at start-up and after a failure: the next sync reads everything back.
    programmed: Option<Programmed>,
    /// When each draining destination went to weight 0 (as far as this process saw).
    draining_since: BTreeMap<Drain, Instant>,
    /// Schedulers named by Services' annotations that were probed (see
    /// [`ModeConfig::unavailable_schedulers`]).
    probed: BTreeSet<&'static str>,
}

impl<B: Backend, C: Clock, R: nft::Backend> IpvsDataplane<B, C, R> {
    /// The mode over an IPVS backend and an nftables backend for the helper rules, which
    /// records its transactions in `drift` so the monitor tells them from other programs'.
    pub fn new(
        cfg: ModeConfig,
        backend: B,
        mut rules: R,
        clock: C,
        drift: Arc<Drift>,
    ) -> IpvsDataplane<B, C, R> {
        rules.watched_by(drift.clone());
        IpvsDataplane {
            cfg,
            backend,
            clock,
            rules: Applier::new(rules),
            planner: Planner::new(),
            tables_in_kernel: false,
            drift,
            owners: Owners::default(),
            programmed: None,
            draining_since: BTreeMap::new(),
            probed: BTreeSet::new(),
        }
    }

    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.backend
    }

    /// Which service port each programmed virtual service serves, shared with the metrics'
    /// [`KernelTraffic`](super::traffic::KernelTraffic).
    pub fn owners(&self) -> Owners {
        self.owners.clone()
    }

    /// The helper tables last applied, one per family.
    pub fn tables(&self) -> Option<&[Ruleset]> {
        self.tables_in_kernel.then(|| &self.planner.tables()[..])
    }

    /// Destinations draining now, for tests and metrics.
    pub fn draining(&self) -> impl Iterator<Item = &Drain> {
        self.draining_since.keys()
    }

    fn try_sync(
        &mut self,
        snapshot: &Snapshot,
        changes: &Changes,
        full: bool,
    ) -> Result<SyncReport, Error> {
        let sent = self.backend.messages_sent() + self.rules.backend().messages_sent();
        // Where a sync's time goes, for the debug log: the partial sync of one endpoint change
        // is meant to take under a millisecond, and these say which part does not.
        let started = self.clock.now();
        let outside = self.drift.take_pending();
        let steady = !full && !outside && self.tables_in_kernel && !self.rules.needs_full();
        let previous = if steady { self.programmed.take() } else { None };
        let full = previous.is_none();
        let (link, addresses, mut kernel) = match previous {
            Some(p) => (p.link, p.addresses, p.kernel),
            None => {
                let link = self.backend.ensure_link()?;
                let addresses = self.backend.addresses(&link)?;
                let listed = self.backend.services()?;
                let backend = &mut self.backend;
                let kernel = IpFamily::ALL
                    .map(|f| adopt(listed.clone(), f, |s| backend.destinations(&s.service.key)));
                let [a, b] = kernel;
                (link, addresses, [a?, b?])
            }
        };
        let read_at = self.clock.now();
        self.probe_annotated_schedulers(snapshot, (!full).then_some(changes))?;
        let host = HostAddresses(addresses.elsewhere.clone());
        // What the kernel should hold, to tell an outside change: copied on full syncs only,
        // which read the whole kernel anyway.
        let last_tables = (full && self.tables_in_kernel).then(|| self.planner.tables().clone());
        self.tables_in_kernel = false;
        let update = if full {
            self.planner.replan(snapshot, &self.cfg, &host)
        } else {
            self.planner.update(snapshot, changes, &self.cfg, &host)
        };
        let (services, tables) = (self.planner.objects(), self.planner.tables());
        let objects = [0, 1].map(|i| services[i] + tables[i].objects());
        let planned_at = self.clock.now();
        let rule_ops = self.apply_rules(&update, full, last_tables)?;
        let rules_at = self.clock.now();
        let changes = if update.full {
            link::address_changes(
                &addresses.bound,
                &self.planner.addresses(),
                &addresses.elsewhere,
            )
        } else {
            AddressChanges {
                bind: update.bind.clone(),
                unbind: update.unbind.clone(),
            }
        };
        if !changes.is_empty() {
            self.backend.update_addresses(&link, &changes)?;
        }
        let mut addresses = addresses;
        for ip in &changes.unbind {
            addresses.bound.remove(ip);
        }
        addresses.bound.extend(&changes.bind);

        let now = self.clock.now();
        let mut services_changed = false;
        let mut families = Vec::with_capacity(2);
        let mut still_draining = BTreeMap::new();
        for (i, w) in self.planner.desired().iter().enumerate() {
            let k = &mut kernel[i];
            // The virtual services a steady sync compares with the kernel: those it touched
            // and those draining.
            let keys: BTreeSet<ServiceKey> = update.touched[i]
                .iter()
                .chain(self.draining_since.keys().map(|(key, _)| key))
                .filter(|key| key.family() == w.family)
                .copied()
                .collect();
            if !full {
                let none = BTreeSet::new();
                let touched = if update.full {
                    &none
                } else {
                    &update.touched[i]
                };
                refresh_destinations(&mut self.backend, &self.draining_since, touched, k)?;
            }
            let drained_for = self
                .draining_since
                .iter()
                .map(|(d, since)| (*d, now.saturating_duration_since(*since)))
                .collect();
            let d = if update.full {
                diff(k, w, &self.cfg, &drained_for)
            } else {
                diff_only(k, w, &keys, &self.cfg, &drained_for)
            };
            services_changed |= d
                .requests
                .iter()
                .any(|r| matches!(r, Request::NewService(_) | Request::DelService(_)));
            if !d.requests.is_empty() {
                let requests = &d.requests;
                self.backend
                    .send_all(requests, &mut |i| k.apply(&requests[i]))?;
            }
            for drain in d.draining {
                let since = self.draining_since.get(&drain).copied().unwrap_or(now);
                still_draining.insert(drain, since);
            }
            let address_ops = changes
                .bind
                .iter()
                .chain(&changes.unbind)
                .filter(|ip| IpFamily::of(ip) == w.family)
                .count();
            let no_local = snapshot.no_local_endpoints(w.family);
            families.push(FamilyReport {
                family: Some(w.family),
                operations: d.requests.len() + address_ops + rule_ops[i],
                objects: objects[i],
                no_local_endpoints_internal: no_local.internal,
                no_local_endpoints_external: no_local.external,
                iptables_rules: None,
            });
        }
        self.draining_since = still_draining;
        if update.full || services_changed {
            self.owners.publish(self.planner.desired());
        }
        self.programmed = Some(Programmed {
            link,
            addresses,
            kernel,
        });
        let sent = (self.backend.messages_sent() + self.rules.backend().messages_sent())
            .saturating_sub(sent);
        let micros = |from: Instant, to: Instant| to.saturating_duration_since(from).as_micros();
        let done = self.clock.now();
        tracing::debug!(
            full,
            read_us = micros(started, read_at) as u64,
            plan_us = micros(read_at, planned_at) as u64,
            rules_us = micros(planned_at, rules_at) as u64,
            ipvs_us = micros(rules_at, done) as u64,
            netlink_messages = sent,
            "ipvs sync phases"
        );
        Ok(SyncReport {
            full,
            families,
            netlink_messages: sent as usize,
        })
    }

    /// Probes, once each, the schedulers Services' annotations name besides the node's. One the
    /// kernel lacks is logged once and remembered, and its Services get the node's scheduler:
    /// a Service's choice never fails the sync of the others. Looks at every port on full
    /// syncs, and only at the `changed` ones otherwise (the runner merges the changes of failed
    /// syncs into the next), so a steady sync does not walk 50,000 ports for it.
    fn probe_annotated_schedulers(
        &mut self,
        snapshot: &Snapshot,
        changed: Option<&Changes>,
    ) -> Result<(), Error> {
        let choices: Vec<_> = match changed {
            Some(c) => c
                .ports
                .iter()
                .filter_map(|name| snapshot.ports.get(name))
                .filter_map(|s| s.port.ipvs_scheduler)
                .collect(),
            None => snapshot
                .ports
                .values()
                .filter_map(|s| s.port.ipvs_scheduler)
                .collect(),
        };
        let named: BTreeSet<&'static str> = choices
            .into_iter()
            .map(|c| c.name)
            .filter(|n| *n != self.cfg.scheduler.as_str() && !self.probed.contains(n))
            .collect();
        for name in named {
            match probe_scheduler(&mut self.backend, name, ipvs::Flags::NONE) {
                Ok(()) => {}
                Err(Error::Ipvs(ipvs::Error::UnknownScheduler { .. })) => {
                    tracing::warn!(
                        scheduler = name,
                        fallback = self.cfg.scheduler.as_str(),
                        "the kernel has no IPVS scheduler {name:?} (no module ip_vs_{name}); \
                         Services annotated with it use the node's scheduler"
                    );
                    self.cfg.unavailable_schedulers.insert(name);
                }
                Err(e) => return Err(e),
            }
            self.probed.insert(name);
        }
        Ok(())
    }

    /// Makes the kernel's helper tables the planner's: adopted from a fresh read on full
    /// syncs (`last`: what the kernel should hold, when known), the update's transactions
    /// otherwise (a steady sync runs only while the kernel holds the previous tables).
    /// Operations per family.
    fn apply_rules(
        &mut self,
        update: &Update,
        full: bool,
        last: Option<[Ruleset; 2]>,
    ) -> Result<[usize; 2], Error> {
        let report = if !full {
            self.rules.send(&update.transactions)?
        } else {
            self.rules
                .adopt(self.planner.tables(), last.as_ref().map(|l| &l[..]))?
        };
        self.tables_in_kernel = true;
        if report.repaired {
            self.drift.repaired();
            tracing::warn!(
                operations = report.operations.iter().map(|(_, n)| n).sum::<usize>(),
                "repaired the IPVS helper rules after an outside change"
            );
        }
        let mut ops = [0; 2];
        for (family, n) in report.operations {
            let i = IpFamily::ALL
                .iter()
                .position(|f| *f == family.ip_family())
                .expect("a family");
            ops[i] = n;
        }
        Ok(ops)
    }
}

/// Reads again the destinations of the services that have one draining (their connection
/// counts decide when they go) and of those the sync `touched` (another program may have
/// deleted or changed some since we wrote them, which IPVS announces to nobody: the diff then
/// puts them back instead of editing what is gone). Only those services: an idle sync reads
/// nothing.
fn refresh_destinations(
    backend: &mut impl Backend,
    draining_since: &BTreeMap<Drain, Instant>,
    touched: &BTreeSet<ServiceKey>,
    kernel: &mut Kernel,
) -> Result<(), Error> {
    let keys: BTreeSet<ServiceKey> = draining_since
        .keys()
        .map(|(k, _)| *k)
        .chain(touched.iter().copied())
        .collect();
    for key in keys {
        if let Some(s) = kernel.services.get_mut(&key) {
            s.destinations = backend
                .destinations(&key)?
                .into_iter()
                .map(|d| (d.destination.address, d))
                .collect();
        }
    }
    Ok(())
}

impl<B: Backend, C: Clock, R: nft::Backend> Dataplane for IpvsDataplane<B, C, R> {
    fn mode(&self) -> &'static str {
        MODE
    }

    /// Once the kernel's state is known (no re-read), a few ports' changes are a handful of IPVS
    /// requests and one small batch for the helper table, all over netlink.
    fn runs_inline(&self, changes: &Changes) -> bool {
        let _ = changes;
        self.programmed.is_some() && self.rules.backend().in_process()
    }

    fn sync(
        &mut self,
        snapshot: &Snapshot,
        changes: &Changes,
        full: bool,
    ) -> Result<SyncReport, SyncError> {
        self.try_sync(snapshot, changes, full).map_err(|e| {
            self.programmed = None;
            self.tables_in_kernel = false;
            match e {
                Error::Ipvs(ipvs::Error::Refused { .. } | ipvs::Error::UnknownScheduler { .. })
                | Error::Link(link::Error::Refused { .. })
                | Error::Rules(nft::apply::Error::Refused { .. }) => SyncError::refused(MODE, e),
                other => SyncError::io(MODE, other),
            }
        })
    }
}
