//! Shared copies of what repeats across endpoints: strings (node names, zones, hints) and whole
//! [`Placement`]s.
//!
//! A cluster with 100,000 endpoints has a few hundred distinct node names; keeping one `Arc`
//! per distinct value instead of one allocation per endpoint makes a full rebuild markedly
//! cheaper and the model smaller. Pure value; entries no longer used anywhere are pruned as it
//! grows, so hostile input with ever-new names cannot make it grow without bound.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Arc;

use super::model::Placement;

#[derive(Debug, Default)]
pub struct Interner {
    strings: HashSet<Arc<str>>,
    placements: HashSet<Arc<Placement>>,
    /// Sizes after the last prune; the next prune happens when a set doubles.
    pruned_at: usize,
    placements_pruned_at: usize,
}

impl Interner {
    /// The shared copy of `s`.
    pub fn get(&mut self, s: &str) -> Arc<str> {
        if let Some(found) = self.strings.get(s) {
            return found.clone();
        }
        prune(&mut self.strings, &mut self.pruned_at);
        let shared: Arc<str> = Arc::from(s);
        self.strings.insert(shared.clone());
        shared
    }

    /// The shared copy of `placement` (whose strings should come from [`Interner::get`]).
    pub fn placement(&mut self, placement: Placement) -> Arc<Placement> {
        if let Some(found) = self.placements.get(&placement) {
            return found.clone();
        }
        prune(&mut self.placements, &mut self.placements_pruned_at);
        let shared = Arc::new(placement);
        self.placements.insert(shared.clone());
        shared
    }

    pub fn len(&self) -> usize {
        self.strings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }
}

/// Drops the values only the set still holds, once it has doubled since the last prune.
fn prune<T: ?Sized + Hash + Eq>(set: &mut HashSet<Arc<T>>, pruned_at: &mut usize) {
    if set.len() >= 2 * (*pruned_at).max(512) {
        set.retain(|v| Arc::strong_count(v) > 1);
        *pruned_at = set.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_strings_share_one_allocation() {
        let mut i = Interner::default();
        let a = i.get("node-a");
        let b = i.get("node-a");
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(i.len(), 1);
    }

    #[test]
    fn unused_strings_are_pruned_as_the_set_grows() {
        let mut i = Interner::default();
        let kept = i.get("kept");
        for n in 0..10_000 {
            drop(i.get(&format!("gone-{n}")));
        }
        assert!(i.len() < 1100, "pruned to a bounded size, got {}", i.len());
        assert!(Arc::ptr_eq(&kept, &i.get("kept")));
    }

    #[test]
    fn equal_placements_share_one_allocation_and_unused_ones_are_pruned() {
        let mut i = Interner::default();
        let place = |i: &mut Interner, node: &str| Placement {
            node_name: Some(i.get(node)),
            zone: Some(i.get("zone-a")),
            ..Placement::default()
        };
        let a = place(&mut i, "node-a");
        let a = i.placement(a);
        let again = place(&mut i, "node-a");
        assert!(Arc::ptr_eq(&a, &i.placement(again)));
        for n in 0..10_000 {
            let p = place(&mut i, &format!("gone-{n}"));
            drop(i.placement(p));
        }
        assert!(i.placements.len() < 1100, "{}", i.placements.len());
        let again = place(&mut i, "node-a");
        assert!(Arc::ptr_eq(&a, &i.placement(again)));
    }
}
