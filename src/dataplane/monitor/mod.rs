//! Notices another program changing our rules in nf_tables, so the next sync re-reads the kernel
//! and repairs them: a netlink socket subscribed to the nf_tables multicast group
//! (`NFNLGRP_NFTABLES`, what `nft monitor` reads), without an `nft` process. Shared by the
//! modes whose rules live in nf_tables: each declares a [`Watch`] that says which objects are
//! its own ([`crate::dataplane::mode::Mode::watch`]): [`OurTable`] for the modes whose rules
//! are in our table, the iptables mode's chains on the nft back end (iptables-nft keeps each
//! iptables table as an nf_tables table, `ip nat` and so on). The monitor itself knows no
//! mode's objects.
//!
//! The message logic ([`Events`], in `events.rs`) is pure and tested on notification bytes;
//! [`run`] is the I/O around it. The kernel notifies each object a transaction touched and then `NEWGEN` with the
//! new generation and the pid (thread id) of the process that committed it. A transaction that
//! touched our objects and came from a process or thread that is not ours ([`OwnProcesses`]: our
//! `nft -f` and `iptables-restore` children, or our threads that sent a netlink batch) is an
//! outside change: [`Drift`] then marks the next sync as full and wakes whoever awaits
//! [`Drift::changed`] (the sync runner). Notifications the kernel had to drop (`ENOBUFS`: a huge
//! transaction overflowed the socket) count as an outside change too: what was lost may have
//! been someone else's.
//!
//! The kernel builds a notification for every object of a transaction while any socket
//! listens, which for a cold sync of 250,000 elements costs about as much kernel time as the
//! transaction itself. So the applier may [`Drift::pause_monitor`] around a large transaction
//! of its own ([`apply_unwatched`]): the monitor leaves the group until the returned [`Paused`]
//! is dropped, and the applier compares the ruleset generation before and after to learn
//! whether anyone else committed meanwhile ([`unseen_commit`]), which it reports with
//! [`Drift::notice`].
//!
//! Never repairs anything itself and never decides when to sync. The proxy (`cli::run`) starts
//! it for the mode that asks; a constructor never does.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use tokio::sync::Notify;

use crate::netlink::nfnetlink::NFNLGRP_NFTABLES;
use crate::netlink::socket::Options;
use crate::netlink::subscription::Subscription;
use crate::nft::backend::netlink;

mod events;

#[cfg(test)]
pub(crate) use events::notices;
pub use events::{Committer, Events, OurTable, Watch};

/// How many of our recent tool pids are remembered. Syncs run one at a time, so a handful
/// covers every transaction whose events can still be in flight.
const OWN_PIDS: usize = 64;

/// Room for the notifications of a large transaction (one per element) before the kernel
/// drops some (`ENOBUFS`; the monitor then asks for a full sync).
const NOTIFY_BUFFER: usize = 32 << 20;

/// How long to wait before reopening a socket that failed, doubling while it keeps failing, so a
/// broken socket can neither spin nor cause a full sync every second. Events may have been
/// missed meanwhile, so a reopen also asks for a full sync.
const RESTART_DELAY: Duration = Duration::from_secs(1);
const RESTART_DELAY_MAX: Duration = Duration::from_secs(60);
/// How long a pause or resume waits for the monitor to act on it. Past that the applier goes
/// on: a pause that did not happen costs only time, and a late resume is followed by a full
/// sync (see [`Paused`]).
const CONTROL_WAIT: Duration = Duration::from_secs(2);

/// What the applier asks of the running monitor: join (`true`) or leave the group, answered on
/// the channel once done.
type Control = (bool, mpsc::SyncSender<()>);

/// Who commits for us: the pids of the `nft -f` and `iptables-restore` processes we started,
/// the thread ids of our threads that sent a netlink batch, and the port ids of our netlink
/// sockets; shared by the backend (writes) and the monitor (reads).
///
/// A transaction is ours when the kernel's notice names one of them, by the committing
/// thread's id or by the sending socket's port id. The thread id the kernel gives is the one
/// of its initial pid namespace: in a pod without the host's pid namespace it is never ours
/// as we see it, so the port id decides there. A child's netlink socket is bound to the
/// child's pid as its own namespace sees it (ours), so a child's pid stands for both.
#[derive(Clone, Debug, Default)]
pub struct OwnProcesses(Arc<Mutex<VecDeque<u32>>>);

