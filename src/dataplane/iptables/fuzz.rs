//! The iptables mode's fuzz targets ([`crate::fuzzing`]): `iptables-save` output, text about
//! the kernel's state that other programs' rules shape, read as the mode's adoption reads it
//! and as `explain` and `status` trace it.

use crate::cluster::IpFamily;
use crate::fuzzing::Target;

/// What [`Mode::fuzz_targets`](crate::dataplane::mode::Mode::fuzz_targets) declares.
pub const TARGETS: &[Target] = &[("iptables_save", iptables_save)];

/// `iptables-save` output: split into tables, each rule's jump target, and our chains read
/// back as typed rules for each family, with and without `KUBE-FIREWALL` as ours.
fn iptables_save(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    let saved = super::adopt::parse(text);
    for table in saved.values() {
        for (_, line) in &table.rules {
            let _ = super::adopt::jump_target(line);
        }
    }
    for family in IpFamily::ALL {
        for firewall in [false, true] {
            let _ = super::parse::parse(family, &saved, firewall);
        }
    }
}
