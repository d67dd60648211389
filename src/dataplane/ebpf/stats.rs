//! The eBPF mode's datapath counters and map fill levels, as the metrics read them at each
//! scrape: the programs count per reason in the per-CPU array `kp_stats`; the applier records
//! how many entries the maps it writes hold after each sync.
//!
//! The counters are read from the pinned map, so they survive a restart of the proxy (they
//! count from the programs' first load until `--cleanup`).

use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use aya::maps::{Map, MapData, PerCpuArray};

use super::backend::Error;
use super::{layout, names};
use crate::dataplane::counters::{DatapathCounts, DatapathSource};

/// The reasons the programs count, in `enum kp_stat`'s order (`bpf/kp_maps.h`).
pub const REASONS: [&str; 7] = [
    "translated",
    "refused",
    "affine",
    "reversed",
    "bind-refused",
    "dropped",
    "nat-port-exhausted",
];

/// The maps whose fill level is reported, with their bounds (`KP_MAX_*` in the header).
pub const FILLED: [(&str, u32); 2] = [
    (names::MAP_SVC, layout::KP_MAX_SERVICES),
    (names::MAP_SLOT, layout::KP_MAX_SLOTS),
];

/// A handle the metrics and the applier share.
#[derive(Clone, Default)]
pub struct Stats(Arc<Inner>);

#[derive(Default)]
struct Inner {
    counters: Mutex<Option<PerCpuArray<MapData, u64>>>,
    entries: [AtomicUsize; 2],
}

impl fmt::Debug for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stats").finish_non_exhaustive()
    }
}

impl Stats {
    /// Opens the counters pinned under `pin_root` (after [`super::backend::Kernel::open`]).
    pub fn open(pin_root: &Path) -> Result<Stats, Error> {
        let name = names::MAP_STATS;
        let path = names::pin_dir(pin_root).join(name);
        let data = MapData::from_pin(&path).map_err(|source| Error::Map { name, source })?;
        let array = PerCpuArray::try_from(Map::PerCpuArray(data))
            .map_err(|source| Error::Map { name, source })?;
        let stats = Stats::default();
        *stats
            .0
            .counters
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(array);
        Ok(stats)
    }

    /// Records the entries of `kp_svc` and `kp_slot` after a sync.
    pub fn record_entries(&self, svc: usize, slots: usize) {
        self.0.entries[0].store(svc, Ordering::Relaxed);
        self.0.entries[1].store(slots, Ordering::Relaxed);
    }

    pub fn read(&self) -> DatapathCounts {
        let counters = self
            .0
            .counters
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let reasons = counters
            .as_ref()
            .map(|array| {
                (0u32..)
                    .zip(REASONS)
                    .map(|(i, reason)| {
                        let sum = array
                            .get(&i, 0)
                            .map(|per_cpu| per_cpu.iter().sum())
                            .unwrap_or(0);
                        (reason, sum)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let maps = FILLED
            .iter()
            .zip(&self.0.entries)
            .map(|(&(name, bound), n)| (name, n.load(Ordering::Relaxed), bound))
            .collect();
        DatapathCounts { reasons, maps }
    }
}

impl DatapathSource for Stats {
    fn counts(&self) -> DatapathCounts {
        self.read()
    }
}
