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

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;

use super::adopt::Saved;
use super::names::ChainName;
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
    /// Rules written per table, indexed by [`Table::index`]
    /// (`sync_proxy_rules_iptables_last{table}`).
    pub rules_per_table: [usize; Table::ALL.len()],
}

impl Script {
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// Rules this input writes into our chains of `table`.
    pub fn rules_written(&self, table: Table) -> usize {
        self.rules_per_table[table.index()]
    }

    fn count_rules(&mut self, table: Table, n: usize) {
        self.rules += n;
        self.rules_per_table[table.index()] += n;
    }
}

/// Full sync: from what `iptables-save` showed (per table) to `want`.
pub fn full(want: &Ruleset, saved: &BTreeMap<Table, Saved>) -> Script {
    let mut s = Script::default();
    let empty = Saved::default();
    for table in Table::ALL {
        let kernel = saved.get(&table).unwrap_or(&empty);
        let wanted: HashSet<&str> = want.chains(table).map(|(n, _)| n.as_str()).collect();
        let stale: Vec<&String> = kernel
            .chains
            .iter()
            .filter(|c| super::names::ours(c) && !wanted.contains(c.as_str()))
            .collect();
        let _ = writeln!(s.text, "*{}", table.as_str());
        for (name, _) in want.chains(table) {
            let _ = writeln!(s.text, ":{name} - [0:0]");
        }
        for name in &stale {
            let _ = writeln!(s.text, ":{name} - [0:0]");
        }
        s.chains += wanted.len() + stale.len();
        for (name, rules) in want.chains(table) {
            for r in rules {
                append_line(&mut s.text, name.as_str(), r, want.family);
            }
            s.count_rules(table, rules.len());
        }
        // Rules in chains not ours (built-in or another program's) that jump to a stale chain:
        // deleted, or the chain could not be.
        let stale_set: BTreeSet<&str> = stale.iter().map(|c| c.as_str()).collect();
        for (owner, line) in &kernel.rules {
            if !super::names::ours(owner)
                && super::adopt::jump_target(line).is_some_and(|t| stale_set.contains(t))
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
        let mut changed: Vec<(&ChainName, &Vec<Rule>)> = new
            .iter()
            .filter(|(name, rules)| old.get(*name) != Some(*rules))
            .collect();
        let mut gone: Vec<&ChainName> = old.keys().filter(|n| !new.contains_key(*n)).collect();
        if table == Table::Nat {
            port_changes(last, want, &mut changed, &mut gone);
        }
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
            s.count_rules(table, rules.len());
        }
        for name in &gone {
            let _ = writeln!(s.text, "-X {name}");
        }
        s.text.push_str("COMMIT\n");
    }
    s
}

/// The service ports' own chains that changed or went away. A port whose rules are the same
/// shared value in both plans (reused by the planner) is skipped without a look at its rules.
fn port_changes<'a>(
    last: &'a Ruleset,
    want: &'a Ruleset,
    changed: &mut Vec<(&'a ChainName, &'a Vec<Rule>)>,
    gone: &mut Vec<&'a ChainName>,
) {
    static EMPTY: BTreeMap<ChainName, Vec<Rule>> = BTreeMap::new();
    for (name, new) in &want.ports {
        let old = match last.ports.get(name) {
            Some(old) if Arc::ptr_eq(old, new) => continue,
            Some(old) => &old.chains,
            None => &EMPTY,
        };
        changed.extend(
            new.chains
                .iter()
                .filter(|(chain, rules)| old.get(*chain) != Some(*rules)),
        );
        gone.extend(old.keys().filter(|c| !new.chains.contains_key(*c)));
    }
    for (name, old) in &last.ports {
        if !want.ports.contains_key(name) {
            gone.extend(old.chains.keys());
        }
    }
}
