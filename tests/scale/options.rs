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
    /// `nftables` or `iptables`, as `--proxy-mode` spells it.
    pub mode: &'static str,
}

impl ProxyKind {
    pub const OURS_NFTABLES: ProxyKind = ProxyKind::new(Implementation::Ours, "nftables");
    pub const OURS_IPTABLES: ProxyKind = ProxyKind::new(Implementation::Ours, "iptables");
    pub const UPSTREAM_NFTABLES: ProxyKind = ProxyKind::new(Implementation::Upstream, "nftables");
    pub const UPSTREAM_IPTABLES: ProxyKind = ProxyKind::new(Implementation::Upstream, "iptables");

    const fn new(implementation: Implementation, mode: &'static str) -> ProxyKind {
        ProxyKind {
            implementation,
            mode,
        }
    }

    /// `ours-nftables`, `upstream-iptables`, … (also `ours/nftables`).
    pub fn parse(text: &str) -> Result<ProxyKind, String> {
        let all = [
            Self::OURS_NFTABLES,
            Self::OURS_IPTABLES,
            Self::UPSTREAM_NFTABLES,
            Self::UPSTREAM_IPTABLES,
        ];
        let want = text.trim().replace('/', "-");
        all.into_iter()
            .find(|k| k.label().replace('/', "-") == want)
            .ok_or_else(|| {
                format!("proxy {text:?}: one of ours-nftables, ours-iptables, upstream-nftables, upstream-iptables")
            })
    }

    /// `ours/nftables`, `upstream/iptables`, …
    pub fn label(self) -> String {
        let who = match self.implementation {
            Implementation::Upstream => "upstream",
            Implementation::Ours => "ours",
        };
        format!("{who}/{}", self.mode)
    }

    /// Why this proxy cannot be measured at all, when that is known before starting it
    /// (nothing since the iptables dataplane exists).
    pub fn known_gap(self) -> Option<&'static str> {
        None
    }
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
/// at 10,000 × 10 in minutes (iptables-nft takes more than half an hour there for either).
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
    /// API requests in flight while creating objects.
    pub concurrency: usize,
    /// Node objects the endpoints are spread over (the proxy's own node is one of them).
    pub nodes: usize,
    /// Timed connects of each first-packet probe (see `first_packet`).
    pub latency_samples: usize,
    /// The iptables back end of the node (iptables mode only).
    pub iptables_flavour: IptablesFlavour,
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
        assert_eq!(
            IptablesFlavour::parse("legacy"),
            Ok(IptablesFlavour::Legacy)
        );
        assert!(IptablesFlavour::parse("xtables").is_err());
    }
}
