//! Test support for host-side resources: network namespaces and child processes, each removed
//! by its guard's `Drop`, so also when a test panics. Used by `testenv.rs` and by any test that
//! builds hosts out of network namespaces.

#![allow(dead_code)] // each test binary uses a different part of this module
#![allow(
    clippy::disallowed_methods,
    reason = "test support is a seam: it starts processes and runs `ip`"
)]

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::scratch_dir;
use std::sync::atomic::{AtomicU32, Ordering};
// ---------------------------------------------------------------------------
// network namespaces and processes

/// Fails the calling test unless it runs as root (network namespaces need it).
pub fn require_root() {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(str::to_owned))
        })
        .unwrap_or_default();
    assert_eq!(
        uid, "0",
        "this test needs root (network namespaces, nftables); run `cargo test` as root as CI does"
    );
}

/// A network namespace (`ip netns add`) with `lo` up, deleted on drop.
pub struct NetNs {
    pub name: String,
}

impl NetNs {
    pub fn new(prefix: &str) -> NetNs {
        require_root();
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        sh(Command::new("ip").args(["netns", "add", &name]));
        let ns = NetNs { name };
        sh(Command::new("ip").args(["-n", &ns.name, "link", "set", "lo", "up"]));
        ns
    }

    /// A command that runs inside this namespace (`ip netns exec`).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// Runs a command in the namespace and returns its stdout; panics on
    /// failure.
    pub fn output(&self, program: &str, args: &[&str]) -> String {
        sh(self.command(program).args(args))
    }

    /// Runs a command in the namespace; `Err(stderr)` on failure.
    pub fn try_output(&self, program: &str, args: &[&str]) -> Result<String, String> {
        let out = self
            .command(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    pub fn exists(name: &str) -> bool {
        Path::new("/var/run/netns").join(name).exists()
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let out = Command::new("ip")
            .args(["netns", "del", &self.name])
            .stdin(Stdio::null())
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!(
                "testenv: cleanup: ip netns del {}: {}",
                self.name,
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => eprintln!("testenv: cleanup: ip netns del {}: {e}", self.name),
        }
    }
}

fn sh(cmd: &mut Command) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
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
