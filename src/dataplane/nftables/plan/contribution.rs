//! What one service port adds to one family's table, planned on its own.
//!
//! Pure. The [`Planner`](super::Planner) re-plans a changed service port without the rest of
//! the snapshot: the same `service::add` the full plan runs, into a builder without the
//! skeleton, so a port's part of the table is exactly what the full plan adds for it. The
//! pieces are kept apart by how they are shared: element keys may be added by several ports
//! (the first in snapshot order keeps its data), pick chains are shared by every list of the
//! same kind and length, and affinity chains and sets belong to their port alone.

use std::collections::BTreeMap;

use super::{Builder, order, service};
use crate::cluster::{IpFamily, NodeContext, ServicePortState};
use crate::dataplane::nftables::mode_config::ModeConfig;
use crate::dataplane::node::NodePortMatch;
use crate::nft::Name;
use crate::nft::ruleset::{Chain, Element, Family, Ruleset, Set, Statement, Tuple};

/// One service port's part of one family's table.
#[derive(Debug, Default)]
pub(super) struct Contribution {
    /// Per set, the elements this port adds, in key order; of keys it adds twice, the first.
    pub elements: BTreeMap<Name, BTreeMap<Tuple, Element>>,
    /// Pick chains it dispatches to, each with the backends map it reads; shared with every
    /// other list of the same kind and length, and created and deleted together.
    pub picks: BTreeMap<Name, Pick>,
    /// Its affinity chains, named by the hash of their seed (never salted here).
    pub affinity_chains: BTreeMap<Name, Chain>,
    /// The client sets of its affinity chains.
    pub affinity_sets: BTreeMap<Name, Set>,
    /// Affinity chain name → the seed it was hashed from, to detect collisions.
    pub seeds: BTreeMap<Name, String>,
}

impl Contribution {
    /// Whether `set` is the backends map of one of its pick chains: its keys are not claimed
    /// (see `claims`).
    pub fn is_backends(&self, set: &Name) -> bool {
        self.picks.values().any(|pick| pick.map == *set)
    }
}

/// A pick chain and its backends map (declaration only: elements are claimed like any other).
#[derive(Debug, Clone)]
pub(super) struct Pick {
    pub chain: Chain,
    pub map: Name,
    pub decl: Set,
}

/// The contribution of `state` in `family`; empty when the port has no such family.
pub(super) fn of(
    state: &ServicePortState,
    family: IpFamily,
    cfg: &ModeConfig,
    node: &NodeContext,
    node_ports: &NodePortMatch,
) -> Contribution {
    let Some(view) = state.family(family) else {
        return Contribution::default();
    };
    let mut b = Builder {
        rules: Ruleset::empty(Family::of(family)),
        family,
        cfg,
        node,
        node_ports: node_ports.clone(),
        affinity_seeds: BTreeMap::new(),
        pending: BTreeMap::new(),
        alone: true,
    };
    service::add(&mut b, &state.port, view);
    let elements = std::mem::take(&mut b.pending)
        .into_iter()
        .map(|(set, pending)| (set, order::sorted(pending)))
        .collect();
    let mut chains = b.rules.chains;
    let affinity_chains = b
        .affinity_seeds
        .keys()
        .filter_map(|name| chains.remove_entry(name))
        .collect();
    let mut sets = b.rules.sets;
    let picks = chains
        .into_iter()
        .map(|(name, chain)| {
            let map = pick_map(&chain).expect("a pick chain reads a backends map");
            let decl = sets.remove(&map).expect("declared with its pick chain");
            (name, Pick { chain, map, decl })
        })
        .collect();
    Contribution {
        elements,
        picks,
        affinity_chains,
        affinity_sets: sets,
        seeds: b.affinity_seeds,
    }
}

/// The backends map a pick chain's single rule reads.
fn pick_map(chain: &Chain) -> Option<Name> {
    chain
        .rules
        .iter()
        .flat_map(|r| &r.statements)
        .find_map(|s| match s {
            Statement::DnatMap { map, .. } => Some(map.clone()),
            _ => None,
        })
}
