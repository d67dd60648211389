//! The [`Planner`]: keeps the last plan and, for the service ports that changed, re-plans only
//! those and yields the transaction from the last plan to the new one.
//!
//! Pure: no I/O, no clock. Its rulesets always equal [`plan_all`](crate::dataplane::nftables::plan_all) of the last
//! snapshot it was given, and its transactions equal [`diff`] of the previous rulesets and the
//! new ones (property-tested), so callers may switch between the two freely. A one-endpoint
//! change costs work proportional to that service port, not to the cluster: each changed port's
//! old and new contributions are planned alone (`contribution`), its element keys re-claimed
//! (`claims`: the first claimant in snapshot order keeps a key, as in the full plan), pick
//! chains counted, and the transaction is the diff of just the touched chains, sets and keys.
//!
//! Everything is re-planned on the first call, when the node changed (its addresses and pod
//! CIDRs feed the skeleton and firewall rules; its zone every selection), and in the
//! astronomically rare case of two affinity seeds hashing alike (the full plan salts them in
//! snapshot order, which planning one port alone cannot reproduce).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use ipnet::IpNet;

use super::claims::Claims;
use super::contribution::{self, Contribution};
use super::patch::{Patch, Touched};
use crate::cluster::{Changes, IpFamily, NodeContext, ServicePortName, ServicePortState, Snapshot};
use crate::dataplane::nftables::mode_config::ModeConfig;
use crate::dataplane::nftables::plan_all;
use crate::dataplane::node::{NodePortMatch, node_ports};
use crate::nft::Name;
use crate::nft::diff::{Transaction, diff};
use crate::nft::ruleset::{Family, Ruleset};

pub(super) type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// The incremental nftables planner. See the module doc.
#[doc(alias = "syncProxyRules")]
#[derive(Debug)]
pub struct Planner {
    cfg: ModeConfig,
    /// The current plan of both families, IPv4 first.
    rules: [Ruleset; 2],
    books: Option<Books>,
}

/// What one call to [`Planner::update`] produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Update {
    /// Per family, IPv4 first: what turns the previous plan into the new one.
    pub transactions: [Transaction; 2],
    /// Everything was re-planned (first call, node change, or an affinity hash collision).
    pub full: bool,
}

/// The bookkeeping behind the current plan.
#[derive(Debug)]
struct Books {
    node: Arc<NodeContext>,
    /// The Service CIDRs the skeleton was planned with.
    service_cidrs: Arc<[IpNet]>,
    ports: Map<ServicePortName, Arc<ServicePortState>>,
    families: [FamilyBooks; 2],
    /// False when affinity names collided: per-port planning cannot reproduce the salting.
    exact: bool,
}

#[derive(Debug, Default)]
pub(super) struct FamilyBooks {
    pub node_ports: Option<NodePortMatch>,
    pub claims: Claims,
    /// Pick chain → how many service ports dispatch to it.
    pub picks: Map<Name, u32>,
    /// Affinity chain → its seed.
    pub seeds: Map<Name, String>,
}

/// One changed service port: its states and contributions (per family) before and after.
struct Change {
    old: Option<Arc<ServicePortState>>,
    new: Option<Arc<ServicePortState>>,
    before: [Contribution; 2],
    after: [Contribution; 2],
}

impl Planner {
    /// A planner with nothing planned yet; the first [`update`](Planner::update) plans
    /// everything. Settings are fixed for its life: new settings need a new planner.
    pub fn new(cfg: ModeConfig) -> Planner {
        Planner {
            cfg,
            rules: IpFamily::ALL.map(|f| Ruleset::empty(Family::of(f))),
            books: None,
        }
    }

    /// The current plan of both families, IPv4 first: `plan_all` of the last snapshot.
    pub fn rulesets(&self) -> &[Ruleset; 2] {
        &self.rules
    }

    /// Plans `snapshot`, given what changed since the snapshot of the previous call. `changes`
    /// must name every service port that differs (the tracker's [`Changes`] for consecutive
    /// snapshots; merge them when snapshots were skipped).
    pub fn update(&mut self, snapshot: &Snapshot, changes: &Changes) -> Update {
        let incremental = self.books.as_ref().is_some_and(|b| {
            b.exact
                && !changes.node_topology_changed
                && (Arc::ptr_eq(&b.node, &snapshot.node) || *b.node == *snapshot.node)
                && b.service_cidrs == snapshot.service_cidrs
        });
        if incremental && let Some(t) = self.incremental(snapshot, &changes.ports) {
            return Update {
                transactions: t,
                full: false,
            };
        }
        self.replan(snapshot)
    }

    /// Plans `snapshot` from scratch, with the transactions from the previous plan.
    pub fn replan(&mut self, snapshot: &Snapshot) -> Update {
        let want = plan_all(snapshot, &self.cfg);
        let transactions = [0, 1].map(|i| diff(&self.rules[i], &want[i]));
        self.rules = want;
        self.keep_books(snapshot);
        Update {
            transactions,
            full: true,
        }
    }

