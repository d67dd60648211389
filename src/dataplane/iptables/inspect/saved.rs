//! What `explain` and `status` read of a live iptables node, and how they tell drift.
//!
//! The reading is the applier's own: `iptables-save` of the flavour (nft or legacy) the
//! dataplane chooses (with [`IptablesCommand::detect_saved`], the choice `detect` makes, whose
//! reading of that flavour is the one used), split by [`adopt::parse`], then typed by
//! [`parse`](iptables::parse) for the tracer. Drift is what the applier would send: the
//! restore input that turns what was read into the plan ([`diff::partial`], with the missing
//! jumps as a full sync inserts them), shown in short as the nftables mode shows its repair.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::cluster::IpFamily;
use crate::dataplane::inspect::Error;
use crate::dataplane::iptables::adopt::{self, Saved};
use crate::dataplane::iptables::ruleset::Table;
use crate::dataplane::iptables::{
    self, Backend as _, Flavour, IptablesCommand, diff, names, render,
};

use super::scoped::{self, Packet};

/// One family's chains of ours as the kernel holds them.
#[derive(Debug)]
pub struct IptablesRead {
    /// Our chains and jumps; `None` when our chains are not there.
    pub rules: Option<iptables::Ruleset>,
    /// What differs from the plan, one line each, or the repair's first lines.
    pub drift: Vec<String>,
}

/// Reads `family`'s rules with the flavour the dataplane would choose, in the named network
/// namespace or the caller's. With a `packet` (one `explain`) on an iptables-nft node, only the
/// chains its path can take are read ([`scoped`]); otherwise (`status`, legacy) the whole save.
pub fn read_iptables(
    netns: Option<&str>,
    family: IpFamily,
    planned: &iptables::Ruleset,
    packet: Option<&Packet>,
) -> Result<IptablesRead, Error> {
    let prefix: Vec<String> = match netns {
        None => Vec::new(),
        Some(name) => ["ip", "netns", "exec", name].map(String::from).to_vec(),
    };
    if let Some(packet) = packet
        && IptablesCommand::nft_for_sure(&prefix) == Some(true)
    {
        let backend = match netns {
            None => IptablesCommand::new(Flavour::Nft),
            Some(name) => IptablesCommand::in_netns(Flavour::Nft, name),
        };
        let read = scoped::read(planned, packet, |table, chain| {
            backend
                .list_chain_if_present(family, table, chain)
                .map_err(|e| Error::kernel("reading our iptables chains (iptables-nft)", e))
        })?;
        return Ok(as_read(
            &adopt::parse(&read.save),
            planned,
            Some(&read.asked),
        ));
    }
    // The flavour is chosen from both flavours' save output; the chosen one's is read.
    let (flavour, saved) = IptablesCommand::detect_saved(&prefix);
    let save = match saved.into_iter().nth(family.index()).flatten() {
        Some(text) => text,
        // Run it again for the tool's own error.
        None => {
            let mut backend = match netns {
                None => IptablesCommand::new(flavour),
                Some(name) => IptablesCommand::in_netns(flavour, name),
            };
            backend.save(family).map_err(|e| {
                let doing = format!(
                    "reading our iptables chains (iptables-{})",
                    flavour.as_str()
                );
                Error::kernel(doing, e)
            })?
        }
    };
    Ok(as_read(&adopt::parse(&save), planned, None))
}

/// What was saved, typed for the tracer, with its drift from `planned` (cut to the chains
/// `asked`, when only those were read).
pub fn as_read(
    saved: &BTreeMap<Table, Saved>,
    planned: &iptables::Ruleset,
    asked: Option<&BTreeMap<Table, BTreeSet<String>>>,
) -> IptablesRead {
    if !adopt::has_chain(saved, Table::Nat, names::SERVICES) {
        return IptablesRead {
            rules: None,
            drift: vec![format!(
                "our chains are not in the kernel (no nat {}): nothing of ours handles this \
                 family",
                names::SERVICES
            )],
        };
    }
    let firewall = planned
        .chain(Table::Filter, &names::ChainName::fixed(names::FIREWALL))
        .is_some();
    let parsed = iptables::parse::parse(planned.family, saved, firewall);
    let mut drift: Vec<String> = parsed
        .unknown
        .iter()
        .map(|l| format!("a rule of ours we do not write (not traced): {l}"))
        .collect();
    drift.extend(repair(&parsed.ruleset, planned, asked));
    IptablesRead {
        rules: Some(parsed.ruleset),
        drift,
    }
}

