//! The applier: makes the kernel's tables match, in one atomic `nft -f` transaction for both
//! families, and knows whether the next apply must read the kernel.
//!
//! - Steady state ([`Applier::send`]): sends the transactions the caller made from what the
//!   kernel holds (the dataplane's incremental planner); no kernel read.
//! - Full ([`Applier::adopt`]: start-up, after a failure, on request): read our tables back
//!   ([`parse`]) and diff against that, so a restart adopts what a previous run left and changes
//!   only what differs, and an outside change is repaired. A table the parser cannot fully name
//!   is rebuilt in one transaction instead ([`rebuild`]); a missing table is created.
//! - A refused transaction changed nothing (nft applies a file atomically); the error carries
//!   nft's message and the failing lines, and [`Applier::needs_full`] holds until an adoption
//!   succeeds.
//!
//! What was last applied is the caller's (the planner holds it); the applier never plans, never
//! retries, never sleeps: the runner decides when.

use super::backend::{self, Backend};
use super::diff::{Transaction, diff, rebuild};
use super::parse::{self, parse};
use super::render::{Encoder as _, NftText};
use super::ruleset::{Family, Ruleset};

/// Lines of the script shown on each side of the one nft complained about.
const CONTEXT_LINES: usize = 2;
/// Script lines longer than this are cut in error messages (element lines hold 1,000 elements).
const CONTEXT_WIDTH: usize = 240;

/// Why an apply failed. The kernel still holds the previous rules.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// nft refused the transaction.
    #[error("{message}{}", at_line(*line, context))]
    Refused {
        /// nft's standard error, verbatim.
        message: String,
        /// The script line nft named, 1-based, when it named one.
        line: Option<usize>,
        /// That line and a few around it, numbered.
        context: String,
    },
    /// nft could not be run, or the table could not be read.
    #[error("nftables backend")]
    Backend(#[from] backend::Error),
}

fn at_line(line: Option<usize>, context: &str) -> String {
    match line {
        Some(n) => format!(" (script line {n}:\n{context})"),
        None => String::new(),
    }
}

/// What one apply did, per family in the order given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// The kernel was read (start-up, resync, after a failure).
    pub full: bool,
    /// Per family: kernel objects created, changed or deleted.
    pub operations: Vec<(Family, usize)>,
    /// A full apply found the kernel different from what was last applied: something else
    /// changed our table, and this apply repaired it.
    pub repaired: bool,
    /// A table was rebuilt because its dump held objects we cannot diff.
    pub rebuilt: bool,
}

/// See the module doc.
#[doc(alias = "syncProxyRules")]
pub struct Applier<B> {
    backend: B,
    /// Nothing was applied yet, or the previous apply failed: the next one reads the kernel.
    needs_full: bool,
}

impl<B: Backend> Applier<B> {
    pub fn new(backend: B) -> Applier<B> {
        Applier {
            backend,
            needs_full: true,
        }
    }

    /// Whether only [`adopt`](Applier::adopt) may run next: no apply succeeded yet, or the
    /// last one failed, so the kernel may not hold what the caller last planned.
    pub fn needs_full(&self) -> bool {
        self.needs_full
    }

