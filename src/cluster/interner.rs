//! Shared copies of strings that repeat across endpoints (node names, zones, hints).
//!
//! A cluster with 100,000 endpoints has a few hundred distinct node names; keeping one `Arc<str>`
//! per distinct value instead of one allocation per endpoint makes a full rebuild markedly cheaper
//! and the model smaller. Pure value; entries no longer used anywhere are pruned as it grows, so
//! hostile input with ever-new names cannot make it grow without bound.

use std::collections::HashSet;
use std::sync::Arc;

#[derive(Debug, Default)]
pub struct Interner {
    strings: HashSet<Arc<str>>,
    /// Size after the last prune; the next prune happens when the set doubles.
    pruned_at: usize,
}

impl Interner {
    /// The shared copy of `s`.
    pub fn get(&mut self, s: &str) -> Arc<str> {
        if let Some(found) = self.strings.get(s) {
            return found.clone();
        }
        if self.strings.len() >= 2 * self.pruned_at.max(512) {
            self.strings.retain(|s| Arc::strong_count(s) > 1);
            self.pruned_at = self.strings.len();
        }
        let shared: Arc<str> = Arc::from(s);
        self.strings.insert(shared.clone());
        shared
    }

    pub fn len(&self) -> usize {
        self.strings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
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
}
