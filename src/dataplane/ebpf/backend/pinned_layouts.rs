//! What a restarted proxy finds pinned: maps it may adopt only when their layout is this
//! build's (aya 0.14 reuses a pinned map by name without looking at it), and the counters,
//! which are renewed rather than refused when a build counts another number of reasons.

use std::path::Path;

use super::{Error, remove_if_present};
use crate::dataplane::ebpf::layout::{
    AffKey, AffVal, Backend as Slot, NpKey, RevKey, RevVal, SlotKey, SrcKey, SvcKey, SvcVal,
};
use crate::dataplane::ebpf::names;

/// Refuses pinned maps whose key size, value size or bound differs from this build's. The
/// counters (`kp_stats`) are not checked: they are no state, and [`renew_resized_counters`]
/// replaces them when a build counts more reasons.
pub(super) fn check_pinned_layouts(pin_dir: &Path) -> Result<(), Error> {
    use crate::dataplane::ebpf::layout::{
        FlowKey, FlowVal, KP_MAX_AFFINITY, KP_MAX_FLOWS, KP_MAX_NODEPORTS, KP_MAX_REVERSE,
        KP_MAX_SERVICES, KP_MAX_SLOTS, KP_MAX_SOURCE_RANGES,
    };
    use std::mem::size_of;
    let want = [
        (
            names::MAP_SVC,
            size_of::<SvcKey>(),
            size_of::<SvcVal>(),
            KP_MAX_SERVICES,
        ),
        (
            names::MAP_SLOT,
            size_of::<SlotKey>(),
            size_of::<Slot>(),
            KP_MAX_SLOTS,
        ),
        (
            names::MAP_REV,
            size_of::<RevKey>(),
            size_of::<RevVal>(),
            KP_MAX_REVERSE,
        ),
        (
            names::MAP_NODEPORT,
            size_of::<NpKey>(),
            size_of::<u8>(),
            KP_MAX_NODEPORTS,
        ),
        (
            names::MAP_AFF,
            size_of::<AffKey>(),
            size_of::<AffVal>(),
            KP_MAX_AFFINITY,
        ),
        (
            names::MAP_FLOW,
            size_of::<FlowKey>(),
            size_of::<FlowVal>(),
            KP_MAX_FLOWS,
        ),
        (
            names::MAP_SRC,
            size_of::<SrcKey>(),
            size_of::<u8>(),
            KP_MAX_SOURCE_RANGES,
        ),
    ];
    for (name, key, value, max_entries) in want {
        let path = pin_dir.join(name);
        if !path.exists() {
            continue;
        }
        let info =
            aya::maps::MapInfo::from_pin(&path).map_err(|source| Error::Map { name, source })?;
        let pinned = (info.key_size(), info.value_size(), info.max_entries());
        let wanted = (key as u32, value as u32, max_entries);
        if pinned != wanted {
            return Err(Error::Layout {
                path,
                pinned,
                wanted,
            });
        }
    }
    Ok(())
}

/// Unpins a `kp_stats` of another size than this build's (an upgrade that counts a new reason):
/// the programs loaded next pin a new one, and the counters start again from zero, which
/// Prometheus reads as a counter reset. Every other map keeps its state across the upgrade.
pub(super) fn renew_resized_counters(pin_dir: &Path) -> Result<(), Error> {
    let name = names::MAP_STATS;
    let path = pin_dir.join(name);
    if !path.exists() {
        return Ok(());
    }
    let info = aya::maps::MapInfo::from_pin(&path).map_err(|source| Error::Map { name, source })?;
    let wanted = u32::try_from(crate::dataplane::ebpf::stats::REASONS.len()).unwrap_or(u32::MAX);
    if info.max_entries() != wanted {
        tracing::info!(
            pinned = info.max_entries(),
            wanted,
            "the datapath counters are renewed"
        );
        remove_if_present(&path)?;
    }
    Ok(())
}
