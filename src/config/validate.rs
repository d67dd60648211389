//! Checks and conversions of single settings, shared by the flag and file front ends.
//!
//! Each function turns a raw value into its typed form or says, in one lower-case line without
//! the setting's name, what is accepted; the caller adds the flag or field name. The rules follow
//! upstream's `validation.go` (ranges, `ip:port`, one CIDR per family, the NodePort keywords).
//! Pure: no I/O.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use ipnet::IpNet;

use super::duration;
use super::model::{DetectLocalMode, LogFormat, NftablesEncoder, NodePortAddresses, ProxyMode};

/// A value a setting does not accept: one lower-case line saying what is wrong and what is
/// accepted, without the setting's name. The front ends name it: [`super::Error::Flag`] with
/// the flag, [`super::Error::File`] with the field path, clap with the flag it parses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

impl From<String> for Invalid {
    fn from(text: String) -> Invalid {
        Invalid(text)
    }
}

impl From<&str> for Invalid {
    fn from(text: &str) -> Invalid {
        Invalid(text.to_owned())
    }
}

/// A setting's typed value, or why it is not accepted.
pub type Result<T> = std::result::Result<T, Invalid>;

/// A boolean spelled as Go's `strconv.ParseBool` accepts (`true`, `false`, `1`, `0`, `t`, `F`...),
/// as pflag and `--feature-gates` do.
pub fn go_bool(text: &str) -> Result<bool> {
    match text {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        other => Err(Invalid(format!("must be true or false, got {other:?}"))),
    }
}

/// `mode` / `--proxy-mode`: `None` when empty (the default applies).
pub fn proxy_mode(text: &str) -> Result<Option<ProxyMode>> {
    match text.trim() {
        "" => Ok(None),
        "iptables" => Ok(Some(ProxyMode::Iptables)),
        "ipvs" => Ok(Some(ProxyMode::Ipvs)),
        "nftables" => Ok(Some(ProxyMode::Nftables)),
        "userspace" => Ok(Some(ProxyMode::Userspace)),
        "ebpf" => Ok(Some(ProxyMode::Ebpf)),
        "kernelspace" => Err(
            "kernelspace is the windows proxy mode; on linux use iptables, ipvs, nftables, userspace or ebpf"
                .into(),
        ),
        other => Err(Invalid(format!(
            "must be iptables, ipvs, nftables, userspace, ebpf or empty (iptables), got {other:?}"
        ))),
    }
}

/// `detectLocalMode` / `--detect-local-mode`: `None` when empty (ClusterCIDR applies).
pub fn detect_local_mode(text: &str) -> Result<Option<DetectLocalMode>> {
    let all = [
        DetectLocalMode::ClusterCidr,
        DetectLocalMode::NodeCidr,
        DetectLocalMode::BridgeInterface,
        DetectLocalMode::InterfaceNamePrefix,
    ];
    if text.is_empty() {
        return Ok(None);
    }
    all.into_iter()
        .find(|m| m.as_str() == text)
        .map(Some)
        .ok_or_else(|| {
            Invalid(format!(
                "must be ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix or empty \
                 (ClusterCIDR), got {text:?}"
            ))
        })
}

/// `clientConnection.contentType` / `--kube-api-content-type`: the two encodings the API server
/// speaks for the proxy's kinds; empty is the default (protobuf), as upstream defaults it.
pub fn content_type(text: &str) -> Result<String> {
    match text {
        "" => Ok(super::defaults::CONTENT_TYPE.to_owned()),
        "application/vnd.kubernetes.protobuf" | "application/json" => Ok(text.to_owned()),
        other => Err(Invalid(format!(
            "must be application/vnd.kubernetes.protobuf or application/json, got {other:?}"
        ))),
    }
}

/// `logging.format` / `--logging-format`.
pub fn log_format(text: &str) -> Result<LogFormat> {
    match text {
        "" | "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        other => Err(Invalid(format!("must be text or json, got {other:?}"))),
    }
}

/// `--nftables-encoder`.
pub fn nftables_encoder(text: &str) -> Result<NftablesEncoder> {
    match text {
        "netlink" => Ok(NftablesEncoder::Netlink),
        "nft" => Ok(NftablesEncoder::Nft),
        other => Err(Invalid(format!("must be netlink or nft, got {other:?}"))),
    }
}

