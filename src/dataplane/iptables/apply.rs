//! Applying, the iptables mode as the sync runner drives it: plan both families, check the canaries,
//! send a full or partial restore input per family, report.
//!
//! What the kernel holds is "last applied": replaced only after both families' inputs were
//! accepted. A sync is full when the runner asks (start-up, the periodic resync, after a
//! failure), when nothing was applied yet, after a refused input, or when a canary chain is
//! gone; then the kernel is read back with `iptables-save`. Other syncs send only the chains
//! that changed. Nothing here reads a clock or a registry.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::adopt;
use super::backend::{self, Backend, IptablesCommand};
use super::diff::{self, Script};
use super::mode_config::ModeConfig;
use super::names;
use super::plan::plan_reusing;
use super::ruleset::{Ruleset, Table};
use crate::cluster::{Changes, IpFamily, Snapshot};

use crate::dataplane::monitor::Drift;
use crate::dataplane::tool;
use crate::dataplane::{Dataplane, FamilyReport, IptablesRules, RuleCounts, SyncError, SyncReport};

const MODE: &str = "iptables";

/// Lines of the input shown on each side of the one the tool named.
const CONTEXT_LINES: usize = 2;

/// See the module doc.
#[doc(alias = "proxier")]
pub struct IptablesDataplane<B = IptablesCommand> {
    cfg: ModeConfig,
    backend: B,
    /// The families programmed: both, unless [`Self::keep_usable_families`] left one out.
    families: Vec<IpFamily>,
    /// Each family's last plan, in `families` order; the next plan reuses its unchanged ports.
    plan: Option<Vec<Ruleset>>,
    /// The kernel holds `plan`: the last sync succeeded. False at start-up and after a failure.
    in_kernel: bool,
    /// The nf_tables monitor's record of outside changes (nft flavour only): one pending makes
    /// the next sync full, at once, instead of at the next canary check.
    drift: Option<Arc<Drift>>,
}

impl<B: Backend> IptablesDataplane<B> {
    pub fn new(cfg: ModeConfig, backend: B) -> IptablesDataplane<B> {
        IptablesDataplane {
            cfg,
            backend,
            families: IpFamily::ALL.to_vec(),
            plan: None,
            in_kernel: false,
            drift: None,
        }
    }

    /// Has outside changes reported by the nf_tables monitor repaired by the next sync, and
    /// tells the backend so it records its restores as ours. Only for the nft flavour:
    /// iptables-legacy rules are not in nf_tables.
    pub fn watched_by(&mut self, drift: Arc<Drift>) {
        self.backend.watched_by(drift.clone());
        self.drift = Some(drift);
    }

    /// The families this dataplane programs.
    pub fn families(&self) -> &[IpFamily] {
        &self.families
    }

