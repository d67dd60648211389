//! Waits for the machine to be quiet before a proxy's cold start.
//!
//! Why: the cold start is measured from the proxy's spawn, and its first lists come from the
//! API server on the same two CPUs. Right after the harness created tens of thousands of
//! objects, or after the previous proxy's run, the API server can still be busy (its garbage
//! collector, its caches) for seconds, and the first byte of a large list comes several times
//! later than on a quiet machine. The scale goals are for a machine that is otherwise idle, so
//! each proxy, ours and upstream alike, starts once the machine's CPUs have
//! been mostly idle for one window, or after [`LIMIT`]; the report's notes say which.

use std::time::{Duration, Instant};

/// One reading window.
const WINDOW: Duration = Duration::from_millis(500);
/// Quiet: this share of the machine's CPU time idle over a window.
const IDLE_SHARE: f64 = 0.9;
/// Starts anyway after this long.
pub const LIMIT: Duration = Duration::from_secs(30);

/// Cumulative CPU time of the whole machine, in clock ticks: idle (with I/O wait) and all.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Ticks {
    idle: u64,
    total: u64,
}

/// The first line of `/proc/stat`: `cpu  user nice system idle iowait irq softirq steal ...`.
fn ticks(stat: &str) -> Option<Ticks> {
    let line = stat.lines().next()?;
    let mut fields = line.split_whitespace();
    (fields.next()? == "cpu").then_some(())?;
    let values: Vec<u64> = fields.map(|f| f.parse().ok()).collect::<Option<_>>()?;
    // guest and guest_nice (9th and 10th) are already counted in user and nice.
    let counted = &values[..values.len().min(8)];
    Some(Ticks {
        idle: values.get(3)? + values.get(4).copied().unwrap_or(0),
        total: counted.iter().sum(),
    })
}

/// The idle share between two readings; `None` when no time passed.
fn idle_share(before: Ticks, after: Ticks) -> Option<f64> {
    let total = after.total.checked_sub(before.total)?;
    let idle = after.idle.checked_sub(before.idle)?;
    (total > 0).then(|| idle as f64 / total as f64)
}

fn read() -> Option<Ticks> {
    ticks(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// Waits until one window was quiet (or [`LIMIT`]); a note for the report.
pub async fn wait() -> String {
    let began = Instant::now();
    let Some(mut before) = read() else {
        return "machine quiet before the start: /proc/stat unreadable, not waited".into();
    };
    let mut last = None;
    while began.elapsed() < LIMIT {
        tokio::time::sleep(WINDOW).await;
        let Some(now) = read() else { break };
        last = idle_share(before, now);
        before = now;
        if last.is_some_and(|s| s >= IDLE_SHARE) {
            return format!(
                "machine quiet before the start: {:.0} % idle after {:.1} s",
                last.unwrap_or(0.0) * 100.0,
                began.elapsed().as_secs_f64()
            );
        }
    }
    format!(
        "machine NOT quiet before the start: {} idle in the last window, started after {:.0} s anyway",
        last.map_or("?".into(), |s| format!("{:.0} %", s * 100.0)),
        began.elapsed().as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_machine_line_of_proc_stat() {
        let stat = "cpu  100 5 50 800 20 3 2 0 7 0\ncpu0 50 2 25 400 10 1 1 0 0 0\n";
        assert_eq!(
            ticks(stat),
            Some(Ticks {
                idle: 820,
                total: 980
            })
        );
        assert_eq!(ticks("cpu0 1 2 3 4\n"), None);
        assert_eq!(ticks("cpu  1 x 3 4\n"), None);
        assert_eq!(ticks(""), None);
    }

    #[test]
    fn the_idle_share_is_of_the_time_between_readings() {
        let a = Ticks {
            idle: 800,
            total: 1000,
        };
        let b = Ticks {
            idle: 890,
            total: 1100,
        };
        assert_eq!(idle_share(a, b), Some(0.9));
        assert_eq!(idle_share(a, a), None);
        assert_eq!(idle_share(b, a), None);
    }
}
