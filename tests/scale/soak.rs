//! What a proxy holds while the churn runs: resident memory and open file descriptors from its
//! own metrics (`process_resident_memory_bytes`, `process_open_fds`) and its tasks (threads,
//! from `/proc/<pid>/task`), sampled every [`EVERY`], and how much each grew over the churn.
//!
//! Growth compares the median of the samples in the first fifth of a span with the median of
//! those in the last fifth, so that one allocator high-water mark or one sync in flight at a
//! sample does not read as a leak. A span shorter than [`MIN_SAMPLES`] samples gives no
//! figure: a leak needs time to show.
//!
//! Two spans are reported: the whole churn, and the churn after its [`turnover`], the time it
//! takes to change every Service once (the churn visits them in turn). Until then the model is
//! partly as the initial list allocated it, object after object, and partly replaced by the
//! churn, whose objects land wherever the allocator has room; resident memory grows until
//! every object has been replaced once and then holds. That warm-up is bounded by the model's
//! size and is reported apart; a leak is growth after it.
//!
//! The samples themselves go into the results (JSON) and, as [`csv`], into a file beside the
//! report, so that a reader can tell growth that levels off from growth that goes on.

use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::options::{ProxyKind, Scale};

/// How often the churn samples the proxy.
pub const EVERY: Duration = Duration::from_secs(30);

/// Fewest samples a growth figure is taken from (10 samples: five minutes of churn).
pub const MIN_SAMPLES: usize = 10;

/// One reading of the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the churn began.
    pub at_secs: f64,
    pub rss_bytes: f64,
    pub open_fds: f64,
    pub tasks: f64,
}

/// How much one quantity grew over the churn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Growth {
    /// Median of the first fifth of the samples.
    pub start: f64,
    /// Median of the last fifth.
    pub end: f64,
    /// The largest sample.
    pub max: f64,
}

impl Growth {
    /// `end` over `start`, in percent (0 when both are 0).
    pub fn percent(&self) -> f64 {
        if self.start == 0.0 {
            if self.end == 0.0 { 0.0 } else { f64::INFINITY }
        } else {
            (self.end - self.start) / self.start * 100.0
        }
    }
}

/// The growth of the quantity `of` picks over `samples`; `None` with fewer than
/// [`MIN_SAMPLES`].
pub fn growth(samples: &[Sample], of: impl Fn(&Sample) -> f64) -> Option<Growth> {
    if samples.len() < MIN_SAMPLES {
        return None;
    }
    let values: Vec<f64> = samples.iter().map(&of).collect();
    let fifth = values.len().div_ceil(5);
    Some(Growth {
        start: median(&values[..fifth]),
        end: median(&values[values.len() - fifth..]),
        max: values.iter().copied().fold(f64::MIN, f64::max),
    })
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len().is_multiple_of(2) {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    } else {
        sorted[mid]
    }
}

/// How long a churn of `rate` changes per second takes to change each of `services` once.
pub fn turnover(services: usize, rate: f64) -> Duration {
    Duration::from_secs_f64(services as f64 / rate.max(0.001))
}

/// One line for the report's notes: each quantity's start, end, growth and largest sample,
/// after the churn's `turnover` and over the whole churn.
pub fn summary(samples: &[Sample], churn: Duration, turnover: Duration) -> String {
    let whole = figures(samples);
    if whole.is_empty() {
        return format!(
            "soak: {} samples over {}s of churn, fewer than {MIN_SAMPLES}: no growth figure",
            samples.len(),
            churn.as_secs()
        );
    }
    let (warm_up, steady) = samples.split_at(
        samples
            .iter()
            .position(|s| s.at_secs >= turnover.as_secs_f64())
            .unwrap_or(samples.len()),
    );
    let mib = |b: f64| b / 1024.0 / 1024.0;
    let after = match (warm_up.first(), steady.first(), figures(steady)) {
        (Some(first), Some(turned), steady) if !steady.is_empty() => format!(
            "every Service changed once by {}s (warm-up: RSS {:.1} → {:.1} MiB); from then, {}",
            turnover.as_secs(),
            mib(first.rss_bytes),
            mib(turned.rss_bytes),
            steady.join("; ")
        ),
        _ => format!(
            "every Service changed once by {}s, too late for {MIN_SAMPLES} samples after it: \
             no figure after the warm-up",
            turnover.as_secs()
        ),
    };
    format!(
        "soak: {} samples every {}s over {}s of churn, first fifth's median → last fifth's; {after}; \
         over the whole churn, {}",
        samples.len(),
        EVERY.as_secs(),
        churn.as_secs(),
        whole.join("; ")
    )
}

/// Each quantity's growth over `samples` in words; empty with fewer than [`MIN_SAMPLES`].
fn figures(samples: &[Sample]) -> Vec<String> {
    let mib = |b: f64| b / 1024.0 / 1024.0;
    [
        (
            "RSS",
            growth(samples, |s| s.rss_bytes).map(|g| (g, "MiB", mib as fn(f64) -> f64)),
        ),
        (
            "open fds",
            growth(samples, |s| s.open_fds).map(|g| (g, "", (|x| x) as fn(f64) -> f64)),
        ),
        (
            "tasks",
            growth(samples, |s| s.tasks).map(|g| (g, "", (|x| x) as fn(f64) -> f64)),
        ),
    ]
    .into_iter()
    .filter_map(|(name, g)| {
        let (g, unit, scale) = g?;
        Some(format!(
            "{name} {:.1} → {:.1}{unit} ({:+.1} %, max {:.1})",
            scale(g.start),
            scale(g.end),
            g.percent(),
            scale(g.max)
        ))
    })
    .collect()
}