impl OwnProcesses {
    /// Records a pid, a thread id or a port id of ours (0, the kernel's port, never counts).
    pub fn record(&self, id: u32) {
        if id == 0 {
            return;
        }
        let mut ids = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if ids.len() == OWN_PIDS {
            ids.pop_front();
        }
        ids.push_back(id);
    }

    /// Whether the transaction was committed by us.
    pub fn committed(&self, by: Committer) -> bool {
        let ids = self.0.lock().unwrap_or_else(|p| p.into_inner());
        [by.pid, by.port_id]
            .iter()
            .any(|id| *id != 0 && ids.contains(id))
    }
}

/// What the monitor tells the dataplane and the runner: an outside change is pending, and how
/// many were noticed and repaired (for `kubeproxy_rs_nftables_repairs_total`).
#[derive(Debug, Default)]
pub struct Drift {
    notify: Arc<Notify>,
    pending: AtomicBool,
    own: OwnProcesses,
    noticed: AtomicU64,
    repairs: AtomicU64,
    pauses: AtomicU64,
    /// The running monitor's control channel; `None` while no monitor runs.
    control: Mutex<Option<tokio::sync::mpsc::UnboundedSender<Control>>>,
}

/// The monitor is not listening until this is dropped; dropping it makes it listen again and
/// waits until it does. See [`Drift::pause_monitor`].
#[must_use = "the monitor listens again when this is dropped"]
pub struct Paused<'a> {
    drift: &'a Drift,
    control: tokio::sync::mpsc::UnboundedSender<Control>,
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        if !ask(&self.control, true) {
            // Changes from now until the monitor listens again may go unseen.
            tracing::warn!("the nftables monitor did not resume in time; syncing fully");
            self.drift.notice();
        }
    }
}

/// Sends one control request and waits for the monitor to act on it.
fn ask(control: &tokio::sync::mpsc::UnboundedSender<Control>, subscribe: bool) -> bool {
    let (done, acted) = mpsc::sync_channel(1);
    control.send((subscribe, done)).is_ok() && acted.recv_timeout(CONTROL_WAIT).is_ok()
}

/// Whether another program committed between two readings of the ruleset generation around
/// our own transaction, which moved the generation on by `commits` (one per nf_tables batch:
/// one for a netlink batch or `nft -f`, one per table for `iptables-restore`; none if refused).
pub fn unseen_commit(before: u32, after: u32, commits: u32) -> bool {
    after.wrapping_sub(before) != commits
}

/// Runs `apply`, a large transaction of ours that commits `commits` generations when it
/// succeeds, with the monitor paused, so the kernel builds no notification per object; then
/// asks for a full sync through `drift` if anyone else committed meanwhile. `generation` reads
/// the ruleset generation (`None`: unknown); without one before, nothing is paused.
pub fn apply_unwatched<E>(
    drift: &Drift,
    mut generation: impl FnMut() -> Option<u32>,
    commits: u32,
    apply: impl FnOnce() -> Result<(), E>,
) -> Result<(), E> {
    let Some(before) = generation() else {
        return apply();
    };
    let paused = drift.pause_monitor();
    let result = apply();
    let Some(paused) = paused else {
        return result;
    };
    // Listening again before the second reading: a commit after it is the monitor's.
    drop(paused);
    match generation() {
        Some(after) if result.is_ok() && !unseen_commit(before, after, commits) => {}
        Some(after) if result.is_err() => {
            // A failed sync is followed by a full one anyway.
            tracing::debug!(
                before,
                after,
                "generation moved during a refused transaction"
            );
        }
        _ => {
            tracing::info!(
                "another nf_tables transaction may have run while our monitor was paused; syncing fully"
            );
            drift.notice();
        }
    }
    result
}

impl Drift {
    pub fn new() -> Arc<Drift> {
        Arc::new(Drift::default())
    }

    /// The pid list the backend must record into.
    pub fn own_processes(&self) -> OwnProcesses {
        self.own.clone()
    }

