//! (last applied, desired) → the smallest [`Transaction`] that turns one into the other.
//!
//! Pure. Elements are compared one by one (a changed element is deleted and re-added: the
//! kernel refuses to overwrite map data), chains by their rule lists (a changed chain is flushed
//! and refilled; chains in this layout hold a handful of rules), sets and base chains by their
//! declaration (a changed declaration means re-creating the object). Work is linear in the two
//! rulesets; the transaction is proportional to what differs.
//!
//! Operations are ordered so the kernel accepts them in one batch: new chains first (rules and
//! verdict elements may name them), then flushes and element deletions (which drop references),
//! then deletions of sets and chains, then new sets, elements and rules.

use std::sync::Arc;

use super::Name;
use super::ruleset::{
    BaseChain, Element, Elements, Family, Match, Rule, Ruleset, SetDecl, Statement, Tuple,
};

/// One batch for one table, in the order it must be sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transaction {
    pub family: Family,
    pub ops: Vec<Op>,
}

impl Transaction {
    /// Nothing to send: the kernel already matches.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Kernel objects touched (each element, rule, chain and set counts once).
    pub fn operations(&self) -> usize {
        self.ops
            .iter()
            .map(|op| match op {
                Op::AddElements { elements, .. } => elements.len(),
                Op::DeleteElements { keys, .. } => keys.len(),
                _ => 1,
            })
            .sum()
    }
}

/// One operation on our table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Creates the table if it is missing; harmless when it exists.
    AddTable,
    DeleteTable,
    AddChain {
        name: Name,
        base: Option<BaseChain>,
    },
    FlushChain(Name),
    DeleteChain(Name),
    AddRule {
        chain: Name,
        rule: Rule,
    },
    AddSet {
        name: Name,
        decl: SetDecl,
    },
    DeleteSet(Name),
    AddElements {
        set: Name,
        elements: Added,
    },
    DeleteElements {
        set: Name,
        keys: Vec<Tuple>,
    },
}

/// The elements an [`Op::AddElements`] adds, in key order: those that differ, copied, or every
/// element of a set the kernel does not hold yet, shared with the ruleset they come from (a
/// cold start's hundreds of thousands of elements are not copied into the transaction).
#[derive(Clone, Debug)]
pub enum Added {
    Some(Vec<(Tuple, Element)>),
    All(Arc<Elements>),
}

