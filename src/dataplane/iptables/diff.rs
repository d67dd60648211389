//! What to send: the `iptables-restore --noflush` input that turns the kernel's state (read back,
//! on a full sync) or the last applied rules (on a partial sync) into the desired rules.
//!
//! Pure. With `--noflush`, declaring a chain (`:NAME - [0:0]`) creates it or flushes it, and
//! leaves every other chain alone. So:
//! - a full sync declares and fills every chain we want, declares and deletes (`-X`) chains of
//!   ours the kernel holds but we no longer want (after deleting any rule elsewhere that jumps
//!   to one), and inserts the jumps from built-in chains that are missing;
//! - a partial sync declares and fills only the chains whose rules changed, and deletes the
//!   chains that went away. A chain that jumps to a deleted chain changed too, so it was
//!   flushed first. Jumps in built-in chains are left alone.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::names::ChainName;
use super::parse::Saved;
use super::render::{append_line, jumps};
use super::ruleset::{Rule, Ruleset, Table};

/// One restore input, with counts for the report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Script {
    pub text: String,
    /// Chains declared (created, flushed or about to be deleted).
    pub chains: usize,
    /// Rules written.
    pub rules: usize,
}

impl Script {
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }
}

/// Full sync: from what `iptables-save` showed (per table) to `want`.
pub fn full(want: &Ruleset, saved: &BTreeMap<Table, Saved>) -> Script {
    let mut s = Script::default();
    let empty = Saved::default();
    for table in Table::ALL {
        let kernel = saved.get(&table).unwrap_or(&empty);
        let chains = &want.table(table).chains;
        let stale: Vec<&String> = kernel
            .chains
            .iter()
            .filter(|c| {
                super::names::ours(c)
                    && ChainName::parse(c).is_none_or(|n| !chains.contains_key(&n))
            })
            .collect();
        let _ = writeln!(s.text, "*{}", table.as_str());
        for name in chains.keys() {
            let _ = writeln!(s.text, ":{name} - [0:0]");
        }
        for name in &stale {
            let _ = writeln!(s.text, ":{name} - [0:0]");
        }
        s.chains += chains.len() + stale.len();
        for (name, rules) in chains {
            for r in rules {
                append_line(&mut s.text, name.as_str(), r, want.family);
            }
            s.rules += rules.len();
        }
        // Rules in chains not ours (built-in or another program's) that jump to a stale chain:
        // deleted, or the chain could not be.
        let stale_set: BTreeSet<&str> = stale.iter().map(|c| c.as_str()).collect();
        for (owner, line) in &kernel.rules {
            if !super::names::ours(owner)
                && super::parse::jump_target(line).is_some_and(|t| stale_set.contains(t))
            {
                let _ = writeln!(s.text, "-D{}", &line[2..]);
            }
        }
        for name in &stale {
            let _ = writeln!(s.text, "-X {name}");
        }
        let present: BTreeSet<&str> = kernel.rules.iter().map(|(_, l)| l.as_str()).collect();
        jumps(&mut s.text, want, table, |line| !present.contains(line));
        s.text.push_str("COMMIT\n");
    }
    s
}

/// Partial sync: from the rules last applied to `want`; empty when nothing changed.
pub fn partial(last: &Ruleset, want: &Ruleset) -> Script {
    let mut s = Script::default();
    for table in Table::ALL {
        let old = &last.table(table).chains;
        let new = &want.table(table).chains;
        let changed: Vec<(&ChainName, &Vec<Rule>)> = new
            .iter()
            .filter(|(name, rules)| old.get(*name) != Some(*rules))
            .collect();
        let gone: Vec<&ChainName> = old.keys().filter(|n| !new.contains_key(*n)).collect();
        if changed.is_empty() && gone.is_empty() {
            continue;
        }
        let _ = writeln!(s.text, "*{}", table.as_str());
        for (name, _) in &changed {
            let _ = writeln!(s.text, ":{name} - [0:0]");
        }
        for name in &gone {
            let _ = writeln!(s.text, ":{name} - [0:0]");
        }
        s.chains += changed.len() + gone.len();
        for (name, rules) in &changed {
            for r in *rules {
                append_line(&mut s.text, name.as_str(), r, want.family);
            }
            s.rules += rules.len();
        }
        for name in &gone {
            let _ = writeln!(s.text, "-X {name}");
        }
        s.text.push_str("COMMIT\n");
    }
    s
}