/// The samples as CSV, one row each: seconds since the churn began, RSS in MiB, open
/// descriptors, tasks.
pub fn csv(samples: &[Sample]) -> String {
    let mut out = String::from("seconds,rss_mib,open_fds,tasks\n");
    for s in samples {
        let _ = writeln!(
            out,
            "{:.0},{:.2},{:.0},{:.0}",
            s.at_secs,
            s.rss_bytes / 1024.0 / 1024.0,
            s.open_fds,
            s.tasks
        );
    }
    out
}

/// The name of the CSV file of `kind`'s samples at `scale`: `scale-soak-10000x10-ours-nftables.csv`.
pub fn file_name(scale: Scale, kind: ProxyKind) -> String {
    format!(
        "scale-soak-{}x{}-{}.csv",
        scale.services,
        scale.endpoints,
        kind.flag_name()
    )
}

/// The proxy's tasks (threads) now, from `/proc/<pid>/task`.
pub fn tasks(pid: u32) -> Option<f64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.count() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rss(values: &[f64]) -> Vec<Sample> {
        values
            .iter()
            .enumerate()
            .map(|(i, &v)| Sample {
                at_secs: i as f64 * EVERY.as_secs_f64(),
                rss_bytes: v,
                open_fds: 10.0,
                tasks: 4.0,
            })
            .collect()
    }

    #[test]
    fn a_flat_series_with_one_spike_does_not_grow() {
        let mut v = vec![100.0; 20];
        v[18] = 300.0;
        let g = growth(&rss(&v), |s| s.rss_bytes).unwrap();
        assert_eq!(g.percent(), 0.0);
        assert_eq!(g.max, 300.0);
    }

    #[test]
    fn a_steady_climb_shows() {
        let v: Vec<f64> = (0..20).map(|i| 100.0 + i as f64).collect();
        let g = growth(&rss(&v), |s| s.rss_bytes).unwrap();
        assert_eq!((g.start, g.end), (101.5, 117.5));
        assert!((g.percent() - 15.76).abs() < 0.01, "{}", g.percent());
    }

    #[test]
    fn too_few_samples_give_no_figure() {
        assert_eq!(growth(&rss(&[1.0; 9]), |s| s.rss_bytes), None);
        let turnover = Duration::from_secs(30);
        assert!(
            summary(&rss(&[1.0; 3]), Duration::from_secs(90), turnover)
                .contains("no growth figure")
        );
    }

    #[test]
    fn growth_that_levels_off_at_the_turnover_is_told_apart_from_growth_after_it() {
        let mib = 1024.0 * 1024.0;
        // 40 samples (20 minutes): a climb over the first 10 minutes, then flat.
        let levels: Vec<f64> = (0..40)
            .map(|i| (70.0 + f64::from(i.min(20))) * mib)
            .collect();
        let churn = Duration::from_secs(1200);
        let text = summary(&rss(&levels), churn, turnover(6000, 10.0));
        assert_eq!(turnover(6000, 10.0), Duration::from_secs(600));
        assert!(
            text.contains("every Service changed once by 600s (warm-up: RSS 70.0 → 90.0 MiB)"),
            "{text}"
        );
        assert!(
            text.contains("from then, RSS 90.0 → 90.0MiB (+0.0 %"),
            "{text}"
        );
        assert!(
            text.contains("over the whole churn, RSS 73.5 → 90.0MiB (+22.4 %"),
            "{text}"
        );
        // Still climbing after the turnover: the figure after it shows the leak.
        let leaking: Vec<f64> = (0..40).map(|i| (70.0 + f64::from(i)) * mib).collect();
        let text = summary(&rss(&leaking), churn, turnover(6000, 10.0));
        assert!(
            text.contains("from then, RSS 91.5 → 107.5MiB (+17.5 %"),
            "{text}"
        );
        // A turnover too late for ten samples after it gives no figure after it.
        let text = summary(&rss(&levels), churn, turnover(60_000, 10.0));
        assert!(text.contains("no figure after the warm-up"), "{text}");
    }

    #[test]
    fn the_summary_names_every_quantity() {
        let line = summary(
            &rss(&[1048576.0; 12]),
            Duration::from_secs(360),
            Duration::from_secs(30),
        );
        assert!(line.contains("RSS 1.0 → 1.0MiB (+0.0 %"), "{line}");
        assert!(line.contains("open fds 10.0 → 10.0"), "{line}");
        assert!(line.contains("tasks 4.0 → 4.0"), "{line}");
    }

    #[test]
    fn the_csv_has_a_row_per_sample_in_mib() {
        let mut samples = rss(&[80.0 * 1048576.0, 83.5 * 1048576.0]);
        samples[1].open_fds = 28.0;
        assert_eq!(
            csv(&samples),
            "seconds,rss_mib,open_fds,tasks\n0,80.00,10,4\n30,83.50,28,4\n"
        );
        assert_eq!(csv(&[]), "seconds,rss_mib,open_fds,tasks\n");
        let scale = Scale {
            services: 10_000,
            endpoints: 10,
        };
        assert_eq!(
            file_name(scale, ProxyKind::OURS_NFTABLES),
            "scale-soak-10000x10-ours-nftables.csv"
        );
    }
}
