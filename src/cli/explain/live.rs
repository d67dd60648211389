//! `explain` on a node: which rules to trace (planned from the objects, or read from this
//! node's kernel), wired from the configuration. Shared by the `explain` command, the running
//! proxy's `/debug/explain` and `/debug/status`.

use super::{Explanation, Planned, Request, Rules, RulesFrom, explain, kernel};
use crate::cluster::{IpFamily, Snapshot};
use crate::config::{Config, ProxyMode};
use crate::dataplane::node::NodePolicy;
use crate::dataplane::{iptables, ipvs, nftables};

/// The rules the configured mode plans for `snapshot`, with the node policy its tracer reads.
pub fn plan_on_node(config: &Config, snapshot: &Snapshot) -> Result<(Planned, NodePolicy), String> {
    Ok(match config.mode {
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
    })
}

/// One family's rules as this node's kernel holds them, and where they differ from the plan.
#[derive(Debug)]
pub struct Read {
    /// Our nftables table: the whole dataplane in nftables mode, the helper rules in ipvs mode
    /// (`None`: not in the kernel).
    table: Option<nftables::Ruleset>,
    empty: nftables::Ruleset,
    /// IPVS mode: the planned virtual services as the kernel holds them.
    services: Option<ipvs::Desired>,
    /// Missing, extra or different objects, one line each, or the repair script's first lines.
    pub drift: Vec<String>,
}

impl Read {
    /// The rules read, for the tracer.
    pub fn rules(&self) -> Rules<'_> {
        let table = self.table.as_ref().unwrap_or(&self.empty);
        match &self.services {
            Some(desired) => Rules::Ipvs {
                desired,
                tables: table,
            },
            None => Rules::Nftables(table),
        }
    }
}

/// Reads `family`'s rules from this node's kernel; `None` in iptables mode, whose rules are
/// not read back yet (they are traced as planned).
pub fn read_family(
    config: &Config,
    planned: &Planned,
    family: IpFamily,
) -> Result<Option<Read>, String> {
    let table_family = nftables::ruleset::Family::of(family);
    let read_table = || kernel::read_nftables(config.nftables_encoder, None, table_family);
    let empty = nftables::Ruleset::empty(table_family);
    match planned.rules(family) {
        Rules::Iptables(_) => Ok(None),
        Rules::Nftables(want) => {
            let table = read_table()?;
            let drift = kernel::drift(table.as_ref(), want);
            Ok(Some(Read {
                table,
                empty,
                services: None,
                drift,
            }))
        }
        Rules::Ipvs { desired, tables } => {
            let (services, mut drift) =
                kernel::ipvs_as_read(desired, &kernel::read_ipvs(None, family)?);
            let table = read_table()?;
            drift.extend(kernel::drift(table.as_ref(), tables));
            Ok(Some(Read {
                table,
                empty,
                services: Some(services),
                drift,
            }))
        }
    }
}

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
    let (planned, node) = plan_on_node(config, snapshot)?;
    let read = if offline {
        None
    } else {
        read_family(config, &planned, family)?
    };
    match read {
        None => explain(
            snapshot,
            &node,
            planned.rules(family),
            RulesFrom::Planned,
            request,
        )
        .map_err(|e| e.to_string()),
        Some(read) => {
            let mut e = explain(snapshot, &node, read.rules(), RulesFrom::Kernel, request)
                .map_err(|e| e.to_string())?;
            e.drift.extend(read.drift);
            Ok(e)
        }
    }
}
