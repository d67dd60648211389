//! Which endpoint a new connection or UDP flow goes to: round-robin over the endpoints the
//! model selected for the traffic, with ClientIP session affinity.
//!
//! Pure: no I/O and no clock (the caller passes "now"), never fails. The relay keeps one
//! [`Balancer`] per listener behind a lock and asks it once per dial attempt.
//!
//! Affinity follows the Service API's documented meaning of `sessionAffinity: ClientIP`: a
//! client's connections go to the endpoint its previous one went to, as long as it comes back
//! within `timeoutSeconds` of that previous connection. An endpoint that fails a dial loses
//! the client, so a retry is free to go elsewhere.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::time::Instant;

/// Round-robin state and the affinity table of one listener.
#[derive(Debug)]
pub struct Balancer {
    endpoints: Vec<SocketAddr>,
    /// Index of the endpoint the next round-robin pick starts from.
    next: usize,
    affinity: Option<Affinity>,
}

/// What [`Balancer::pick`] chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pick {
    pub endpoint: SocketAddr,
    /// Every endpoint was already tried by this connection, so this one failed before: the
    /// dial policy pauses before such an attempt.
    pub revisit: bool,
}

#[derive(Debug)]
struct Affinity {
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

impl Balancer {
    /// `affinity`: the Service's ClientIP timeout, `None` without affinity.
    pub fn new(endpoints: Vec<SocketAddr>, affinity: Option<Duration>) -> Balancer {
        let mut balancer = Balancer {
            endpoints: Vec::new(),
            next: 0,
            affinity: None,
        };
        balancer.set(endpoints, affinity);
        balancer
    }

    pub fn endpoints(&self) -> &[SocketAddr] {
        &self.endpoints
    }

    /// Takes a new endpoint list and affinity setting. Round-robin continues from where it
    /// was (so a sync does not send the next burst to the first endpoint); clients stuck to
    /// an endpoint that is gone lose their affinity, the others keep it. Turning affinity off
    /// or changing its timeout keeps what is still valid under the new setting.
    pub fn set(&mut self, endpoints: Vec<SocketAddr>, affinity: Option<Duration>) {
        self.endpoints = endpoints;
        if self.next >= self.endpoints.len() {
            self.next = 0;
        }
        self.affinity = match (self.affinity.take(), affinity) {
            (_, None) => None,
            (Some(mut kept), Some(timeout)) => {
                kept.timeout = timeout;
                let present: HashSet<&SocketAddr> = self.endpoints.iter().collect();
                kept.clients.retain(|_, s| present.contains(&s.endpoint));
                Some(kept)
            }
            (None, Some(timeout)) => Some(Affinity {
                timeout,
                clients: HashMap::new(),
                sweep_at: MIN_SWEEP,
            }),
        };
    }

    /// The endpoint for the next dial from `client`, or `None` when there are no endpoints.
    /// `tried` holds the endpoints this connection already failed to reach: they are skipped
    /// while any other remains, then revisited in round-robin order. The choice is
    /// remembered for affinity at once, so concurrent connections of one client agree.
    pub fn pick(&mut self, client: IpAddr, tried: &[SocketAddr], now: Instant) -> Option<Pick> {
        if self.endpoints.is_empty() {
            return None;
        }
        if let Some(sticky) = self.sticky(client, tried, now) {
            return Some(Pick {
                endpoint: sticky,
                revisit: false,
            });
        }
        let count = self.endpoints.len();
        let untried = (0..count)
            .map(|offset| (self.next + offset) % count)
            .find(|&i| !tried.contains(&self.endpoints[i]));
        let (index, revisit) = match untried {
            Some(i) => (i, false),
            None => (self.next, true),
        };
        self.next = (index + 1) % count;
        let endpoint = self.endpoints[index];
        if let Some(affinity) = &mut self.affinity {
            affinity.remember(client, endpoint, now);
        }
        Some(Pick { endpoint, revisit })
    }

