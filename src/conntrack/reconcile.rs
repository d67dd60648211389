//! The conntrack reconciler task: after every successful sync that changed a UDP or SCTP
//! frontend, and every sync period regardless, it compares each family's conntrack table with
//! the model and deletes exactly the stale flows ([`super::plan`]).
//!
//! Level-triggered: a pass needs no event history, only the latest [`Frontends`], so a missed
//! or failed pass is repaired by the next periodic one. It never flushes the table and never
//! deletes a flow it has not judged stale, also not at start-up. The netlink work runs on a
//! blocking thread; the runner's observer only publishes the frontends and never waits.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::flow::Flow;
use super::plan::{Frontends, Translation};
use super::socket::{self, Socket};
use crate::cluster::IpFamily;
use crate::metrics::Metrics;

/// What one pass over one family did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pass {
    /// Entries in the family's table.
    pub flows: usize,
    /// Entries judged stale.
    pub stale: usize,
    pub deleted: u64,
    /// Stale entries that were gone before the delete reached them.
    pub gone: u64,
    /// Stale entries the kernel refused to delete, with the errno.
    pub failed: Vec<(Flow, i32)>,
    /// Why some entries could not be decoded (a few).
    pub undecodable: Vec<String>,
}

/// How the mode translates flows now, read at each pass after the table is dumped, so a flow
/// in the dump is judged against listeners at least as recent as it (the userspace mode's
/// relay opens and closes them at each sync).
pub type Translations = Arc<dyn Fn() -> Translation + Send + Sync>;

/// A translation that never changes: the NAT modes' [`Translation::ToEndpoint`].
pub fn fixed(translation: Translation) -> Translations {
    Arc::new(move || translation.clone())
}

/// One reconcile of one family: dump, judge, delete the stale entries. Blocking.
#[doc(alias = "CleanStaleEntries")]
pub fn pass(
    socket: &mut Socket,
    frontends: &Frontends,
    family: IpFamily,
    translation: &dyn Fn() -> Translation,
) -> Result<Pass, socket::Error> {
    let dumped = socket.dump(family)?;
    let translation = translation();
    let stale: Vec<Flow> = frontends
        .stale(&dumped.flows, &translation)
        .cloned()
        .collect();
    for flow in &stale {
        tracing::trace!(%flow, "stale conntrack flow");
    }
    let count = stale.len();
    let deleted = if stale.is_empty() {
        Default::default()
    } else {
        socket.delete(stale)?
    };
    Ok(Pass {
        flows: dumped.flows.len(),
        stale: count,
        deleted: deleted.deleted,
        gone: deleted.gone,
        failed: deleted.failed,
        undecodable: dumped.undecodable,
    })
}

/// Opens a socket in the current network namespace and runs one [`pass`].
pub fn pass_here(
    frontends: &Frontends,
    family: IpFamily,
    translation: &dyn Fn() -> Translation,
) -> Result<Pass, socket::Error> {
    pass(&mut Socket::open()?, frontends, family, translation)
}

/// Runs forever: a pass per family whenever `frontends` changes, and every `period` since the
/// last pass. Nothing happens before the first successful sync publishes frontends. Flows
/// are judged as the mode's NAT works at the time of each pass (`translations`).
pub async fn run(
    frontends: watch::Receiver<Option<Arc<Frontends>>>,
    period: Duration,
    metrics: Metrics,
    translations: Translations,
) {
    let pass = move |f: &Frontends, family| pass_here(f, family, &*translations);
    run_with(frontends, period, metrics, pass).await
}

/// Waits for the next pass: until `frontends` changes or `period` has passed since the last
/// one, and then only for frontends to judge against (none before the first successful sync
/// publishes them; an empty set has nothing that could be stale, so its tables are not
/// dumped). `None` once the publisher is gone. Shared with the eBPF mode's UDP socket
/// reconciler, which follows the same schedule.
pub async fn next_pass(
    frontends: &mut watch::Receiver<Option<Arc<Frontends>>>,
    period: Duration,
) -> Option<Arc<Frontends>> {
    loop {
        tokio::select! {
            changed = frontends.changed() => changed.ok()?,
            () = tokio::time::sleep(period) => {}
        }
        match frontends.borrow_and_update().clone() {
            Some(current) if !current.is_empty() => return Some(current),
            _ => {}
        }
    }
}

/// [`run`] with the pass given, so the schedule is testable without a kernel.
pub async fn run_with<P>(
    mut frontends: watch::Receiver<Option<Arc<Frontends>>>,
    period: Duration,
    metrics: Metrics,
    pass: P,
) where
    P: Fn(&Frontends, IpFamily) -> Result<Pass, socket::Error> + Clone + Send + 'static,
{
    // Whether the last pass of each family failed: the first failure warns, repeats do not.
    let mut failing = [false; 2];
    while let Some(current) = next_pass(&mut frontends, period).await {
        for family in IpFamily::ALL {
            let started = tokio::time::Instant::now();
            let (f, p) = (current.clone(), pass.clone());
            let result = tokio::task::spawn_blocking(move || p(&f, family)).await;
            let duration = started.elapsed();
            match result {
                Ok(Ok(done)) => {
                    failing[family.index()] = false;
                    metrics.observe_conntrack_reconcile(family, duration, done.deleted);
                    report(family, &done, duration);
                }
                Ok(Err(error)) if !failing[family.index()] => {
                    failing[family.index()] = true;
                    tracing::warn!(%family, error = %crate::causes::one_line(&error), "conntrack reconcile failed; retrying every sync period");
                }
                Ok(Err(error)) => {
                    tracing::debug!(%family, error = %crate::causes::one_line(&error), "conntrack reconcile failed again");
                }
                Err(error) => tracing::error!(%family, %error, "conntrack reconcile task panicked"),
            }
        }
    }
}

fn report(family: IpFamily, pass: &Pass, duration: Duration) {
    tracing::debug!(
        %family,
        flows = pass.flows,
        stale = pass.stale,
        deleted = pass.deleted,
        gone = pass.gone,
        elapsed = %crate::go_duration::GoDuration(duration),
        "conntrack reconciled"
    );
    for (flow, errno) in &pass.failed {
        tracing::warn!(%family, %flow, errno, "the kernel refused to delete a stale conntrack flow");
    }
    if let Some(reason) = pass.undecodable.first() {
        tracing::warn!(%family, reason = %reason, "some conntrack entries could not be decoded; they were left alone");
    }
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;
