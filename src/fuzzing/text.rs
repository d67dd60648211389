//! Targets for rule tools' text about the kernel's state, which other programs' rules can
//! shape: `nft -j list table` (the nft-command backend's adoption). `iptables-save` is the
//! iptables mode's own target (`dataplane/iptables/fuzz.rs`).

use crate::nft::{self, Family, Ruleset, diff, rebuild, render};

/// One family's `nft -j list table` output, read for each family, diffed and rendered as a
/// sync renders a transaction.
pub fn nft_json(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    for family in [Family::Ip, Family::Ip6] {
        if let Ok(parsed) = nft::adopt::parse(text, family) {
            let _ = render(&diff(&parsed.ruleset, &Ruleset::empty(family)));
            let _ = render(&rebuild(&parsed.ruleset));
        }
    }
}
