//! The relay's counters of every open listener, shared with the metrics, which read them at
//! each scrape (`kubeproxy_rs_userspace_*`).
//!
//! The dataplane belongs to the sync runner's thread, so a scrape cannot ask it; instead the
//! dataplane records here each listener it opens and forgets each it closes, and a scrape reads
//! the listeners' atomic counters directly. A sync with nothing changed touches nothing here.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::plan::Key;
use super::relay::counters::Counters;
use crate::dataplane::counters::{RelaySource, RelayedCounts, RelayedListener};

/// See the module doc. Cloning shares the same table.
#[derive(Clone, Debug, Default)]
pub struct ListenerCounters(Arc<Mutex<BTreeMap<Key, Arc<Counters>>>>);

impl ListenerCounters {
    /// Every open listener's counters now, in key order.
    pub fn read(&self) -> Vec<(Key, RelayedCounts)> {
        self.table()
            .iter()
            .map(|(k, c)| (k.clone(), c.read()))
            .collect()
    }

    /// `key`'s listener opened, counting in `counters`.
    pub(super) fn opened(&self, key: Key, counters: Arc<Counters>) {
        self.table().insert(key, counters);
    }

    /// `key`'s listener closed: its series leave the scrape.
    pub(super) fn closed(&self, key: &Key) {
        self.table().remove(key);
    }

    fn table(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, Arc<Counters>>> {
        // The table is whole after any panic: each change is one insert or remove.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl RelaySource for ListenerCounters {
    fn listeners(&self) -> Vec<RelayedListener> {
        self.read()
            .into_iter()
            .map(|(key, counts)| RelayedListener {
                port: key.port,
                family: key.family,
                listener: key.list.as_str(),
                counts,
            })
            .collect()
    }
}
