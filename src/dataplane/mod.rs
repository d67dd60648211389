//! The contract every dataplane mode meets (nftables, iptables, IPVS, userspace, eBPF),
//! and the layer the modes share.
//!
//! A mode turns a [`Snapshot`] into kernel state: a pure planner builds the desired state as
//! values, and an applier diffs it against what it last programmed (or adopted) and sends the
//! smallest change in one transaction where the kernel allows. The sync runner is the only
//! caller, through [`Dataplane`]; it owns the clock and the retries, so a mode never sleeps,
//! never retries by itself and never reads the time.
//!
//! # A mode is a folder with the same parts
//! ```text
//! <mode>/mod.rs       the kernel layout it programs (the operator's reference), re-exports
//!        names.rs     every kernel-visible name and how it is derived
//!        mode_config  its settings: the shared node::NodePolicy plus what only it has
//!        plan/        pure: (Snapshot, ModeConfig, family) -> desired state as values
//!        apply        the Dataplane impl: diff against the last programmed or adopted state,
//!                     render, send one transaction; replace "last" only once the kernel took it
//!        adopt        read the kernel back into desired-state values, on start (never flush)
//!                     and on full syncs
//!        trace        walk the desired state with one packet: tests and `explain`
//!        cleanup      what `--cleanup` removes of this mode (dataplane::cleanup runs them all)
//!        mode.rs      its parts for the command line: plan rendering, host set-up, start
//!                     (dataplane, monitor, counters, side tasks), cleanup
//!        backend      the thin I/O: one trait, one real implementation per way of talking to
//!                     the kernel, and in tests one that fails on demand
//! ```
//! The desired-state types (`ruleset.rs`), their `diff` and `render` are the mode's own
//! vocabulary beside these parts. Each mode's `mode.rs` hands the command line its parts
//! ([`mode::Mode`]: plan rendering, host set-up, start, cleanup); [`modes`] lists the modes. A
//! new mode adds its folder, a [`crate::config::ProxyMode`] value and one arm in
//! [`modes::of`]; it touches no other mode.
//!
//! # What the modes share (write it here, not twice)
//! - [`node`]: node traffic policy (detect-local, masquerade mark, NodePort addresses, INVALID
//!   drop, LoadBalancer source ranges), resolved once from the configuration;
//! - [`nft_table`]: our nf_tables table as the nftables, ipvs and userspace modes share it (the
//!   chain and set names more than one mode uses, the base chains, the shared chains' rules);
//! - [`report`]: what a sync reports, and the counts every mode derives alike;
//! - [`comment`]: how object names become comments in rule text;
//! - [`tool`]: starting rule tools (`nft`, `iptables-restore`) for text backends;
//! - [`mode`]: what every mode hands the command line, and [`modes`]: the one list of them;
//! - [`cleanup`]: `--cleanup` over every mode;
//! - [`leftovers`]: after the first sync, another proxy's rules left on the node removed and
//!   named in one line, over every mode's kinds of leftovers ([`leftovers::Kind`]);
//! - [`monitor`]: noticing another program changing our rules in nf_tables (what a mode's
//!   [`monitor::Watch`] names), so the next sync repairs them at once;
//! - [`crate::netlink`]: sockets, framing, batches and dumps for every netlink protocol (nf_tables,
//!   ctnetlink, rtnetlink, generic netlink).

pub mod cleanup;
pub mod comment;
pub mod counters;
pub mod ebpf;
pub mod inspect;
pub mod iptables;
pub mod ipvs;
pub mod leftovers;
pub mod mode;
pub mod modes;
pub mod monitor;
pub mod nft_table;
pub mod nftables;
pub mod node;
pub mod report;
pub mod tool;
pub mod traffic;
pub mod userspace;

pub use report::{FamilyReport, IptablesRules, RuleCounts, SyncReport};
pub use traffic::{ServiceTraffic, TrafficSource};

use crate::cluster::{Changes, Snapshot};

/// A mode's own error, kept whole (with its causes) as the source of a [`SyncError`].
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a sync failed. The previously programmed rules are still in place when this is returned.
/// Shown to an operator as `crate::causes::one_line` renders it: this error, then its causes.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The kernel (or the tool feeding it) refused the transaction.
    #[error("{mode} transaction refused")]
    Refused {
        mode: &'static str,
        #[source]
        source: Cause,
    },
    /// The kernel or the tool could not be reached or run, or the mode could not do its part.
    #[error("{mode} dataplane")]
    Io {
        mode: &'static str,
        #[source]
        source: Cause,
    },
    /// The mode's code panicked; the sync runner caught it.
    #[error("the {mode} dataplane panicked: {message}")]
    Panicked { mode: &'static str, message: String },
}

impl SyncError {
    pub fn refused(mode: &'static str, source: impl Into<Cause>) -> Self {
        SyncError::Refused {
            mode,
            source: source.into(),
        }
    }

    pub fn io(mode: &'static str, source: impl Into<Cause>) -> Self {
        SyncError::Io {
            mode,
            source: source.into(),
        }
    }
}

/// A dataplane mode, as the sync runner drives it.
#[doc(alias = "Provider")]
#[doc(alias = "proxier")]
pub trait Dataplane: Send {
    /// The mode's name as `--proxy-mode` spells it.
    fn mode(&self) -> &'static str;

    /// Makes the kernel match `snapshot`. `changes` says which service ports changed since the
    /// previous successful sync, so a mode may limit its work to them; with `full` it must
    /// re-read the kernel and repair anything that differs. On error the previous rules stay.
    #[doc(alias = "syncProxyRules")]
    fn sync(
        &mut self,
        snapshot: &Snapshot,
        changes: &Changes,
        full: bool,
    ) -> Result<SyncReport, SyncError>;

    /// Whether a partial sync of `changes` is short and waits on no process, so the runner may
    /// run it on its own thread rather than hand it to a blocking thread and take it back: on
    /// a busy single-CPU node those two wake-ups cost as much as a one-endpoint sync's own
    /// dataplane work (docs/benchmarks.md, ipvs mode in User-mode Linux).
    /// Asked only for a partial sync of at most [`INLINE_SYNC_MAX_PORTS`] changed ports, never
    /// for a full one. No by default: a mode that runs a tool (iptables-restore,
    /// nft) must not hold the runner while it does. The runner tells the runtime first, so
    /// such a sync may still wait on another task (the monitor's pause before a large batch).
    fn runs_inline(&self, changes: &Changes) -> bool {
        let _ = changes;
        false
    }
}

/// The most changed service ports a partial sync may have and still run on the runner's
/// thread ([`Dataplane::runs_inline`]): a few endpoint changes, a few Services. The runner
/// applies the bound; a mode only says whether its state allows it.
pub const INLINE_SYNC_MAX_PORTS: usize = 16;
