//! Test-only: a fresh network namespace, removed on drop (also when the test panics), and the
//! commands run inside it or beside it; each fails the test with the command's stderr.
//!
//! One copy for every test that programs the kernel: the crate's own unit tests (`crate::testing`),
//! the test-support crate of the integration tests and examples (`tests/support/lib.rs`, its
//! `netns`, re-exported by `host.rs`) compile this file, so it uses nothing but `std`. State made inside a namespace is the namespace's own;
//! nothing outside it is touched.

#![allow(
    dead_code,
    reason = "the crate's unit tests use a part, the test-support crate's users the rest"
)]
#![allow(
    clippy::disallowed_methods,
    reason = "test support is a seam: it runs `ip` and the tools it is asked to"
)]

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Why a command run by [`NetNs::try_output`] did not succeed. Shown as the tool says it: the
/// start's error, or the command's stderr.
#[derive(Debug)]
pub enum RunError {
    /// It could not be started.
    Spawn(std::io::Error),
    /// It ran and failed.
    Failed {
        status: std::process::ExitStatus,
        stderr: String,
    },
}

impl RunError {
    /// `out`'s stdout when the command succeeded.
    fn check(out: Output) -> Result<String, RunError> {
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(RunError::Failed {
                status: out.status,
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            })
        }
    }
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Spawn(e) => e.fmt(f),
            RunError::Failed { stderr, .. } => f.write_str(stderr),
        }
    }
}

impl std::error::Error for RunError {}

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

/// A network namespace (`ip netns add`) named `<prefix>-<pid>-<n>` with `lo` up, deleted on
/// drop.
pub struct NetNs {
    pub name: String,
}

impl NetNs {
    /// Creates it; fails the test (never skips) when that is not possible, e.g. without root.
    pub fn new(prefix: &str) -> NetNs {
        require_root();
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        stdout_of(Command::new("ip").args(["netns", "add", &name]));
        let ns = NetNs { name };
        stdout_of(Command::new("ip").args(["-n", &ns.name, "link", "set", "lo", "up"]));
        ns
    }

    /// A command that runs inside this namespace (`ip netns exec`).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// Runs a command in the namespace and returns its stdout; panics on failure.
    pub fn output(&self, program: &str, args: &[&str]) -> String {
        stdout_of(self.command(program).args(args))
    }

    /// [`NetNs::output`] with `input` on the command's stdin (`nft -f -`, `iptables-restore`).
    pub fn output_fed(&self, program: &str, args: &[&str], input: &str) -> String {
        let mut cmd = self.command(program);
        cmd.args(args);
        let out = output_with_stdin(&mut cmd, input);
        checked(&cmd, out)
    }

    /// Runs a command in the namespace; its stdout, or why it did not succeed.
    pub fn try_output(&self, program: &str, args: &[&str]) -> Result<String, RunError> {
        let out = self
            .command(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(RunError::Spawn)?;
        RunError::check(out)
    }

    /// [`NetNs::try_output`] with `input` on the command's stdin: a refusal is what some tests
    /// look for.
    pub fn try_output_fed(
        &self,
        program: &str,
        args: &[&str],
        input: &str,
    ) -> Result<String, RunError> {
        let mut cmd = self.command(program);
        cmd.args(args);
        RunError::check(output_with_stdin(&mut cmd, input))
    }

    /// A veth pair: `dev` in this namespace, its peer `eth0` in `peer`, as a node's link to
    /// a pod's or a client's namespace. Both ends are left down.
    pub fn veth_to(&self, dev: &str, peer: &NetNs) {
        self.output(
            "ip",
            &[
                "link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", &peer.name,
            ],
        );
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

/// Runs `cmd` with stdin closed and returns its stdout; panics with its stderr on failure.
pub fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    checked(cmd, out)
}

/// Runs `cmd` with `input` on its stdin and waits for it; the outcome, whatever it was. The
/// input is written from a thread of its own, so a command that answers before it has read
/// everything cannot leave both sides waiting on a full pipe.
pub fn output_with_stdin(cmd: &mut Command, input: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    let mut stdin = child.stdin.take().expect("piped stdin");
    let text = input.to_owned();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(text.as_bytes());
    });
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("wait for {cmd:?}: {e}"));
    let _ = writer.join();
    out
}

/// `out`'s stdout when `cmd` succeeded; otherwise a panic with its status and stderr.
fn checked(cmd: &Command, out: Output) -> String {
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
