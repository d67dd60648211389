//! The applier: makes the kernel's tables match, in one atomic transaction for both families
//! (one netlink batch, or one `nft -f` script), and knows whether the next apply must read the
//! kernel.
//!
//! - Steady state ([`Applier::send`]): sends the transactions the caller made from what the
//!   kernel holds (the dataplane's incremental planner); no kernel read.
//! - Full ([`Applier::adopt`]: start-up, after a failure, on request): read our tables back
//!   (the backend's dump) and diff against that, so a restart adopts what a previous run left and changes
//!   only what differs, and an outside change is repaired. [`Applier::read`] and
//!   [`Applier::apply_read`] are its two halves, for a caller that re-plans between them. A table the parser cannot fully name
//!   is rebuilt in one transaction instead ([`rebuild`]); a missing table is created.
//! - A refused transaction changed nothing (a batch is atomic); the error carries the kernel's
//!   (or nft's) message and the failing operations or lines, and [`Applier::needs_full`] holds
//!   until an adoption succeeds.
//!
//! What was last applied is the caller's (the planner holds it); the applier never plans, never
//! retries, never sleeps: the runner decides when.

use super::adopt;
use super::backend::{self, Backend};
use super::diff::{Transaction, diff, rebuild};
use super::ruleset::{Family, Ruleset};

/// Why an apply failed. The kernel still holds the previous rules.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kernel (or nft) refused the transaction.
    #[error("{message}{}", at(*line, context))]
    Refused {
        /// nft's standard error verbatim, or the operation the kernel refused and why.
        message: String,
        /// The script line nft named, 1-based, when it named one.
        line: Option<usize>,
        /// The failing line and a few around it, or the refused operations, as numbered nft
        /// text.
        context: String,
    },
    /// The backend could not run, or the table could not be read.
    #[error("nftables backend")]
    Backend(#[source] backend::Error),
}

impl From<backend::Error> for Error {
    fn from(e: backend::Error) -> Error {
        match e {
            backend::Error::Refused {
                message,
                line,
                context,
            } => Error::Refused {
                message,
                line,
                context,
            },
            other => Error::Backend(other),
        }
    }
}

fn at(line: Option<usize>, context: &str) -> String {
    match line {
        Some(n) => format!(" (script line {n}:\n{context})"),
        None if !context.is_empty() => format!(" (at:\n{context})"),
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
        let read = self.read(want, last)?;
        self.apply_read(read, want)
    }

    /// The first half of [`adopt`](Applier::adopt): reads our tables of the families of
    /// `expect` (which names the large sets worth reading by key; any ruleset will do, the
    /// result is the kernel's either way) and tells whether they differ from `last`. A caller
    /// that knows what the kernel should hold reads before it plans again and passes its plan as
    /// both, so it never holds its previous plan, the new one and the kernel's at once.
    pub fn read(
        &mut self,
        expect: &[Ruleset],
        last: Option<&[Ruleset]>,
    ) -> Result<KernelRead, Error> {
        let mut read = KernelRead::default();
        for e in expect {
            let l = last.and_then(|l| l.iter().find(|r| r.family == e.family));
            match self.read_family(e, l) {
                Ok((found, differs)) => {
                    read.differs |= differs;
                    read.families.push((e.family, found));
                }
                Err(e) => {
                    self.needs_full = true;
                    return Err(e);
                }
            }
        }
        Ok(read)
    }

    /// The second half of [`adopt`](Applier::adopt): makes the kernel hold `want`, diffing
    /// against `read` (a family it lacks is read now). Each family's table read back is dropped
    /// once its transaction is made.
    pub fn apply_read(&mut self, read: KernelRead, want: &[Ruleset]) -> Result<Report, Error> {
        let KernelRead {
            mut families,
            differs,
        } = read;
        let mut report = Report {
            full: true,
            repaired: differs,
            ..Report::default()
        };
        let mut transactions = Vec::with_capacity(want.len());
        for w in want {
            let found = match families.iter().position(|(f, _)| *f == w.family) {
                Some(i) => families.swap_remove(i).1,
                None => match self.read_family(w, None) {
                    Ok((found, _)) => found,
                    Err(e) => {
                        self.needs_full = true;
                        return Err(e);
                    }
                },
            };
            transactions.push(match found {
                Found::Missing => diff(&Ruleset::empty(w.family), w),
                Found::Rebuild => {
                    report.rebuilt = true;
                    rebuild(w)
                }
                Found::Table(ruleset) => diff(&ruleset, w),
            });
        }
        drop(families);
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

    /// Sends `transactions` as one batch; counts operations per family.
    fn run(&mut self, transactions: &[Transaction], report: &mut Report) -> Result<(), Error> {
        report.operations = transactions
            .iter()
            .map(|t| (t.family, t.operations()))
            .collect();
        if transactions.iter().any(|t| !t.is_empty())
            && let Err(e) = self.backend.run(transactions)
        {
            self.needs_full = true;
            return Err(e.into());
        }
        self.needs_full = false;
        Ok(())
    }

    /// What our table of `expect`'s family holds; whether it differs from `last`.
    fn read_family(
        &mut self,
        expect: &Ruleset,
        last: Option<&Ruleset>,
    ) -> Result<(Found, bool), Error> {
        let family = expect.family;
        let parsed = match self.backend.dump_expecting(family, expect) {
            Ok(None) => {
                tracing::info!(
                    family = family.ip_family().as_str(),
                    "no table of ours yet; creating it"
                );
                return Ok((Found::Missing, last.is_some()));
            }
            Ok(Some(parsed)) => parsed,
            Err(backend::Error::Unreadable(error)) => {
                tracing::warn!(family = family.ip_family().as_str(), error = %error,
                    "cannot read our table back; rebuilding it in one transaction");
                return Ok((Found::Rebuild, last.is_some()));
            }
            Err(e) => return Err(e.into()),
        };
        let adopt::Parsed {
            ruleset,
            unknown,
            foreign,
        } = parsed;
        if !foreign.is_empty() {
            tracing::warn!(family = family.ip_family().as_str(), objects = %foreign.join(", "),
                "our table holds objects we never make; rebuilding it in one transaction");
            return Ok((Found::Rebuild, last.is_some()));
        }
        if !unknown.is_empty() {
            tracing::info!(family = family.ip_family().as_str(), unknown = %unknown.join("; "),
                "parts of our table could not be read; replacing them");
        }
        let differs = last.is_some_and(|l| *l != ruleset);
        Ok((Found::Table(ruleset), differs))
    }
}

/// Our tables as [`Applier::read`] found them, for [`Applier::apply_read`].
#[derive(Debug, Default)]
pub struct KernelRead {
    families: Vec<(Family, Found)>,
    /// Some family differed from what the caller said was last applied.
    differs: bool,
}

/// One family's table, read back.
#[derive(Debug)]
enum Found {
    /// No table of ours: created from nothing.
    Missing,
    /// Unreadable, or holding objects we never make: replaced in one transaction.
    Rebuild,
    /// Read and parsed: the transaction is the diff from it.
    Table(Ruleset),
}
