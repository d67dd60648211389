//! Every kernel-visible name of the eBPF mode: programs, maps, pin paths.
//!
//! The map and program names are the C identifiers in `bpf/kp_sock.c` (the kernel keeps the
//! first 15 bytes). Pins live under a directory per layout version, so a proxy never opens
//! maps pinned with another layout.

use std::path::{Path, PathBuf};

use super::layout::VERSION;

/// The programs, in the order they are attached; each is a cgroup sock_addr or sock program
/// whose attach type its ELF section names (`cgroup/connect4`, ..., `cgroup/sock_release`).
pub const PROGRAMS: [&str; 12] = [
    "kp_connect4",
    "kp_connect6",
    "kp_sendmsg4",
    "kp_sendmsg6",
    "kp_recvmsg4",
    "kp_recvmsg6",
    "kp_getpeername4",
    "kp_getpeername6",
    "kp_sock_release",
    "kp_post_bind4",
    "kp_post_bind6",
    "kp_restrict_egress",
];

/// The tc programs (`bpf/kp_tc.c`, ELF section `classifier`) and where each attaches on the
/// node's interfaces.
pub const TC_PROGRAMS: [(&str, Direction); 2] = [
    ("kp_tc_ingress", Direction::Ingress),
    ("kp_tc_egress", Direction::Egress),
];

/// A tc attachment's direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Ingress,
    Egress,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Ingress => "ingress",
            Direction::Egress => "egress",
        }
    }
}

/// The pin name (under [`links_dir`]) of a tc link: `tc_<ifindex>_<direction>`; by index, as
/// interface names may hold a dot, which bpffs refuses.
pub fn tc_link(ifindex: u32, direction: Direction) -> String {
    format!("tc_{ifindex}_{}", direction.as_str())
}

/// Frontends → slot set (`struct kp_svc_key` → `struct kp_svc_val`).
pub const MAP_SVC: &str = "kp_svc";
/// Slot set slots → backends.
pub const MAP_SLOT: &str = "kp_slot";
/// (socket cookie, backend) → Service address; written by the programs.
pub const MAP_REV: &str = "kp_rev";
/// (network namespace cookie, slot set) → the backend it was given; written by the programs.
pub const MAP_AFF: &str = "kp_aff";
/// Per-CPU counters by reason; written by the programs, read at each scrape.
pub const MAP_STATS: &str = "kp_stats";
/// NodePort numbers, for post_bind's bind protection.
pub const MAP_NODEPORT: &str = "kp_nodeport";
/// Flows from outside, both directions (tc programs' connection tracking); written by them.
pub const MAP_FLOW: &str = "kp_flow";
/// loadBalancerSourceRanges of frontends from outside (LPM trie).
pub const MAP_SRC: &str = "kp_src";
/// Sockets translated through a frontend with loadBalancerSourceRanges → that frontend
/// (socket-local storage; the cgroup egress program checks their packets' sources).
pub const MAP_RESTRICT: &str = "kp_restrict";
/// Every map, as pinned.
pub const MAPS: [&str; 9] = [
    MAP_SVC,
    MAP_SLOT,
    MAP_REV,
    MAP_AFF,
    MAP_STATS,
    MAP_NODEPORT,
    MAP_FLOW,
    MAP_SRC,
    MAP_RESTRICT,
];

/// Where the proxy pins by default: a bpffs mount, mounted by the proxy when absent.
pub const PIN_ROOT: &str = "/sys/fs/bpf/kube-proxy-rs";
/// The bpffs mount point the proxy mounts when the pin root's file system is not bpffs.
pub const BPFFS: &str = "/sys/fs/bpf";
/// The cgroup v2 hierarchy the programs attach to by default (its root, so every process and
/// pod of the node is balanced); on a hybrid host the v2 hierarchy is mounted below it at
/// `unified`.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// `<root>/v1`: this layout's maps.
pub fn pin_dir(root: &Path) -> PathBuf {
    root.join(format!("v{VERSION}"))
}

/// `<root>/v1/links`: the pinned cgroup links, one per program, named after it, and the tc
/// links ([`tc_link`]).
pub fn links_dir(root: &Path) -> PathBuf {
    pin_dir(root).join("links")
}
