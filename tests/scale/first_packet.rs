//! First-packet latency: how long a TCP connect to one address takes from the node namespace,
//! many times over, each connect a new flow whose first packet meets the proxy's NAT rules.
//!
//! What is timed is `connect()` alone (SYN out, SYN-ACK back), inside one long-lived harness
//! process in the namespace ([`Spec::Connects`]): no process start, no namespace entry, no name
//! lookup is in a sample, and the process runs in the real-time FIFO class so that other work
//! on the machine does not preempt it mid-sample. Each connection is then checked to have
//! reached the pod address the caller expects (outside the timing), so a refused or misrouted
//! connect is counted as failed, never as a fast sample. The same probe aimed at the pod itself
//! before the proxy starts gives the floor (veth, conntrack, the pod's stack) that every
//! proxy's figure includes.
//!
//! Why it matters: a new flow's first packet walks the `nat` hooks. In nftables mode that is a
//! few map lookups, flat in the number of Services; in upstream's iptables mode every new flow
//! walks `KUBE-SERVICES` rule by rule, linear in the number of Services.

use std::io::Read as _;
use std::net::{SocketAddr, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::helper::{Aim, RESULT_PREFIX, SelfExec, Spec, result};

/// Connects before the timed ones: warms caches, ARP/neighbour entries and the pod's accept loop.
pub const WARMUP: usize = 50;
/// Longest a single connect may take before it counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A probe's summary. Times in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    pub median: f64,
    pub p99: f64,
    /// Timed connects that reached the wanted address.
    pub samples: usize,
    /// Timed connects that failed or reached another address (not in the figures).
    pub failed: usize,
}

impl std::fmt::Display for Latency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "median {:.0} µs, p99 {:.0} µs over {} connects",
            self.median * 1e6,
            self.p99 * 1e6,
            self.samples
        )?;
        if self.failed > 0 {
            write!(f, " ({} failed, left out)", self.failed)?;
        }
        Ok(())
    }
}

/// Median and p99 (nearest rank) of connect times in nanoseconds; `None` without samples.
pub fn summarize(mut nanos: Vec<u64>, failed: usize) -> Option<Latency> {
    if nanos.is_empty() {
        return None;
    }
    nanos.sort_unstable();
    let rank = |q: f64| {
        let r = (q * nanos.len() as f64).ceil() as usize;
        nanos[r.clamp(1, nanos.len()) - 1] as f64 / 1e9
    };
    Some(Latency {
        median: rank(0.5),
        p99: rank(0.99),
        samples: nanos.len(),
        failed,
    })
}

/// In the namespace: `warmup` untimed connects, then `samples` timed ones to `target`, each
/// checked to be answered by `want`. Prints `connects <failed> <ns> <ns> …`.
pub fn run(target: SocketAddr, want: &str, warmup: usize, samples: usize) {
    for _ in 0..warmup {
        let _ = connect(target, want);
    }
    let mut nanos = Vec::with_capacity(samples);
    let mut failed = 0;
    for _ in 0..samples {
        match connect(target, want) {
            Some(d) => nanos.push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            None => failed += 1,
        }
    }
    let list: Vec<String> = nanos.iter().map(u64::to_string).collect();
    result(&format!("connects {failed} {}", list.join(" ")));
}

/// One connect, timed; `None` unless it was answered by `want`.
fn connect(target: SocketAddr, want: &str) -> Option<Duration> {
    let start = Instant::now();
    let stream = TcpStream::connect_timeout(&target, CONNECT_TIMEOUT);
    let took = start.elapsed();
    let mut stream = stream.ok()?;
    let _ = stream.set_read_timeout(Some(CONNECT_TIMEOUT));
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    (reply == want).then_some(took)
}

/// Runs the probe from `netns` at `aim`.
pub async fn probe(
    exec: &SelfExec,
    netns: &str,
    aim: Aim,
    samples: usize,
) -> Result<Latency, String> {
    let target = aim.target;
    let spec = Spec::Connects {
        aim,
        warmup: WARMUP,
        samples,
    };
    let out = tokio::process::Command::from(exec.realtime_command(netns, &spec))
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("run connect probe: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.split_once(RESULT_PREFIX).map(|(_, rest)| rest))
        .ok_or_else(|| {
            format!(
                "connect probe said nothing: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })?;
    let (failed, nanos) = parse(line)?;
    summarize(nanos, failed).ok_or_else(|| {
        format!("first packet to {target}: all {failed} connects failed or reached another address")
    })
}

/// `connects <failed> <ns>…` → (failed, samples).
fn parse(line: &str) -> Result<(usize, Vec<u64>), String> {
    let mut words = line
        .strip_prefix("connects ")
        .ok_or_else(|| format!("connect probe said {line:?}"))?
        .split_whitespace();
    let failed = words
        .next()
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| format!("connect probe: no failure count in {line:?}"))?;
    let nanos = words
        .map(|w| w.parse().map_err(|e| format!("connect probe: {w:?}: {e}")))
        .collect::<Result<_, _>>()?;
    Ok((failed, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_p99_are_nearest_ranks() {
        // 1..=200 µs in a shuffled order: median 100 µs, p99 198 µs.
        let nanos: Vec<u64> = (1..=200u64)
            .rev()
            .map(|i| (i * 7 % 200 + 1) * 1000)
            .collect();
        let l = summarize(nanos, 3).unwrap();
        assert_eq!(l.median, 100e-6);
        assert_eq!(l.p99, 198e-6);
        assert_eq!((l.samples, l.failed), (200, 3));
        assert_eq!(summarize(vec![5], 0).unwrap().p99, 5e-9);
        assert_eq!(summarize(Vec::new(), 4), None);
    }

    #[test]
    fn parses_the_probe_line() {
        assert_eq!(parse("connects 2 10 30 20"), Ok((2, vec![10, 30, 20])));
        assert_eq!(parse("connects 0"), Ok((0, vec![])));
        assert!(parse("connects x 1").is_err());
        assert!(parse("armed").is_err());
    }
}
