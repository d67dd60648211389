//! The entry points of coverage-guided fuzzing: one function per decoder of bytes the proxy did
//! not write, each taking arbitrary bytes and calling the real decoder the way the proxy does.
//!
//! The fuzz targets in `fuzz/` (libFuzzer, their own cargo package) and the replay of their
//! corpora in the default test suite (`tests/fuzz_corpora.rs`) both call [`TARGETS`], so what
//! is fuzzed and what is replayed are the same code. A target returns normally on any input:
//! a decoder that panics, or that loops without end, is the defect a run finds.
//!
//! Input shapes, so that captured bytes serve as seeds unchanged: an API list body as the API
//! server sends it, a manifest or configuration file's text, the datagram(s) a netlink socket
//! receives (one or more messages, read as the proxy reads each answer), or a rule tool's
//! output (`nft -j`, `iptables-save`).

mod api;
mod netlink;
mod text;

/// A fuzz target: its name (the directory of its corpus) and its entry point.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, by name.
pub const TARGETS: &[Target] = &[
    ("protobuf_list", api::protobuf_list),
    ("json_list", api::json_list),
    ("manifests", api::manifests),
    ("config", api::config),
    ("nftables_netlink", netlink::nftables),
    ("ipvs_netlink", netlink::ipvs),
    ("rtnetlink", netlink::rtnetlink),
    ("conntrack", netlink::conntrack),
    ("sock_diag", netlink::sock_diag),
    ("nft_json", text::nft_json),
    ("iptables_save", text::iptables_save),
];

/// The entry point of the target called `name`.
pub fn target(name: &str) -> Option<fn(&[u8])> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}
