//! Snapshot + [`ModeConfig`] → the desired [`Ruleset`] of one family.
//!
//! Pure and total: no I/O, no clock, no error; the same snapshot and settings always give the
//! same ruleset. The work is split by concept (which destinations accept NodePorts is the shared
//! node policy's: [`crate::dataplane::node::node_ports`], with loopback for IPv4):
//! - `skeleton`: the fixed chains, their rules, and the jumps from the built-in chains;
//! - `service`: one service port's capture rules, its `KUBE-SVC/SVL/EXT/FW` chains and the
//!   filter rules for frontends without endpoints;
//! - `endpoints`: the endpoint choice inside `KUBE-SVC/SVL` (`recent` affinity, `statistic`
//!   probabilities) and the `KUBE-SEP` chains.
//!
//! Endpoint choice per kind of traffic is the cluster model's (`Selection`); this only lays it
//! out as upstream's chains.

mod endpoints;
mod service;
mod skeleton;

#[cfg(test)]
pub(crate) mod tests;

use super::mode_config::ModeConfig;
use super::names::ChainName;
use crate::dataplane::node::Local;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::ruleset::{Context, PortRules, Rule, Ruleset, Table};
use crate::cluster::{IpFamily, NodeContext, Snapshot};

use crate::dataplane::node::{NodePortMatch, node_ports};

/// Above this many endpoints (all service ports, this family) per-endpoint comments are left
/// out, as upstream's "large cluster mode" does: they are a large share of the rule text.
pub const LARGE_CLUSTER_ENDPOINTS: usize = 1000;

/// The desired rules of one family.
#[doc(alias = "syncProxyRules")]
pub fn plan(snapshot: &Snapshot, cfg: &ModeConfig, family: IpFamily) -> Ruleset {
    plan_reusing(snapshot, cfg, family, None)
}

/// The same as [`plan`], taking each service port's rules from `previous` (a plan of the same
/// family and settings) where the port, the node and large-cluster mode are unchanged: a sync
/// after a small change plans that change only, plus the fixed chains.
pub fn plan_reusing(
    snapshot: &Snapshot,
    cfg: &ModeConfig,
    family: IpFamily,
    previous: Option<&Ruleset>,
) -> Ruleset {
    let endpoints: usize = snapshot
        .ports
        .values()
        .filter_map(|s| s.family(family))
        .map(|v| v.endpoints.len())
        .sum();
    let context = Context {
        node: snapshot.node.clone(),
        large: endpoints > LARGE_CLUSTER_ENDPOINTS,
    };
    let reusable = previous.filter(|p| p.family == family && p.context == context);
    let mut rules = Ruleset::empty(family);
    rules.context = context;
    let mut b = Builder {
        rules,
        family,
        cfg,
        node: &snapshot.node,
        local: cfg
            .node
            .detect_local
            .resolve(family, &snapshot.node.pod_cidrs),
        node_ports: node_ports::resolve(
            &cfg.node.node_ports,
            &snapshot.node,
            family,
            cfg.localhost_node_ports,
        ),
        large: endpoints > LARGE_CLUSTER_ENDPOINTS,
        port: None,
    };
    skeleton::begin(&mut b);
    for (name, state) in snapshot.ports.iter() {
        let Some(view) = state.family(family) else {
            continue;
        };
        let same = |r: &&Arc<PortRules>| Arc::ptr_eq(&r.source, state) || r.source == *state;
        let port = match reusable.and_then(|p| p.ports.get(name)).filter(same) {
            Some(r) => r.clone(),
            None => {
                b.port = Some(PortRules {
                    source: state.clone(),
                    chains: BTreeMap::new(),
                    shared: Vec::new(),
                });
                service::add(&mut b, &state.port, view);
                Arc::new(b.port.take().expect("set above"))
            }
        };
        for (table, chain, rule) in &port.shared {
            b.rules
                .table_mut(*table)
                .chains
                .entry(chain.clone())
                .or_default()
                .push(rule.clone());
        }
        b.rules.ports.insert(name.clone(), port);
    }
    skeleton::finish(&mut b);
    b.rules
}

/// The ruleset being built, with what the parts share.
struct Builder<'a> {
    rules: Ruleset,
    cfg: &'a ModeConfig,
    node: &'a NodeContext,
    family: IpFamily,
    /// How this family recognises local traffic.
    local: Local,
    node_ports: NodePortMatch,
    /// Large-cluster mode: no per-endpoint comments.
    large: bool,
    /// The service port being planned, which receives its own chains and the rules it adds
    /// to fixed chains.
    port: Option<PortRules>,
}

impl Builder<'_> {
    /// Appends a rule to a chain, creating the chain.
    fn push(&mut self, table: Table, chain: &ChainName, rule: Rule) {
        if let Some(port) = self.port.as_mut()
            && !chain.is_per_service()
        {
            port.shared.push((table, chain.clone(), rule));
            return;
        }
        self.chain(table, chain).push(rule);
    }

    /// Declares a chain (empty until rules are pushed) and returns its rules: a per-service
    /// chain in the port being planned, else a fixed chain.
    fn chain(&mut self, table: Table, chain: &ChainName) -> &mut Vec<Rule> {
        if let Some(port) = self.port.as_mut()
            && chain.is_per_service()
        {
            return port.chains.entry(chain.clone()).or_default();
        }
        self.rules
            .table_mut(table)
            .chains
            .entry(chain.clone())
            .or_default()
    }
}
