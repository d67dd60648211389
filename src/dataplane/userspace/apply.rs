//! The userspace mode's [`Dataplane`]: keeps one relay listener open for each listener the
//! snapshot asks for ([`plan`]), opening, updating and closing them at each sync.
//!
//! The relay's state is the process's own, so there is nothing of it to adopt or re-read: a
//! full sync is the same reconcile as any other, against the listeners this process holds. A
//! listener that cannot be opened (its port taken by another program, say) fails the sync
//! after every other change has been made; the runner retries and the next sync opens what is
//! still missing. Endpoint changes reach a listener in place: connections to endpoints that
//! remain are untouched.
//!
//! The redirect rules ([`redirect`]) follow the listeners: they are planned from the ports the
//! open listeners actually hold, so they go after the listeners are opened, and both families
//! go in one nftables transaction through the nf_tables library's [`Applier`]. As for IPVS mode's
//! helper rules, a full sync (or one after a failure, or after the monitor saw another program
//! change our table) adopts the kernel's table and repairs it; any other sync sends the diff
//! from the tables last applied.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use crate::cluster::{Changes, IpFamily, ServiceKey, ServicePortName, Snapshot};
use crate::dataplane::monitor::Drift;
use crate::dataplane::{Dataplane, FamilyReport, SyncError, SyncReport};
use crate::nft::{self, Ruleset, apply::Applier};

use super::listener_counters::ListenerCounters;
use super::plan::{self, Key, Listeners, Spec, Transport};
use super::ports::PortRange;
use super::redirect::{self, Listening};
use super::relay::{Affinity, Limit, Listener, Relay, Settings, Target};
use super::relay_ports::RelayPorts;
use crate::dataplane::counters::RelayedCounts;

/// What stopped a sync of this mode, as the cause of its [`SyncError`].
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("listeners need a tokio runtime")]
    NoRuntime(#[source] tokio::runtime::TryCurrentError),
    #[error("redirect rules")]
    Redirect(#[source] nft::apply::Error),
    #[error("cannot listen for {port}")]
    Listen {
        port: String,
        #[source]
        source: io::Error,
    },
}

/// The mode's name as `--proxy-mode` spells it.
pub const MODE: &str = "userspace";

/// The listeners this process holds, by what they carry.
#[derive(Debug)]
#[doc(alias = "proxier")]
pub struct UserspaceDataplane {
    relay: Relay,
    range: PortRange,
    /// `--bind-address`: the address listeners of its family bind; the other family binds
    /// its unspecified address.
    bind: IpAddr,
    open: BTreeMap<Key, Open>,
    /// Ports our TCP and UDP listeners hold, so a range hands each port out once.
    taken: BTreeMap<Transport, BTreeSet<u16>>,
    /// Each Service's connection limit, shared by its listeners; kept while it has one.
    limits: BTreeMap<ServiceKey, Limit>,
    /// Each service port's ClientIP affinity table in each family, shared by its listeners
    /// (upstream keeps one per service port, whatever frontend a client comes through); kept
    /// while the port has affinity.
    affinities: BTreeMap<(ServicePortName, IpFamily), Affinity>,
    /// The open listeners' counters, as the metrics read them.
    counters: ListenerCounters,
    /// The open listeners' ports, as the conntrack reconciler reads them.
    relay_ports: RelayPorts,
    /// The redirect rules, when this dataplane programs them (see [`Self::with_redirect`]).
    rules: Option<Rules>,
    /// The listeners a snapshot asks for: [`plan::plan`], or the loopback NodePorts of
    /// [`Self::loopback_node_ports`].
    plan: fn(&Snapshot) -> Listeners,
}

/// The redirect rules' applier and what it last applied.
struct Rules {
    applier: Applier<Box<dyn nft::Backend>>,
    settings: redirect::Settings,
    /// Where the nf_tables monitor reports another program's change to our table.
    drift: Arc<Drift>,
    /// The tables the kernel holds since the last successful apply; `None` before one and
    /// after a failure.
    last: Option<[Ruleset; 2]>,
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules")
            .field("settings", &self.settings)
            .field("applied", &self.last.is_some())
            .finish_non_exhaustive()
    }
}

