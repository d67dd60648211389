//! What one harness run measures: the scales (Services × endpoints), the proxies and modes, the
//! churn load and every time limit. Plain values; the bench's command line and the smoke test
//! both build one.

use std::path::PathBuf;
use std::time::Duration;

use super::helper::SelfExec;

/// N Services × M endpoints each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Scale {
    pub services: usize,
    pub endpoints: usize,
}

impl Scale {
    /// `1000x10`, `10,000x10`, `44000×1`.
    pub fn parse(text: &str) -> Result<Scale, String> {
        let clean: String = text.chars().filter(|c| *c != ',' && *c != '_').collect();
        let (s, e) = clean
            .split_once(['x', '×'])
            .ok_or_else(|| format!("scale {text:?}: want SERVICESxENDPOINTS, e.g. 1000x10"))?;
        let n = |v: &str| {
            v.trim()
                .parse::<usize>()
                .map_err(|e| format!("{text}: {e}"))
        };
        let scale = Scale {
            services: n(s)?,
            endpoints: n(e)?,
        };
        if scale.services == 0 || scale.endpoints == 0 {
            return Err(format!("scale {text}: both numbers must be positive"));
        }
        Ok(scale)
    }
}

impl std::fmt::Display for Scale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} × {}",
            thousands(self.services),
            thousands(self.endpoints)
        )
    }
}

/// `44000` → `44,000`.
pub fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Which proxy implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Implementation {
    /// `testenv/bin/kube-proxy`, unchanged.
    Upstream,
    /// This crate's `kube-proxy-rs`.
    Ours,
}

/// A proxy and the `--proxy-mode` it runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyKind {
    pub implementation: Implementation,
    /// `nftables`, `iptables` or `ipvs`, as `--proxy-mode` spells it.
    pub mode: &'static str,
}

/// Where the kernel lists its IPVS virtual services: there only when it has IPVS.
const IPVS_PROC: &str = "/proc/net/ip_vs";

impl ProxyKind {
    pub const OURS_NFTABLES: ProxyKind = ProxyKind::new(Implementation::Ours, "nftables");
    pub const OURS_IPTABLES: ProxyKind = ProxyKind::new(Implementation::Ours, "iptables");
    pub const UPSTREAM_NFTABLES: ProxyKind = ProxyKind::new(Implementation::Upstream, "nftables");
    pub const UPSTREAM_IPTABLES: ProxyKind = ProxyKind::new(Implementation::Upstream, "iptables");
    pub const OURS_IPVS: ProxyKind = ProxyKind::new(Implementation::Ours, "ipvs");
    pub const UPSTREAM_IPVS: ProxyKind = ProxyKind::new(Implementation::Upstream, "ipvs");
    /// Ours only: upstream has no eBPF mode.
    pub const OURS_EBPF: ProxyKind = ProxyKind::new(Implementation::Ours, "ebpf");
    /// Every proxy and mode the harness knows, in the order `--proxies` lists them.
    pub const ALL: [ProxyKind; 7] = [
        Self::OURS_NFTABLES,
        Self::OURS_IPTABLES,
        Self::OURS_IPVS,
        Self::OURS_EBPF,
        Self::UPSTREAM_NFTABLES,
        Self::UPSTREAM_IPTABLES,
        Self::UPSTREAM_IPVS,
    ];

    const fn new(implementation: Implementation, mode: &'static str) -> ProxyKind {
        ProxyKind {
            implementation,
            mode,
        }
    }

    /// `ours-nftables`, `upstream-ipvs`, … (also `ours/nftables`).
    pub fn parse(text: &str) -> Result<ProxyKind, String> {
        let want = text.trim().replace('/', "-");
        Self::ALL
            .into_iter()
            .find(|k| k.flag_name() == want)
            .ok_or_else(|| {
                let names: Vec<String> = Self::ALL.iter().map(|k| k.flag_name()).collect();
                format!("proxy {text:?}: one of {}", names.join(", "))
            })
    }

    /// `ours-nftables`, as `--proxies` takes it.
    pub fn flag_name(self) -> String {
        self.label().replace('/', "-")
    }

    /// `ours/nftables`, `upstream/iptables`, …
    pub fn label(self) -> String {
        let who = match self.implementation {
            Implementation::Upstream => "upstream",
            Implementation::Ours => "ours",
        };
        format!("{who}/{}", self.mode)
    }

    /// Why this proxy cannot be measured on this kernel, when that is known before starting
    /// it: ipvs mode needs a kernel with IPVS (this host's has none; `--uml` runs the harness
    /// in a User-mode Linux kernel that has it).
    pub fn unavailable(self) -> Option<String> {
        if self.mode != "ipvs" || kernel_has_ipvs() {
            return None;
        }
        Some(format!(
            "not run: this kernel has no IPVS ({IPVS_PROC} is missing, and `modprobe ip_vs` did \
             not add it); run with --uml"
        ))
    }
}

/// Whether the kernel has IPVS, loading the module first where it is one (upstream's ipvs mode
/// loads it too, and ours expects it loaded).
fn kernel_has_ipvs() -> bool {
    let present = || std::path::Path::new(IPVS_PROC).exists();
    if !present() {
        let _ = std::process::Command::new("modprobe")
            .args(["-q", "ip_vs"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
    present()
}

/// Saved as its label (`ours/nftables`), so result files stay readable.
impl serde::Serialize for ProxyKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.label())
    }
}

