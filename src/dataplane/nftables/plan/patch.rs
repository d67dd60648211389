//! One service port's change applied to one family's plan in place, recording what it touched
//! so the transaction can be computed from the touched parts alone.
//!
//! Pure. Removing a port's old contribution drops its claims (a key another port also adds
//! takes that port's data, a key nobody adds leaves its set), releases its pick chains (a chain
//! no port uses any more is removed) and removes its affinity chains and sets; adding the new
//! one does the reverse. Before anything is changed, its previous state is copied into
//! [`Touched::before`], so `diff(before, after-of-the-same-parts)` is exactly the part of the
//! full diff that is not empty: untouched parts are equal on both sides.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::claims::{self, Holder};
use super::contribution::{self, Contribution};
use super::planner::FamilyBooks;
use crate::cluster::{IpFamily, NodeContext, ServicePortState};
use crate::dataplane::nftables::mode_config::ModeConfig;
use crate::nft::Name;
use crate::nft::diff::{Transaction, diff};
use crate::nft::ruleset::{Family, Ruleset, Set, Tuple};

/// What one family's update touched, and how it was before.
pub(super) struct Touched {
    /// The touched chains, sets and keys as they were (absent ones absent).
    before: Ruleset,
    chains: BTreeSet<Name>,
    /// Affinity client sets, compared whole.
    sets: BTreeSet<Name>,
    /// Keys of the shared sets.
    keys: BTreeMap<Name, BTreeSet<Tuple>>,
    /// Whether each shared set whose keys were touched existed before the update: backends maps
    /// come and go with their pick chains.
    existed: BTreeMap<Name, bool>,
}

impl Touched {
    pub fn new(family: Family) -> Touched {
        Touched {
            before: Ruleset::empty(family),
            chains: BTreeSet::new(),
            sets: BTreeSet::new(),
            keys: BTreeMap::new(),
            existed: BTreeMap::new(),
        }
    }

    /// The transaction from `before` to the same parts of `rules` (the plan after the update).
    pub fn transaction(self, rules: &Ruleset) -> Transaction {
        let mut after = Ruleset::empty(rules.family);
        for name in &self.chains {
            if let Some(chain) = rules.chains.get(name) {
                after.chains.insert(name.clone(), chain.clone());
            }
        }
        for name in &self.sets {
            if let Some(set) = rules.sets.get(name) {
                after.sets.insert(name.clone(), set.clone());
            }
        }
        for (name, keys) in &self.keys {
            // A backends map deleted by this update is absent after it.
            let Some(set) = rules.sets.get(name) else {
                continue;
            };
            let mut part = Set::new(set.decl.clone());
            for key in keys {
                if let Some(e) = set.elements.get(key) {
                    part.elements_mut().insert(*key, e.clone());
                }
            }
            after.sets.insert(name.clone(), part);
        }
        diff(&self.before, &after)
    }
}

/// One family's plan and bookkeeping, open for one port's change.
pub(super) struct Patch<'a> {
    pub rules: &'a mut Ruleset,
    pub books: &'a mut FamilyBooks,
    pub family: IpFamily,
    pub cfg: &'a ModeConfig,
    pub node: &'a NodeContext,
    pub touched: &'a mut Touched,
}