impl Rules {
    /// Makes the kernel hold `want`; operations per family (by [`IpFamily::index`]).
    fn apply(&mut self, want: [Ruleset; 2], full: bool) -> Result<[usize; 2], nft::apply::Error> {
        let outside = self.drift.take_pending();
        let last = self.last.take();
        let report = match last {
            Some(last) if !full && !outside && !self.applier.needs_full() => {
                let transactions: Vec<_> = last
                    .iter()
                    .zip(&want)
                    .map(|(l, w)| nft::diff(l, w))
                    .collect();
                self.applier.send(&transactions)?
            }
            last => self.applier.adopt(&want, last.as_ref().map(|l| &l[..]))?,
        };
        if report.repaired {
            self.drift.repaired();
            tracing::warn!("repaired the userspace mode's redirect rules after an outside change");
        }
        self.last = Some(want);
        let mut operations = [0; 2];
        for (family, n) in report.operations {
            operations[family.ip_family().index()] += n;
        }
        Ok(operations)
    }
}

#[derive(Debug)]
struct Open {
    spec: Spec,
    listener: Listener,
}

impl UserspaceDataplane {
    /// Builds the value; listeners open at the first sync, which must run within a tokio
    /// runtime (the runner's blocking sync thread is).
    pub fn new(settings: Settings, range: PortRange, bind: IpAddr) -> UserspaceDataplane {
        UserspaceDataplane {
            relay: Relay::new(settings),
            range,
            bind,
            open: BTreeMap::new(),
            taken: BTreeMap::new(),
            limits: BTreeMap::new(),
            affinities: BTreeMap::new(),
            counters: ListenerCounters::default(),
            relay_ports: RelayPorts::default(),
            rules: None,
            plan: plan::plan,
        }
    }

    /// The relay for NodePorts on 127.0.0.1 and ::1 (`--nodeport-localhost`) beside another
    /// mode: a listener on each NodePort itself, so no rule is needed (the other modes leave
    /// loopback NodePorts alone).
    pub fn loopback_node_ports(settings: Settings) -> UserspaceDataplane {
        UserspaceDataplane {
            plan: plan::loopback_node_ports,
            ..UserspaceDataplane::new(settings, PortRange::Any, Ipv4Addr::LOCALHOST.into())
        }
    }

    /// Programs the redirect rules through `backend` (an nf_tables one), so traffic to
    /// Service addresses reaches the listeners; the backend records its transactions in
    /// `drift`, so the monitor tells them from other programs'. Without this only clients
    /// dialling a listener's port are relayed (the relay's own tests).
    pub fn with_redirect(
        mut self,
        mut backend: Box<dyn nft::Backend>,
        settings: redirect::Settings,
        drift: Arc<Drift>,
    ) -> UserspaceDataplane {
        backend.watched_by(drift.clone());
        self.rules = Some(Rules {
            applier: Applier::new(backend),
            settings,
            drift,
            last: None,
        });
        self
    }

    /// Records the listeners' counters in `counters` (shared with another dataplane's).
    pub fn counting_in(mut self, counters: ListenerCounters) -> UserspaceDataplane {
        self.counters = counters;
        self
    }

    /// The redirect tables last applied, one per family.
    pub fn redirect_tables(&self) -> Option<&[Ruleset; 2]> {
        self.rules.as_ref().and_then(|r| r.last.as_ref())
    }

    /// The open listeners' counters, for the metrics to read at each scrape.
    pub fn listener_counters(&self) -> ListenerCounters {
        self.counters.clone()
    }

    /// The open listeners' ports after each sync, for the conntrack reconciler.
    pub fn relay_ports(&self) -> RelayPorts {
        self.relay_ports.clone()
    }

    /// Where each listener listens: what the redirect rules will point at.
    pub fn listening(&self) -> impl Iterator<Item = (&Key, SocketAddr)> {
        self.open.iter().map(|(k, o)| (k, o.listener.local_addr()))
    }

    /// What each listener has relayed so far.
    pub fn counters(&self) -> impl Iterator<Item = (&Key, RelayedCounts)> {
        self.open.iter().map(|(k, o)| (k, o.listener.counters()))
    }

