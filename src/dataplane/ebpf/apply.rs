//! The eBPF mode's [`Dataplane`]: plans the maps' contents, diffs them against what the maps
//! hold and writes only the difference, in [`diff`]'s order.
//!
//! "What the maps hold" is read back from the kernel on a full sync, on the first sync (which
//! adopts the maps a previous run pinned) and after a failed write; otherwise it is what the
//! last successful sync left. A failed write stops the sync: the entries written so far are
//! consistent (see [`diff`]), and the next sync re-reads and finishes the job.

use crate::cluster::{Changes, IpFamily, Snapshot};
use crate::dataplane::{Dataplane, FamilyReport, SyncError, SyncReport};

use super::backend::Backend;
use super::diff::{self, Maps};
use super::plan;

/// The mode's name as `--proxy-mode` spells it.
pub const MODE: &str = "ebpf";

#[doc(alias = "proxier")]
pub struct EbpfDataplane<B> {
    backend: B,
    /// What the maps hold after the last successful sync; `None`: read them.
    last: Option<Maps>,
}

impl<B: Backend> EbpfDataplane<B> {
    pub fn new(backend: B) -> Self {
        EbpfDataplane {
            backend,
            last: None,
        }
    }
}

impl<B: Backend> Dataplane for EbpfDataplane<B> {
    fn mode(&self) -> &'static str {
        MODE
    }

    fn sync(
        &mut self,
        snapshot: &Snapshot,
        _changes: &Changes,
        full: bool,
    ) -> Result<SyncReport, SyncError> {
        let want = plan::plan(snapshot);
        let (current, read) = match self.last.take() {
            Some(m) if !full => (m, false),
            _ => (self.backend.read().map_err(io_error)?, true),
        };
        let ops = diff::diff(&current, &want);
        for op in &ops {
            self.backend.write(op).map_err(|e| SyncError::Refused {
                mode: MODE,
                message: crate::causes::one_line(&e),
            })?;
        }
        let now = diff::applied(current, &ops);
        let objects = now.svc.len() + now.slots.len();
        self.last = Some(now);
        let families = [IpFamily::V4, IpFamily::V6]
            .into_iter()
            .map(|f| {
                let missing = snapshot.no_local_endpoints(f);
                FamilyReport {
                    family: Some(f),
                    // Map entries are not per family: both families' reports carry the totals
                    // on the first, none on the second.
                    operations: if f == IpFamily::V4 { ops.len() } else { 0 },
                    objects: if f == IpFamily::V4 { objects } else { 0 },
                    no_local_endpoints_internal: missing.internal,
                    no_local_endpoints_external: missing.external,
                    iptables_rules: None,
                }
            })
            .collect();
        Ok(SyncReport {
            full: full || read,
            families,
            netlink_messages: 0,
        })
    }
}

fn io_error(e: super::backend::Error) -> SyncError {
    SyncError::Io {
        mode: MODE,
        message: crate::causes::one_line(&e),
        source: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::ebpf::backend::Error;
    use crate::dataplane::ebpf::diff::Op;
    use crate::testing::snapshots::{node, snapshot, svc};

    /// Maps in memory that refuse the write numbered `fail_at` once.
    #[derive(Default)]
    struct Fake {
        maps: Maps,
        reads: usize,
        writes: usize,
        fail_at: Option<usize>,
    }

    impl Backend for Fake {
        fn read(&mut self) -> Result<Maps, Error> {
            self.reads += 1;
            Ok(self.maps.clone())
        }
        fn write(&mut self, op: &Op) -> Result<(), Error> {
            self.writes += 1;
            if self.fail_at == Some(self.writes) {
                self.fail_at = None;
                return Err(Error::Missing("refused on purpose"));
            }
            self.maps = diff::applied(std::mem::take(&mut self.maps), std::slice::from_ref(op));
            Ok(())
        }
    }

    fn web(endpoints: &[&str]) -> Snapshot {
        let mut s = svc("default/web", "10.96.0.10", 80);
        for (i, e) in endpoints.iter().enumerate() {
            s = s.ep(e, 8080, if i % 2 == 0 { "node-a" } else { "node-b" });
        }
        snapshot(node(), vec![s])
    }

    #[test]
    fn an_idle_sync_reads_nothing_and_writes_nothing() {
        let mut dp = EbpfDataplane::new(Fake::default());
        let snap = web(&["10.244.1.5"]);
        dp.sync(&snap, &Changes::default(), false).unwrap();
        let (reads, writes) = (dp.backend.reads, dp.backend.writes);
        let report = dp.sync(&snap, &Changes::default(), false).unwrap();
        assert_eq!((dp.backend.reads, dp.backend.writes), (reads, writes));
        assert_eq!(report.families[0].operations, 0);
        assert_eq!(report.families[0].objects, 2);
    }

    #[test]
    fn a_failed_write_is_finished_by_the_next_sync_after_a_fresh_read() {
        let mut dp = EbpfDataplane::new(Fake {
            fail_at: Some(2),
            ..Fake::default()
        });
        let snap = web(&["10.244.1.5", "10.244.2.5"]);
        assert!(dp.sync(&snap, &Changes::default(), false).is_err());
        let report = dp.sync(&snap, &Changes::default(), false).unwrap();
        assert!(report.full, "re-read after the failure");
        let maps = &dp.backend.maps;
        assert_eq!(maps.svc.len(), 1);
        assert_eq!(maps.svc.values().next().unwrap().count, 2);
        assert_eq!(
            maps.slots.len(),
            2,
            "the half-written set left no slot behind"
        );
        assert_eq!(diff::diff(maps, &plan::plan(&snap)), []);
    }
}
