//! What a sync did, as every mode reports it to the runner for logs and upstream's metrics.
//!
//! Pure values; the no-local-endpoints counts come from the snapshot
//! ([`Snapshot::no_local_endpoints`](crate::cluster::Snapshot::no_local_endpoints)).

use crate::cluster::IpFamily;

/// What one successful sync did, for logs and metrics. Counts only; the runner measures time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// The sync compared against a fresh read of the kernel (start-up, periodic resync, after a
    /// failure or an outside change) rather than against what was last programmed.
    pub full: bool,
    pub families: Vec<FamilyReport>,
    /// Netlink messages the sync sent to the kernel (requests, dump requests, the messages of
    /// a batch), so an idle sync can be seen to send none. 0 in modes whose tools talk to the
    /// kernel for them (iptables mode runs `iptables-restore`; `--nftables-encoder=nft`).
    pub netlink_messages: usize,
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