/// The restore input that brings `kernel` to `planned` (over the chains `asked`, when given),
/// in short; empty when they agree.
fn repair(
    kernel: &iptables::Ruleset,
    planned: &iptables::Ruleset,
    asked: Option<&BTreeMap<Table, BTreeSet<String>>>,
) -> Vec<String> {
    let want = match asked {
        Some(asked) => scoped::cut(planned, asked),
        None => iptables::parse::canonical(planned),
    };
    let mut script = diff::partial(kernel, &want).text;
    for table in Table::ALL {
        let present: BTreeSet<String> = kernel
            .table(table)
            .jumps
            .iter()
            .map(|(b, r)| render::jump_line(b.as_str(), r, kernel.family))
            .collect();
        let mut missing = String::new();
        render::jumps(&mut missing, &want, table, |line| !present.contains(line));
        if !missing.is_empty() {
            let _ = write!(script, "*{}\n{missing}COMMIT\n", table.as_str());
        }
    }
    let lines: Vec<&str> = script.lines().filter(|l| *l != "COMMIT").collect();
    crate::dataplane::inspect::table::shortened(
        &lines,
        &format!(
            "{} lines of iptables-restore input would bring the kernel to the plan (a sync \
             pending, or another program changed our chains):",
            lines.len()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::iptables::ModeConfig;
    use crate::testing::snapshots::{node, snapshot, svc};

    /// `planned` as `iptables-save` prints it: chains declared, then the jumps and rules.
    fn saved(planned: &iptables::Ruleset) -> BTreeMap<Table, Saved> {
        let want = iptables::parse::canonical(planned);
        let mut text = String::new();
        for table in Table::ALL {
            let _ = writeln!(text, "*{}", table.as_str());
            for (name, _) in want.chains(table) {
                let _ = writeln!(text, ":{name} - [0:0]");
            }
            for (b, r) in &want.table(table).jumps {
                render::append_line(&mut text, b.as_str(), r, want.family);
            }
            for (name, rules) in want.chains(table) {
                for r in rules {
                    render::append_line(&mut text, name.as_str(), r, want.family);
                }
            }
            text.push_str("COMMIT\n");
        }
        adopt::parse(&text)
    }

    #[test]
    fn the_kernel_holding_the_plan_has_no_drift_and_a_change_is_its_repair() {
        let cfg = ModeConfig::default();
        let before = snapshot(node(), vec![svc("default/web", "10.96.0.10", 80)]);
        let after = snapshot(
            node(),
            vec![svc("default/web", "10.96.0.10", 80).ep("10.244.1.2", 8080, "node-a")],
        );
        let old = iptables::plan(&before, &cfg, IpFamily::V4);
        let new = iptables::plan(&after, &cfg, IpFamily::V4);
        let same = as_read(&saved(&new), &new, None);
        assert!(same.rules.is_some());
        assert_eq!(same.drift, Vec::<String>::new());
        let d = as_read(&saved(&old), &new, None).drift;
        assert!(d[0].contains("would bring the kernel to the plan"), "{d:?}");
        assert!(d.iter().any(|l| l.contains("10.244.1.2:8080")), "{d:?}");
    }

    #[test]
    fn a_missing_jump_is_drift_and_missing_chains_say_so() {
        let cfg = ModeConfig::default();
        let snap = snapshot(
            node(),
            vec![svc("default/web", "10.96.0.10", 80).ep("10.244.1.2", 8080, "node-a")],
        );
        let plan = iptables::plan(&snap, &cfg, IpFamily::V4);
        let mut kernel = saved(&plan);
        kernel
            .get_mut(&Table::Nat)
            .unwrap()
            .rules
            .retain(|(owner, _)| owner != "PREROUTING");
        let read = as_read(&kernel, &plan, None);
        assert!(
            read.drift
                .iter()
                .any(|l| l.starts_with("-I PREROUTING 1") && l.contains("KUBE-SERVICES")),
            "{:?}",
            read.drift
        );
        let none = as_read(&BTreeMap::new(), &plan, None);
        assert!(none.rules.is_none());
        assert!(none.drift[0].contains("our chains are not in the kernel"));
    }
}
