//! The kernel seam of the nf_tables library: a [`Backend`] applies transactions and reads our
//! table back.
//!
//! Two real implementations: [`netlink::Netlink`] (the default: nf_tables netlink messages, and
//! `GET*` dumps read by `netlink::dump`) and [`NftCommand`] (`nft -f -` text from `render`, and
//! `nft -j list table` read by `parse`; kept for debugging with `--nftables-encoder=nft`).
//! Tests add one that fails on demand. A backend never retries and never decides: the applier
//! decides, this runs. A transaction list is one atomic batch either way, so a refused one
//! changes nothing.

pub mod netlink;

use std::process::Command;
use std::sync::Arc;

use super::Name;
use super::adopt::{self, Parsed};
use super::diff::Transaction;
use super::render;
use super::ruleset::{Family, Ruleset, SetDecl, Tuple};
use crate::config::NftablesEncoder;
use crate::dataplane::monitor::{self, Drift, OwnProcesses};
use crate::dataplane::tool::{self, Launcher};
use netlink::Netlink;
pub use netlink::dump::BaseChainSummary;

/// Lines of the script shown on each side of the one nft complained about.
const CONTEXT_LINES: usize = 2;
/// Script lines longer than this are cut in error messages (element lines hold 1,000 elements).
const CONTEXT_WIDTH: usize = 240;

