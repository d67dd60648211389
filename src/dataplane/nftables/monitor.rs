//! Notices another program changing our table, so the next sync re-reads the kernel and repairs
//! it: a `nft monitor` process, read line by line.
//!
//! The line logic ([`Events`]) is pure and tested on captured `nft monitor` output; [`run`] is the
//! I/O around it. nft prints each transaction's events and then `# new generation N by process
//! PID (comm)`. A transaction that touched `ip`/`ip6 kube-proxy-rs` and came from a process that
//! is not one of our `nft -f` children ([`OwnProcesses`]) is an outside change: [`Drift`] then
//! marks the next sync as full and wakes whoever awaits [`Drift::changed`] (the sync runner).
//!
//! Never repairs anything itself and never decides when to sync. `main` starts it; a
//! constructor never does.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::sync::Notify;

use super::backend::NftCommand;
use super::names;

/// How many of our recent `nft -f` pids are remembered. Syncs run one at a time, so a handful
/// covers every transaction whose events can still be in flight.
const OWN_PIDS: usize = 64;

/// How long to wait before restarting a `nft monitor` that exited, doubling while it keeps
/// failing, so a broken `nft` can neither spin nor cause a full sync every second. Events may
/// have been missed meanwhile, so a restart also asks for a full sync.
const RESTART_DELAY: Duration = Duration::from_secs(1);
const RESTART_DELAY_MAX: Duration = Duration::from_secs(60);

/// Pids of the `nft -f` processes we started; shared by the backend (writes) and the monitor
/// (reads).
#[derive(Clone, Debug, Default)]
pub struct OwnProcesses(Arc<Mutex<VecDeque<u32>>>);

impl OwnProcesses {
    pub fn record(&self, pid: u32) {
        let mut pids = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if pids.len() == OWN_PIDS {
            pids.pop_front();
        }
        pids.push_back(pid);
    }

    pub fn contains(&self, pid: u32) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&pid)
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
}

/// The state of reading `nft monitor` text: whether the transaction being printed touched our
/// table.
#[derive(Debug, Default)]
pub struct Events {
    touched: bool,
}

impl Events {
    /// Feeds one line; returns the pid of a finished transaction that touched our table.
    pub fn line(&mut self, line: &str) -> Option<u32> {
        if let Some(rest) = line.strip_prefix("# new generation ") {
            let touched = std::mem::take(&mut self.touched);
            let pid = rest
                .split_once(" by process ")
                .and_then(|(_, p)| p.split_whitespace().next())
                .and_then(|p| p.parse().ok());
            // A generation line without a pid (older nft) cannot be attributed: count it.
            return if touched {
                Some(pid.unwrap_or(0))
            } else {
                None
            };
        }
        if line.starts_with('#') {
            // `# ERROR: We lost some netlink events!`: what was lost may have been ours.
            self.touched |= line.contains("lost");
            return None;
        }
        self.touched |= names_our_table(line);
        None
    }
}

/// `add chain ip kube-proxy-rs x`, `delete table ip6 kube-proxy-rs`, ...: the third and fourth
/// words are the family and the table.
fn names_our_table(line: &str) -> bool {
    let mut words = line.split_whitespace().skip(2);
    matches!(
        (words.next(), words.next()),
        (Some("ip" | "ip6"), Some(names::TABLE))
    )
}

/// Runs `nft monitor` through `nft` (its namespace prefix) until the task is dropped, and
/// reports outside changes to `drift`. Restarts nft if it exits.
pub async fn run(nft: NftCommand, drift: Arc<Drift>) {
    let own = drift.own_processes();
    let mut delay = RESTART_DELAY;
    loop {
        let started = tokio::time::Instant::now();
        let mut cmd = tokio::process::Command::from(nft.command(["monitor"]));
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        match cmd.spawn() {
            Ok(mut child) => {
                let stdout = child.stdout.take().expect("stdout is piped");
                let mut lines = BufReader::new(stdout).lines();
                let mut events = Events::default();
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(pid) = events.line(&line)
                        && !own.contains(pid)
                    {
                        tracing::warn!(
                            table = names::TABLE,
                            pid,
                            "another program changed our nftables table; repairing"
                        );
                        drift.notice();
                    }
                }
                let _ = child.kill().await;
                tracing::warn!("nft monitor ended; restarting it");
            }
            Err(error) => tracing::warn!(%error, "cannot start nft monitor; retrying"),
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

    /// Captured from `nft monitor` (nft 1.0.6) while an outside `nft` added a chain, another
    /// table came and went, and our table was deleted.
    const CAPTURED: &str = "\
add chain ip kube-proxy-rs c2
# new generation 10 by process 19986 (nft)
add table ip6 x
delete table ip6 x
# new generation 12 by process 20011 (nft)
delete set ip kube-proxy-rs fw
delete chain ip kube-proxy-rs c
delete table ip kube-proxy-rs
# new generation 13 by process 20039 (nft)
";

    #[test]
    fn transactions_touching_our_table_are_attributed_to_their_process() {
        let mut events = Events::default();
        let found: Vec<u32> = CAPTURED.lines().filter_map(|l| events.line(l)).collect();
        assert_eq!(found, vec![19986, 20039]);
    }

    #[test]
    fn lost_events_count_as_touching_our_table() {
        let mut events = Events::default();
        assert_eq!(events.line("# ERROR: We lost some netlink events!"), None);
        assert_eq!(
            events.line("# new generation 3 by process 7 (nft)"),
            Some(7)
        );
    }

    #[test]
    fn own_processes_are_remembered_up_to_a_bound() {
        let own = OwnProcesses::default();
        for pid in 0..(OWN_PIDS as u32 + 1) {
            own.record(pid);
        }
        assert!(!own.contains(0));
        assert!(own.contains(OWN_PIDS as u32));
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
