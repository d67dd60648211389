//! `explain` on a node: which rules to trace (planned from the objects, or read from this
//! node's kernel), wired from the configuration. Shared by the `explain` command and the
//! running proxy's `/debug/explain`.

use super::{Explanation, Planned, Request, Rules, RulesFrom, explain, kernel};
use crate::cluster::{IpFamily, Snapshot};
use crate::config::{Config, ProxyMode};
use crate::dataplane::{iptables, ipvs, nftables};

/// Explains `request` over `snapshot` in the configured mode: the rules planned for the
/// objects when `offline` (`explain --manifests`), and in iptables mode; otherwise (nftables
/// and ipvs mode on a live node) what the kernel holds, with its drift from the plan.
pub fn explain_on_node(
    config: &Config,
    snapshot: &Snapshot,
    request: &Request,
    offline: bool,
) -> Result<Explanation, String> {
    let family = IpFamily::of(&request.to.ip());
    let (planned, node) = match config.mode {
        ProxyMode::Nftables => {
            let mode = nftables::ModeConfig::new(config).map_err(|e| e.to_string())?;
            (Planned::nftables(snapshot, &mode), mode.node)
        }
        ProxyMode::Iptables => {
            let mode = iptables::ModeConfig::new(config).map_err(|e| e.to_string())?;
            (Planned::iptables(snapshot, &mode), mode.node)
        }
        ProxyMode::Ipvs => {
            let mode = ipvs::ModeConfig::new(config).map_err(|e| e.to_string())?;
            (Planned::ipvs(snapshot, &mode), mode.node)
        }
    };
    let live = !offline && config.mode != ProxyMode::Iptables;
    if !live {
        return explain(
            snapshot,
            &node,
            planned.rules(family),
            RulesFrom::Planned,
            request,
        )
        .map_err(|e| e.to_string());
    }
    // Our nftables table: the whole dataplane in nftables mode, the helper rules in ipvs mode.
    let table = nftables::ruleset::Family::of(family);
    let read = kernel::read_nftables(config.nftables_encoder, None, table)?;
    let empty = nftables::Ruleset::empty(table);
    let (e, mut drift) = match planned.rules(family) {
        Rules::Nftables(want) => {
            let e = explain(
                snapshot,
                &node,
                Rules::Nftables(read.as_ref().unwrap_or(&empty)),
                RulesFrom::Kernel,
                request,
            );
            (e, kernel::drift(read.as_ref(), want))
        }
        Rules::Ipvs { desired, tables } => {
            let (services, mut drift) =
                kernel::ipvs_as_read(desired, &kernel::read_ipvs(None, family)?);
            let rules = Rules::Ipvs {
                desired: &services,
                tables: read.as_ref().unwrap_or(&empty),
            };
            let e = explain(snapshot, &node, rules, RulesFrom::Kernel, request);
            drift.extend(kernel::drift(read.as_ref(), tables));
            (e, drift)
        }
        Rules::Iptables(_) => unreachable!("iptables mode is traced as planned"),
    };
    let mut e = e.map_err(|e| e.to_string())?;
    e.drift.append(&mut drift);
    Ok(e)
}