impl Added {
    pub fn len(&self) -> usize {
        match self {
            Added::Some(v) => v.len(),
            Added::All(all) => all.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each key and element, in key order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&Tuple, &Element)> + Clone {
        let (some, all) = match self {
            Added::Some(v) => (v.as_slice(), None),
            Added::All(all) => (&[][..], Some(all.iter())),
        };
        AddedIter {
            some: some.iter(),
            all,
        }
    }
}

/// Equal when they add the same elements, however they hold them.
impl PartialEq for Added {
    fn eq(&self, other: &Added) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Added {}

impl From<Vec<(Tuple, Element)>> for Added {
    fn from(v: Vec<(Tuple, Element)>) -> Added {
        Added::Some(v)
    }
}

#[derive(Clone)]
struct AddedIter<'a> {
    some: std::slice::Iter<'a, (Tuple, Element)>,
    all: Option<std::collections::btree_map::Iter<'a, Tuple, Element>>,
}

impl<'a> Iterator for AddedIter<'a> {
    type Item = (&'a Tuple, &'a Element);

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.all {
            Some(all) => all.next(),
            None => self.some.next().map(|(k, e)| (k, e)),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.all.as_ref().map_or(self.some.len(), |a| a.len());
        (n, Some(n))
    }
}

impl ExactSizeIterator for AddedIter<'_> {}

/// The transaction that makes `last` into `want`. Both must be of the same family.
pub fn diff(last: &Ruleset, want: &Ruleset) -> Transaction {
    debug_assert_eq!(last.family, want.family);
    let mut d = Ops::default();

    // Sets whose declaration changed are re-created; rules naming them are re-added so the
    // kernel sees no reference to a deleted set.
    let recreated_sets: Vec<&Name> = want
        .sets
        .iter()
        .filter(|(name, set)| last.sets.get(*name).is_some_and(|l| l.decl != set.decl))
        .map(|(name, _)| name)
        .collect();
    let names_recreated = |rules: &[Rule]| {
        rules
            .iter()
            .any(|r| referenced_sets(r).any(|s| recreated_sets.contains(&s)))
    };

    for (name, chain) in &want.chains {
        match last.chains.get(name) {
            None => d.add_chains.push(Op::AddChain {
                name: name.clone(),
                base: chain.base,
            }),
            Some(old) if old.base != chain.base => {
                if !old.rules.is_empty() {
                    d.flushes.push(Op::FlushChain(name.clone()));
                }
                d.delete_chains.push(Op::DeleteChain(name.clone()));
                d.readd_chains.push(Op::AddChain {
                    name: name.clone(),
                    base: chain.base,
                });
            }
            Some(old) if old.rules == chain.rules && !names_recreated(&chain.rules) => continue,
            Some(old) if !old.rules.is_empty() => d.flushes.push(Op::FlushChain(name.clone())),
            Some(_) => {}
        }
        d.add_rules.extend(chain.rules.iter().map(|r| Op::AddRule {
            chain: name.clone(),
            rule: r.clone(),
        }));
    }
    for (name, chain) in &last.chains {
        if !want.chains.contains_key(name) {
            if !chain.rules.is_empty() {
                d.flushes.push(Op::FlushChain(name.clone()));
            }
            d.delete_chains.push(Op::DeleteChain(name.clone()));
        }
    }

    for (name, set) in &want.sets {
        let old = last.sets.get(name).filter(|l| l.decl == set.decl);
        if old.is_none() {
            if last.sets.contains_key(name) {
                d.delete_sets.push(Op::DeleteSet(name.clone()));
            }
            d.add_sets.push(Op::AddSet {
                name: name.clone(),
                decl: set.decl.clone(),
            });
        }
        let added = match old {
            // All of them (shared, not copied) into a set the kernel creates or holds empty.
            None => Added::All(set.elements.clone()),
            Some(o) if o.elements.is_empty() => Added::All(set.elements.clone()),
            // The very elements planned (a large set read back by key, found as planned).
            Some(o) if Arc::ptr_eq(&o.elements, &set.elements) => Added::Some(Vec::new()),
            Some(o) => {
                let (deleted, added) = elements(&o.elements, &set.elements);
                if !deleted.is_empty() {
                    d.delete_elements.push(Op::DeleteElements {
                        set: name.clone(),
                        keys: deleted,
                    });
                }
                Added::Some(added)
            }
        };
        if !added.is_empty() {
            d.add_elements.push(Op::AddElements {
                set: name.clone(),
                elements: added,
            });
        }
    }
    for name in last.sets.keys() {
        if !want.sets.contains_key(name) {
            d.delete_sets.push(Op::DeleteSet(name.clone()));
        }
    }
    d.finish(want.family)
}

/// A transaction that replaces whatever table the kernel has with `want`, atomically: create
/// (so the delete cannot fail), delete, then build from scratch. For adopting a table whose
/// content is unknown when no parsed dump is available; see the module doc of
/// `dataplane::nftables`.
pub fn rebuild(want: &Ruleset) -> Transaction {
    let mut t = diff(&Ruleset::empty(want.family), want);
    t.ops.splice(0..0, [Op::AddTable, Op::DeleteTable]);
    t
}

/// Keys to delete and elements to add, in one merge pass over both ordered maps.
fn elements(last: &Elements, want: &Elements) -> (Vec<Tuple>, Vec<(Tuple, Element)>) {
    let mut deleted = Vec::new();
    let mut added = Vec::new();
    let mut a = last.iter().peekable();
    let mut b = want.iter().peekable();
    loop {
        match (a.peek(), b.peek()) {
            (None, None) => break,
            (Some((k, _)), None) => {
                deleted.push(**k);
                a.next();
            }
            (None, Some((k, e))) => {
                added.push((**k, (*e).clone()));
                b.next();
            }
            (Some((ka, ea)), Some((kb, eb))) => match ka.cmp(kb) {
                std::cmp::Ordering::Less => {
                    deleted.push(**ka);
                    a.next();
                }
                std::cmp::Ordering::Greater => {
                    added.push((**kb, (*eb).clone()));
                    b.next();
                }
                std::cmp::Ordering::Equal => {
                    if ea != eb {
                        deleted.push(**ka);
                        added.push((**kb, (*eb).clone()));
                    }
                    a.next();
                    b.next();
                }
            },
        }
    }
    (deleted, added)
}

/// Every set or map a rule names.
pub fn referenced_sets(rule: &Rule) -> impl Iterator<Item = &Name> {
    let from_matches = rule.matches.iter().filter_map(|m| match m {
        Match::InSet { set, .. } => Some(set),
        _ => None,
    });
    let from_statements = rule.statements.iter().filter_map(|s| match s {
        Statement::RememberSource(set) => Some(set),
        Statement::DnatMap { map, .. } | Statement::VerdictMap { map, .. } => Some(map),
        _ => None,
    });
    from_matches.chain(from_statements)
}

/// Operations by phase, concatenated in the order the kernel needs.
#[derive(Default)]
struct Ops {
    add_chains: Vec<Op>,
    flushes: Vec<Op>,
    delete_elements: Vec<Op>,
    delete_sets: Vec<Op>,
    delete_chains: Vec<Op>,
    readd_chains: Vec<Op>,
    add_sets: Vec<Op>,
    add_elements: Vec<Op>,
    add_rules: Vec<Op>,
}

impl Ops {
    fn finish(self, family: Family) -> Transaction {
        let ops: Vec<Op> = [
            self.add_chains,
            self.flushes,
            self.delete_elements,
            self.delete_sets,
            self.delete_chains,
            self.readd_chains,
            self.add_sets,
            self.add_elements,
            self.add_rules,
        ]
        .into_iter()
        .flatten()
        .collect();
        if ops.is_empty() {
            return Transaction { family, ops };
        }
        let mut all = Vec::with_capacity(ops.len() + 1);
        all.push(Op::AddTable);
        all.extend(ops);
        Transaction { family, ops: all }
    }
}