    /// Records an outside change (or a stretch of unwatched time) and wakes the runner.
    pub fn notice(&self) {
        self.noticed.fetch_add(1, Ordering::Relaxed);
        self.pending.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }

    /// Whether an outside change is pending; clears it. The dataplane calls this at the start
    /// of a sync and then syncs fully.
    pub fn take_pending(&self) -> bool {
        self.pending.swap(false, Ordering::SeqCst)
    }

    /// Whether an outside change is pending, leaving it so.
    pub fn is_pending(&self) -> bool {
        self.pending.load(Ordering::SeqCst)
    }

    /// Resolves when an outside change was noticed (at once if one came while nobody waited).
    pub async fn changed(&self) {
        self.notify.notified().await;
    }

    /// The wake-up alone, for the sync runner (`Runner::full_sync_on`), which knows nothing of
    /// nftables: it starts a full sync whenever this is notified.
    pub fn waker(&self) -> Arc<Notify> {
        self.notify.clone()
    }

    /// Counts a full sync that found the kernel different from what we had programmed.
    pub fn repaired(&self) {
        self.repairs.fetch_add(1, Ordering::Relaxed);
    }

    /// Outside changes noticed by the monitor since start.
    pub fn noticed(&self) -> u64 {
        self.noticed.load(Ordering::Relaxed)
    }

    /// Full syncs that repaired our table: `kubeproxy_rs_nftables_repairs_total`.
    pub fn repairs(&self) -> u64 {
        self.repairs.load(Ordering::Relaxed)
    }

    /// Makes the running monitor stop listening, so the kernel builds no notifications for a
    /// large transaction of ours, until the result is dropped. `None` when no monitor runs or
    /// it did not answer in time; then nothing changed. Blocks for up to two seconds: call it
    /// from the sync thread, never from the runtime's.
    pub fn pause_monitor(&self) -> Option<Paused<'_>> {
        let control = self
            .control
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?;
        let paused = ask(&control, false).then_some(Paused {
            drift: self,
            control,
        });
        if paused.is_some() {
            self.pauses.fetch_add(1, Ordering::Relaxed);
        }
        paused
    }

    /// Pauses of the monitor since start (for tests and logs).
    pub fn pauses(&self) -> u64 {
        self.pauses.load(Ordering::Relaxed)
    }

    fn set_control(&self, control: Option<tokio::sync::mpsc::UnboundedSender<Control>>) {
        *self.control.lock().unwrap_or_else(|p| p.into_inner()) = control;
    }
}

/// Clears the monitor's control channel from [`Drift`] when the monitor stops, however it does.
struct ControlRegistration<'a>(&'a Drift);

impl Drop for ControlRegistration<'_> {
    fn drop(&mut self) {
        self.0.set_control(None);
    }
}

/// `ENOBUFS`: the kernel dropped notifications for us.
const ENOBUFS: i32 = 105;

/// Watches nf_tables notifications in the named network namespace (or ours) until the task is
/// dropped, and reports outside changes to what `watch` names to `drift`. Reopens the socket if
/// it fails. Serves [`Drift::pause_monitor`] meanwhile.
pub async fn run(netns: Option<String>, drift: Arc<Drift>, watch: &'static dyn Watch) {
    run_with_buffer(netns, drift, watch, NOTIFY_BUFFER).await;
}