/// A whole number within `lo..=hi`.
pub fn in_range(value: i64, lo: i64, hi: i64) -> Result<i64> {
    if (lo..=hi).contains(&value) {
        Ok(value)
    } else {
        Err(Invalid(format!(
            "must be between {lo} and {hi}, got {value}"
        )))
    }
}

/// `masqueradeBit` / `--iptables-masquerade-bit`: 0 to 31.
pub fn masquerade_bit(value: i64) -> Result<u8> {
    in_range(value, 0, 31).map(|v| v as u8)
}

/// `oomScoreAdj` / `--oom-score-adj`: -1000 to 1000.
pub fn oom_score_adj(value: i64) -> Result<i32> {
    in_range(value, -1000, 1000).map(|v| v as i32)
}

/// Counts that must not be negative (`burst`, `conntrack.min`, ...).
pub fn count(value: i64) -> Result<u32> {
    if value < 0 {
        return Err(Invalid(format!("must be 0 or more, got {value}")));
    }
    u32::try_from(value).map_err(|_| Invalid(format!("must be at most {}, got {value}", u32::MAX)))
}

/// `clientConnection.qps` / `--kube-api-qps`: finite and not negative.
pub fn qps(value: f64) -> Result<f32> {
    if value.is_finite() && value >= 0.0 && value <= f64::from(f32::MAX) {
        Ok(value as f32)
    } else {
        Err(Invalid(format!("must be a number 0 or more, got {value}")))
    }
}

/// Periods that must be longer than zero (`syncPeriod`, `configSyncPeriod`).
pub fn positive(value: Duration) -> Result<Duration> {
    if value.is_zero() {
        Err("must be greater than 0s".into())
    } else {
        Ok(value)
    }
}

/// `syncPeriod` must not be shorter than `minSyncPeriod`; the message names the latter as `min`.
pub fn sync_covers_min(sync: Duration, min: Duration, min_name: &str) -> Result<()> {
    if sync < min {
        Err(Invalid(format!(
            "must be at least {min_name} ({}), got {}",
            duration::format(min),
            duration::format(sync)
        )))
    } else {
        Ok(())
    }
}

/// `bindAddress` / `--bind-address`: one IP address.
pub fn ip(text: &str) -> Result<IpAddr> {
    IpAddr::from_str(text.trim()).map_err(|_| {
        Invalid(format!(
            "must be an ip address (e.g. 0.0.0.0 or ::), got {text:?}"
        ))
    })
}

/// Server addresses: `ip:port` or `[ipv6]:port`, port 1 to 65535; a bare IP gets
/// `default_port`, as upstream's defaulting appends it.
pub fn host_port(text: &str, default_port: u16) -> Result<SocketAddr> {
    let text = text.trim();
    if let Ok(ip) = IpAddr::from_str(text) {
        return Ok(SocketAddr::new(ip, default_port));
    }
    let addr = SocketAddr::from_str(text).map_err(|_| {
        Invalid(format!(
            "must be ip:port (e.g. 0.0.0.0:{default_port} or [::]:{default_port}), got {text:?}"
        ))
    })?;
    if addr.port() == 0 {
        return Err(Invalid(format!(
            "port must be between 1 and 65535, got {text:?}"
        )));
    }
    Ok(addr)
}

/// One CIDR, normalised to its network address (`10.244.1.0/16` → `10.244.0.0/16`).
pub fn cidr(text: &str) -> Result<IpNet> {
    IpNet::from_str(text.trim())
        .map(|net| net.trunc())
        .map_err(|_| {
            Invalid(format!(
                "must be a cidr (e.g. 10.244.0.0/16 or fd00:10::/56), got {text:?}"
            ))
        })
}

/// A list of CIDRs (`ipvs.excludeCIDRs`).
pub fn cidrs(texts: &[String]) -> Result<Vec<IpNet>> {
    texts.iter().map(|t| cidr(t)).collect()
}

/// `clusterCIDR` / `--cluster-cidr` (comma-separated): one CIDR, or one per family.
pub fn cluster_cidrs(text: &str) -> Result<Vec<IpNet>> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let nets = text.split(',').map(cidr).collect::<Result<Vec<IpNet>>>()?;
    let dual = |a: &IpNet, b: &IpNet| {
        matches!(
            (a, b),
            (IpNet::V4(_), IpNet::V6(_)) | (IpNet::V6(_), IpNet::V4(_))
        )
    };
    match nets.as_slice() {
        [_] => Ok(nets),
        [a, b] if dual(a, b) => Ok(nets),
        _ => Err(Invalid(format!(
            "must be one cidr or an ipv4,ipv6 pair (e.g. 10.244.0.0/16,fd00:10::/56), got {text:?}"
        ))),
    }
}