impl<'de> serde::Deserialize<'de> for ProxyKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ProxyKind, D::Error> {
        let text = String::deserialize(d)?;
        ProxyKind::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Which iptables back end the node uses, for both proxies' iptables mode. nft is what a
/// fresh Debian host has; legacy (x_tables) is the one where both proxies finish a full sync
/// at 10,000 × 10 in minutes (iptables-nft is far slower there, for either; docs/benchmarks.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IptablesFlavour {
    #[default]
    Nft,
    Legacy,
}

impl IptablesFlavour {
    pub fn parse(text: &str) -> Result<IptablesFlavour, String> {
        match text.trim() {
            "nft" => Ok(IptablesFlavour::Nft),
            "legacy" => Ok(IptablesFlavour::Legacy),
            _ => Err(format!("iptables flavour {text:?}: one of nft, legacy")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            IptablesFlavour::Nft => "nft",
            IptablesFlavour::Legacy => "legacy",
        }
    }
}

/// Both proxies' `syncPeriod` unless told otherwise (`--iptables-sync-period`,
/// `--ipvs-sync-period`).
pub const DEFAULT_SYNC_PERIOD: Duration = Duration::from_secs(30);

impl Options {
    /// The proxies' `syncPeriod` in this run.
    pub fn sync_period(&self) -> Duration {
        self.sync_period.unwrap_or(DEFAULT_SYNC_PERIOD)
    }
}

/// Time limits. A phase that passes its limit is reported as "> limit", never dropped.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Proxy start → first sync with a working ClusterIP.
    pub cold: Duration,
    /// API write of one endpoint change → the new endpoint answers through the ClusterIP.
    pub change: Duration,
    /// After the churn writes stop: until every change has been observed as programmed.
    pub drain: Duration,
}

/// The churn load: `rate` endpoint changes per second for `duration`.
#[derive(Debug, Clone, Copy)]
pub struct Churn {
    pub rate: f64,
    pub duration: Duration,
}

/// Everything a harness run needs.
#[derive(Debug, Clone)]
pub struct Options {
    pub scales: Vec<Scale>,
    pub proxies: Vec<ProxyKind>,
    pub churn: Churn,
    pub limits: Limits,
    /// API requests in flight while creating the Node objects (Services and slices are loaded
    /// into etcd by `testenv load`).
    pub concurrency: usize,
    /// Our proxy's memory limit in bytes (`--memory-max`): it runs in a memory cgroup of its
    /// own with this hard limit (see `memory_cgroup`); `None`, no limit.
    pub memory_max: Option<u64>,
    /// Both proxies' `--v`.
    pub proxy_verbosity: u8,
    /// Record our proxy's cold start with `perf` (see `profile`).
    pub perf_cold: bool,
    /// Node objects the endpoints are spread over (the proxy's own node is one of them).
    pub nodes: usize,
    /// Timed connects of each first-packet probe (see `first_packet`).
    pub latency_samples: usize,
    /// The iptables back end of the node (iptables mode only).
    pub iptables_flavour: IptablesFlavour,
    /// `syncPeriod` for both proxies (the mode's `--*-sync-period` flag); `None` keeps their
    /// default, [`DEFAULT_SYNC_PERIOD`]. The idle-sync phase waits for two of them.
    pub sync_period: Option<Duration>,
    /// Where the harness runs when that is not this machine's own kernel (a User-mode Linux
    /// guest, with the host's description), for the report.
    pub guest: Option<String>,
    /// Our binary.
    pub ours_bin: PathBuf,
    /// How to re-run this binary as a harness process (echo server, watcher, metrics reader).
    pub exec: SelfExec,
    /// Where the markdown report and the chart are written.
    pub out_dir: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_scales_and_proxies() {
        assert_eq!(
            Scale::parse("10,000x10"),
            Ok(Scale {
                services: 10_000,
                endpoints: 10
            })
        );
        assert!(Scale::parse("10x0").is_err());
        assert_eq!(thousands(44_000), "44,000");
        assert_eq!(
            ProxyKind::parse("upstream/iptables"),
            Ok(ProxyKind::UPSTREAM_IPTABLES)
        );
        assert_eq!(ProxyKind::parse("ours-ipvs"), Ok(ProxyKind::OURS_IPVS));
        assert_eq!(
            ProxyKind::parse("upstream-ipvs"),
            Ok(ProxyKind::UPSTREAM_IPVS)
        );
        assert_eq!(ProxyKind::parse("ours-ebpf"), Ok(ProxyKind::OURS_EBPF));
        let err = ProxyKind::parse("upstream-ebpf").unwrap_err();
        assert!(
            err.contains("ours-ipvs") && err.contains("upstream-ipvs"),
            "{err}"
        );
        assert_eq!(ProxyKind::OURS_NFTABLES.unavailable(), None);
        assert_eq!(
            IptablesFlavour::parse("legacy"),
            Ok(IptablesFlavour::Legacy)
        );
        assert!(IptablesFlavour::parse("xtables").is_err());
    }
}
