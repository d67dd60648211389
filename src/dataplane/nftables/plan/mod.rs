//! Snapshot + [`ModeConfig`] → the desired [`Ruleset`] of one family.
//!
//! Pure and total: no I/O, no clock, no error. The same snapshot and settings always give the
//! same ruleset. The layout it builds is described in the parent module; the work is split by
//! concept (which node addresses accept NodePorts is the shared node policy's:
//! [`crate::dataplane::node::node_ports`]):
//! - `skeleton`: the fixed chains and sets every table has, with their rules;
//! - `service`: one service port's frontends, endpoint lists, no-endpoint verdicts, firewall and
//!   hairpin elements;
//! - `affinity`: the chain and dynamic sets of an endpoint list with ClientIP affinity;
//! - `order`: pending elements into key order, once per set;
//! - `planner`: the [`Planner`], which keeps the last plan and re-plans only the service ports
//!   that changed (with `contribution`, one port planned on its own, and `claims`, which port
//!   owns an element key several ports add).
//!
//! Work is proportional to the snapshot (one pass over the service ports), and a change to one
//! service port changes only that port's elements, plus at most a pick chain for a new
//! endpoint count.

mod affinity;
mod claims;
mod contribution;
mod order;
mod patch;
mod planner;
mod service;
mod skeleton;

#[cfg(test)]
mod planner_props;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use super::mode_config::ModeConfig;
use super::names::{self, FrontendKind, ListKind};
use crate::cluster::{IpFamily, NodeContext, Snapshot};
use crate::nft::Name;
use crate::nft::ruleset::{
    Chain, Comment, Data, Element, Family, Field, Match, Rule, Ruleset, Statement, Tuple,
};

use crate::dataplane::nft_table::skeleton::IP_KEY;
use crate::dataplane::node::{NodePortMatch, node_ports};
pub use planner::{Planner, Update};

/// The desired table of one family.
#[doc(alias = "syncProxyRules")]
pub fn plan(snapshot: &Snapshot, cfg: &ModeConfig, family: IpFamily) -> Ruleset {
    let mut b = Builder::new(family, cfg, &snapshot.node);
    skeleton::add(&mut b, &snapshot.service_cidrs);
    for state in snapshot.ports.values() {
        if let Some(view) = state.family(family) {
            service::add(&mut b, &state.port, view);
        }
    }
    b.finish()
}

/// The ruleset being built, with what the parts need to share.
struct Builder<'a> {
    rules: Ruleset,
    family: IpFamily,
    cfg: &'a ModeConfig,
    node: &'a NodeContext,
    node_ports: NodePortMatch,
    /// Derived affinity names and the seed each was made from, to catch hash collisions.
    affinity_seeds: BTreeMap<Name, String>,
    /// Elements per set in the order added; sorted into the sets once at the end, which is far
    /// cheaper than a hundred thousand ordered-map inserts.
    pending: BTreeMap<Name, Vec<(Tuple, Element)>>,
    /// Planning one service port alone (`contribution`): no skeleton, so sets are undeclared.
    alone: bool,
}

impl<'a> Builder<'a> {
    fn new(family: IpFamily, cfg: &'a ModeConfig, node: &'a NodeContext) -> Builder<'a> {
        Builder {
            rules: Ruleset::empty(Family::of(family)),
            family,
            cfg,
            node,
            node_ports: node_ports::resolve(&cfg.node.node_ports, node, family, false),
            affinity_seeds: BTreeMap::new(),
            pending: BTreeMap::new(),
            alone: false,
        }
    }

    /// Moves the pending elements into their sets: sorted by key, the first added kept.
    fn finish(mut self) -> Ruleset {
        for (name, elements) in std::mem::take(&mut self.pending) {
            let set = self.rules.sets.get_mut(&name).expect("declared");
            set.elements = std::sync::Arc::new(order::sorted(elements));
        }
        self.rules
    }

    fn push(&mut self, chain: &'static str, matches: Vec<Match>, statements: Vec<Statement>) {
        self.rules.push(chain, matches, statements);
    }

    /// Adds an element to a set the skeleton declared. A key already present keeps its first
    /// data: service ports are visited in order, so the first owner wins deterministically.
    fn element(&mut self, set: &Name, key: Tuple, data: Data, comment: Option<&Comment>) {
        debug_assert!(
            self.alone || self.rules.sets.contains_key(set),
            "set {set} is declared by the skeleton"
        );
        let element = Element {
            data,
            comment: comment.cloned(),
        };
        match self.pending.get_mut(set) {
            Some(v) => v.push((key, element)),
            None => {
                self.pending.insert(set.clone(), vec![(key, element)]);
            }
        }
    }

    /// Makes sure the pick chain for `count` endpoints of this kind exists, with the backends
    /// map it reads (see [`names::backends`] for why each chain has its own).
    fn pick_chain(&mut self, frontend: FrontendKind, list: ListKind, count: u32) -> Name {
        let name = names::pick(frontend, list, count);
        if !self.rules.chains.contains_key(&name) {
            let mut key = match frontend {
                FrontendKind::Ip => IP_KEY.to_vec(),
                FrontendKind::NodePort => vec![Field::L4Proto, Field::Dport],
            };
            key.push(Field::Random(count));
            let rule = Rule::new(
                vec![],
                vec![Statement::DnatMap {
                    key,
                    map: names::backends(frontend, list, count),
                }],
            );
            self.rules.chains.insert(
                name.clone(),
                Chain {
                    base: None,
                    rules: vec![rule],
                },
            );
            self.rules.sets.insert(
                names::backends(frontend, list, count),
                skeleton::backends_decl(frontend),
            );
        }
        name
    }
}