/// `nodePortAddresses` / `--nodeport-addresses`: CIDRs and the keywords `primary`,
/// `localhost`, `all`; `None` when empty (the mode's default applies).
pub fn node_port_addresses(entries: &[String]) -> Result<Option<NodePortAddresses>> {
    let mut out = NodePortAddresses::default();
    let mut any = false;
    for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
        any = true;
        match entry {
            "primary" => out.primary = true,
            "localhost" => out.localhost = true,
            "all" => out.all = true,
            _ => {
                let net = IpNet::from_str(entry).map_err(|_| {
                    Invalid(format!(
                        "entries must be cidrs or the keywords primary, localhost, all, \
                         got {entry:?}"
                    ))
                })?;
                out.cidrs.push(net.trunc());
            }
        }
    }
    Ok(any.then_some(out))
}

/// `portRange`: empty, `port`, `low-high` or `base+size`, within 1 to 65535.
pub fn port_range(text: &str) -> Result<()> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(());
    }
    let bad = || {
        Invalid(format!(
            "must be empty, a port, low-high or base+size (e.g. 30000-32767), got {text:?}"
        ))
    };
    let port = |s: &str| s.trim().parse::<u32>().map_err(|_| bad());
    let (low, high) = if let Some((a, b)) = text.split_once('-') {
        (port(a)?, port(b)?)
    } else if let Some((a, b)) = text.split_once('+') {
        let base = port(a)?;
        (base, base + port(b)?.saturating_sub(1))
    } else {
        let p = port(text)?;
        (p, p)
    };
    if low == 0 || high > 65535 || low > high {
        return Err(bad());
    }
    Ok(())
}

/// `showHiddenMetricsForVersion`: empty or `major.minor`.
pub fn metrics_version(text: &str) -> Result<()> {
    let ok = text.is_empty()
        || text.split_once('.').is_some_and(|(a, b)| {
            [a, b]
                .iter()
                .all(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()))
        });
    if ok {
        Ok(())
    } else {
        Err(Invalid(format!(
            "must be empty or major.minor (e.g. 1.36), got {text:?}"
        )))
    }
}

/// `hostnameOverride` / `--hostname-override`: trimmed and lower-cased; empty means none.
pub fn hostname(text: &str) -> Option<String> {
    let name = text.trim();
    (!name.is_empty()).then(|| name.to_lowercase())
}

