//! What a run found, as values, and the markdown table per scale that goes to docs/benchmarks.md.
//!
//! Every cell is a [`Figure`]: a measured number, a histogram bound ("≤ 0.25 s"), "> limit" for a
//! phase that ran out of time, or "—" with the reason in the notes. Nothing is dropped.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::options::{Implementation, ProxyKind, Scale};

/// One cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Figure {
    /// Seconds, measured.
    Secs(f64),
    /// Seconds, at most this (the upper bound of a histogram bucket).
    AtMost(f64),
    /// The phase did not finish within this many seconds.
    Over(f64),
    /// Mebibytes.
    Mib(f64),
    /// Changes written / changes the proxy reported programmed.
    Changes(usize, f64),
    /// A count per event (netlink messages per idle sync).
    Count(f64),
    /// No value; the reason goes into the notes.
    Missing,
}

impl Figure {
    /// The number, when there is one to compare.
    pub fn number(&self) -> Option<f64> {
        match self {
            Figure::Secs(v) | Figure::Mib(v) | Figure::Count(v) => Some(*v),
            _ => None,
        }
    }
}

impl std::fmt::Display for Figure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Figure::Secs(v) => write!(f, "{}", secs(*v)),
            Figure::AtMost(v) if v.is_infinite() => write!(f, "> last bucket"),
            Figure::AtMost(v) => write!(f, "≤ {}", secs(*v)),
            Figure::Over(v) => write!(f, "> {v:.0} s"),
            Figure::Mib(v) => write!(f, "{v:.0} MiB"),
            Figure::Changes(w, p) => write!(f, "{w} / {p:.0}"),
            Figure::Count(v) if v.fract() == 0.0 => write!(f, "{v:.0}"),
            Figure::Count(v) => write!(f, "{v:.1}"),
            Figure::Missing => write!(f, "—"),
        }
    }
}

fn secs(v: f64) -> String {
    if v < 0.001 {
        format!("{:.0} µs", v * 1e6)
    } else if v < 0.1 {
        format!("{:.1} ms", v * 1000.0)
    } else if v < 10.0 {
        format!("{v:.2} s")
    } else {
        format!("{v:.0} s")
    }
}

/// The columns of a scale's table, in order, with their headers.
pub const COLUMNS: [&str; 20] = [
    "cold sync (metrics)",
    "cold sync (first connection)",
    "first sync (proxy)",
    "CPU to cold sync",
    "endpoint change (probe)",
    "its sync (proxy)",
    "its programming latency (proxy)",
    "churn changes written / programmed",
    "churn latency mean",
    "p50",
    "p90",
    "p99",
    "peak RSS",
    "CPU total",
    "first packet p50",
    "first packet p99",
    "first packet p50, no rules (floor)",
    "netlink messages per idle sync",
    "RSS after churn",
    "restart to first sync (metrics)",
];

/// The column of [`COLUMNS`] named `name` (which must be one).
pub fn column(name: &str) -> usize {
    COLUMNS
        .iter()
        .position(|c| *c == name)
        .unwrap_or_else(|| panic!("no column {name:?}"))
}

/// Everything measured for one proxy at one scale.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProxyResult {
    pub kind: ProxyKind,
    /// One figure per [`COLUMNS`] entry, or why the proxy was not measured at all (shown as
    /// the row's text: "not built (issue 7)", "not run: …").
    pub figures: Result<Vec<Figure>, String>,
    /// What the reader needs to know about this run (limits hit, approximations, failures).
    pub notes: Vec<String>,
    /// The proxy sampled every [`super::soak::EVERY`] during the churn (none in results saved
    /// before the samples were kept).
    #[serde(default)]
    pub soak: Vec<super::soak::Sample>,
}

impl ProxyResult {
    /// Fills the columns a result saved before they existed (new ones go last) with "—".
    pub fn pad_columns(&mut self) {
        if let Ok(figures) = &mut self.figures
            && figures.len() < COLUMNS.len()
        {
            figures.resize(COLUMNS.len(), Figure::Missing);
        }
    }
}

/// One scale's results, in the order the proxies ran.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScaleReport {
    pub scale: Scale,
    /// Seconds it took to create the objects.
    pub load_seconds: f64,
    pub results: Vec<ProxyResult>,
}

