//! The userspace mode's [`Dataplane`]: keeps one relay listener open for each listener the
//! snapshot asks for ([`plan`]), opening, updating and closing them at each sync.
//!
//! The relay's state is the process's own, so there is nothing to adopt or re-read: a full
//! sync is the same reconcile as any other, against the listeners this process holds. A
//! listener that cannot be opened (its port taken by another program, say) fails the sync
//! after every other change has been made; the runner retries and the next sync opens what is
//! still missing. Endpoint changes reach a listener in place: connections to endpoints that
//! remain are untouched.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::cluster::{Changes, IpFamily, ServiceKey, Snapshot};
use crate::dataplane::{Dataplane, FamilyReport, SyncError, SyncReport};

use super::listener_counters::ListenerCounters;
use super::plan::{self, Key, Listeners, Spec, Transport};
use super::ports::PortRange;
use super::relay::{CounterValues, Limit, Listener, Relay, Settings, Target};

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
    /// The open listeners' counters, as the metrics read them.
    counters: ListenerCounters,
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
            counters: ListenerCounters::default(),
        }
    }

    /// The open listeners' counters, for the metrics to read at each scrape.
    pub fn listener_counters(&self) -> ListenerCounters {
        self.counters.clone()
    }

    /// Where each listener listens: what the redirect rules will point at.
    pub fn listening(&self) -> impl Iterator<Item = (&Key, SocketAddr)> {
        self.open.iter().map(|(k, o)| (k, o.listener.local_addr()))
    }

    /// What each listener has relayed so far.
    pub fn counters(&self) -> impl Iterator<Item = (&Key, CounterValues)> {
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
        let mut failed = None;
        for (key, spec) in want {
            match self.open.get_mut(&key) {
                Some(open) if open.spec == spec => {}
                Some(open) => {
                    open.listener.update(spec.endpoints.clone(), spec.affinity);
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

    /// Opens a listener for `key` on the first port of the range that binds.
    fn listen(&mut self, key: &Key, spec: &Spec) -> io::Result<Listener> {
        let address = match (key.family, self.bind) {
            (IpFamily::V4, bind @ IpAddr::V4(_)) | (IpFamily::V6, bind @ IpAddr::V6(_)) => bind,
            (IpFamily::V4, _) => Ipv4Addr::UNSPECIFIED.into(),
            (IpFamily::V6, _) => Ipv6Addr::UNSPECIFIED.into(),
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
        for port in self.range.candidates(taken) {
            let target = Target {
                name: plan::name(key).into(),
                endpoints: spec.endpoints.clone(),
                affinity: spec.affinity,
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
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| SyncError::Io {
            mode: MODE,
            message: format!("listeners need a tokio runtime: {e}"),
            source: None,
        })?;
        let _entered = runtime.enter();
        let (operations, failed) = self.reconcile(plan::plan(snapshot));
        if let Some((key, error)) = failed {
            return Err(SyncError::Io {
                mode: MODE,
                message: format!("cannot listen for {}", plan::name(&key)),
                source: Some(error),
            });
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
            netlink_messages: 0,
        })
    }
}