/// The interface setting an interface-based detect-local mode needs must not be empty.
pub fn interface(value: &str, mode: DetectLocalMode) -> Result<()> {
    if value.trim().is_empty() {
        Err(Invalid(format!(
            "must not be empty when detect-local mode is {}",
            mode.as_str()
        )))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_good_values() {
        assert_eq!(proxy_mode(""), Ok(None));
        assert_eq!(proxy_mode("nftables"), Ok(Some(ProxyMode::Nftables)));
        assert_eq!(proxy_mode("userspace"), Ok(Some(ProxyMode::Userspace)));
        assert_eq!(proxy_mode("ebpf"), Ok(Some(ProxyMode::Ebpf)));
        assert_eq!(
            detect_local_mode("NodeCIDR"),
            Ok(Some(DetectLocalMode::NodeCidr))
        );
        assert_eq!(log_format("json"), Ok(LogFormat::Json));
        assert_eq!(masquerade_bit(31), Ok(31));
        assert_eq!(oom_score_adj(-1000), Ok(-1000));
        assert_eq!(
            host_port("0.0.0.0", 10256),
            Ok("0.0.0.0:10256".parse().unwrap())
        );
        assert_eq!(host_port("::", 10256), Ok("[::]:10256".parse().unwrap()));
        assert_eq!(host_port("[::1]:9", 10256), Ok("[::1]:9".parse().unwrap()));
        assert_eq!(cidr("10.244.1.0/16"), Ok("10.244.0.0/16".parse().unwrap()));
        assert_eq!(
            cluster_cidrs("10.0.0.0/8,fd00::/64").map(|v| v.len()),
            Ok(2)
        );
        assert_eq!(cluster_cidrs(""), Ok(vec![]));
        assert!(port_range("30000-32767").is_ok());
        assert!(port_range("300+20").is_ok());
        assert!(port_range("8080").is_ok());
        assert!(metrics_version("1.36").is_ok());
        assert_eq!(hostname("  Node-A "), Some("node-a".into()));
        assert_eq!(hostname("  "), None);
        let npa = node_port_addresses(&["primary".into(), "10.1.2.3/8".into(), "localhost".into()])
            .unwrap()
            .unwrap();
        assert!(npa.primary && npa.localhost && !npa.all);
        assert_eq!(npa.cidrs, vec!["10.0.0.0/8".parse::<IpNet>().unwrap()]);
        assert_eq!(node_port_addresses(&[]), Ok(None));
    }

    #[test]
    fn says_what_is_accepted() {
        let cases: Vec<(Result<()>, &str)> = vec![
            (
                proxy_mode("xdp").map(drop),
                "must be iptables, ipvs, nftables, userspace, ebpf or empty (iptables), got \"xdp\"",
            ),
            (
                proxy_mode("kernelspace").map(drop),
                "kernelspace is the windows proxy mode; on linux use iptables, ipvs, nftables, userspace or ebpf",
            ),
            (
                detect_local_mode("Bridge").map(drop),
                "must be ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix or empty (ClusterCIDR), got \"Bridge\"",
            ),
            (
                log_format("xml").map(drop),
                "must be text or json, got \"xml\"",
            ),
            (
                masquerade_bit(32).map(drop),
                "must be between 0 and 31, got 32",
            ),
            (
                masquerade_bit(-1).map(drop),
                "must be between 0 and 31, got -1",
            ),
            (
                oom_score_adj(1001).map(drop),
                "must be between -1000 and 1000, got 1001",
            ),
            (count(-1).map(drop), "must be 0 or more, got -1"),
            (qps(-0.5).map(drop), "must be a number 0 or more, got -0.5"),
            (
                positive(Duration::ZERO).map(drop),
                "must be greater than 0s",
            ),
            (
                sync_covers_min(
                    Duration::from_secs(1),
                    Duration::from_secs(2),
                    "minSyncPeriod",
                ),
                "must be at least minSyncPeriod (2s), got 1s",
            ),
            (
                ip("1.2.3").map(drop),
                "must be an ip address (e.g. 0.0.0.0 or ::), got \"1.2.3\"",
            ),
            (
                host_port("localhost:80", 1).map(drop),
                "must be ip:port (e.g. 0.0.0.0:1 or [::]:1), got \"localhost:80\"",
            ),
            (
                host_port("1.2.3.4:0", 1).map(drop),
                "port must be between 1 and 65535, got \"1.2.3.4:0\"",
            ),
            (
                cidr("10.0.0.0").map(drop),
                "must be a cidr (e.g. 10.244.0.0/16 or fd00:10::/56), got \"10.0.0.0\"",
            ),
            (
                cluster_cidrs("10.0.0.0/8,11.0.0.0/8").map(drop),
                "must be one cidr or an ipv4,ipv6 pair (e.g. 10.244.0.0/16,fd00:10::/56), got \"10.0.0.0/8,11.0.0.0/8\"",
            ),
            (
                cluster_cidrs("10.0.0.0/8,fd00::/8,fd01::/8").map(drop),
                "must be one cidr or an ipv4,ipv6 pair",
            ),
            (
                node_port_addresses(&["eth0".into()]).map(drop),
                "entries must be cidrs or the keywords primary, localhost, all, got \"eth0\"",
            ),
            (
                port_range("2-1"),
                "must be empty, a port, low-high or base+size (e.g. 30000-32767), got \"2-1\"",
            ),
            (
                metrics_version("v1.2"),
                "must be empty or major.minor (e.g. 1.36), got \"v1.2\"",
            ),
            (
                interface("", DetectLocalMode::BridgeInterface),
                "must not be empty when detect-local mode is BridgeInterface",
            ),
        ];
        for (got, want) in cases {
            let msg = got.expect_err(want).to_string();
            assert!(msg.starts_with(want), "{msg:?} vs {want:?}");
            assert!(!msg.contains('\n') && !msg.ends_with('.'), "{msg:?}");
        }
    }
}
