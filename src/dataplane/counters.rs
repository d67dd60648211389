//! What a mode counts in a datapath of its own, handed over when it starts
//! (`mode::Started`) and read by the metrics at each scrape: the relay's listeners (userspace
//! mode) and the eBPF datapath's counters and map fill levels. The metrics, and the proxy's
//! drain at shutdown, know these shapes, not the modes that fill them.

use std::fmt::Debug;

use crate::cluster::{IpFamily, ServicePortName};

/// What one relay listener has relayed since it opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RelayedCounts {
    /// Connections (UDP: flows) being relayed now.
    pub active: u64,
    /// Connections (UDP: flows) admitted since the listener opened.
    pub total: u64,
    /// Bytes from clients to endpoints, and back.
    pub bytes_to_endpoint: u64,
    pub bytes_to_client: u64,
    /// Dials that failed, and dials after a connection's first.
    pub dial_failures: u64,
    pub retries: u64,
    /// Connections turned away: over the listener's limit, or with no endpoint to dial.
    pub over_limit: u64,
    pub no_endpoint: u64,
}

/// One open relay listener: the Service port, family and endpoint list (`cluster`, `local`,
/// as the listener label spells it) it relays to, and its counts.
#[derive(Clone, Debug, PartialEq)]
pub struct RelayedListener {
    pub port: ServicePortName,
    pub family: IpFamily,
    pub listener: &'static str,
    pub counts: RelayedCounts,
}

/// Where the relay's listeners are read.
pub trait RelaySource: Send + Sync + Debug {
    /// Every open listener now.
    fn listeners(&self) -> Vec<RelayedListener>;
}

/// What the eBPF datapath counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DatapathCounts {
    /// (reason, count summed over CPUs); empty before the counters are open.
    pub reasons: Vec<(&'static str, u64)>,
    /// (map, entries, bound).
    pub maps: Vec<(&'static str, usize, u32)>,
}

/// Where the eBPF datapath's counts are read.
pub trait DatapathSource: Send + Sync + Debug {
    fn counts(&self) -> DatapathCounts;
}