    /// A dial from `client` to `endpoint` failed: the client is no longer stuck to it.
    pub fn failed(&mut self, client: IpAddr, endpoint: SocketAddr) {
        if let Some(affinity) = &mut self.affinity
            && affinity
                .clients
                .get(&client)
                .is_some_and(|s| s.endpoint == endpoint)
        {
            affinity.clients.remove(&client);
        }
    }

    /// The endpoint `client` is stuck to, refreshed, if its affinity is still valid and the
    /// endpoint has not already failed for this connection. The endpoint is present: [`set`]
    /// drops the clients of the endpoints it removes.
    ///
    /// [`set`]: Balancer::set
    fn sticky(&mut self, client: IpAddr, tried: &[SocketAddr], now: Instant) -> Option<SocketAddr> {
        let affinity = self.affinity.as_mut()?;
        let sticky = affinity.clients.get_mut(&client)?;
        let fresh = now.saturating_duration_since(sticky.last_used) <= affinity.timeout;
        if fresh && !tried.contains(&sticky.endpoint) {
            sticky.last_used = now;
            Some(sticky.endpoint)
        } else {
            None
        }
    }
}

impl Affinity {
    fn remember(&mut self, client: IpAddr, endpoint: SocketAddr, now: Instant) {
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

    fn picks(b: &mut Balancer, from: IpAddr, n: usize, now: Instant) -> Vec<SocketAddr> {
        (0..n)
            .map(|_| b.pick(from, &[], now).expect("endpoints").endpoint)
            .collect()
    }

    #[test]
    fn round_robin_visits_every_endpoint_in_turn() {
        let now = Instant::now();
        let mut b = Balancer::new(vec![ep(1), ep(2), ep(3)], None);
        assert_eq!(
            picks(&mut b, client(1), 4, now),
            [ep(1), ep(2), ep(3), ep(1)]
        );
    }

    #[test]
    fn no_endpoints_gives_no_pick() {
        let mut b = Balancer::new(vec![], Some(Duration::from_secs(10)));
        assert_eq!(b.pick(client(1), &[], Instant::now()), None);
    }

    #[test]
    fn tried_endpoints_are_skipped_until_all_failed() {
        let now = Instant::now();
        let mut b = Balancer::new(vec![ep(1), ep(2), ep(3)], None);
        let first = b.pick(client(1), &[ep(2)], now).unwrap();
        assert_eq!(
            first,
            Pick {
                endpoint: ep(1),
                revisit: false
            }
        );
        let second = b.pick(client(1), &[ep(1)], now).unwrap();
        assert_eq!(
            second,
            Pick {
                endpoint: ep(2),
                revisit: false
            }
        );
        let all = b.pick(client(1), &[ep(1), ep(2), ep(3)], now).unwrap();
        assert!(all.revisit);
        assert_eq!(all.endpoint, ep(3));
    }

    #[test]
    fn affinity_keeps_a_client_on_its_endpoint_within_the_timeout() {
        let t0 = Instant::now();
        let mut b = Balancer::new(vec![ep(1), ep(2)], Some(Duration::from_secs(10)));
        let first = b.pick(client(1), &[], t0).unwrap().endpoint;
        let other = b.pick(client(2), &[], t0).unwrap().endpoint;
        assert_ne!(first, other, "another client still goes round-robin");
        for s in [5, 14, 23] {
            let at = t0 + Duration::from_secs(s);
            assert_eq!(b.pick(client(1), &[], at).unwrap().endpoint, first);
        }
    }

    #[test]
    fn affinity_expires_after_the_timeout_since_last_use() {
        let t0 = Instant::now();
        let mut b = Balancer::new(vec![ep(1), ep(2)], Some(Duration::from_secs(10)));
        assert_eq!(b.pick(client(1), &[], t0).unwrap().endpoint, ep(1));
        let later = t0 + Duration::from_secs(11);
        assert_eq!(b.pick(client(1), &[], later).unwrap().endpoint, ep(2));
    }

    #[test]
    fn a_failed_dial_releases_the_client_from_its_endpoint() {
        let now = Instant::now();
        let mut b = Balancer::new(vec![ep(1), ep(2)], Some(Duration::from_secs(10)));
        assert_eq!(b.pick(client(1), &[], now).unwrap().endpoint, ep(1));
        b.failed(client(1), ep(1));
        let retry = b.pick(client(1), &[ep(1)], now).unwrap().endpoint;
        assert_eq!(retry, ep(2));
        assert_eq!(b.pick(client(1), &[], now).unwrap().endpoint, ep(2));
    }

    #[test]
    fn removed_endpoint_loses_its_clients_and_kept_one_keeps_them() {
        let now = Instant::now();
        let timeout = Some(Duration::from_secs(10));
        let mut b = Balancer::new(vec![ep(1), ep(2)], timeout);
        assert_eq!(b.pick(client(1), &[], now).unwrap().endpoint, ep(1));
        assert_eq!(b.pick(client(2), &[], now).unwrap().endpoint, ep(2));
        b.set(vec![ep(2), ep(3)], timeout);
        assert_eq!(b.pick(client(2), &[], now).unwrap().endpoint, ep(2));
        assert_ne!(b.pick(client(1), &[], now).unwrap().endpoint, ep(1));
    }

    #[test]
    fn turning_affinity_off_sends_clients_round_robin() {
        let now = Instant::now();
        let mut b = Balancer::new(vec![ep(1), ep(2)], Some(Duration::from_secs(10)));
        b.pick(client(1), &[], now);
        b.set(vec![ep(1), ep(2)], None);
        assert_eq!(picks(&mut b, client(1), 2, now), [ep(2), ep(1)]);
    }

    proptest::proptest! {
        /// Without affinity, any `rounds` full rounds of picks give every endpoint the same
        /// share, wherever round-robin stood and however the list was replaced before.
        #[test]
        fn round_robin_is_fair_after_any_update(
            before in 1usize..8,
            after in 1usize..8,
            warmup in 0usize..20,
            rounds in 1usize..4,
        ) {
            let now = Instant::now();
            let mut b = Balancer::new((1..=before as u8).map(ep).collect(), None);
            picks(&mut b, client(1), warmup, now);
            b.set((1..=after as u8).map(ep).collect(), None);
            let got = picks(&mut b, client(1), after * rounds, now);
            for e in b.endpoints() {
                let share = got.iter().filter(|g| *g == e).count();
                proptest::prop_assert_eq!(share, rounds, "{} in {:?}", e, got);
            }
        }

        /// A retry never goes back to an endpoint it tried while an untried one remains, and
        /// says so when it must.
        #[test]
        fn retries_prefer_untried_endpoints(
            count in 1usize..8,
            tried_mask in 0u8..255,
            affinity in proptest::bool::ANY,
        ) {
            let now = Instant::now();
            let endpoints: Vec<SocketAddr> = (1..=count as u8).map(ep).collect();
            let tried: Vec<SocketAddr> = endpoints
                .iter()
                .enumerate()
                .filter(|(i, _)| tried_mask & (1 << i) != 0)
                .map(|(_, e)| *e)
                .collect();
            let timeout = affinity.then(|| Duration::from_secs(10));
            let mut b = Balancer::new(endpoints.clone(), timeout);
            b.pick(client(1), &[], now);
            let pick = b.pick(client(1), &tried, now).unwrap();
            let all_tried = tried.len() == endpoints.len();
            proptest::prop_assert_eq!(pick.revisit, all_tried);
            proptest::prop_assert!(all_tried || !tried.contains(&pick.endpoint));
        }
    }

    #[test]
    fn expired_clients_are_swept_as_the_table_grows() {
        let t0 = Instant::now();
        let mut b = Balancer::new(vec![ep(1)], Some(Duration::from_secs(1)));
        for i in 0..200u8 {
            let at = t0 + Duration::from_secs(u64::from(i) * 2);
            b.pick(client(i), &[], at);
        }
        let table = b.affinity.as_ref().unwrap().clients.len();
        assert!(
            table <= MIN_SWEEP,
            "{table} entries kept for one live client"
        );
    }
}
