//! The iptables mode as the sync runner drives it: plan both families, check the canaries,
//! send a full or partial restore input per family, report.
//!
//! What the kernel holds is "last applied": replaced only after both families' inputs were
//! accepted. A sync is full when the runner asks (start-up, the periodic resync, after a
//! failure), when nothing was applied yet, after a refused input, or when a canary chain is
//! gone; then the kernel is read back with `iptables-save`. Other syncs send only the chains
//! that changed. Nothing here reads a clock or a registry.

use std::collections::BTreeMap;

use super::backend::{self, Backend, IptablesCommand};
use super::diff::{self, Script};
use super::mode_config::ModeConfig;
use super::names;
use super::parse;
use super::plan::plan_reusing;
use super::ruleset::{Ruleset, Table};
use crate::cluster::{Changes, IpFamily, Snapshot};
use crate::dataplane::nftables::dataplane::no_local_endpoints;
use crate::dataplane::{Dataplane, FamilyReport, SyncError, SyncReport};

const MODE: &str = "iptables";

/// Lines of the input shown on each side of the one the tool named.
const CONTEXT_LINES: usize = 2;

/// See the module doc.
#[doc(alias = "proxier")]
pub struct IptablesDataplane<B = IptablesCommand> {
    cfg: ModeConfig,
    backend: B,
    /// Both families' last plan, IPv4 first; the next plan reuses its unchanged ports.
    plan: Option<[Ruleset; 2]>,
    /// The kernel holds `plan`: the last sync succeeded. False at start-up and after a failure.
    in_kernel: bool,
}

impl<B: Backend> IptablesDataplane<B> {
    pub fn new(cfg: ModeConfig, backend: B) -> IptablesDataplane<B> {
        IptablesDataplane {
            cfg,
            backend,
            plan: None,
            in_kernel: false,
        }
    }

    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.backend
    }

    /// Whether every family's canary chains are still there.
    fn canaries_present(&mut self) -> Result<bool, backend::Error> {
        for family in IpFamily::ALL {
            for table in Table::ALL {
                if !self.backend.has_chain(family, table, names::CANARY)? {
                    tracing::warn!(family = %family, table = table.as_str(),
                        "our canary chain is gone (firewall reload?); syncing fully");
                    return Ok(false);
                }
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
            Ok(text) => parse::parse(&text),
            Err(error) => {
                // iptables-nft-save 1.8.9 crashes (SIGSEGV, after minutes) on 110,000 chains.
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
    ) -> Result<BTreeMap<Table, parse::Saved>, backend::Error> {
        let mut out = BTreeMap::new();
        for table in Table::ALL {
            let mut saved = parse::Saved::default();
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
        let want = [0, 1].map(|i| {
            let family = IpFamily::ALL[i];
            plan_reusing(
                snapshot,
                &self.cfg,
                family,
                previous.as_ref().map(|p| &p[i]),
            )
        });
        // Cleared until the kernel accepts both families.
        let in_kernel = std::mem::take(&mut self.in_kernel);
        let mut full = full || !in_kernel || previous.is_none();
        if !full {
            match self.canaries_present() {
                Ok(present) => full = !present,
                Err(e) => {
                    self.plan = Some(want);
                    return Err(io_error(e));
                }
            }
        }
        let mut families = Vec::with_capacity(2);
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
            let (internal, external) = no_local_endpoints(snapshot, w.family);
            families.push(FamilyReport {
                family: Some(w.family),
                operations: script.chains + script.rules,
                objects: w.objects(),
                no_local_endpoints_internal: internal,
                no_local_endpoints_external: external,
            });
        }
        self.plan = Some(want);
        self.in_kernel = true;
        Ok(SyncReport { full, families })
    }
}

fn io_error(e: backend::Error) -> SyncError {
    SyncError::Io {
        mode: MODE,
        message: e.to_string(),
        source: match e {
            backend::Error::Spawn { source, .. } => Some(source),
            backend::Error::Refused { .. } => None,
        },
    }
}

/// A refused restore as a sync error: the tool's message and the input lines it pointed at.
fn refused(e: backend::Error, input: &str) -> SyncError {
    let backend::Error::Refused { ref message, .. } = e else {
        return io_error(e);
    };
    let context = failing_line(message)
        .map(|n| format!(" (input line {n}:\n{})", context(input, n)))
        .unwrap_or_default();
    SyncError::Refused {
        mode: MODE,
        message: format!("{e}{context}"),
    }
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

/// Lines around `n` of `input`, numbered, `>` marking line `n`.
fn context(input: &str, n: usize) -> String {
    let first = n.saturating_sub(CONTEXT_LINES).max(1);
    input
        .lines()
        .enumerate()
        .skip(first - 1)
        .take(n + CONTEXT_LINES + 1 - first)
        .map(|(i, text)| {
            let mark = if i + 1 == n { '>' } else { ' ' };
            format!("{mark}{:>6} | {text}", i + 1)
        })
        .collect::<Vec<_>>()
        .join("\n")
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
        assert_eq!(
            context("a\nb\nc\nd", 1),
            ">     1 | a\n      2 | b\n      3 | c"
        );
    }
}
