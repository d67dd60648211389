//! Test support for host-side resources: network namespaces and child processes, each removed
//! by its guard's `Drop`, so also when a test panics, the scratch directory their logs go to,
//! and the test binary re-run as a helper process inside a namespace (`helper_process.rs`).
//! Used by `testenv.rs` and by any test that builds hosts out of network namespaces.
//!
//! The namespace guard itself is `src/testing/netns.rs` (this crate's `netns`), re-exported
//! here: the library's unit tests use the same one.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use crate::helper_process;
pub use crate::netns::*;

/// Overrides where [`scratch_dir`] is: a test binary re-run inside a UML guest keeps its
/// scratch files on the guest's own tmpfs (and guests' small pids would collide on the host).
pub const SCRATCH_VAR: &str = "KPRS_SCRATCH_DIR";

/// This test binary's scratch directory for process logs and state,
/// `target/tmp/testenv/<binary>-<pid>` (the place `docs/testing.md` names) unless
/// [`SCRATCH_VAR`] names another, created.
pub fn scratch_dir() -> PathBuf {
    let base = std::env::var_os(SCRATCH_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::layout::target_tmp().join("testenv"));
    let dir = base.join(format!("{}-{}", exe_name(), std::process::id()));
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// The running test binary's name without cargo's hash (`conntrack`, `lab_scenarios`).
fn exe_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|s| s.split('-').next().unwrap_or("test").to_owned())
        .unwrap_or_else(|| "test".to_owned())
}

/// A child process, killed (SIGKILL, by pid) and reaped on drop. Its output
/// goes to a log file in the scratch directory.
pub struct ChildGuard {
    pub name: String,
    pub log: PathBuf,
    pub(super) child: Child,
}

impl ChildGuard {
    /// Starts `cmd` with stdout and stderr appended to `<scratch>/<name>.log`.
    pub fn spawn(name: &str, cmd: &mut Command) -> ChildGuard {
        let log = scratch_dir().join(format!("{name}.log"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("open log");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("dup log"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name} ({cmd:?}): {e}"));
        ChildGuard {
            name: name.to_owned(),
            log,
            child,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(status)` once the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last `n` lines of the log, for failure messages.
    pub fn log_tail(&self, n: usize) -> String {
        log_tail(&self.log, n)
    }

    /// Polls `done` every 200 ms until it holds; fails naming `what`, with the log's tail, when
    /// the process exits first or `limit` passes.
    pub fn wait_until(&mut self, what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + limit;
        while !done() {
            assert!(
                self.exited().is_none(),
                "{} exited while waiting until {what}:\n{}",
                self.name,
                self.log_tail(30)
            );
            assert!(
                Instant::now() < deadline,
                "{what}: not within {limit:?}; {}'s log:\n{}",
                self.name,
                self.log_tail(30)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Prints the body of the proxy's `/metrics` on its default address, or nothing when it does
/// not answer (run by [`metric`] inside a namespace, where only python is at hand).
const SCRAPE: &str = r#"
import urllib.request
try:
    print(urllib.request.urlopen("http://127.0.0.1:10249/metrics", timeout=5).read().decode(), end="")
except Exception:
    pass
"#;

/// The value of `series` (name and labels exactly as exposed) in a scrape of the proxy that
/// serves its metrics on 127.0.0.1:10249 inside `ns`; `None` while it does not answer.
pub fn metric(ns: &NetNs, series: &str) -> Option<f64> {
    ns.output("python3", &["-c", SCRAPE])
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn log_tail(path: &Path, n: usize) -> String {
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => return format!("({}: {e})", path.display()),
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut s = String::new();
    let _ = f.read_to_string(&mut s);
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
