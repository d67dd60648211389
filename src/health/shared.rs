//! The one [`ProxyHealth`] the sync runner writes and every health server reads.
//!
//! A cheap-to-clone handle around a mutex. Each method holds the lock only for the call, so a
//! slow HTTP client can never block the runner. Times are arguments, as in [`ProxyHealth`].

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use super::proxy::{ProxyHealth, Status};
use crate::cluster::{IpFamily, NodeContext};

/// Shared proxy health: clone it into the runner and into each server.
#[derive(Clone, Debug)]
pub struct SharedHealth(Arc<Mutex<ProxyHealth>>);

impl SharedHealth {
    /// A fresh, healthy state; see [`ProxyHealth::new`] for `timeout`.
    pub fn new(timeout: Duration) -> SharedHealth {
        SharedHealth(Arc::new(Mutex::new(ProxyHealth::new(timeout))))
    }

    fn lock(&self) -> MutexGuard<'_, ProxyHealth> {
        // The state is plain data updated in single assignments, so it is consistent even if a
        // holder panicked.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// See [`ProxyHealth::queued_update`].
    pub fn queued_update(&self, family: IpFamily, at: SystemTime) {
        self.lock().queued_update(family, at);
    }

    /// See [`ProxyHealth::updated`].
    pub fn updated(&self, family: IpFamily, at: SystemTime) {
        self.lock().updated(family, at);
    }

    /// See [`ProxyHealth::ready`].
    pub fn ready(&self, family: IpFamily) {
        self.lock().ready(family);
    }

    /// See [`ProxyHealth::sync_node`].
    pub fn sync_node(&self, node: &NodeContext) {
        self.lock().sync_node(node);
    }

    /// See [`ProxyHealth::status`].
    pub fn status(&self, now: SystemTime) -> Status {
        self.lock().status(now)
    }

    /// See [`ProxyHealth::stop`].
    pub fn stop(&self) {
        self.lock().stop();
    }

    /// See [`ProxyHealth::node_eligible`].
    pub fn node_eligible(&self) -> bool {
        self.lock().node_eligible()
    }

    /// A copy of the whole state, for tests and diagnostics.
    pub fn get(&self) -> ProxyHealth {
        self.lock().clone()
    }
}
