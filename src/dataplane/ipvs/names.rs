//! Every kernel-visible name of the IPVS mode, and the scheduler it uses by default.

/// The dummy interface the Service addresses are bound to, so the kernel takes packets to them
/// as local and IPVS (at `LOCAL_IN`) sees them: upstream's name, so tools and runbooks that
/// look for it keep working.
pub const LINK: &str = "kube-ipvs0";

/// The scheduler when `ipvs.scheduler` is empty, as upstream.
pub const DEFAULT_SCHEDULER: &str = "rr";

/// The schedulers Linux ships (`net/netfilter/ipvs/ip_vs_*.c`). Any other name is still tried
/// (the kernel loads `ip_vs_<name>` if it has it); start-up asks the kernel, which is the only
/// authority on what it has.
pub const KNOWN_SCHEDULERS: [&str; 14] = [
    "rr", "wrr", "lc", "wlc", "lblc", "lblcr", "sh", "dh", "sed", "nq", "mh", "fo", "ovf", "twos",
];

/// The helper rules live in our nftables table (`nft::TABLE`, in the `ip` and `ip6`
/// families), with the shared table's chain and set names
/// ([`nft_table::names`](crate::dataplane::nft_table::names)) where a chain or set plays the
/// same role as in the nftables mode (`service-ips`, `cluster-ip`, `external`, `masquerading`,
/// `firewall-check`, `reject-chain`, ...). One table name for every mode: switching a node between the nftables
/// and the IPVS mode replaces one set of rules by the other in one transaction, and
/// `--cleanup` has one table to remove. These are the names only this mode has.
pub mod rules {
    /// Every address bound on [`LINK`](super::LINK): packets to them are for IPVS or nobody.
    pub const BOUND_ADDRESSES: &str = "bound-addresses";
    /// Every virtual service's address . protocol . port.
    pub const SERVICE_PORTS: &str = "service-ports";
    /// Refuses new connections to a bound address on a port no virtual service has, so a
    /// host port is not reachable on a Service address (upstream's `KUBE-IPVS-FILTER`,
    /// kubernetes#72236).
    pub const IPVS_FILTER: &str = "ipvs-filter";
    /// `externalTrafficPolicy: Local` without a local endpoint: drops what comes from outside
    /// the node; the node and its pods go on to the cluster's endpoints.
    pub const NO_LOCAL_ENDPOINT: &str = "no-local-endpoint";
}
