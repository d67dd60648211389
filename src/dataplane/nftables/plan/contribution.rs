//! What one service port adds to one family's table, planned on its own.
//!
//! Pure. The [`Planner`](super::Planner) re-plans a changed service port without the rest of
//! the snapshot: the same `service::add` the full plan runs, into a builder without the
//! skeleton, so a port's part of the table is exactly what the full plan adds for it. The
//! pieces are kept apart by how they are shared: element keys may be added by several ports
//! (the first in snapshot order keeps its data), pick chains are shared by every list of the
//! same kind and length, and affinity chains and sets belong to their port alone.

use std::collections::BTreeMap;

use super::node_ports::NodePortMatch;
use super::{Builder, order, service};
use crate::cluster::{IpFamily, NodeContext, ServicePortState};
use crate::dataplane::nftables::mode_config::ModeConfig;
use crate::dataplane::nftables::names::Name;
use crate::dataplane::nftables::ruleset::{Chain, Element, Family, Ruleset, Set, Tuple};

/// One service port's part of one family's table.
#[derive(Debug, Default)]
pub(super) struct Contribution {
    /// Per set, the elements this port adds, in key order; of keys it adds twice, the first.
    pub elements: BTreeMap<Name, BTreeMap<Tuple, Element>>,
    /// Pick chains it dispatches to; shared with every other list of the same kind and length.
    pub picks: BTreeMap<Name, Chain>,
    /// Its affinity chains, named by the hash of their seed (never salted here).
    pub affinity_chains: BTreeMap<Name, Chain>,
    /// The client sets of its affinity chains.
    pub affinity_sets: BTreeMap<Name, Set>,
    /// Affinity chain name → the seed it was hashed from, to detect collisions.
    pub seeds: BTreeMap<Name, String>,
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
    let mut picks = b.rules.chains;
    let affinity_chains = b
        .affinity_seeds
        .keys()
        .filter_map(|name| picks.remove_entry(name))
        .collect();
    Contribution {
        elements,
        picks,
        affinity_chains,
        affinity_sets: b.rules.sets,
        seeds: b.affinity_seeds,
    }
}
