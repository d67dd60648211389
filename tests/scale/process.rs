//! What a proxy process cost, from `/proc/<pid>`: peak and current resident memory (`VmHWM`
//! and `VmRSS` in `status`)
//! and CPU seconds (`utime + stime` of the process, `cutime + cstime` of the children it
//! reaped, and the CPU so far of the children still running, from `stat`: both proxies run
//! `nft`, `iptables-restore` … as children, and that work is theirs). The children's own peak
//! memory is not included.

/// Clock ticks per second of `/proc/<pid>/stat` (`USER_HZ`, 100 on every Linux ABI we run on).
const TICKS_PER_SECOND: f64 = 100.0;

/// One reading of a process's cost so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// Peak resident set size in bytes.
    pub peak_rss: u64,
    /// Resident set size now, in bytes: what the node keeps paying after start-up's peak.
    pub rss: u64,
    /// CPU seconds: own user + system, plus reaped children's.
    pub cpu_seconds: f64,
}

/// Reads the usage of process `pid`; `None` once it is gone.
pub fn usage(pid: u32) -> Option<Usage> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let running: f64 = children(pid)
        .iter()
        .filter_map(|c| std::fs::read_to_string(format!("/proc/{c}/stat")).ok())
        .filter_map(|s| cpu_ticks(&s))
        .sum();
    Some(Usage {
        peak_rss: status_bytes(&status, "VmHWM:")?,
        rss: status_bytes(&status, "VmRSS:")?,
        cpu_seconds: (cpu_ticks(&stat)? + running) / TICKS_PER_SECOND,
    })
}

/// The direct children of `pid`, from `/proc/<pid>/task/*/children`.
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|text| {
            text.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// The command name of `pid` (`/proc/<pid>/comm`), to check it is the proxy itself.
pub fn command_name(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim().to_owned())
}

/// `KEY   1234 kB` (`VmHWM:`, `VmRSS:`) → bytes.
fn status_bytes(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Fields 14-17 (utime, stime, cutime, cstime) of `stat`, counted after the `(comm)` field,
/// which may itself contain spaces.
fn cpu_ticks(stat: &str) -> Option<f64> {
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `after` starts at field 3 (state), so field N is at index N - 3.
    (14..=17)
        .map(|n| fields.get(n - 3)?.parse::<f64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_status_and_stat() {
        let status = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n";
        assert_eq!(status_bytes(status, "VmHWM:"), Some(2 * 1024 * 1024));
        assert_eq!(status_bytes(status, "VmRSS:"), Some(1024 * 1024));
        let stat = "42 (kube proxy) S 1 42 42 0 -1 4194560 100 0 0 0 150 50 7 3 20 0 8 0";
        assert_eq!(cpu_ticks(stat), Some(210.0));
    }
}
