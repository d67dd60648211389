//! The Linux capabilities each proxy mode needs, and why: what the deploy overlays add to
//! `drop: [ALL]` (`tests/deploy/privileges.rs` checks they do) and the only ones
//! `tests/least_privilege.rs` and the lab (`tests/lab/proxy.rs`) start our binary with.
//! docs/operations.md has the same table.

/// A capability by its Kubernetes name (`capabilities.add`), with its number (the bit in
/// `/proc/PID/status`'s `CapEff`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cap {
    pub name: &'static str,
    pub bit: u32,
}

/// Netlink writes: nf_tables, rtnetlink (links, addresses, tc filters), IPVS's generic
/// netlink, conntrack deletions, sock_diag's SOCK_DESTROY, the iptables tools.
pub const NET_ADMIN: Cap = Cap {
    name: "NET_ADMIN",
    bit: 12,
};
/// iptables-legacy's tools open a raw socket for their get/setsockopt; without it they fail,
/// and the flavour detection then takes a legacy node for an nft one.
pub const NET_RAW: Cap = Cap {
    name: "NET_RAW",
    bit: 13,
};
/// Entering the pods' network namespaces (`setns`) to destroy their connected UDP sockets
/// whose backend went away (eBPF mode).
pub const SYS_ADMIN: Cap = Cap {
    name: "SYS_ADMIN",
    bit: 21,
};
/// The verifier's checks for programs that compare and store pointers (eBPF mode): without it
/// the programs do not load.
pub const PERFMON: Cap = Cap {
    name: "PERFMON",
    bit: 38,
};
/// Creating maps and loading programs (eBPF mode).
pub const BPF: Cap = Cap {
    name: "BPF",
    bit: 39,
};

/// What `mode` (as `--proxy-mode` spells it) needs; everything else is dropped.
pub fn needed(mode: &str) -> &'static [Cap] {
    match mode {
        "nftables" | "ipvs" | "userspace" => &[NET_ADMIN],
        "iptables" => &[NET_ADMIN, NET_RAW],
        "ebpf" => &[BPF, NET_ADMIN, PERFMON, SYS_ADMIN],
        other => panic!("no such mode: {other}"),
    }
}

/// The capability mask `caps` make, as `CapEff` shows it.
pub fn mask(caps: &[Cap]) -> u64 {
    caps.iter().fold(0, |m, c| m | 1 << c.bit)
}

/// `setpriv`'s `--bounding-set` argument that keeps exactly `caps`: a process running as root
/// then has exactly these, effective and permitted, as a container given `drop: [ALL]` and
/// `add: caps` has.
pub fn bounding_set(caps: &[Cap]) -> String {
    std::iter::once("-all".to_owned())
        .chain(caps.iter().map(|c| format!("+{}", c.name.to_lowercase())))
        .collect::<Vec<_>>()
        .join(",")
}