    /// The backend, for measurements.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The backend, for tests that fail it on demand.
    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.backend
    }

    /// Makes the kernel hold `want` (one ruleset per family), diffing against a fresh read of
    /// the kernel. `last` is what the caller believes the kernel holds (`None`: unknown); it
    /// only serves to tell an outside change ([`Report::repaired`]).
    pub fn adopt(&mut self, want: &[Ruleset], last: Option<&[Ruleset]>) -> Result<Report, Error> {
        let mut report = Report {
            full: true,
            ..Report::default()
        };
        let mut transactions = Vec::with_capacity(want.len());
        for w in want {
            let l = last.and_then(|l| l.iter().find(|r| r.family == w.family));
            let (t, differs, rebuilt) = match self.against_kernel(w, l) {
                Ok(found) => found,
                Err(e) => {
                    self.needs_full = true;
                    return Err(e);
                }
            };
            report.repaired |= differs;
            report.rebuilt |= rebuilt;
            transactions.push(t);
        }
        self.run(&transactions, &mut report)?;
        Ok(report)
    }

    /// Steady state: sends `transactions`, which the caller made from what the kernel holds
    /// (the previous successful apply). Only valid while [`needs_full`](Applier::needs_full)
    /// is false.
    pub fn send(&mut self, transactions: &[Transaction]) -> Result<Report, Error> {
        debug_assert!(!self.needs_full, "a steady-state send after a failure");
        let mut report = Report::default();
        self.run(transactions, &mut report)?;
        Ok(report)
    }

    /// Renders `transactions` into one script and runs it; counts operations per family.
    fn run(&mut self, transactions: &[Transaction], report: &mut Report) -> Result<(), Error> {
        report.operations = transactions
            .iter()
            .map(|t| (t.family, t.operations()))
            .collect();
        let script: String = transactions.iter().map(|t| NftText.encode(t)).collect();
        if !script.is_empty()
            && let Err(e) = self.backend.run(&script)
        {
            self.needs_full = true;
            return Err(refused(e, &script));
        }
        self.needs_full = false;
        Ok(())
    }

    /// The transaction from the kernel's table to `want`; whether the kernel differed from
    /// `last`; whether the table is rebuilt.
    fn against_kernel(
        &mut self,
        want: &Ruleset,
        last: Option<&Ruleset>,
    ) -> Result<(Transaction, bool, bool), Error> {
        let family = want.family;
        let Some(dump) = self.backend.dump(family)? else {
            tracing::info!(family = ?family, "no table of ours yet; creating it");
            return Ok((diff(&Ruleset::empty(family), want), last.is_some(), false));
        };
        match parse(&dump, family) {
            Ok(parse::Parsed { foreign, .. }) if !foreign.is_empty() => {
                tracing::warn!(family = ?family, objects = %foreign.join(", "),
                    "our table holds objects we never make; rebuilding it in one transaction");
                Ok((rebuild(want), last.is_some(), true))
            }
            Ok(parsed) => {
                if !parsed.unknown.is_empty() {
                    tracing::info!(family = ?family, unknown = %parsed.unknown.join("; "),
                        "parts of our table could not be read; replacing them");
                }
                let differs = last.is_some_and(|l| *l != parsed.ruleset);
                Ok((diff(&parsed.ruleset, want), differs, false))
            }
            Err(error) => {
                tracing::warn!(family = ?family, %error,
                    "cannot read our table back; rebuilding it in one transaction");
                Ok((rebuild(want), last.is_some(), true))
            }
        }
    }
}

/// A backend error as an apply error, with the script lines nft pointed at.
fn refused(error: backend::Error, script: &str) -> Error {
    let backend::Error::Refused { message, .. } = error else {
        return Error::Backend(error);
    };
    let line = failing_line(&message);
    let context = line.map(|n| context(script, n)).unwrap_or_default();
    Error::Refused {
        message,
        line,
        context,
    }
}

/// nft names the place as `/dev/stdin:LINE:COLUMNS: Error: ...`.
fn failing_line(message: &str) -> Option<usize> {
    let rest = &message[message.find("stdin:")? + "stdin:".len()..];
    rest.split(':').next()?.parse().ok()
}

/// Lines `n - CONTEXT_LINES ..= n + CONTEXT_LINES` of `script`, numbered, `>` marking line `n`.
fn context(script: &str, n: usize) -> String {
    let first = n.saturating_sub(CONTEXT_LINES).max(1);
    script
        .lines()
        .enumerate()
        .skip(first - 1)
        .take(n + CONTEXT_LINES + 1 - first)
        .map(|(i, text)| {
            let mark = if i + 1 == n { '>' } else { ' ' };
            let cut: String = text.chars().take(CONTEXT_WIDTH).collect();
            let more = if cut.len() < text.len() { " ..." } else { "" };
            format!("{mark}{:>6} | {cut}{more}", i + 1)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_failing_line_and_its_neighbours_are_quoted() {
        let script = "a\nb\nc\nd\ne\nf\n";
        let message = "/dev/stdin:4:39-45: Error: No such file or directory\nd\n  ^^";
        let Error::Refused { line, context, .. } = refused(
            backend::Error::Refused {
                status: "exit status: 1".into(),
                message: message.into(),
            },
            script,
        ) else {
            panic!("refused expected")
        };
        assert_eq!(line, Some(4));
        assert_eq!(
            context,
            "      2 | b\n      3 | c\n>     4 | d\n      5 | e\n      6 | f"
        );
    }

    #[test]
    fn long_lines_are_cut_and_a_message_without_a_line_has_no_context() {
        let long = "x".repeat(1000);
        let c = context(&long, 1);
        assert!(c.ends_with("x ...") && c.len() < 300, "{c}");
        assert_eq!(failing_line("Error: Could not process rule"), None);
    }
}