/// Why the backend could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Spawn(#[from] tool::SpawnError),
    /// The kernel (or nft) refused the transactions; nothing changed.
    #[error("{message}{}", at(*line, context))]
    Refused {
        /// nft's standard error verbatim, or which operation the kernel refused and why.
        message: String,
        /// The script line nft named, 1-based, when it named one.
        line: Option<usize>,
        /// What failed as nft text, numbered: the script lines around `line`, or the refused
        /// operations.
        context: String,
    },
    /// nft printed something that is not UTF-8.
    #[error("nft printed something that is not UTF-8")]
    NotText,
    /// Our table was read but is not in a form we can read at all.
    #[error("cannot read our table back")]
    Unreadable(#[source] adopt::Error),
    /// The netlink socket or a dump failed.
    #[error("nf_tables netlink")]
    Netlink(#[source] netlink::Error),
}

fn at(line: Option<usize>, context: &str) -> String {
    match line {
        Some(n) => format!(" (script line {n}:\n{context})"),
        None if !context.is_empty() => format!(" (at:\n{context})"),
        None => String::new(),
    }
}

/// Applies transactions to the kernel and reads our table back.
pub trait Backend: Send {
    /// Applies `transactions` (one per family) as one atomic batch: all of it, or nothing and
    /// an error.
    fn run(&mut self, transactions: &[Transaction]) -> Result<(), Error>;

    /// Our table of `family` as the kernel holds it, or `None` when it does not exist.
    fn dump(&mut self, family: Family) -> Result<Option<Parsed>, Error>;

    /// [`Backend::dump`], told what the table should hold (the applier's plan), which a
    /// backend may use to read large sets faster. Must give the same result as `dump`.
    fn dump_expecting(&mut self, family: Family, want: &Ruleset) -> Result<Option<Parsed>, Error> {
        let _ = want;
        self.dump(family)
    }

    /// The keys of dynamic set `set` of our `family` table (an affinity set's clients), for
    /// `explain`; `None` where the backend cannot read them (`nft`'s JSON, which the debugging
    /// encoder reads, is not worth a second parser for this).
    fn dynamic_keys(
        &mut self,
        family: Family,
        set: &Name,
        decl: &SetDecl,
    ) -> Result<Option<Vec<Tuple>>, Error> {
        let _ = (family, set, decl);
        Ok(None)
    }

    /// Every base chain of every `ip`, `ip6` and `inet` table, for `explain`; `None` where
    /// the backend cannot list them.
    fn base_chains(&mut self) -> Result<Option<Vec<BaseChainSummary>>, Error> {
        Ok(None)
    }

    /// The monitor watching our table: the backend records the processes (or threads) our
    /// transactions come from, so the monitor tells them from other programs', and may pause
    /// it around a large transaction.
    fn watched_by(&mut self, drift: Arc<Drift>);

    /// Netlink messages this backend has sent to the kernel so far, for the sync's count of
    /// them; 0 where they cannot be counted (`nft`, a separate program, sends its own).
    fn messages_sent(&self) -> u64 {
        0
    }

    /// Whether it talks to the kernel itself (netlink) rather than through a program it
    /// starts, so a small transaction returns within a millisecond or so.
    fn in_process(&self) -> bool {
        false
    }
}

impl Backend for Box<dyn Backend> {
    fn run(&mut self, transactions: &[Transaction]) -> Result<(), Error> {
        (**self).run(transactions)
    }

    fn dump(&mut self, family: Family) -> Result<Option<Parsed>, Error> {
        (**self).dump(family)
    }

    fn dump_expecting(&mut self, family: Family, want: &Ruleset) -> Result<Option<Parsed>, Error> {
        (**self).dump_expecting(family, want)
    }

    fn dynamic_keys(
        &mut self,
        family: Family,
        set: &Name,
        decl: &SetDecl,
    ) -> Result<Option<Vec<Tuple>>, Error> {
        (**self).dynamic_keys(family, set, decl)
    }

    fn base_chains(&mut self) -> Result<Option<Vec<BaseChainSummary>>, Error> {
        (**self).base_chains()
    }

    fn watched_by(&mut self, drift: Arc<Drift>) {
        (**self).watched_by(drift)
    }

    fn messages_sent(&self) -> u64 {
        (**self).messages_sent()
    }

    fn in_process(&self) -> bool {
        (**self).in_process()
    }
}

/// The backend of `encoder` (`--nftables-encoder`), in the named network namespace or the
/// caller's.
pub fn for_encoder(encoder: NftablesEncoder, netns: Option<&str>) -> Box<dyn Backend> {
    match (encoder, netns) {
        (NftablesEncoder::Netlink, None) => Box::new(NetlinkBackend::new(Netlink::new())),
        (NftablesEncoder::Netlink, Some(n)) => Box::new(NetlinkBackend::new(Netlink::in_netns(n))),
        (NftablesEncoder::Nft, None) => Box::new(NftCommand::new()),
        (NftablesEncoder::Nft, Some(n)) => Box::new(NftCommand::in_netns(n)),
    }
}

/// Operations from which a transaction of ours is sent with the monitor paused (see
/// [`monitor`]): below this the notifications cost little, and a pause costs two round trips
/// to the monitor task and two generation reads.
pub const UNWATCHED_MIN: usize = 10_000;

/// The netlink encoder as a [`Backend`].
pub struct NetlinkBackend {
    netlink: Netlink,
    drift: Option<Arc<Drift>>,
}

impl NetlinkBackend {
    pub fn new(netlink: Netlink) -> NetlinkBackend {
        NetlinkBackend {
            netlink,
            drift: None,
        }
    }

    /// Applies a large batch with the monitor paused (see [`monitor::apply_unwatched`]): one
    /// batch, one generation.
    fn apply_unwatched(
        &mut self,
        drift: &Drift,
        transactions: &[Transaction],
    ) -> Result<(), netlink::Error> {
        let netlink = std::cell::RefCell::new(&mut self.netlink);
        monitor::apply_unwatched(
            drift,
            || netlink.borrow_mut().generation().ok().flatten(),
            1,
            || netlink.borrow_mut().apply(transactions),
        )
    }
}

impl Backend for NetlinkBackend {
    fn run(&mut self, transactions: &[Transaction]) -> Result<(), Error> {
        let result = match self.drift.clone() {
            Some(drift) => {
                // The kernel names the sending thread and socket in its generation notice.
                let own = drift.own_processes();
                own.record(nix::unistd::gettid().as_raw() as u32);
                if let Ok(port_id) = self.netlink.port_id() {
                    own.record(port_id);
                }
                let operations: usize = transactions.iter().map(|t| t.operations()).sum();
                if operations >= UNWATCHED_MIN {
                    self.apply_unwatched(&drift, transactions)
                } else {
                    self.netlink.apply(transactions)
                }
            }
            None => self.netlink.apply(transactions),
        };
        result.map_err(|e| match e {
            netlink::Error::Refused { message, context } => Error::Refused {
                message,
                line: None,
                context,
            },
            other => Error::Netlink(other),
        })
    }

    fn dump(&mut self, family: Family) -> Result<Option<Parsed>, Error> {
        self.netlink.dump(family).map_err(Error::Netlink)
    }

    fn dump_expecting(&mut self, family: Family, want: &Ruleset) -> Result<Option<Parsed>, Error> {
        self.netlink
            .dump_expecting(family, Some(want))
            .map_err(Error::Netlink)
    }

    fn dynamic_keys(
        &mut self,
        family: Family,
        set: &Name,
        decl: &SetDecl,
    ) -> Result<Option<Vec<Tuple>>, Error> {
        self.netlink
            .dynamic_keys(family, set.as_str(), decl)
            .map(Some)
            .map_err(Error::Netlink)
    }

    fn base_chains(&mut self) -> Result<Option<Vec<BaseChainSummary>>, Error> {
        self.netlink.base_chains().map(Some).map_err(Error::Netlink)
    }

    fn watched_by(&mut self, drift: Arc<Drift>) {
        self.drift = Some(drift);
    }

    fn messages_sent(&self) -> u64 {
        self.netlink.messages_sent()
    }

    fn in_process(&self) -> bool {
        true
    }
}

/// The text backend: the `nft` program, optionally run through a prefix such as
/// `ip netns exec NAME` (tests program a network namespace).
#[derive(Clone, Debug)]
pub struct NftCommand {
    launcher: Launcher,
    /// Where the pids of our `nft -f` processes are recorded, so the monitor can tell our
    /// transactions from other programs'.
    own: Option<OwnProcesses>,
}

impl Default for NftCommand {
    fn default() -> NftCommand {
        NftCommand::new()
    }
}

impl NftCommand {
    /// `nft` from `PATH`, in the caller's network namespace.
    pub fn new() -> NftCommand {
        NftCommand {
            launcher: Launcher::here(),
            own: None,
        }
    }

    /// `nft` inside the named network namespace (`ip netns exec NAME nft ...`).
    pub fn in_netns(name: &str) -> NftCommand {
        NftCommand {
            launcher: Launcher::in_netns(name),
            own: None,
        }
    }

    /// Records the pid of every `nft -f` this backend starts in `own`.
    pub fn with_own_processes(mut self, own: OwnProcesses) -> NftCommand {
        self.own = Some(own);
        self
    }

    /// A command for `nft` with `args`, through the launcher's prefix.
    pub fn command<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut cmd = self.launcher.command("nft");
        cmd.args(args);
        cmd
    }

    /// How this backend starts tools (for `--cleanup` in the same place).
    pub fn launcher(&self) -> &Launcher {
        &self.launcher
    }

    fn program(&self) -> String {
        self.launcher.describe("nft")
    }
}

