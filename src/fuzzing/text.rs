//! Targets for rule tools' text about the kernel's state, which other programs' rules can
//! shape: `nft -j list table` (the nft-command backend's adoption) and `iptables-save` (the
//! iptables mode's adoption, and what `explain` and `status` trace).

use crate::cluster::IpFamily;
use crate::dataplane::iptables;
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

/// `iptables-save` output: split into tables, each rule's jump target, and our chains read
/// back as typed rules for each family, with and without `KUBE-FIREWALL` as ours.
pub fn iptables_save(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    let saved = iptables::adopt::parse(text);
    for table in saved.values() {
        for (_, line) in &table.rules {
            let _ = iptables::adopt::jump_target(line);
        }
    }
    for family in IpFamily::ALL {
        for firewall in [false, true] {
            let _ = iptables::parse::parse(family, &saved, firewall);
        }
    }
}
