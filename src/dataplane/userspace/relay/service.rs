//! The state one listener's connections share: the balancer, the affinity table (its service
//! port's), which endpoints are still present (so connections to a removed one close), the
//! connection limits and the counters.
//!
//! The locks are short ones, around the balancer and the endpoint table, and inside it around
//! the affinity table (never the other way round), held for a pick or an update and never
//! across an await.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;

use super::affinity::Affinity;
use super::balancer::{Balancer, Pick};
use super::counters::{Counters, Event};
use super::dial_policy::DialPolicy;

/// One listener's shared state; the listener task and every connection hold an `Arc` of it.
#[derive(Debug)]
pub struct Service {
    /// For logs: the service port and family, as the caller named it.
    pub(super) name: Arc<str>,
    pub(super) counters: Arc<Counters>,
    pub(super) dial: DialPolicy,
    table: Mutex<Table>,
    permits: Arc<Semaphore>,
    global: Arc<Semaphore>,
}

#[derive(Debug)]
struct Table {
    balancer: Balancer,
    /// The service port's ClientIP affinity table; `None` without affinity.
    affinity: Option<Affinity>,
    /// One sender per present endpoint that has had a connection since the last update:
    /// made at its first pick, so an idle listener holds none (a watch channel is a few
    /// hundred bytes; a listener may have hundreds of endpoints). Connections hold a
    /// receiver; dropping the sender (endpoint removed, or the listener closed) is what tells
    /// them to close.
    watched: HashMap<SocketAddr, watch::Sender<()>>,
}

/// An endpoint chosen for a dial, with the signal that it has been removed since.
#[derive(Debug)]
pub struct Chosen {
    pub pick: Pick,
    pub present: Presence,
}

/// Tells whether the endpoint it was taken for is still among the listener's endpoints.
#[derive(Clone, Debug)]
pub struct Presence(watch::Receiver<()>);

impl Presence {
    /// Whether the endpoint has been removed (or the listener closed), without waiting.
    pub fn is_removed(&self) -> bool {
        self.0.has_changed().is_err()
    }

    /// Waits until the endpoint is removed (or the listener closed). Cancel-safe.
    pub async fn removed(&mut self) {
        while self.0.changed().await.is_ok() {}
    }
}

/// A connection limit several listeners share: a Service's, over its ports, families and
/// endpoint lists, so one busy Service cannot take every connection the node allows.
#[derive(Clone, Debug)]
pub struct Limit(Arc<Semaphore>);

impl Limit {
    /// At most `connections` at once (UDP: flows); 0 admits none.
    pub fn new(connections: usize) -> Limit {
        Limit(Arc::new(Semaphore::new(
            connections.min(Semaphore::MAX_PERMITS),
        )))
    }
}

/// A connection or flow counted against the limits: the permits are returned, and the
/// active count lowered, when it is dropped.
#[derive(Debug)]
pub struct Admission {
    service: Arc<Service>,
    _permits: (OwnedSemaphorePermit, OwnedSemaphorePermit),
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.service.counters.closed();
    }
}

impl Service {
    /// `affinity`: the service port's table, shared with its other listeners; `limit`: the
    /// Service's, shared with its other listeners; `global`: the relay-wide limit every
    /// listener draws from.
    pub fn new(
        name: Arc<str>,
        endpoints: Vec<SocketAddr>,
        affinity: Option<Affinity>,
        dial: DialPolicy,
        limit: Limit,
        global: Arc<Semaphore>,
    ) -> Service {
        let service = Service {
            name,
            counters: Arc::default(),
            dial,
            table: Mutex::new(Table {
                balancer: Balancer::default(),
                affinity: None,
                watched: HashMap::new(),
            }),
            permits: limit.0,
            global,
        };
        service.update(endpoints, &[], affinity);
        service
    }

    /// Takes a new endpoint list and affinity table: new connections use them at once;
    /// connections to endpoints still present, or in `listed`, are kept, those to removed
    /// endpoints are told to close.
    pub fn update(
        &self,
        endpoints: Vec<SocketAddr>,
        listed: &[SocketAddr],
        affinity: Option<Affinity>,
    ) {
        let mut table = self.lock();
        let wanted: HashSet<&SocketAddr> = endpoints.iter().chain(listed).collect();
        // Senders no connection listens to any more go too; a later pick makes a new one.
        table
            .watched
            .retain(|e, sender| wanted.contains(e) && sender.receiver_count() > 0);
        table.balancer.set(endpoints);
        table.affinity = affinity;
    }

    /// Tells every connection to close, and leaves nothing to pick: the listener is going
    /// away.
    pub fn close_all(&self) {
        let mut table = self.lock();
        table.watched.clear();
        table.balancer.set(Vec::new());
        table.affinity = None;
    }

    /// Admits one more connection, or counts it as over the limit and returns `None`.
    pub fn admit(self: &Arc<Self>) -> Option<Admission> {
        let permits = Arc::clone(&self.permits)
            .try_acquire_owned()
            .ok()
            .zip(Arc::clone(&self.global).try_acquire_owned().ok());
        match permits {
            Some(permits) => {
                self.counters.opened();
                Some(Admission {
                    service: Arc::clone(self),
                    _permits: permits,
                })
            }
            None => {
                self.counters.add(Event::OverLimit, 1);
                None
            }
        }
    }

    /// The endpoint for the next dial from `client` (see [`Balancer::pick`]).
    pub fn pick(&self, client: IpAddr, tried: &[SocketAddr], now: Instant) -> Option<Chosen> {
        let mut table = self.lock();
        let Table {
            balancer, affinity, ..
        } = &mut *table;
        let mut sticky = affinity.as_ref().map(Affinity::lock);
        let pick = balancer.pick(client, tried, now, sticky.as_deref_mut())?;
        drop(sticky);
        let sender = table
            .watched
            .entry(pick.endpoint)
            .or_insert_with(|| watch::Sender::new(()));
        let present = Presence(sender.subscribe());
        Some(Chosen { pick, present })
    }

    /// A dial from `client` to `endpoint` failed.
    pub fn failed(&self, client: IpAddr, endpoint: SocketAddr) {
        self.counters.add(Event::DialFailure, 1);
        if let Some(affinity) = &self.lock().affinity {
            affinity.lock().release(client, endpoint);
        }
    }

    /// The lock, also after a panic elsewhere: the table is consistent between statements.
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }
}
