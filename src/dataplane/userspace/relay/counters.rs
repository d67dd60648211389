//! What one listener has relayed: connections (or UDP flows) active and in total, bytes each
//! way, dial failures and retries, and what it turned away.
//!
//! Plain atomics, written by the relay's tasks and read at any time (by the metrics layer at
//! scrape time, by tests) through [`Counters::read`]; relaxed ordering, since
//! each value is a statistic on its own and no reader infers one from another.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::dataplane::counters::RelayedCounts;

/// The live counters of one listener.
#[derive(Debug, Default)]
pub struct Counters {
    active: AtomicU64,
    total: AtomicU64,
    bytes_to_endpoint: AtomicU64,
    bytes_to_client: AtomicU64,
    dial_failures: AtomicU64,
    retries: AtomicU64,
    over_limit: AtomicU64,
    no_endpoint: AtomicU64,
}

/// Which counter to add to; one name per field of [`RelayedCounts`] that only grows.
#[derive(Clone, Copy, Debug)]
pub enum Event {
    BytesToEndpoint,
    BytesToClient,
    DialFailure,
    Retry,
    OverLimit,
    NoEndpoint,
}

impl Counters {
    pub fn add(&self, event: Event, n: u64) {
        let counter = match event {
            Event::BytesToEndpoint => &self.bytes_to_endpoint,
            Event::BytesToClient => &self.bytes_to_client,
            Event::DialFailure => &self.dial_failures,
            Event::Retry => &self.retries,
            Event::OverLimit => &self.over_limit,
            Event::NoEndpoint => &self.no_endpoint,
        };
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// A connection or flow was admitted: one more active, one more in total.
    pub(super) fn opened(&self) {
        self.active.fetch_add(1, Ordering::Relaxed);
        self.total.fetch_add(1, Ordering::Relaxed);
    }

    /// An admitted connection or flow ended.
    pub(super) fn closed(&self) {
        self.active.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn read(&self) -> RelayedCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RelayedCounts {
            active: get(&self.active),
            total: get(&self.total),
            bytes_to_endpoint: get(&self.bytes_to_endpoint),
            bytes_to_client: get(&self.bytes_to_client),
            dial_failures: get(&self.dial_failures),
            retries: get(&self.retries),
            over_limit: get(&self.over_limit),
            no_endpoint: get(&self.no_endpoint),
        }
    }
}