    /// Makes the open listeners match `want`; the listeners opened, updated or closed per
    /// family (by [`IpFamily::index`]), and the first failure to open one (after trying all).
    fn reconcile(&mut self, want: Listeners) -> ([usize; 2], Option<(Key, io::Error)>) {
        let mut operations = [0; 2];
        let gone: Vec<Key> = self
            .open
            .keys()
            .filter(|k| !want.contains_key(*k))
            .cloned()
            .collect();
        for key in gone {
            if let Some(open) = self.open.remove(&key) {
                self.counters.closed(&key);
                let transport = open.spec.transport;
                let port = open.listener.local_addr().port();
                self.taken.entry(transport).or_default().remove(&port);
                operations[key.family.index()] += 1;
            }
        }
        self.share_affinities(&want);
        let mut failed = None;
        for (key, spec) in want {
            match self.open.get_mut(&key) {
                Some(open) if open.spec == spec => {}
                Some(open) => {
                    let affinity = spec.affinity.and(self.affinities.get(&affinity_key(&key)));
                    open.listener.update_keeping(
                        spec.endpoints.clone(),
                        &spec.listed,
                        affinity.cloned(),
                    );
                    open.spec = spec;
                    operations[key.family.index()] += 1;
                }
                None => match self.listen(&key, &spec) {
                    Ok(listener) => {
                        operations[key.family.index()] += 1;
                        self.counters
                            .opened(key.clone(), listener.shared_counters());
                        self.open.insert(key, Open { spec, listener });
                    }
                    Err(error) => {
                        failed.get_or_insert((key, error));
                    }
                },
            }
        }
        let serving: BTreeSet<&ServiceKey> = self.open.keys().map(|k| &k.port.service).collect();
        self.limits.retain(|service, _| serving.contains(service));
        (operations, failed)
    }

    /// Keeps one affinity table per service port and family with affinity in `want`: its
    /// timeout the spec's, without the clients of endpoints none of the port's listeners has
    /// any more; new for a port that just got affinity, gone with a port that lost it.
    fn share_affinities(&mut self, want: &Listeners) {
        let mut wanted: BTreeMap<(ServicePortName, IpFamily), (Duration, HashSet<SocketAddr>)> =
            BTreeMap::new();
        for (key, spec) in want {
            if let Some(timeout) = spec.affinity {
                let (t, present) = wanted.entry(affinity_key(key)).or_default();
                *t = timeout;
                present.extend(&spec.endpoints);
            }
        }
        self.affinities.retain(|k, _| wanted.contains_key(k));
        for (k, (timeout, present)) in wanted {
            let affinity = self
                .affinities
                .entry(k)
                .or_insert_with(|| Affinity::new(timeout));
            let mut table = affinity.lock();
            table.set_timeout(timeout);
            table.keep_only(&present);
        }
    }

    /// Opens a listener for `key` on the first port of the range that binds.
    fn listen(&mut self, key: &Key, spec: &Spec) -> io::Result<Listener> {
        let address = match (key.family, self.bind, spec.port) {
            (IpFamily::V4, _, Some(_)) => Ipv4Addr::LOCALHOST.into(),
            (IpFamily::V6, _, Some(_)) => Ipv6Addr::LOCALHOST.into(),
            (IpFamily::V4, bind @ IpAddr::V4(_), None)
            | (IpFamily::V6, bind @ IpAddr::V6(_), None) => bind,
            (IpFamily::V4, _, None) => Ipv4Addr::UNSPECIFIED.into(),
            (IpFamily::V6, _, None) => Ipv6Addr::UNSPECIFIED.into(),
        };
        let transport = spec.transport;
        let limit = self
            .limits
            .entry(key.port.service.clone())
            .or_insert_with(|| self.relay.service_limit())
            .clone();
        let taken = self.taken.entry(transport).or_default();
        let mut last = io::Error::new(io::ErrorKind::AddrInUse, "every port of the range is ours");
        let mut bound = None;
        let candidates = match spec.port {
            Some(port) => Box::new(std::iter::once(port)),
            None => self.range.candidates(taken),
        };
        for port in candidates {
            let target = Target {
                name: plan::name(key).into(),
                endpoints: spec.endpoints.clone(),
                affinity: spec
                    .affinity
                    .and(self.affinities.get(&affinity_key(key)))
                    .cloned(),
                limit: limit.clone(),
            };
            let at = SocketAddr::new(address, port);
            let opened = match spec.transport {
                Transport::Tcp => self.relay.listen_tcp(at, target),
                Transport::Udp => self.relay.listen_udp(at, target),
            };
            match opened {
                Ok(listener) => {
                    bound = Some(listener);
                    break;
                }
                Err(error) => last = error,
            }
        }
        let listener = bound.ok_or(last)?;
        taken.insert(listener.local_addr().port());
        Ok(listener)
    }
}

/// Which affinity table a listener shares: its service port's in its family.
fn affinity_key(key: &Key) -> (ServicePortName, IpFamily) {
    (key.port.clone(), key.family)
}

