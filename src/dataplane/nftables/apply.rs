//! The nftables mode as the sync runner drives it: plan both families, apply, report.
//!
//! Glue between the incremental [`Planner`], the [`Applier`] and the [`Drift`] the monitor
//! feeds. A sync is full when the runner asks, at start-up, after a failed apply, or when an
//! outside change is pending: the planner re-plans everything and the applier diffs against
//! the kernel read back. Otherwise the planner re-plans only the service ports the runner's
//! [`Changes`] name, and its transactions (from its previous plan, which the kernel holds) are
//! sent as they are: the planner's rulesets are "last applied", never copied per sync.
//! Counts for the metrics come from the snapshot, the apply report and the backend's count of
//! netlink messages sent (before and after the sync); nothing here reads a clock or a registry.

use std::sync::Arc;

use crate::cluster::{Changes, Snapshot};
use crate::dataplane::monitor::Drift;
use crate::dataplane::nftables::mode_config::ModeConfig;
use crate::dataplane::nftables::plan::Planner;
use crate::dataplane::{Dataplane, FamilyReport, SyncError, SyncReport};
use crate::nft::apply::{self, Applier};
use crate::nft::backend::Backend;
use crate::nft::ruleset::Family;

const MODE: &str = "nftables";

/// See the module doc.
#[doc(alias = "proxier")]
pub struct NftablesDataplane<B = Box<dyn Backend>> {
    planner: Planner,
    /// The kernel holds the planner's rulesets: the last apply succeeded. False at start-up
    /// and after a failure (the planner has moved on; the kernel kept the rules before).
    in_kernel: bool,
    applier: Applier<B>,
    drift: Arc<Drift>,
}

impl NftablesDataplane<Box<dyn Backend>> {
    /// The real mode over `backend` (netlink or `nft`; see `backend::Encoder`), which records
    /// where its transactions come from in `drift` so the monitor can tell them from others'.
    pub fn new(
        cfg: ModeConfig,
        backend: impl Backend + 'static,
        drift: Arc<Drift>,
    ) -> NftablesDataplane {
        NftablesDataplane::with_backend(cfg, Box::new(backend), drift)
    }
}

impl<B: Backend> NftablesDataplane<B> {
    /// The mode over any backend (tests pass one that fails on demand). The backend records
    /// its transactions in `drift` (and pauses the monitor for large ones), so the monitor
    /// never takes our own changes for another program's.
    pub fn with_backend(
        cfg: ModeConfig,
        mut backend: B,
        drift: Arc<Drift>,
    ) -> NftablesDataplane<B> {
        backend.watched_by(drift.clone());
        NftablesDataplane {
            planner: Planner::new(cfg),
            in_kernel: false,
            applier: Applier::new(backend),
            drift,
        }
    }

    pub fn applier(&self) -> &Applier<B> {
        &self.applier
    }

    pub fn applier_mut(&mut self) -> &mut Applier<B> {
        &mut self.applier
    }

    /// What the monitor and the metrics share with this mode.
    pub fn drift(&self) -> &Arc<Drift> {
        &self.drift
    }
}

impl<B: Backend> NftablesDataplane<B> {
    /// Plans everything and diffs against the kernel read back. When the kernel should hold
    /// the previous plan (`in_kernel`), the kernel is read first and compared with it (an
    /// outside change), and only then is the plan replaced, so the proxy never holds the
    /// previous plan, the new one and the kernel's tables at once. Otherwise (start-up, after a
    /// failure) the new plan comes first and names what to read by key.
    fn full_sync(
        &mut self,
        snapshot: &Snapshot,
        in_kernel: bool,
    ) -> Result<apply::Report, apply::Error> {
        if !in_kernel {
            self.planner.plan_afresh(snapshot);
        }
        let rulesets = self.planner.rulesets();
        let read = self
            .applier
            .read(rulesets, in_kernel.then_some(&rulesets[..]))?;
        if in_kernel {
            self.planner.plan_afresh(snapshot);
        }
        self.applier.apply_read(read, self.planner.rulesets())
    }
}

impl<B: Backend> Dataplane for NftablesDataplane<B> {
    fn mode(&self) -> &'static str {
        MODE
    }

    /// On a table we know is as we left it, over netlink: a few ports' changes are one small batch.
    fn runs_inline(&self, changes: &Changes) -> bool {
        let _ = changes;
        self.in_kernel
            && !self.drift.is_pending()
            && !self.applier.needs_full()
            && self.applier.backend().in_process()
    }

    fn sync(
        &mut self,
        snapshot: &Snapshot,
        changes: &Changes,
        full: bool,
    ) -> Result<SyncReport, SyncError> {
        let outside = self.drift.take_pending();
        // Cleared until the kernel accepts: a panic in between (the runner survives it) leaves
        // the next sync full.
        let in_kernel = std::mem::take(&mut self.in_kernel);
        let sent_before = self.applier.backend().messages_sent();
        let steady = !full && !outside && in_kernel && !self.applier.needs_full();
        let result = if steady {
            // `changes` names every port changed since the previous update: the runner merges
            // the changes of failed syncs into the next one, and a failure makes it full.
            let update = self.planner.update(snapshot, changes);
            self.applier.send(&update.transactions)
        } else {
            self.full_sync(snapshot, in_kernel)
        };
        self.in_kernel = result.is_ok();
        let report = match result {
            Ok(r) => r,
            Err(e) => {
                if outside {
                    // Still pending: the retry must read the kernel too (it will: a failed
                    // apply makes the next one full).
                    tracing::debug!("repair of an outside change failed; retried as a full sync");
                }
                return Err(sync_error(e));
            }
        };
        let objects: Vec<(Family, usize)> = self
            .planner
            .rulesets()
            .iter()
            .map(|r| (r.family, r.objects()))
            .collect();
        if report.repaired {
            self.drift.repaired();
            tracing::warn!(
                operations = report.operations.iter().map(|(_, n)| n).sum::<usize>(),
                "repaired our nftables table after an outside change"
            );
        }
        let families = objects
            .into_iter()
            .map(|(family, objects)| {
                let ip = family.ip_family();
                let no_local = snapshot.no_local_endpoints(ip);
                FamilyReport {
                    family: Some(ip),
                    operations: report
                        .operations
                        .iter()
                        .find(|(f, _)| *f == family)
                        .map_or(0, |(_, n)| *n),
                    objects,
                    no_local_endpoints_internal: no_local.internal,
                    no_local_endpoints_external: no_local.external,
                    iptables_rules: None,
                }
            })
            .collect();
        let sent = self.applier.backend().messages_sent();
        Ok(SyncReport {
            full: report.full,
            families,
            netlink_messages: usize::try_from(sent.saturating_sub(sent_before))
                .unwrap_or(usize::MAX),
        })
    }
}

fn sync_error(e: apply::Error) -> SyncError {
    match e {
        apply::Error::Refused { .. } => SyncError::refused(MODE, e),
        apply::Error::Backend(inner) => SyncError::io(MODE, inner),
    }
}