    /// Leaves out the families whose tools cannot program this host (no `ip6tables`, no IPv6
    /// nat table), as upstream does, with a warning naming the family and the reason. Errs
    /// when no family is left: then the mode cannot run at all.
    pub fn keep_usable_families(&mut self) -> Result<(), NoUsableFamily> {
        let mut reasons = Vec::new();
        let mut usable = Vec::new();
        for &family in &self.families {
            match backend::check_family(&mut self.backend, family) {
                Ok(()) => usable.push(family),
                Err(reason) => {
                    tracing::warn!(family = %family, reason = %reason,
                        "iptables cannot program this family on this host; leaving it out");
                    reasons.push((family, reason));
                }
            }
        }
        if usable.is_empty() {
            return Err(NoUsableFamily { reasons });
        }
        self.families = usable;
        Ok(())
    }

    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.backend
    }

    /// Whether every family's mangle canary chain is still there. Only mangle is looked at,
    /// as upstream's monitor does: nothing of ours lives there, so a reload that flushed it
    /// flushed the other tables too, and with iptables-nft every `-S` reads the whole table,
    /// which at 10,000 Services costs more than the rest of a partial sync.
    fn canaries_present(&mut self) -> Result<bool, backend::Error> {
        for &family in &self.families {
            if !self
                .backend
                .has_chain(family, Table::Mangle, names::CANARY)?
            {
                tracing::warn!(family = %family,
                    "our canary chain is gone (firewall reload?); syncing fully");
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The restore input: partial from `last` (what the kernel holds), or full against the
    /// kernel read back. `known` is the previous plan, whose chains the fallback read uses.
    fn script(
        &mut self,
        last: Option<&Ruleset>,
        want: &Ruleset,
        known: Option<&Ruleset>,
    ) -> Result<Script, SyncError> {
        if let Some(last) = last {
            return Ok(diff::partial(last, want));
        }
        let saved = match self.backend.save(want.family) {
            Ok(text) => adopt::parse(&text),
            Err(error) => {
                // iptables-nft-save 1.8.9 crashes (SIGSEGV) on a node of 110,000 chains.
                tracing::warn!(family = %want.family, %error,
                    "cannot read the rules back; reading our jumps chain by chain, and deleting only stale chains this process made");
                self.read_jumps(want, known).map_err(io_error)?
            }
        };
        Ok(diff::full(want, &saved))
    }

    /// The fallback read: the built-in chains we jump from (`-S CHAIN`, small), and as our
    /// chains those of the previous plan.
    fn read_jumps(
        &mut self,
        want: &Ruleset,
        known: Option<&Ruleset>,
    ) -> Result<BTreeMap<Table, adopt::Saved>, backend::Error> {
        let mut out = BTreeMap::new();
        for table in Table::ALL {
            let mut saved = adopt::Saved::default();
            if let Some(k) = known {
                saved.chains = k.chains(table).map(|(n, _)| n.to_string()).collect();
            }
            let mut builtins: Vec<&str> = want
                .table(table)
                .jumps
                .iter()
                .map(|(b, _)| b.as_str())
                .collect();
            builtins.dedup();
            for chain in builtins {
                let listed = self.backend.list_chain(want.family, table, chain)?;
                for line in listed.lines().filter(|l| l.starts_with("-A ")) {
                    saved.rules.push((chain.to_string(), line.to_string()));
                }
            }
            out.insert(table, saved);
        }
        Ok(out)
    }
}

impl<B: Backend> Dataplane for IptablesDataplane<B> {
    fn mode(&self) -> &'static str {
        MODE
    }

    fn sync(
        &mut self,
        snapshot: &Snapshot,
        _changes: &Changes,
        full: bool,
    ) -> Result<SyncReport, SyncError> {
        let previous = self.plan.take();
        let want: Vec<Ruleset> = self
            .families
            .iter()
            .enumerate()
            .map(|(i, &family)| {
                plan_reusing(
                    snapshot,
                    &self.cfg,
                    family,
                    previous.as_ref().map(|p| &p[i]),
                )
            })
            .collect();
        // Cleared until the kernel accepts both families.
        let in_kernel = std::mem::take(&mut self.in_kernel);
        // A failed sync is followed by a full one, so a repair that fails is still retried.
        let outside = self.drift.as_ref().is_some_and(|d| d.take_pending());
        let mut full = full || outside || !in_kernel || previous.is_none();
        if !full {
            match self.canaries_present() {
                Ok(present) => full = !present,
                Err(e) => {
                    self.plan = Some(want);
                    return Err(io_error(e));
                }
            }
        }
        let mut families = Vec::with_capacity(want.len());
        for (i, w) in want.iter().enumerate() {
            let last = previous.as_ref().filter(|_| !full).map(|p| &p[i]);
            let known = previous.as_ref().map(|p| &p[i]);
            let result = self.script(last, w, known).and_then(|script| {
                if script.is_empty() {
                    return Ok(script);
                }
                match self.backend.restore(w.family, &script.text) {
                    Ok(()) => Ok(script),
                    Err(e) => Err(refused(e, &script.text)),
                }
            });
            let script = match result {
                Ok(s) => s,
                Err(e) => {
                    self.plan = Some(want);
                    return Err(e);
                }
            };
            let no_local = snapshot.no_local_endpoints(w.family);
            families.push(FamilyReport {
                family: Some(w.family),
                operations: script.chains + script.rules,
                objects: w.objects(),
                no_local_endpoints_internal: no_local.internal,
                no_local_endpoints_external: no_local.external,
                iptables_rules: Some(rule_counts(w, &script)),
            });
        }
        self.plan = Some(want);
        self.in_kernel = true;
        let written: usize = families.iter().map(|f| f.operations).sum();
        if let Some(drift) = self.drift.as_ref().filter(|_| outside && written > 0) {
            drift.repaired();
            tracing::warn!(
                operations = written,
                "repaired our iptables rules after an outside change"
            );
        }
        Ok(SyncReport {
            full,
            families,
            // iptables-restore talks to the kernel; this mode sends nothing itself.
            netlink_messages: 0,
        })
    }
}

/// The filter and nat counts of upstream's rule metrics for one family's sync.
fn rule_counts(want: &Ruleset, script: &Script) -> IptablesRules {
    let counts = |table| RuleCounts {
        total: want.rule_count(table),
        last: script.rules_written(table),
    };
    IptablesRules {
        filter: counts(Table::Filter),
        nat: counts(Table::Nat),
    }
}

/// No IP family can be programmed with iptables on this host.
#[derive(Debug, thiserror::Error)]
#[error("iptables is not usable on this host: {}", per_family(reasons))]
pub struct NoUsableFamily {
    /// Per family, why not.
    pub reasons: Vec<(IpFamily, backend::Unusable)>,
}

/// `IPv4: reason; IPv6: reason`.
fn per_family(reasons: &[(IpFamily, backend::Unusable)]) -> String {
    reasons
        .iter()
        .map(|(family, reason)| format!("{family}: {reason}"))
        .collect::<Vec<_>>()
        .join("; ")
}

fn io_error(e: backend::Error) -> SyncError {
    SyncError::io(MODE, e)
}

/// A refused restore as a sync error: the tool's message and the input lines it pointed at.
fn refused(e: backend::Error, input: &str) -> SyncError {
    let backend::Error::Refused { ref message, .. } = e else {
        return io_error(e);
    };
    let context = failing_line(message)
        .map(|n| {
            let quoted = tool::excerpt(input, n, CONTEXT_LINES, usize::MAX);
            format!(" (input line {n}:\n{quoted})")
        })
        .unwrap_or_default();
    // The tool's words and the input it pointed at are the whole cause: text, not an error.
    SyncError::refused(MODE, format!("{e}{context}"))
}

/// iptables-restore names the place as `line N failed` (or `Error occurred at line: N`).
fn failing_line(message: &str) -> Option<usize> {
    let at = message.find("line")? + "line".len();
    message[at..]
        .trim_start_matches([':', ' '])
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_failing_line_is_found_in_both_spellings() {
        assert_eq!(failing_line("iptables-restore: line 12 failed"), Some(12));
        assert_eq!(
            failing_line("iptables-restore v1.8.9 (nf_tables): Error occurred at line: 7\n"),
            Some(7)
        );
        assert_eq!(failing_line("something else"), None);
    }
}
