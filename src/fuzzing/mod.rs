//! The entry points of coverage-guided fuzzing: one function per decoder of bytes the proxy did
//! not write, each taking arbitrary bytes and calling the real decoder the way the proxy does.
//!
//! The fuzz targets in `fuzz/` (libFuzzer, their own cargo package) and the replay of their
//! corpora in the default test suite (`tests/fuzz_corpora.rs`) both call [`TARGETS`], so what
//! is fuzzed and what is replayed are the same code. A target returns normally on any input:
//! a decoder that panics, or that loops without end, is the defect a run finds.
//!
//! This module holds the targets over shared code; a mode's decoders are fuzzed by the targets
//! it declares ([`Mode::fuzz_targets`](crate::dataplane::mode::Mode::fuzz_targets), in its
//! folder's `fuzz.rs`), which [`TARGETS`] gathers through the registry.
//!
//! Input shapes, so that captured bytes serve as seeds unchanged: an API list body as the API
//! server sends it, a manifest or configuration file's text, the datagram(s) a netlink socket
//! receives (one or more messages, read as the proxy reads each answer), or a rule tool's
//! output (`nft -j`, `iptables-save`).

use std::sync::LazyLock;

use crate::dataplane::modes;

mod api;
pub(crate) mod netlink;
mod text;

/// A fuzz target: its name (the directory of its corpus) and its entry point.
pub type Target = (&'static str, fn(&[u8]));

/// A target over shared code: its own decoders, then every mode's part of the same name.
macro_rules! shared {
    ($name:literal, $decoders:path) => {
        ($name, |bytes: &[u8]| {
            $decoders(bytes);
            modes_parts($name, bytes);
        })
    };
}

/// The targets over shared code.
const SHARED: &[Target] = &[
    shared!("protobuf_list", api::protobuf_list),
    shared!("json_list", api::json_list),
    shared!("manifests", api::manifests),
    shared!("config", api::config),
    shared!("nftables_netlink", netlink::nftables),
    shared!("rtnetlink", netlink::rtnetlink),
    shared!("conntrack", netlink::conntrack),
    shared!("nft_json", text::nft_json),
];

/// Every mode's declared targets, in [`modes::ALL`]'s order.
fn modes_targets() -> impl Iterator<Item = &'static Target> {
    modes::ALL
        .into_iter()
        .flat_map(|mode| modes::of(mode).fuzz_targets())
}

/// Runs every mode's target called `name` on `bytes`: the modes' parts of a shared target.
fn modes_parts(name: &str, bytes: &[u8]) {
    for (_, part) in modes_targets().filter(|(n, _)| *n == name) {
        part(bytes);
    }
}

/// Every target, by name: the shared ones, then the modes' own (those not named as a shared
/// target, which run as its parts).
pub static TARGETS: LazyLock<Vec<Target>> = LazyLock::new(|| {
    let mut all = SHARED.to_vec();
    for target in modes_targets() {
        if !all.iter().any(|(n, _)| *n == target.0) {
            all.push(*target);
        }
    }
    all
});

/// The entry point of the target called `name`.
pub fn target(name: &str) -> Option<fn(&[u8])> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name two modes declare, and no shared target has, would list only the first mode's
    /// target and leave the second's unreached.
    #[test]
    fn a_modes_own_target_is_declared_by_that_mode_alone() {
        for mode in modes::ALL {
            for (name, _) in modes::of(mode).fuzz_targets() {
                let shared = SHARED.iter().any(|(n, _)| n == name);
                let declaring = modes::ALL
                    .into_iter()
                    .filter(|m| modes::of(*m).fuzz_targets().iter().any(|(n, _)| n == name))
                    .count();
                assert!(
                    shared || declaring == 1,
                    "{name} is declared by {declaring} modes"
                );
            }
        }
    }

    #[test]
    fn every_target_is_found_by_its_name_once() {
        for (name, _) in TARGETS.iter() {
            assert!(target(name).is_some(), "{name}");
            assert_eq!(
                TARGETS.iter().filter(|(n, _)| n == name).count(),
                1,
                "{name}"
            );
        }
    }
}
