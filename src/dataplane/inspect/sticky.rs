//! Test-only: what the modes' readers of affinity state are tested with, alike in every mode:
//! a Service with ClientIP affinity, and a fake kernel's lists of remembered clients by name.

use crate::testing::snapshots::{Svc, svc};

/// `default/sticky` port 80 on 10.96.0.10 with ClientIP affinity for `seconds`: an endpoint on
/// this node (10.244.1.2) and one on `node-b` (10.244.2.2), both on port 8080.
pub fn sticky(seconds: u32) -> Svc {
    svc("default/sticky", "10.96.0.10", 80)
        .affinity(seconds)
        .ep("10.244.1.2", 8080, "node-a")
        .ep("10.244.2.2", 8080, "node-b")
}

/// What a fake kernel holding `lists` lists under `name`: an empty list where it has none.
pub fn listed<K: PartialEq, V: Clone>(lists: &[(K, Vec<V>)], name: &K) -> Vec<V> {
    lists
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, entries)| entries.clone())
        .unwrap_or_default()
}