impl Dataplane for UserspaceDataplane {
    fn mode(&self) -> &'static str {
        MODE
    }

    fn sync(
        &mut self,
        snapshot: &Snapshot,
        _changes: &Changes,
        full: bool,
    ) -> Result<SyncReport, SyncError> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| SyncError::io(MODE, Failure::NoRuntime(e)))?;
        let _entered = runtime.enter();
        let (mut operations, failed) = self.reconcile((self.plan)(snapshot));
        if operations.iter().sum::<usize>() > 0 {
            // Only an opened or closed listener moves a port; an idle sync rebuilds nothing.
            self.relay_ports.set(&self.taken);
        }
        let mut netlink_messages = 0;
        if let Some(rules) = &mut self.rules {
            let listening: BTreeMap<Key, Listening> = self
                .open
                .iter()
                .map(|(key, open)| {
                    let listening = Listening {
                        port: open.listener.local_addr().port(),
                        serving: !open.spec.endpoints.is_empty(),
                    };
                    (key.clone(), listening)
                })
                .collect();
            let want = redirect::plan(snapshot, &listening, &rules.settings);
            let sent = rules.applier.backend().messages_sent();
            let applied = rules.apply(want, full).map_err(|e| match e {
                nft::apply::Error::Refused { .. } => SyncError::refused(MODE, Failure::Redirect(e)),
                other => SyncError::io(MODE, Failure::Redirect(other)),
            })?;
            netlink_messages = (rules.applier.backend().messages_sent() - sent) as usize;
            for family in IpFamily::ALL {
                operations[family.index()] += applied[family.index()];
            }
        }
        if let Some((key, error)) = failed {
            return Err(SyncError::io(
                MODE,
                Failure::Listen {
                    port: plan::name(&key),
                    source: error,
                },
            ));
        }
        let families = IpFamily::ALL
            .into_iter()
            .map(|family| {
                let no_local = snapshot.no_local_endpoints(family);
                FamilyReport {
                    family: Some(family),
                    operations: operations[family.index()],
                    objects: self.open.keys().filter(|k| k.family == family).count(),
                    no_local_endpoints_internal: no_local.internal,
                    no_local_endpoints_external: no_local.external,
                    iptables_rules: None,
                }
            })
            .collect();
        Ok(SyncReport {
            full,
            families,
            netlink_messages,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::snapshots::{node, snapshot, svc};

    fn dataplane() -> UserspaceDataplane {
        UserspaceDataplane::new(
            Settings::default(),
            PortRange::Any,
            Ipv4Addr::UNSPECIFIED.into(),
        )
    }

    fn client(last: u8) -> IpAddr {
        IpAddr::from([192, 168, 0, last])
    }

    /// One table per service port and family, whatever its listeners: the port under
    /// `externalTrafficPolicy: Local` has two, sharing it; a port without affinity has none.
    /// A sync keeps a table and its clients, forgets the clients of endpoints that left, and
    /// drops the table with the port's affinity.
    #[test]
    fn one_affinity_table_per_service_port_and_family_kept_from_sync_to_sync() {
        let sticky = |eps: &[&str]| {
            let mut s = svc("default/web", "10.96.0.10", 80)
                .node_port(30080)
                .external_local()
                .affinity(600);
            for ep in eps {
                s = s.ep(ep, 8080, "node-a");
            }
            snapshot(
                node(),
                vec![
                    s,
                    svc("default/other", "10.96.0.11", 80).ep("10.244.1.9", 8080, "node-a"),
                ],
            )
        };
        let mut dp = dataplane();
        let want = plan::plan(&sticky(&["10.244.1.5", "10.244.1.6"]));
        assert_eq!(
            want.len(),
            3,
            "web's cluster and local listeners, other's one"
        );
        dp.share_affinities(&want);
        assert_eq!(dp.affinities.len(), 1);
        let (key, table) = dp.affinities.iter().next().unwrap();
        assert_eq!((&*key.0.service.name, key.1), ("web", IpFamily::V4));
        let table = table.clone();
        let now = tokio::time::Instant::now();
        let (a, b): (SocketAddr, SocketAddr) = (
            "10.244.1.5:8080".parse().unwrap(),
            "10.244.1.6:8080".parse().unwrap(),
        );
        table.lock().remember(client(1), a, now);
        table.lock().remember(client(2), b, now);

        dp.share_affinities(&plan::plan(&sticky(&["10.244.1.6"])));
        let kept = &dp.affinities.values().next().unwrap();
        assert!(kept.same(&table), "the same table");
        assert_eq!(kept.lock().sticky(client(2), |_| true, now), Some(b));
        assert_eq!(
            kept.lock().sticky(client(1), |_| true, now),
            None,
            "its endpoint left"
        );

        let without = snapshot(node(), vec![svc("default/web", "10.96.0.10", 80)]);
        dp.share_affinities(&plan::plan(&without));
        assert!(dp.affinities.is_empty());
    }
}
