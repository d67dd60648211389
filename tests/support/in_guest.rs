//! What the guest tests (`guest_sctp.rs`, `guest_ipvs.rs`) run inside the qemu guest: shell
//! commands, waiting for a probe, a client exchange in a namespace, the node's ICMP count.
//! Included by each with `#[path]` next to `guest.rs`, whose `host` module it uses.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::guest::host::helper_process::{self, HelperProcess};

/// Tries `probe` until it answers, for up to 60 s (the guest is emulated and slow).
pub fn eventually(mut probe: impl FnMut() -> Result<String, String>) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match probe() {
            Ok(seen) => return seen,
            Err(e) if Instant::now() > deadline => panic!("no answer within 60 s: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// Runs `helper` as `client:<target>` in network namespace `ns`; its answer is a result line
/// `answered <what the server saw>`, anything else is the error.
pub fn client_in(helper: &HelperProcess, ns: &str, target: &str) -> Result<String, String> {
    let out = helper
        .in_netns(ns, &format!("client:{target}"))
        .output()
        .map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = *helper_process::results(&stdout)
        .first()
        .ok_or_else(|| format!("client printed nothing: {stdout}"))?;
    match line.split_once(' ') {
        Some(("answered", seen)) => Ok(seen.to_owned()),
        _ => Err(line.to_owned()),
    }
}

/// `Icmp: OutDestUnreachs` of this namespace (`/proc/net/snmp`).
pub fn icmp_unreachables_sent() -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").expect("/proc/net/snmp");
    let mut icmp = snmp.lines().filter(|l| l.starts_with("Icmp: "));
    let (names, values) = (icmp.next().unwrap_or(""), icmp.next().unwrap_or(""));
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "OutDestUnreachs")
        .and_then(|(_, v)| v.parse().ok())
        .expect("OutDestUnreachs in /proc/net/snmp")
}

/// Runs a command line split at spaces; fails the test unless it succeeds.
pub fn run(cmd: &str) {
    let words: Vec<&str> = cmd.split(' ').collect();
    let status = Command::new(words[0])
        .args(&words[1..])
        .stdin(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(status.success(), "{cmd}: {status}");
}

/// A command's standard output, or the reason it could not run.
#[allow(dead_code, reason = "not every guest test reads a command's output")]
pub fn output(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_else(|e| format!("{cmd}: {e}"))
}
