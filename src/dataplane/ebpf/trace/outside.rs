//! The tc programs' path: the first packet of a flow from outside the node, walked through the
//! maps as `kp_tc_ingress` in `bpf/kp_tc.c` walks it.
//!
//! Pure: no I/O, never fails. The steps, in the program's order: the `kp_svc` entry of scope
//! external for the destination, else for its address at port 0 (a ClusterIP's undefined
//! ports; none: the packet goes on to the node's stack unchanged);
//! the source check against `kp_src` (a longest-prefix match over the frontend and the
//! client's address: no entry, or a range entry, lets it in; the frontend's marker alone
//! drops it), made before the count, so a restricted frontend drops outsiders even when it
//! has no endpoint; a count of 0 drops (drop flag) or answers ICMP port unreachable; then a
//! remembered backend (ClientIP affinity, keyed by [`client_key`]) found among the first
//! slots, else one slot drawn at random. A flow already in `kp_flow` follows its entry, but
//! `explain` asks about a new connection, whose source port it does not know, so that table
//! is not read here.

use std::net::{IpAddr, SocketAddr};

use super::{Dropped, Entry, Fate, Hook, Maps, Remembered, Trace};
use crate::dataplane::ebpf::diff;
use crate::dataplane::ebpf::layout::{SRC_FRONTEND_BITS, SvcKey, addr_words};
use crate::dataplane::ebpf::plan::{Scope, Transport};

/// The `kp_aff` key the tc programs give a client from outside (`kp_client_key` in
/// `bpf/kp_tc.c`): a hash of its address as the maps hold it, with the top bit set so it never
/// equals a network namespace cookie (the socket programs' keys).
pub fn client_key(client: IpAddr) -> u64 {
    let w = addr_words(client).map(u64::from);
    let h = w[0].wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ w[1].wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
        ^ w[2].wrapping_mul(0x1656_67b1_9e37_79f9)
        ^ w[3].wrapping_mul(0x27d4_eb2f_1656_67c5);
    h | (1 << 63)
}

/// Walks a new flow from `client` to `to` through `maps`, as `kp_tc_ingress` does.
pub(super) fn trace(
    maps: &Maps,
    transport: Transport,
    to: SocketAddr,
    client: IpAddr,
    remembered: Option<&Remembered>,
) -> Trace {
    let hooks = vec![Hook::TcIngress];
    let Some((key, val)) = super::lookup(maps, to, transport, Scope::External) else {
        return Trace {
            hooks,
            entry: None,
            source_ranges: None,
            fate: Fate::Untouched,
        };
    };
    let entry = Entry::at(&key, val);
    let source_ranges = ranges(maps, &key);
    let fate = if !allowed(maps, &key, client) {
        Fate::Dropped(Dropped::SourceRange)
    } else if entry.count == 0 {
        if entry.drop {
            Fate::Dropped(Dropped::NoLocalEndpoint)
        } else {
            Fate::Refused
        }
    } else {
        let slots = entry.slots(maps);
        let remembered = remembered.and_then(|r| affine(&entry, r, &slots));
        Fate::Translated { slots, remembered }
    };
    Trace {
        hooks,
        entry: Some(entry),
        source_ranges,
        fate,
    }
}

/// Whether `kp_src` lets `client` use the frontend `key`: the longest entry of the frontend
/// that holds the client decides (the marker holds every client and says no; a range says
/// yes); no entry of the frontend lets everyone in.
pub(super) fn allowed(maps: &Maps, key: &SvcKey, client: IpAddr) -> bool {
    maps.src
        .iter()
        .filter(|k| k.frontend() == *key)
        .filter(|k| {
            k.prefixlen == SRC_FRONTEND_BITS || k.source().is_some_and(|n| n.contains(&client))
        })
        .max_by_key(|k| k.prefixlen)
        .is_none_or(|k| diff::src_value(k) == 1)
}

/// The ranges `kp_src` holds for the frontend `key`, when its marker restricts it.
pub(super) fn ranges(maps: &Maps, key: &SvcKey) -> Option<Vec<ipnet::IpNet>> {
    let mine = || maps.src.iter().filter(|k| k.frontend() == *key);
    mine()
        .any(|k| k.prefixlen == SRC_FRONTEND_BITS)
        .then(|| mine().filter_map(|k| k.source()).collect())
}

/// The backend `r` gives under `entry`, as `kp_pick` decides: within the timeout, and found
/// among the first slots (the tc program does not try the remembered slot first, unlike the
/// socket programs).
fn affine(entry: &Entry, r: &Remembered, slots: &[Option<SocketAddr>]) -> Option<SocketAddr> {
    let backend = super::fresh(entry, r)?;
    slots
        .iter()
        .take(usize::from(super::AFFINITY_SCAN))
        .any(|s| *s == Some(backend))
        .then_some(backend)
}

#[cfg(test)]
#[path = "outside_tests.rs"]
mod tests;
