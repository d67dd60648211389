//! Snapshot + [`ModeConfig`] → the desired [`Ruleset`] of one family.
//!
//! Pure and total: no I/O, no clock, no error; the same snapshot and settings always give the
//! same ruleset. The work is split by concept:
//! - `skeleton`: the fixed chains, their rules, and the jumps from the built-in chains;
//! - `node_ports`: which destinations accept NodePorts;
//! - `service`: one service port's capture rules, its `KUBE-SVC/SVL/EXT/FW` chains and the
//!   filter rules for frontends without endpoints;
//! - `endpoints`: the endpoint choice inside `KUBE-SVC/SVL` (`recent` affinity, `statistic`
//!   probabilities) and the `KUBE-SEP` chains.
//!
//! Endpoint choice per kind of traffic is the cluster model's (`Selection`); this only lays it
//! out as upstream's chains.

mod endpoints;
mod node_ports;
mod service;
mod skeleton;

#[cfg(test)]
pub(crate) mod tests;

use super::mode_config::{Local, ModeConfig};
use super::names::ChainName;
use super::ruleset::{Rule, Ruleset, Table};
use crate::cluster::{IpFamily, NodeContext, Snapshot};

pub use node_ports::NodePortMatch;

/// Above this many endpoints (all service ports, this family) per-endpoint comments are left
/// out, as upstream's "large cluster mode" does: they are a large share of the rule text.
pub const LARGE_CLUSTER_ENDPOINTS: usize = 1000;

/// The desired rules of one family.
#[doc(alias = "syncProxyRules")]
pub fn plan(snapshot: &Snapshot, cfg: &ModeConfig, family: IpFamily) -> Ruleset {
    let endpoints: usize = snapshot
        .ports
        .values()
        .filter_map(|s| s.family(family))
        .map(|v| v.endpoints.len())
        .sum();
    let mut b = Builder {
        rules: Ruleset::empty(family),
        family,
        cfg,
        node: &snapshot.node,
        local: cfg.detect_local.resolve(family, &snapshot.node.pod_cidrs),
        node_ports: node_ports::resolve(cfg, &snapshot.node, family),
        large: endpoints > LARGE_CLUSTER_ENDPOINTS,
    };
    skeleton::begin(&mut b);
    for state in snapshot.ports.values() {
        if let Some(view) = state.family(family) {
            service::add(&mut b, &state.port, view);
        }
    }
    skeleton::finish(&mut b);
    b.rules
}

/// The desired rules of both families, IPv4 first.
pub fn plan_all(snapshot: &Snapshot, cfg: &ModeConfig) -> [Ruleset; 2] {
    IpFamily::ALL.map(|f| plan(snapshot, cfg, f))
}

/// The ruleset being built, with what the parts share.
struct Builder<'a> {
    rules: Ruleset,
    family: IpFamily,
    cfg: &'a ModeConfig,
    node: &'a NodeContext,
    local: Local,
    node_ports: NodePortMatch,
    /// Large-cluster mode: no per-endpoint comments.
    large: bool,
}

impl Builder<'_> {
    /// Appends a rule to a chain, creating the chain.
    fn push(&mut self, table: Table, chain: &ChainName, rule: Rule) {
        self.chain(table, chain).push(rule);
    }

    /// Declares a chain (empty until rules are pushed) and returns its rules.
    fn chain(&mut self, table: Table, chain: &ChainName) -> &mut Vec<Rule> {
        let chains = &mut self.rules.table_mut(table).chains;
        if !chains.contains_key(chain) {
            chains.insert(chain.clone(), Vec::new());
        }
        chains.get_mut(chain).expect("just inserted")
    }
}