impl Patch<'_> {
    /// Takes `state`'s contribution `c` out of the plan.
    pub fn remove(&mut self, state: Option<&Arc<ServicePortState>>, c: &Contribution) {
        let Some(state) = state else { return };
        let mut others = Others::default();
        // Backends keys first, while this port's frontends are still claimed.
        let (backends, claimed): (Vec<_>, Vec<_>) =
            c.elements.iter().partition(|(set, _)| c.is_backends(set));
        for (set, elements) in backends.into_iter().chain(claimed) {
            let is_backends = c.is_backends(set);
            for key in elements.keys() {
                self.touch_key(set, key);
                let holder = if is_backends {
                    self.backends_holder(set, key, state, &mut others)
                } else {
                    self.books.claims.remove(set, key, state)
                };
                let next = match holder {
                    Holder::Same => continue,
                    Holder::None => None,
                    Holder::Next(next) => {
                        let theirs = others.of(&next, |s| self.contribution(s));
                        Some(theirs.elements[set][key].clone())
                    }
                };
                let elements = self.set(set).elements_mut();
                match next {
                    Some(e) => elements.insert(*key, e),
                    None => elements.remove(key),
                };
            }
        }
        for (name, pick) in &c.picks {
            self.touch_chain(name);
            let count = self.books.picks.get_mut(name).expect("counted");
            *count -= 1;
            if *count == 0 {
                self.books.picks.remove(name);
                self.rules.chains.remove(name);
                // Its elements went with the ports above; the map goes with the chain.
                self.first_touch(&pick.map);
                self.rules.sets.remove(&pick.map);
            }
        }
        for name in c.affinity_chains.keys() {
            self.touch_chain(name);
            self.rules.chains.remove(name);
            self.books.seeds.remove(name);
        }
        for name in c.affinity_sets.keys() {
            self.touch_set(name);
            self.rules.sets.remove(name);
        }
    }

    /// Puts `state`'s contribution `c` into the plan.
    pub fn add(&mut self, state: Option<&Arc<ServicePortState>>, c: &Contribution) {
        let Some(state) = state else { return };
        // Pick chains and their maps first: the elements below go into those maps.
        for (name, pick) in &c.picks {
            self.touch_chain(name);
            let count = self.books.picks.entry(name.clone()).or_default();
            *count += 1;
            if *count == 1 {
                self.rules.chains.insert(name.clone(), pick.chain.clone());
                self.first_touch(&pick.map);
                self.rules.sets.insert(pick.map.clone(), pick.decl.clone());
            }
        }
        for (set, elements) in c.elements.iter().filter(|(s, _)| !c.is_backends(s)) {
            for (key, element) in elements {
                self.touch_key(set, key);
                if self.books.claims.add(set, *key, state) {
                    self.set(set).elements_mut().insert(*key, element.clone());
                }
            }
        }
        // Backends keys last, once this port's frontends are claimed.
        let mut others = Others::default();
        for (set, elements) in c.elements.iter().filter(|(s, _)| c.is_backends(s)) {
            for (key, element) in elements {
                self.touch_key(set, key);
                if self.holds_backends_key(set, key, state, &mut others) {
                    self.set(set).elements_mut().insert(*key, element.clone());
                }
            }
        }
        for (name, chain) in &c.affinity_chains {
            self.touch_chain(name);
            self.rules.chains.insert(name.clone(), chain.clone());
        }
        for (name, seed) in &c.seeds {
            self.books.seeds.insert(name.clone(), seed.clone());
        }
        for (name, set) in &c.affinity_sets {
            self.touch_set(name);
            self.rules.sets.insert(name.clone(), set.clone());
        }
    }

    /// Who holds backends key `key` of `set` once `leaving` stops adding it: the first other
    /// claimant of its frontend (in snapshot order) that adds the key too. `Same` when one
    /// before `leaving` does: its data stays.
    fn backends_holder(
        &self,
        set: &Name,
        key: &Tuple,
        leaving: &ServicePortState,
        others: &mut Others,
    ) -> Holder {
        let (treatments, frontend) = claims::frontend_of(key);
        let mut before = true;
        for port in self.books.claims.claimants(&treatments, &frontend) {
            if port.port.name == leaving.port.name {
                before = false;
                continue;
            }
            let theirs = others.of(port, |s| self.contribution(s));
            if theirs
                .elements
                .get(set)
                .is_some_and(|e| e.contains_key(key))
            {
                return if before {
                    Holder::Same
                } else {
                    Holder::Next(port.clone())
                };
            }
        }
        Holder::None
    }

    /// Whether `joining`, which adds backends key `key` of `set`, comes first among the
    /// claimants of its frontend that add it (its frontend's claim is already recorded).
    fn holds_backends_key(
        &self,
        set: &Name,
        key: &Tuple,
        joining: &ServicePortState,
        others: &mut Others,
    ) -> bool {
        let (treatments, frontend) = claims::frontend_of(key);
        let claimants = self.books.claims.claimants(&treatments, &frontend);
        debug_assert!(claimants.iter().any(|p| p.port.name == joining.port.name));
        for port in claimants {
            if port.port.name == joining.port.name {
                return true;
            }
            let theirs = others.of(port, |s| self.contribution(s));
            if theirs
                .elements
                .get(set)
                .is_some_and(|e| e.contains_key(key))
            {
                return false;
            }
        }
        true
    }

    fn contribution(&self, state: &ServicePortState) -> Contribution {
        let np = self.books.node_ports.as_ref().expect("set by replan");
        contribution::of(state, self.family, self.cfg, self.node, np)
    }

    fn set(&mut self, name: &Name) -> &mut Set {
        self.rules
            .sets
            .get_mut(name)
            .expect("declared by the skeleton")
    }

    fn touch_key(&mut self, set: &Name, key: &Tuple) {
        self.first_touch(set);
        let keys = self
            .touched
            .keys
            .get_mut(set)
            .expect("first_touch records it");
        if !keys.insert(*key) {
            return;
        }
        let Some(before) = self.touched.before.sets.get_mut(set) else {
            return; // created by this update: nothing was there before
        };
        if let Some(e) = self.rules.sets.get(set).and_then(|s| s.elements.get(key)) {
            before.elements_mut().insert(*key, e.clone());
        }
    }

    /// The first time a shared set is touched in this update, records whether it existed (and
    /// its declaration), before anything in it changes.
    fn first_touch(&mut self, set: &Name) {
        if self.touched.existed.contains_key(set) {
            return;
        }
        let current = self.rules.sets.get(set);
        self.touched.existed.insert(set.clone(), current.is_some());
        self.touched.keys.entry(set.clone()).or_default();
        if let Some(current) = current {
            self.touched
                .before
                .sets
                .insert(set.clone(), Set::new(current.decl.clone()));
        }
    }

    fn touch_chain(&mut self, name: &Name) {
        if self.touched.chains.insert(name.clone())
            && let Some(chain) = self.rules.chains.get(name)
        {
            self.touched
                .before
                .chains
                .insert(name.clone(), chain.clone());
        }
    }

    fn touch_set(&mut self, name: &Name) {
        if self.touched.sets.insert(name.clone())
            && let Some(set) = self.rules.sets.get(name)
        {
            self.touched.before.sets.insert(name.clone(), set.clone());
        }
    }
}

/// Other ports' contributions, planned once per update of one port: a contested key asks for
/// them, and most keys are contested by nobody.
#[derive(Default)]
struct Others(BTreeMap<usize, Contribution>);

impl Others {
    fn of(
        &mut self,
        port: &Arc<ServicePortState>,
        plan: impl FnOnce(&ServicePortState) -> Contribution,
    ) -> &Contribution {
        self.0
            .entry(Arc::as_ptr(port) as usize)
            .or_insert_with(|| plan(port))
    }
}
