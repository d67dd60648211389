//! Which endpoint a new connection or UDP flow goes to: round-robin over the endpoints the
//! model selected for the listener, after the client's ClientIP affinity.
//!
//! Pure: no I/O and no clock (the caller passes "now"), never fails. The relay keeps one
//! [`Balancer`] per listener behind a lock and asks it once per dial attempt; the affinity
//! [`Table`] is the service port's, shared with its other listeners (see `affinity`), and
//! lent to each pick.

use std::net::{IpAddr, SocketAddr};

use tokio::time::Instant;

use super::affinity::Table;

/// Round-robin state of one listener.
#[derive(Debug, Default)]
pub struct Balancer {
    endpoints: Vec<SocketAddr>,
    /// Index of the endpoint the next round-robin pick starts from.
    next: usize,
}

/// What [`Balancer::pick`] chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pick {
    pub endpoint: SocketAddr,
    /// Every endpoint was already tried by this connection, so this one failed before: the
    /// dial policy pauses before such an attempt.
    pub revisit: bool,
}

impl Balancer {
    pub fn new(endpoints: Vec<SocketAddr>) -> Balancer {
        let mut balancer = Balancer::default();
        balancer.set(endpoints);
        balancer
    }

    pub fn endpoints(&self) -> &[SocketAddr] {
        &self.endpoints
    }

    /// Takes a new endpoint list. Round-robin continues from where it was (so a sync does not
    /// send the next burst to the first endpoint).
    pub fn set(&mut self, endpoints: Vec<SocketAddr>) {
        self.endpoints = endpoints;
        if self.next >= self.endpoints.len() {
            self.next = 0;
        }
    }

