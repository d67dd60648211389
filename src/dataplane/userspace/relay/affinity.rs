//! ClientIP session affinity: which endpoint each client was last sent to, shared by every
//! listener of one service port in one family.
//!
//! Upstream keeps one affinity per service port, whatever frontend a client comes through: a
//! client sent to an endpoint through the ClusterIP goes back to it through the NodePort, as
//! long as that frontend's endpoints include it. A service port here may have two listeners
//! (its cluster-wide and its local endpoints), so the table is not a listener's own but a
//! [`Affinity`] handle the dataplane gives each of them.
//!
//! The [`Table`] is pure: no I/O and no clock (the caller passes "now"). Its meaning is the
//! Service API's for `sessionAffinity: ClientIP`: a client's connections go to the endpoint
//! its previous one went to, as long as it comes back within `timeoutSeconds` of that
//! previous connection. An endpoint that fails a dial loses the client, so a retry is free to
//! go elsewhere.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// The clients of one service port in one family and the endpoint each is stuck to.
#[derive(Debug)]
pub struct Table {
    timeout: Duration,
    clients: HashMap<IpAddr, Sticky>,
    /// The table is swept of expired entries when it grows past this size, so a stream of
    /// one-off clients costs memory in proportion to the clients seen within a timeout.
    sweep_at: usize,
}

#[derive(Clone, Copy, Debug)]
struct Sticky {
    endpoint: SocketAddr,
    last_used: Instant,
}

/// Smallest table size that triggers a sweep; below it a sweep would cost more than it frees.
const MIN_SWEEP: usize = 64;

impl Table {
    pub fn new(timeout: Duration) -> Table {
        Table {
            timeout,
            clients: HashMap::new(),
            sweep_at: MIN_SWEEP,
        }
    }

    /// A new `timeoutSeconds`: what is still valid under it is kept.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// The endpoint `client` is stuck to, refreshed, if its affinity is still valid and
    /// `usable` says the endpoint may take it (one of the asking listener's endpoints that
    /// this connection has not already failed to reach).
    pub fn sticky(
        &mut self,
        client: IpAddr,
        usable: impl Fn(&SocketAddr) -> bool,
        now: Instant,
    ) -> Option<SocketAddr> {
        let sticky = self.clients.get_mut(&client)?;
        let fresh = now.saturating_duration_since(sticky.last_used) <= self.timeout;
        if fresh && usable(&sticky.endpoint) {
            sticky.last_used = now;
            Some(sticky.endpoint)
        } else {
            None
        }
    }

    /// `client` was sent to `endpoint`: it sticks there from now on.
    pub fn remember(&mut self, client: IpAddr, endpoint: SocketAddr, now: Instant) {
        self.clients.insert(
            client,
            Sticky {
                endpoint,
                last_used: now,
            },
        );
        if self.clients.len() >= self.sweep_at {
            let timeout = self.timeout;
            self.clients
                .retain(|_, s| now.saturating_duration_since(s.last_used) <= timeout);
            self.sweep_at = (self.clients.len() * 2).max(MIN_SWEEP);
        }
    }

    /// A dial from `client` to `endpoint` failed: the client is no longer stuck to it.
    pub fn release(&mut self, client: IpAddr, endpoint: SocketAddr) {
        if self
            .clients
            .get(&client)
            .is_some_and(|s| s.endpoint == endpoint)
        {
            self.clients.remove(&client);
        }
    }

    /// Forgets the clients of every endpoint not in `present` (endpoints that left the
    /// service port), so one that comes back starts without them.
    pub fn keep_only(&mut self, present: &HashSet<SocketAddr>) {
        self.clients.retain(|_, s| present.contains(&s.endpoint));
    }

    pub fn len(&self) -> usize {
        self.clients.len()
    }

    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }
}

/// A [`Table`] shared by the listeners of one service port in one family. Cloning shares it.
#[derive(Clone, Debug)]
pub struct Affinity(Arc<Mutex<Table>>);

impl Affinity {
    /// A new, empty table with `timeoutSeconds`.
    pub fn new(timeout: Duration) -> Affinity {
        Affinity(Arc::new(Mutex::new(Table::new(timeout))))
    }

    /// The table, also after a panic elsewhere: it is consistent between statements. Held
    /// for one pick or update, never across an await.
    pub fn lock(&self) -> MutexGuard<'_, Table> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `self` and `other` are the same table.
    pub fn same(&self, other: &Affinity) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(last: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, last], 80))
    }

    fn client(last: u8) -> IpAddr {
        IpAddr::from([192, 168, 0, last])
    }

    #[test]
    fn a_client_sticks_until_the_timeout_since_its_last_use() {
        let t0 = Instant::now();
        let mut t = Table::new(Duration::from_secs(10));
        t.remember(client(1), ep(1), t0);
        for s in [5, 14, 23] {
            let at = t0 + Duration::from_secs(s);
            assert_eq!(t.sticky(client(1), |_| true, at), Some(ep(1)));
        }
        let late = t0 + Duration::from_secs(34);
        assert_eq!(t.sticky(client(1), |_| true, late), None);
    }

    #[test]
    fn an_endpoint_the_asker_cannot_use_is_not_offered_and_the_client_stays() {
        let now = Instant::now();
        let mut t = Table::new(Duration::from_secs(10));
        t.remember(client(1), ep(2), now);
        assert_eq!(t.sticky(client(1), |e| *e != ep(2), now), None);
        assert_eq!(t.sticky(client(1), |_| true, now), Some(ep(2)));
    }

    #[test]
    fn release_and_keep_only_forget_clients() {
        let now = Instant::now();
        let mut t = Table::new(Duration::from_secs(10));
        t.remember(client(1), ep(1), now);
        t.remember(client(2), ep(2), now);
        t.release(client(1), ep(2));
        assert_eq!(t.len(), 2, "client 1 was not on ep 2");
        t.release(client(1), ep(1));
        assert_eq!(t.sticky(client(1), |_| true, now), None);
        t.keep_only(&HashSet::from([ep(1)]));
        assert!(t.is_empty(), "ep 2 left, and its client with it");
    }

    #[test]
    fn expired_clients_are_swept_as_the_table_grows() {
        let t0 = Instant::now();
        let mut t = Table::new(Duration::from_secs(1));
        for i in 0..200u8 {
            let at = t0 + Duration::from_secs(u64::from(i) * 2);
            t.remember(client(i), ep(1), at);
        }
        assert!(
            t.len() <= MIN_SWEEP,
            "{} entries kept for one live client",
            t.len()
        );
    }

    #[test]
    fn clones_share_one_table() {
        let now = Instant::now();
        let a = Affinity::new(Duration::from_secs(10));
        let b = a.clone();
        a.lock().remember(client(1), ep(3), now);
        assert_eq!(b.lock().sticky(client(1), |_| true, now), Some(ep(3)));
        assert!(a.same(&b));
        assert!(!a.same(&Affinity::new(Duration::from_secs(10))));
    }
}