/// [`run`] with `receive_buffer` bytes of room for notifications instead of
/// [`NOTIFY_BUFFER`]: a kernel test gives it a small one, so that the kernel drops
/// notifications (`ENOBUFS`) on demand.
pub async fn run_with_buffer(
    netns: Option<String>,
    drift: Arc<Drift>,
    watch: &'static dyn Watch,
    receive_buffer: usize,
) {
    let own = drift.own_processes();
    let (control_tx, mut control) = tokio::sync::mpsc::unbounded_channel::<Control>();
    drift.set_control(Some(control_tx));
    let _registration = ControlRegistration(&drift);
    let mut delay = RESTART_DELAY;
    loop {
        let started = tokio::time::Instant::now();
        let options = Options {
            receive_buffer: Some(receive_buffer),
            ..Options::default()
        };
        let groups = [NFNLGRP_NFTABLES];
        match Subscription::open(netlink::PROTOCOL, netns.as_deref(), options, &groups) {
            Ok(socket) => {
                let mut events = Events::new(watch);
                loop {
                    let received = tokio::select! {
                        received = socket.recv() => received,
                        Some((subscribe, done)) = control.recv() => {
                            match socket.set_joined(NFNLGRP_NFTABLES, subscribe) {
                                // A pause whose asker gave up waiting is undone: nobody
                                // would resume it.
                                Ok(()) if done.send(()).is_err() && !subscribe => {
                                    let _ = socket.set_joined(NFNLGRP_NFTABLES, true);
                                }
                                Ok(()) => {}
                                Err(error) => {
                                    tracing::warn!(%error, subscribe,
                                        "cannot change the nf_tables subscription");
                                }
                            }
                            continue;
                        }
                    };
                    match received {
                        Ok(bytes) => {
                            for by in events.datagram(&bytes) {
                                if !own.committed(by) {
                                    tracing::warn!(
                                        watched = watch.as_str(),
                                        pid = by.pid,
                                        "another program changed our rules; repairing"
                                    );
                                    drift.notice();
                                }
                            }
                        }
                        Err(e) if e.raw_os_error() == Some(ENOBUFS) => {
                            tracing::info!(
                                "nf_tables notifications were dropped; a full sync checks our table"
                            );
                            events = Events::new(watch);
                            drift.notice();
                        }
                        Err(error) => {
                            tracing::warn!(%error, "nf_tables notifications ended; reopening");
                            break;
                        }
                    }
                }
            }
            Err(error) => tracing::warn!(
                error = %crate::causes::one_line(&error),
                "cannot watch nf_tables notifications; retrying"
            ),
        }
        delay = if started.elapsed() >= RESTART_DELAY_MAX {
            RESTART_DELAY
        } else {
            (delay * 2).min(RESTART_DELAY_MAX)
        };
        tokio::time::sleep(delay).await;
        // Changes made while nobody watched are found by a full sync.
        drift.notice();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by(pid: u32, port_id: u32) -> Committer {
        Committer { pid, port_id }
    }

    #[test]
    fn own_processes_are_remembered_up_to_a_bound() {
        let own = OwnProcesses::default();
        for pid in 1..(OWN_PIDS as u32 + 2) {
            own.record(pid);
        }
        assert!(!own.committed(by(1, 0)));
        assert!(own.committed(by(OWN_PIDS as u32 + 1, 0)));
    }

    #[test]
    fn a_commit_is_ours_by_its_thread_or_by_its_socket() {
        let own = OwnProcesses::default();
        own.record(1234);
        own.record(0);
        // Our thread, as the host's pid namespace names it.
        assert!(own.committed(by(1234, 99)));
        // In a pod with a pid namespace of its own the kernel names a thread id we never
        // see; the socket's port id is ours.
        assert!(own.committed(by(48_211, 1234)));
        assert!(!own.committed(by(48_211, 99)));
        // The kernel's own port (0) and an unnamed thread are nobody's.
        assert!(!own.committed(by(0, 0)));
    }

    #[test]
    fn only_our_own_commit_between_two_generations_is_expected() {
        assert!(!unseen_commit(41, 42, 1));
        assert!(!unseen_commit(42, 42, 0));
        assert!(
            !unseen_commit(40, 43, 3),
            "iptables-restore commits once per table"
        );
        assert!(unseen_commit(41, 43, 1), "someone else committed too");
        assert!(unseen_commit(41, 42, 0), "someone else committed");
        assert!(!unseen_commit(u32::MAX, 0, 1), "the generation wraps");
    }

    #[test]
    fn without_a_running_monitor_there_is_nothing_to_pause() {
        let drift = Drift::new();
        assert!(drift.pause_monitor().is_none());
        assert_eq!(drift.noticed(), 0);
    }

    #[tokio::test]
    async fn a_notice_wakes_a_later_waiter_and_marks_the_next_sync_full() {
        let drift = Drift::new();
        drift.notice();
        drift.changed().await;
        assert!(drift.take_pending());
        assert!(!drift.take_pending());
        assert_eq!(drift.noticed(), 1);
    }
}
