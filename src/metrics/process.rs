//! The standard `process_*` metrics every Prometheus client library exposes, read from `/proc`
//! at scrape time (prometheus-client has no process collector).
//!
//! I/O at the edge: reads `/proc/self/*` and `/proc/stat` on each scrape. A value that cannot be
//! read (not Linux, a hardened `/proc`) is left out of the scrape rather than reported as zero.
//! The parsing is pure and tested on captured text.

use std::fs;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// `USER_HZ`, the unit of CPU times in `/proc/<pid>/stat`. Fixed at 100 by the Linux ABI on
/// every architecture we build for (`sysconf(_SC_CLK_TCK)` would need `unsafe`).
const TICKS_PER_SECOND: f64 = 100.0;

/// Reads the process metrics on each scrape.
#[derive(Debug, Default)]
pub struct Process;

/// What one scrape found; `None` where it could not be read.
#[derive(Debug, Default, PartialEq)]
struct Sample {
    cpu_seconds: Option<f64>,
    start_time_seconds: Option<f64>,
    resident_bytes: Option<f64>,
    virtual_bytes: Option<f64>,
    open_fds: Option<f64>,
    max_fds: Option<f64>,
}

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = read();
        if let Some(v) = s.cpu_seconds {
            let c = ConstCounter::new(v);
            let m = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                c.metric_type(),
            )?;
            c.encode(m)?;
        }
        let gauges = [
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                s.start_time_seconds,
            ),
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                s.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                s.virtual_bytes,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                s.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                s.max_fds,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(v) = value {
                let g = ConstGauge::new(v);
                let m = encoder.encode_descriptor(name, help, None, g.metric_type())?;
                g.encode(m)?;
            }
        }
        Ok(())
    }
}

fn read() -> Sample {
    let stat = fs::read_to_string("/proc/self/stat").ok();
    let times = stat.as_deref().and_then(parse_stat);
    let boot_time = fs::read_to_string("/proc/stat")
        .ok()
        .as_deref()
        .and_then(parse_boot_time);
    let status = fs::read_to_string("/proc/self/status").ok();
    let status_kib = |key: &str| {
        status
            .as_deref()
            .and_then(|s| parse_status_kib(s, key))
            .map(|kib| kib * 1024.0)
    };
    Sample {
        cpu_seconds: times.map(|t| t.cpu_ticks / TICKS_PER_SECOND),
        start_time_seconds: times
            .zip(boot_time)
            .map(|(t, boot)| boot + t.start_ticks / TICKS_PER_SECOND),
        resident_bytes: status_kib("VmRSS:"),
        virtual_bytes: status_kib("VmSize:"),
        open_fds: fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as f64),
        max_fds: fs::read_to_string("/proc/self/limits")
            .ok()
            .as_deref()
            .and_then(parse_max_open_files),
    }
}

/// This process's memory now and at its peak (`VmRSS`, `VmHWM`), in MiB to a tenth, for log
/// lines that say where start-up's memory goes; zero where `/proc` cannot be read.
pub fn resident_mib() -> Memory {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mib = |key| {
        parse_status_kib(&status, key).map_or(0.0, |kib| (kib / 1024.0 * 10.0).round() / 10.0)
    };
    Memory {
        now: mib("VmRSS:"),
        peak: mib("VmHWM:"),
    }
}

/// See [`resident_mib`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Memory {
    pub now: f64,
    pub peak: f64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Times {
    /// utime + stime.
    cpu_ticks: f64,
    /// Start time after boot.
    start_ticks: f64,
}

/// `/proc/self/stat`: fields after the parenthesised command name (which may hold spaces);
/// utime and stime are fields 14 and 15, starttime field 22 (1-based, `proc(5)`).
fn parse_stat(text: &str) -> Option<Times> {
    let rest = &text[text.rfind(')')? + 1..];
    // `rest` starts at field 3 (state).
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
    Some(Times {
        cpu_ticks: field(14)? + field(15)?,
        start_ticks: field(22)?,
    })
}

/// `btime` in `/proc/stat`: boot time in seconds since the epoch.
fn parse_boot_time(text: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// A `Key:   1234 kB` line of `/proc/self/status`, in KiB.
fn parse_status_kib(text: &str, key: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// The soft limit of `Max open files` in `/proc/self/limits`.
fn parse_max_open_files(text: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_spaces_in_the_command_name() {
        let stat = "1234 (kube proxy) S 1 1234 1234 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 12 0 4200 123456789 3000 18446744073709551615";
        assert_eq!(
            parse_stat(stat),
            Some(Times {
                cpu_ticks: 300.0,
                start_ticks: 4200.0
            })
        );
    }

    #[test]
    fn parses_boot_time_status_and_limits() {
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 5\n"),
            Some(1_700_000_000.0)
        );
        let status = "Name:\tkube-proxy-rs\nVmSize:\t  123456 kB\nVmRSS:\t    2048 kB\n";
        assert_eq!(parse_status_kib(status, "VmRSS:"), Some(2048.0));
        assert_eq!(parse_status_kib(status, "VmSize:"), Some(123_456.0));
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1048576              1048576              files\n";
        assert_eq!(parse_max_open_files(limits), Some(1_048_576.0));
    }

    #[test]
    fn reads_this_process() {
        let s = read();
        assert!(s.resident_bytes.is_some_and(|v| v > 0.0));
        assert!(s.open_fds.is_some_and(|v| v > 0.0));
        assert!(s.start_time_seconds.is_some_and(|v| v > 1_000_000_000.0));
    }
}
