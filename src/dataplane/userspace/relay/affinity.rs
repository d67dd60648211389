//! ClientIP session affinity: which endpoints each client was sent to, shared by every
//! listener of one service port in one family.
//!
//! Upstream keeps one affinity per service port, whatever frontend a client comes through: a
//! client sent to an endpoint through the ClusterIP goes back to it through the NodePort, as
//! long as that frontend's endpoints include it. It remembers the client per endpoint, so a
//! client the local endpoints took elsewhere (their list lacks its endpoint) keeps both: each
//! frontend goes on to the endpoint it chose. A service port here may have two listeners (its
//! cluster-wide and its local endpoints), so the table is not a listener's own but a
//! [`Affinity`] handle the dataplane gives each of them.
//!
//! The [`Table`] is pure: no I/O and no clock (the caller passes "now"). Its meaning is the
//! Service API's for `sessionAffinity: ClientIP`: a client's connections go to the endpoint
//! its previous one went to, as long as it comes back within `timeoutSeconds` of that
//! previous connection; of several, the one it was sent to first. An endpoint that fails a
//! dial loses the client, so a retry is free to go elsewhere.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// The clients of one service port in one family and the endpoints each is stuck to, in the
/// order it was sent to them (rarely more than one: one per endpoint list it came through).
#[derive(Debug)]
pub struct Table {
    timeout: Duration,
    clients: HashMap<IpAddr, Vec<Sticky>>,
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
    /// this connection has not already failed to reach); of several, the first it was sent
    /// to.
    pub fn sticky(
        &mut self,
        client: IpAddr,
        usable: impl Fn(&SocketAddr) -> bool,
        now: Instant,
    ) -> Option<SocketAddr> {
        let timeout = self.timeout;
        let sticky = self.clients.get_mut(&client)?.iter_mut().find(|s| {
            now.saturating_duration_since(s.last_used) <= timeout && usable(&s.endpoint)
        })?;
        sticky.last_used = now;
        Some(sticky.endpoint)
    }

    /// `client` was sent to `endpoint`: it sticks there from now on, beside any other
    /// endpoint it is still stuck to.
    pub fn remember(&mut self, client: IpAddr, endpoint: SocketAddr, now: Instant) {
        let timeout = self.timeout;
        let stuck = self.clients.entry(client).or_default();
        stuck.retain(|s| {
            s.endpoint != endpoint && now.saturating_duration_since(s.last_used) <= timeout
        });
        stuck.push(Sticky {
            endpoint,
            last_used: now,
        });
        if self.clients.len() >= self.sweep_at {
            self.clients.retain(|_, stuck| {
                stuck.retain(|s| now.saturating_duration_since(s.last_used) <= timeout);
                !stuck.is_empty()
            });
            self.sweep_at = (self.clients.len() * 2).max(MIN_SWEEP);
        }
    }

    /// A dial from `client` to `endpoint` failed: the client is no longer stuck to it.
    pub fn release(&mut self, client: IpAddr, endpoint: SocketAddr) {
        if let Some(stuck) = self.clients.get_mut(&client) {
            stuck.retain(|s| s.endpoint != endpoint);
            if stuck.is_empty() {
                self.clients.remove(&client);
            }
        }
    }

    /// Forgets the clients of every endpoint not in `present` (endpoints that left the
    /// service port), so one that comes back starts without them.
    pub fn keep_only(&mut self, present: &HashSet<SocketAddr>) {
        self.clients.retain(|_, stuck| {
            stuck.retain(|s| present.contains(&s.endpoint));
            !stuck.is_empty()
        });
    }

    /// How many clients are stuck to some endpoint.
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
    fn a_client_sent_elsewhere_by_another_listener_keeps_both_endpoints() {
        let now = Instant::now();
        let mut t = Table::new(Duration::from_secs(10));
        // The ClusterIP's listener (every endpoint) sends the client to ep 1.
        t.remember(client(1), ep(1), now);
        // The NodePort's local listener cannot use ep 1 and sends it to ep 2.
        let local = |e: &SocketAddr| *e == ep(2) || *e == ep(3);
        assert_eq!(t.sticky(client(1), local, now), None);
        t.remember(client(1), ep(2), now);
        // Each goes on to its own choice.
        for _ in 0..3 {
            assert_eq!(t.sticky(client(1), |_| true, now), Some(ep(1)));
            assert_eq!(t.sticky(client(1), local, now), Some(ep(2)));
        }
        assert_eq!(t.len(), 1, "one client");
        // A failed dial releases only that endpoint.
        t.release(client(1), ep(1));
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
