//! How hard a new connection tries its endpoints: how many dials, how long each may take, and
//! how long to pause between them.
//!
//! Pure: the policy is a value and its answers are functions of the attempt; the TCP relay
//! does the waiting. As upstream's userspace proxier did, each attempt goes to the next
//! endpoint and may wait longer than the one before, so one dead pod costs a client a short
//! delay rather than a failed connection, and a slow network still gets a fair chance.

use std::time::Duration;

/// The dial attempts of one connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DialPolicy {
    /// One entry per attempt: how long that dial may take before the endpoint counts as not
    /// answering. Never empty.
    timeouts: Vec<Duration>,
    /// The pause before an attempt that goes back to an endpoint this connection already
    /// failed on, doubled for each such attempt.
    backoff: Duration,
}

impl Default for DialPolicy {
    /// Four attempts with timeouts of 250 ms, 500 ms, 1 s and 2 s (upstream's userspace
    /// proxier's schedule), and 100 ms of backoff once every endpoint has failed.
    fn default() -> DialPolicy {
        DialPolicy::new(
            [250, 500, 1000, 2000].map(Duration::from_millis).to_vec(),
            Duration::from_millis(100),
        )
    }
}

impl DialPolicy {
    /// A policy with one attempt per entry of `timeouts`; an empty list means one attempt
    /// with the default first timeout, since a connection always gets one dial.
    pub fn new(timeouts: Vec<Duration>, backoff: Duration) -> DialPolicy {
        let timeouts = if timeouts.is_empty() {
            vec![Duration::from_millis(250)]
        } else {
            timeouts
        };
        DialPolicy { timeouts, backoff }
    }

    /// How many dials a connection makes at most.
    pub fn attempts(&self) -> usize {
        self.timeouts.len()
    }

    /// The dial timeout of `attempt` (counted from 0); the last one for any later attempt.
    pub fn timeout(&self, attempt: usize) -> Duration {
        self.timeouts[attempt.min(self.timeouts.len() - 1)]
    }

    /// The pause before `attempt`. None before an endpoint this connection has not tried:
    /// one pod refusing says nothing about the next. Before a revisit, when every endpoint
    /// has failed once, `backoff` doubled per revisit so far, so a Service whose pods all
    /// restart is not dialled in a tight loop. `revisits` counts the earlier revisits.
    pub fn pause(&self, revisit: bool, revisits: u32) -> Duration {
        if revisit {
            self.backoff.saturating_mul(1 << revisits.min(16))
        } else {
            Duration::ZERO
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_schedule_grows_and_stops_after_four_attempts() {
        let p = DialPolicy::default();
        assert_eq!(p.attempts(), 4);
        let timeouts: Vec<_> = (0..5).map(|a| p.timeout(a).as_millis()).collect();
        assert_eq!(timeouts, [250, 500, 1000, 2000, 2000]);
    }

    #[test]
    fn untried_endpoints_are_dialled_without_pause() {
        let p = DialPolicy::default();
        assert_eq!(p.pause(false, 3), Duration::ZERO);
    }

    #[test]
    fn revisits_back_off_exponentially() {
        let p = DialPolicy::new(vec![Duration::from_secs(1)], Duration::from_millis(10));
        let pauses: Vec<_> = (0..4).map(|r| p.pause(true, r).as_millis()).collect();
        assert_eq!(pauses, [10, 20, 40, 80]);
    }

    #[test]
    fn an_empty_schedule_still_dials_once() {
        let p = DialPolicy::new(vec![], Duration::ZERO);
        assert_eq!(p.attempts(), 1);
        assert_eq!(p.timeout(0), Duration::from_millis(250));
    }
}
