//! The harness's in-namespace processes: the pod's echo server, the ClusterIP watcher, the
//! metrics reader and the first-packet probe, run by re-executing the harness's own binary inside a network namespace.
//!
//! The benchmark binary re-executes itself with [`SPEC_VAR`] set; the smoke test re-executes its
//! test binary with the libtest filter of its entry test as well (see [`SelfExec`]). Either way
//! [`run_if_requested`] does the work and exits the process; without the variable it returns.
//!
//! Output protocol: result lines start with [`RESULT_PREFIX`], so libtest's lines are easy to
//! tell apart. Times are Unix nanoseconds, so the harness can compare them with its own clock.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// The environment variable that turns the binary into a harness process.
pub const SPEC_VAR: &str = "KPRS_SCALE_HELPER";

/// Prefix of every machine-readable line.
pub const RESULT_PREFIX: &str = "SCALE-RESULT ";

/// Where a harness process connects, and the pod whose answer it waits for: the pods' echo
/// servers answer with the address they were reached on, so an answer equal to `want` says that
/// pod, and no other, was reached.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Aim {
    pub target: SocketAddr,
    pub want: String,
}

impl Aim {
    pub fn new(target: SocketAddrV4, want: Ipv4Addr) -> Aim {
        Aim {
            target: SocketAddr::V4(target),
            want: want.to_string(),
        }
    }
}

/// What a harness process should do.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Spec {
    /// Accept TCP on `port` (all addresses) and answer each connection with the local address
    /// it arrived on, then close. Never returns.
    Echo { port: u16 },
    /// Connect to the aim's target every `interval_ms` until a reply equals its `want` or
    /// `limit_ms` passes. Prints `armed` after the first attempt (whatever it got), then
    /// `seen <unix ns>` or `timeout <last outcome>`.
    Watch {
        aim: Aim,
        interval_ms: u64,
        attempt_timeout_ms: u64,
        limit_ms: u64,
    },
    /// `GET path` from `addr` (HTTP/1.0); prints `ok` and then the body verbatim, or `error …`.
    Get { addr: SocketAddr, path: String },
    /// `warmup` untimed, then `samples` timed TCP connects to the aim's target, each checked to
    /// be answered by its `want`; prints the times (see `first_packet`).
    Connects {
        aim: Aim,
        warmup: usize,
        samples: usize,
    },
}

/// How to start this very binary as a harness process.
#[derive(Debug, Clone)]
pub struct SelfExec {
    pub exe: PathBuf,
    /// Arguments before anything else (a libtest filter in test binaries; none in the bench).
    pub args: Vec<String>,
}

impl SelfExec {
    /// The current executable with `args` (e.g. `["scale_helper_process", "--exact"]`).
    pub fn current(args: &[&str]) -> SelfExec {
        SelfExec {
            exe: std::env::current_exe().expect("path of the running binary"),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
        }
    }

    /// A command that runs `spec` in the namespace `netns`.
    pub fn command(&self, netns: &str, spec: &Spec) -> Command {
        self.command_via(Command::new("ip"), netns, spec)
    }

    /// [`Self::command`] under the real-time FIFO scheduling class (`chrt`), for a short,
    /// bounded timing loop: on this shared machine other processes' compiles would otherwise
    /// preempt it, and the tail of its figures would time the scheduler instead of the kernel's
    /// packet path.
    pub fn realtime_command(&self, netns: &str, spec: &Spec) -> Command {
        let mut chrt = Command::new("chrt");
        chrt.args(["--fifo", "50", "ip"]);
        self.command_via(chrt, netns, spec)
    }

    fn command_via(&self, mut cmd: Command, netns: &str, spec: &Spec) -> Command {
        cmd.args(["netns", "exec", netns])
            .arg(&self.exe)
            .args(&self.args)
            .env(SPEC_VAR, serde_json::to_string(spec).expect("spec JSON"));
        cmd
    }
}

/// Runs the harness process described by [`SPEC_VAR`] and exits, or returns at once without it.
pub fn run_if_requested() {
    let Ok(text) = std::env::var(SPEC_VAR) else {
        return;
    };
    let spec: Spec =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad {SPEC_VAR} ({e}): {text}"));
    match spec {
        Spec::Echo { port } => echo(port),
        Spec::Watch {
            aim,
            interval_ms,
            attempt_timeout_ms,
            limit_ms,
        } => watch(
            aim.target,
            &aim.want,
            Duration::from_millis(interval_ms),
            Duration::from_millis(attempt_timeout_ms),
            Duration::from_millis(limit_ms),
        ),
        Spec::Get { addr, path } => get(addr, &path),
        Spec::Connects {
            aim,
            warmup,
            samples,
        } => super::first_packet::run(aim.target, &aim.want, warmup, samples),
    }
    std::process::exit(0);
}

/// Unix time in nanoseconds.
pub fn unix_nanos(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos()
}

/// Prints one machine-readable line.
pub fn result(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{RESULT_PREFIX}{line}");
    let _ = out.flush();
}

fn echo(port: u16) {
    let listener = TcpListener::bind(("0.0.0.0", port))
        .unwrap_or_else(|e| panic!("echo: bind tcp {port}: {e}"));
    result("ready");
    for mut stream in listener.incoming().flatten() {
        if let Ok(local) = stream.local_addr() {
            let _ = stream.write_all(local.ip().to_string().as_bytes());
        }
    }
}

/// One connection: what the server said, or the error kind.
fn attempt(target: SocketAddr, timeout: Duration) -> String {
    match TcpStream::connect_timeout(&target, timeout) {
        Ok(mut s) => {
            let _ = s.set_read_timeout(Some(timeout));
            let mut text = String::new();
            match s.read_to_string(&mut text) {
                Ok(_) => text,
                Err(e) => format!("read error: {:?}", e.kind()),
            }
        }
        Err(e) => format!("error: {:?}", e.kind()),
    }
}

fn watch(target: SocketAddr, want: &str, interval: Duration, timeout: Duration, limit: Duration) {
    let start = SystemTime::now();
    let mut last = attempt(target, timeout);
    result(&format!("armed {last}"));
    loop {
        if last == want {
            result(&format!("seen {}", unix_nanos(SystemTime::now())));
            return;
        }
        if start.elapsed().unwrap_or_default() >= limit {
            result(&format!("timeout {last}"));
            return;
        }
        std::thread::sleep(interval);
        last = attempt(target, timeout);
    }
}

fn get(addr: SocketAddr, path: &str) {
    let body = (|| -> std::io::Result<String> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        Ok(text)
    })();
    match body {
        Ok(text) => match text.split_once("\r\n\r\n") {
            Some((head, body)) if head.starts_with("HTTP/1.") && head.contains(" 200 ") => {
                result("ok");
                print!("{body}");
            }
            _ => result(&format!(
                "error: {}",
                text.lines().next().unwrap_or("empty")
            )),
        },
        Err(e) => result(&format!("error: {e}")),
    }
}
