//! `explain` on a node: which rules to trace (planned from the objects, or read from this
//! node's kernel), wired from the configuration. Shared by the `explain` command, the running
//! proxy's `/debug/explain` and `/debug/status`. The configured mode plans and reads through
//! its inspection ([`crate::dataplane::inspect`]); nothing here depends on which mode it is.

use super::{Explanation, Plan, Read, Request, RulesFrom, affinity_reason, explain, others};
use crate::causes::one_line;
use crate::cluster::{IpFamily, Snapshot};
use crate::config::Config;
use crate::dataplane::inspect::{self, Destination, table};
use crate::dataplane::modes;
use crate::dataplane::node::NodePolicy;

/// Why a packet could not be explained on this node.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The mode's rules could not be planned or read.
    #[error(transparent)]
    Inspect(#[from] inspect::Error),
    #[error(transparent)]
    Explain(#[from] super::Error),
}

/// The rules the configured mode plans for `snapshot`, with the node policy its tracer reads.
/// On a live node (`offline` false) a mode plans over the host's addresses where its sync
/// does; offline the Node object's addresses stand in for them.
pub fn plan_on_node(
    config: &Config,
    snapshot: &Snapshot,
    offline: bool,
) -> Result<(Box<dyn Plan>, NodePolicy), inspect::Error> {
    modes::of(config.mode)
        .inspect()
        .plan(config, snapshot, offline)
}

/// Reads `family`'s rules from this node's kernel, through the reader the mode's applier
/// adopts with; for one `packet` only what its path needs, where the mode reads less for it.
pub fn read_family(
    config: &Config,
    snapshot: &Snapshot,
    planned: &dyn Plan,
    family: IpFamily,
    packet: Option<&Destination>,
) -> Result<Box<dyn Read>, inspect::Error> {
    planned.read(config, snapshot, family, packet)
}

/// Explains `request` over `snapshot` in the configured mode: the rules planned for the
/// objects when `offline` (`explain --manifests`); otherwise what the kernel holds, with its
/// drift from the plan.
pub fn explain_on_node(
    config: &Config,
    snapshot: &Snapshot,
    request: &Request,
    offline: bool,
) -> Result<Explanation, Error> {
    let family = IpFamily::of(&request.to.ip());
    let (planned, node) = plan_on_node(config, snapshot, offline)?;
    if offline {
        return Ok(explain(
            snapshot,
            &node,
            planned.rules(family),
            RulesFrom::Planned,
            request,
        )?);
    }
    let destination = Destination {
        protocol: request.protocol,
        to: request.to,
    };
    let mut read = read_family(
        config,
        snapshot,
        planned.as_ref(),
        family,
        Some(&destination),
    )?;
    let mut unread = Vec::new();
    // The client's affinity entries, so the trace is its path now. What the kernel remembers
    // is a detail of the answer: state that cannot be read leaves the entry unknown, not the
    // explanation.
    let packet = super::packet(snapshot, &node, request);
    let remembered = match packet
        .as_ref()
        .map_err(ToString::to_string)
        .and_then(|p| read.remember(config, snapshot, p).map_err(|e| one_line(&e)))
    {
        Ok(r) => r,
        Err(why) => {
            unread.push(format!("affinity entries not looked up: {why}"));
            Default::default()
        }
    };
    let mut e = explain(snapshot, &node, read.rules(), RulesFrom::Kernel, request)?;
    if let (Some(endpoints), Some(a)) = (&remembered.endpoints, e.affinity.as_mut()) {
        a.entry = Some(!endpoints.is_empty());
        let why = affinity_reason(e.packet.source, endpoints, a.timeout_seconds);
        e.reasons.push(why);
    }
    unread.extend(remembered.unread);
    e.reasons.extend(remembered.later);
    if let Ok(packet) = &packet {
        e.reasons.extend(read.draining(packet));
    }
    // Other tables' base chains see the packet too, before or after ours: named where the
    // mode's rules are ordered among them.
    let listed = match read.beside() {
        None => Ok(None),
        Some(ours) => {
            table::base_chains(config.nftables_encoder, None).map(|c| c.map(|c| (ours, c)))
        }
    };
    match listed {
        Ok(Some((ours, chains))) => {
            let from_node = e.packet.origin == "node";
            e.other_chains = others::on_path(ours, &chains, family, from_node);
        }
        Ok(None) => {}
        Err(why) => unread.push(format!(
            "other tables' chains not listed: {}",
            one_line(&why)
        )),
    }
    e.reasons.extend(unread);
    e.drift.extend(read.drift().iter().cloned());
    Ok(e)
}
