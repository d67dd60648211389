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