    /// Plans `snapshot` from scratch for a caller that diffs against the kernel instead of the
    /// previous plan: the previous plan is dropped first, so the two are never held at once.
    pub fn plan_afresh(&mut self, snapshot: &Snapshot) {
        self.rules = IpFamily::ALL.map(|f| Ruleset::empty(Family::of(f)));
        self.books = None;
        self.rules = plan_all(snapshot, &self.cfg);
        self.keep_books(snapshot);
    }

    /// The books of the plan just made from `snapshot`.
    fn keep_books(&mut self, snapshot: &Snapshot) {
        let mut books = Books {
            node: snapshot.node.clone(),
            service_cidrs: snapshot.service_cidrs.clone(),
            ports: snapshot
                .ports
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            families: Default::default(),
            exact: true,
        };
        for (i, family) in IpFamily::ALL.into_iter().enumerate() {
            let fb = &mut books.families[i];
            let np = node_ports::resolve(&self.cfg.node.node_ports, &snapshot.node, family, false);
            for state in snapshot.ports.values() {
                let c = contribution::of(state, family, &self.cfg, &snapshot.node, &np);
                for (set, elements) in &c.elements {
                    if c.is_backends(set) {
                        continue;
                    }
                    for key in elements.keys() {
                        fb.claims.add(set, *key, state);
                    }
                }
                for name in c.picks.into_keys() {
                    *fb.picks.entry(name).or_default() += 1;
                }
                for (name, seed) in c.seeds {
                    match fb.seeds.get(&name) {
                        Some(other) if *other != seed => books.exact = false,
                        _ => {
                            fb.seeds.insert(name, seed);
                        }
                    }
                }
            }
            fb.node_ports = Some(np);
        }
        self.books = Some(books);
    }

    /// Re-plans the changed ports; `None` (nothing changed yet) when an affinity name would
    /// collide, which only a full plan resolves.
    fn incremental(
        &mut self,
        snapshot: &Snapshot,
        changed: &BTreeSet<ServicePortName>,
    ) -> Option<[Transaction; 2]> {
        let books = self.books.as_mut().expect("checked by update");
        let node = &snapshot.node;
        let cfg = &self.cfg;
        let contributions = |state: Option<&Arc<ServicePortState>>| {
            [0, 1].map(|i| match state {
                Some(s) => {
                    let np = books.families[i]
                        .node_ports
                        .as_ref()
                        .expect("set by replan");
                    contribution::of(s, IpFamily::ALL[i], cfg, node, np)
                }
                None => Contribution::default(),
            })
        };
        let mut work = Vec::new();
        for name in changed {
            let old = books.ports.get(name).cloned();
            let new = snapshot.ports.get(name).cloned();
            if let (Some(o), Some(n)) = (&old, &new)
                && (Arc::ptr_eq(o, n) || o == n)
            {
                continue;
            }
            let before = contributions(old.as_ref());
            let after = contributions(new.as_ref());
            work.push(Change {
                old,
                new,
                before,
                after,
            });
        }
        if !seeds_stay_unique(books, &work) {
            return None;
        }
        let mut touched = IpFamily::ALL.map(|f| Touched::new(Family::of(f)));
        for change in &work {
            for (i, t) in touched.iter_mut().enumerate() {
                let mut patch = Patch {
                    rules: &mut self.rules[i],
                    books: &mut books.families[i],
                    family: IpFamily::ALL[i],
                    cfg,
                    node,
                    touched: t,
                };
                patch.remove(change.old.as_ref(), &change.before[i]);
                patch.add(change.new.as_ref(), &change.after[i]);
            }
            let name = change.new.as_ref().or(change.old.as_ref());
            let name = name.expect("one side exists").port.name.clone();
            match &change.new {
                Some(n) => books.ports.insert(name, n.clone()),
                None => books.ports.remove(&name),
            };
        }
        let rules = &self.rules;
        let [v4, v6] = touched;
        Some([v4.transaction(&rules[0]), v6.transaction(&rules[1])])
    }
}

/// Whether the changed ports' affinity chains keep names no other seed holds.
fn seeds_stay_unique(books: &Books, work: &[Change]) -> bool {
    (0..2).all(|i| {
        let mut seeds: BTreeMap<&Name, Option<&String>> = BTreeMap::new();
        for c in work {
            for name in c.before[i].seeds.keys() {
                seeds.insert(name, None);
            }
        }
        work.iter()
            .flat_map(|c| &c.after[i].seeds)
            .all(|(name, seed)| {
                let held = match seeds.get(name) {
                    Some(h) => *h,
                    None => books.families[i].seeds.get(name),
                };
                let ok = held.is_none_or(|h| h == seed);
                seeds.insert(name, Some(seed));
                ok
            })
    })
}
