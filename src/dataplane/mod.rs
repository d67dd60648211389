//! The contract every dataplane mode meets (nftables, iptables, IPVS).
//!
//! A mode turns a [`Snapshot`] into kernel state: a pure planner builds the desired state as
//! values, and an applier diffs it against what it last programmed and sends the smallest change
//! in one transaction. The sync runner is the only caller; it owns the clock and the retries, so a
//! mode never sleeps, never retries by itself and never reads the time.

pub mod cleanup;
pub mod comment;
pub mod iptables;
pub mod nftables;
pub mod node;
pub mod tool;

use crate::cluster::{Changes, IpFamily, Snapshot};

/// What one successful sync did, for logs and metrics. Counts only; the runner measures time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// The sync compared against a fresh read of the kernel (start-up, periodic resync, after a
    /// failure or an outside change) rather than against what was last programmed.
    pub full: bool,
    pub families: Vec<FamilyReport>,
}

/// Per-family counts, for upstream's `ip_family`-labelled metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FamilyReport {
    pub family: Option<IpFamily>,
    /// Kernel objects (chains, sets, maps, elements, rules) created, changed or deleted.
    pub operations: usize,
    /// Kernel objects this mode owns after the sync.
    pub objects: usize,
    /// Services with a Local internal policy and no local endpoint
    /// (`sync_proxy_rules_no_local_endpoints_total{traffic_policy="internal"}`).
    pub no_local_endpoints_internal: usize,
    /// The same for the external policy.
    pub no_local_endpoints_external: usize,
    /// iptables mode only: rules per table, for upstream's `sync_proxy_rules_iptables_*`.
    pub iptables_rules: Option<IptablesRules>,
}

/// The rules of the two tables upstream's `sync_proxy_rules_iptables_total{table}` and
/// `sync_proxy_rules_iptables_last{table}` report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IptablesRules {
    pub filter: RuleCounts,
    pub nat: RuleCounts,
}

/// One table's rules: in our chains after the sync, and written by it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuleCounts {
    /// Rules in our chains of the table after the sync.
    pub total: usize,
    /// Rules the sync wrote: all of them on a full sync, those of rewritten chains otherwise.
    pub last: usize,
}

/// Why a sync failed. The previously programmed rules are still in place when this is returned.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The kernel (or the tool feeding it) refused the transaction.
    #[error("{mode} transaction refused: {message}")]
    Refused { mode: &'static str, message: String },
    /// The tool could not be run or talked to.
    #[error("{mode}: {message}")]
    Io {
        mode: &'static str,
        message: String,
        #[source]
        source: Option<std::io::Error>,
    },
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
}