impl NftCommand {
    /// Runs `script` through `nft -f -`.
    fn run_script(&mut self, script: &str) -> Result<(), Error> {
        let own = self.own.clone();
        let mut cmd = self.command(["-f", "-"]);
        // Recorded before the script is written: the transaction cannot commit earlier.
        let output = tool::feed(&mut cmd, &self.program(), script, |pid| {
            if let Some(own) = &own {
                own.record(pid);
            }
        })?;
        if output.status.success() {
            return Ok(());
        }
        let message = String::from_utf8_lossy(&output.stderr)
            .trim_end()
            .to_string();
        Err(refused(message, script))
    }

    /// `nft -j list table <family> kube-proxy-rs`, or `None` when the table does not exist.
    pub fn list_json(&mut self, family: Family) -> Result<Option<String>, Error> {
        let mut cmd = self.command(["-j", "list", "table", family_word(family), super::TABLE]);
        let output = tool::output(&mut cmd, &self.program())?;
        if output.status.success() {
            return String::from_utf8(output.stdout)
                .map(Some)
                .map_err(|_| Error::NotText);
        }
        let message = String::from_utf8_lossy(&output.stderr)
            .trim_end()
            .to_string();
        // The kernel's ENOENT, as nft 1.0.6 prints it: the table is simply not there.
        if message.contains("No such file or directory") {
            return Ok(None);
        }
        Err(Error::Refused {
            message: format!("nft refused ({}): {message}", output.status),
            line: None,
            context: String::new(),
        })
    }
}

impl Backend for NftCommand {
    fn run(&mut self, transactions: &[Transaction]) -> Result<(), Error> {
        let script = render::render_all(transactions);
        if script.is_empty() {
            return Ok(());
        }
        self.run_script(&script)
    }

    fn dump(&mut self, family: Family) -> Result<Option<Parsed>, Error> {
        let Some(json) = self.list_json(family)? else {
            return Ok(None);
        };
        adopt::parse(&json, family)
            .map(Some)
            .map_err(Error::Unreadable)
    }

    fn watched_by(&mut self, drift: Arc<Drift>) {
        let own = drift.own_processes();
        self.own = Some(own);
    }
}

/// nft's refusal, with the script lines it pointed at.
fn refused(message: String, script: &str) -> Error {
    let line = failing_line(&message);
    let context = line
        .map(|n| tool::excerpt(script, n, CONTEXT_LINES, CONTEXT_WIDTH))
        .unwrap_or_default();
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

/// The family as nft spells it.
pub fn family_word(family: Family) -> &'static str {
    match family {
        Family::Ip => "ip",
        Family::Ip6 => "ip6",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_failing_line_and_its_neighbours_are_quoted() {
        let script = "a\nb\nc\nd\ne\nf\n";
        let message = "/dev/stdin:4:39-45: Error: No such file or directory\nd\n  ^^";
        let Error::Refused { line, context, .. } = refused(message.into(), script) else {
            panic!("refused expected")
        };
        assert_eq!(line, Some(4));
        assert_eq!(
            context,
            "      2 | b\n      3 | c\n>     4 | d\n      5 | e\n      6 | f"
        );
    }

    #[test]
    fn a_message_without_a_line_has_no_context() {
        assert_eq!(failing_line("Error: Could not process rule"), None);
    }
}