impl ScaleReport {
    /// The markdown table, a ratio row (ours ÷ upstream, same mode) and the notes.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "#### {} (objects created in {:.0} s)\n",
            self.scale, self.load_seconds
        );
        let _ = writeln!(out, "| proxy/mode | {} |", COLUMNS.join(" | "));
        let _ = writeln!(out, "|---|{}", "---|".repeat(COLUMNS.len()));
        for r in &self.results {
            let cells: Vec<String> = match &r.figures {
                Ok(figs) => figs.iter().map(Figure::to_string).collect(),
                Err(why) => {
                    let mut v = vec![why.clone()];
                    v.resize(COLUMNS.len(), String::new());
                    v
                }
            };
            let _ = writeln!(out, "| {} | {} |", r.kind.label(), cells.join(" | "));
        }
        for (ours, theirs) in self.pairs() {
            let cells: Vec<String> = (0..COLUMNS.len())
                .map(|i| match (ours.get(i), theirs.get(i)) {
                    (Some(a), Some(b)) => ratio(a, b),
                    _ => String::new(),
                })
                .collect();
            let mode = self
                .results
                .iter()
                .find(|r| r.figures.as_ref().ok() == Some(ours));
            let mode = mode.map(|r| r.kind.mode).unwrap_or_default();
            let _ = writeln!(out, "| ours ÷ upstream ({mode}) | {} |", cells.join(" | "));
        }
        let notes: Vec<String> = self
            .results
            .iter()
            .flat_map(|r| {
                r.notes
                    .iter()
                    .map(move |n| format!("- {}: {n}", r.kind.label()))
            })
            .collect();
        if !notes.is_empty() {
            let _ = writeln!(out, "\n{}", notes.join("\n"));
        }
        out
    }

    /// (ours, upstream) figure rows for each mode both were measured in.
    fn pairs(&self) -> Vec<(&Vec<Figure>, &Vec<Figure>)> {
        let find = |implementation, mode| {
            self.results
                .iter()
                .find(|r| r.kind.implementation == implementation && r.kind.mode == mode)
                .and_then(|r| r.figures.as_ref().ok())
        };
        ["nftables", "iptables", "ipvs"]
            .into_iter()
            .filter_map(|mode| {
                Some((
                    find(Implementation::Ours, mode)?,
                    find(Implementation::Upstream, mode)?,
                ))
            })
            .collect()
    }
}

fn ratio(ours: &Figure, theirs: &Figure) -> String {
    match (ours.number(), theirs.number()) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => String::new(),
    }
}

/// A line about the machine: kernel, CPUs, CPU model, memory, load average now.
pub fn machine() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let kernel = read("/proc/sys/kernel/osrelease").trim().to_owned();
    let cpuinfo = read("/proc/cpuinfo");
    let cpus = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_default();
    let mem_gib = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
    format!(
        "{cpus} CPUs ({model}), {mem_gib:.0} GiB, kernel {kernel}, load average {}",
        load_average()
    )
}

/// The 1-minute load average.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .next()
        .unwrap_or("?")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: ProxyKind, cold: Figure) -> ProxyResult {
        let mut figures = vec![Figure::Missing; COLUMNS.len()];
        figures[1] = cold;
        ProxyResult {
            kind,
            figures: Ok(figures),
            notes: vec!["a note".into()],
            soak: Vec::new(),
        }
    }

    #[test]
    fn table_has_a_row_per_proxy_and_a_ratio_row() {
        let report = ScaleReport {
            scale: Scale {
                services: 1000,
                endpoints: 10,
            },
            load_seconds: 3.0,
            results: vec![
                row(ProxyKind::OURS_NFTABLES, Figure::Secs(0.5)),
                row(ProxyKind::UPSTREAM_NFTABLES, Figure::Secs(2.0)),
                row(ProxyKind::UPSTREAM_IPTABLES, Figure::Over(900.0)),
                ProxyResult {
                    kind: ProxyKind::OURS_IPTABLES,
                    figures: Err("not built (issue 7)".into()),
                    notes: Vec::new(),
                    soak: Vec::new(),
                },
            ],
        };
        let md = report.markdown();
        for line in [
            "| ours/nftables | — | 0.50 s |",
            "| upstream/iptables | — | > 900 s |",
            "| ours/iptables | not built (issue 7) |",
            "| ours ÷ upstream (nftables) |  | 0.25× |",
            "- ours/nftables: a note",
        ] {
            assert!(md.contains(line), "{line:?} is missing:\n{md}");
        }
        let mut old = row(ProxyKind::OURS_IPVS, Figure::Secs(1.0));
        if let Ok(f) = &mut old.figures {
            f.truncate(17);
        }
        let json = serde_json::to_string(&old)
            .expect("saves")
            .replace(r#","soak":[]"#, "");
        assert!(!json.contains("soak"), "{json}");
        let mut loaded: ProxyResult = serde_json::from_str(&json).expect("loads");
        loaded.pad_columns();
        assert_eq!(loaded.figures.as_ref().map(Vec::len), Ok(COLUMNS.len()));
        assert_eq!(Figure::Count(0.0).to_string(), "0");
        assert_eq!(Figure::Count(2.5).to_string(), "2.5");
        let chart = super::super::chart::sync_and_rss(&[report]);
        for label in [
            ">0.5</text>",
            ">&gt; 900</text>",
            ">not built (issue 7)</text>",
        ] {
            assert!(chart.contains(label), "{label:?} is missing:\n{chart}");
        }
    }
}