    /// The endpoint for the next dial from `client`, or `None` when there are no endpoints.
    /// With `affinity`, a client stuck to one of this listener's endpoints goes there, and
    /// any other choice is remembered at once (beside the endpoints other listeners sent the
    /// client to), so concurrent connections of one client agree.
    /// `tried` holds the endpoints this connection already failed to reach: they are skipped
    /// while any other remains, then revisited in round-robin order.
    pub fn pick(
        &mut self,
        client: IpAddr,
        tried: &[SocketAddr],
        now: Instant,
        mut affinity: Option<&mut Table>,
    ) -> Option<Pick> {
        if self.endpoints.is_empty() {
            return None;
        }
        if let Some(table) = affinity.as_deref_mut() {
            // An endpoint this connection failed to reach loses the client.
            for endpoint in tried {
                table.release(client, *endpoint);
            }
            let usable = |e: &SocketAddr| self.endpoints.contains(e) && !tried.contains(e);
            if let Some(endpoint) = table.sticky(client, usable, now) {
                return Some(Pick {
                    endpoint,
                    revisit: false,
                });
            }
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
        if let Some(table) = affinity {
            table.remember(client, endpoint, now);
        }
        Some(Pick { endpoint, revisit })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn ep(last: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, last], 80))
    }

    fn client(last: u8) -> IpAddr {
        IpAddr::from([192, 168, 0, last])
    }

    fn picks(b: &mut Balancer, from: IpAddr, n: usize, now: Instant) -> Vec<SocketAddr> {
        (0..n)
            .map(|_| b.pick(from, &[], now, None).expect("endpoints").endpoint)
            .collect()
    }

    fn table() -> Table {
        Table::new(Duration::from_secs(10))
    }

    #[test]
    fn round_robin_visits_every_endpoint_in_turn() {
        let now = Instant::now();
        let mut b = Balancer::new(vec![ep(1), ep(2), ep(3)]);
        assert_eq!(
            picks(&mut b, client(1), 4, now),
            [ep(1), ep(2), ep(3), ep(1)]
        );
    }

    #[test]
    fn no_endpoints_gives_no_pick() {
        let mut b = Balancer::new(vec![]);
        assert_eq!(
            b.pick(client(1), &[], Instant::now(), Some(&mut table())),
            None
        );
    }

    #[test]
    fn tried_endpoints_are_skipped_until_all_failed() {
        let now = Instant::now();
        let mut b = Balancer::new(vec![ep(1), ep(2), ep(3)]);
        let first = b.pick(client(1), &[ep(2)], now, None).unwrap();
        assert_eq!(
            first,
            Pick {
                endpoint: ep(1),
                revisit: false
            }
        );
        let second = b.pick(client(1), &[ep(1)], now, None).unwrap();
        assert_eq!(
            second,
            Pick {
                endpoint: ep(2),
                revisit: false
            }
        );
        let all = b
            .pick(client(1), &[ep(1), ep(2), ep(3)], now, None)
            .unwrap();
        assert!(all.revisit);
        assert_eq!(all.endpoint, ep(3));
    }

    #[test]
    fn affinity_keeps_a_client_on_its_endpoint_and_others_go_round_robin() {
        let t0 = Instant::now();
        let mut t = table();
        let mut b = Balancer::new(vec![ep(1), ep(2)]);
        let first = b.pick(client(1), &[], t0, Some(&mut t)).unwrap().endpoint;
        let other = b.pick(client(2), &[], t0, Some(&mut t)).unwrap().endpoint;
        assert_ne!(first, other, "another client still goes round-robin");
        for s in [5, 14, 23] {
            let at = t0 + Duration::from_secs(s);
            assert_eq!(
                b.pick(client(1), &[], at, Some(&mut t)).unwrap().endpoint,
                first
            );
        }
    }

    #[test]
    fn a_stuck_client_that_failed_its_endpoint_goes_elsewhere() {
        let now = Instant::now();
        let mut t = table();
        let mut b = Balancer::new(vec![ep(1), ep(2)]);
        assert_eq!(
            b.pick(client(1), &[], now, Some(&mut t)).unwrap().endpoint,
            ep(1)
        );
        let retry = b
            .pick(client(1), &[ep(1)], now, Some(&mut t))
            .unwrap()
            .endpoint;
        assert_eq!(retry, ep(2));
        assert_eq!(
            b.pick(client(1), &[], now, Some(&mut t)).unwrap().endpoint,
            ep(2)
        );
    }

    /// Two listeners of one service port share its table: a client sent to an endpoint by
    /// one is sent there by the other, whose round-robin would have chosen another, as long
    /// as the other has that endpoint.
    #[test]
    fn listeners_sharing_a_table_send_a_client_to_one_endpoint() {
        let now = Instant::now();
        let mut t = table();
        let mut cluster = Balancer::new(vec![ep(1), ep(2), ep(3)]);
        let mut local = Balancer::new(vec![ep(1), ep(2)]);
        assert_eq!(
            local
                .pick(client(9), &[], now, Some(&mut t))
                .unwrap()
                .endpoint,
            ep(1)
        );
        assert_eq!(
            cluster
                .pick(client(1), &[], now, Some(&mut t))
                .unwrap()
                .endpoint,
            ep(1)
        );
        assert_eq!(
            local
                .pick(client(1), &[], now, Some(&mut t))
                .unwrap()
                .endpoint,
            ep(1),
            "not ep 2, local's turn"
        );
        // Stuck to an endpoint the other listener does not have: it picks, and remembers.
        assert_eq!(
            cluster
                .pick(client(2), &[], now, Some(&mut t))
                .unwrap()
                .endpoint,
            ep(2)
        );
        assert_eq!(
            cluster
                .pick(client(3), &[], now, Some(&mut t))
                .unwrap()
                .endpoint,
            ep(3)
        );
        assert_eq!(
            local
                .pick(client(3), &[], now, Some(&mut t))
                .unwrap()
                .endpoint,
            ep(2)
        );
        // Each listener then keeps its own choice, as upstream remembers a client per
        // endpoint: neither moves the client on the other.
        for _ in 0..2 {
            assert_eq!(
                cluster
                    .pick(client(3), &[], now, Some(&mut t))
                    .unwrap()
                    .endpoint,
                ep(3)
            );
            assert_eq!(
                local
                    .pick(client(3), &[], now, Some(&mut t))
                    .unwrap()
                    .endpoint,
                ep(2)
            );
        }
    }

    #[test]
    fn a_removed_endpoint_is_never_picked_for_its_stuck_clients() {
        let now = Instant::now();
        let mut t = table();
        let mut b = Balancer::new(vec![ep(1), ep(2)]);
        assert_eq!(
            b.pick(client(1), &[], now, Some(&mut t)).unwrap().endpoint,
            ep(1)
        );
        assert_eq!(
            b.pick(client(2), &[], now, Some(&mut t)).unwrap().endpoint,
            ep(2)
        );
        b.set(vec![ep(2), ep(3)]);
        assert_eq!(
            b.pick(client(2), &[], now, Some(&mut t)).unwrap().endpoint,
            ep(2)
        );
        assert_ne!(
            b.pick(client(1), &[], now, Some(&mut t)).unwrap().endpoint,
            ep(1)
        );
    }

    #[test]
    fn without_affinity_clients_go_round_robin() {
        let now = Instant::now();
        let mut t = table();
        let mut b = Balancer::new(vec![ep(1), ep(2)]);
        b.pick(client(1), &[], now, Some(&mut t));
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
            let mut b = Balancer::new((1..=before as u8).map(ep).collect());
            picks(&mut b, client(1), warmup, now);
            b.set((1..=after as u8).map(ep).collect());
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
            let mut t = table();
            let mut b = Balancer::new(endpoints.clone());
            b.pick(client(1), &[], now, affinity.then_some(&mut t));
            let pick = b.pick(client(1), &tried, now, affinity.then_some(&mut t)).unwrap();
            let all_tried = tried.len() == endpoints.len();
            proptest::prop_assert_eq!(pick.revisit, all_tried);
            proptest::prop_assert!(all_tried || !tried.contains(&pick.endpoint));
        }
    }
}
