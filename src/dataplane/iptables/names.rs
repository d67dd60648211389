//! Every kernel-visible name of the iptables mode, defined once, and how per-Service and
//! per-endpoint chain names are derived.
//!
//! Pure. These are upstream kube-proxy's names, on purpose: operators' runbooks grep
//! `iptables-save` for `KUBE-SERVICES` and `KUBE-SVC-…`, and a chain name must tell them the same
//! thing under either proxy. Per-object chains carry upstream's hash scheme: the first 16
//! characters of the standard base32 encoding of SHA-256 over the service port's name
//! (`namespace/name[:port]`) and its lower-case protocol, plus `ip:port` for an endpoint. So the
//! same service port gets the same `KUBE-SVC-…` here and under upstream.
//!
//! No text from an API object becomes part of a name: [`ChainName`] holds only `[A-Z0-9-]`.

use std::fmt;
use std::sync::Arc;

use crate::cluster::{Endpoint, Protocol, ServicePortName};

/// nat: from PREROUTING and OUTPUT; captures Service traffic. filter: from FORWARD and OUTPUT;
/// rejects ClusterIP traffic without endpoints.
pub const SERVICES: &str = "KUBE-SERVICES";
/// nat: per NodePort, to the Service's external chain. filter: health-check node ports.
pub const NODEPORTS: &str = "KUBE-NODEPORTS";
/// nat: from POSTROUTING; masquerades marked packets.
pub const POSTROUTING: &str = "KUBE-POSTROUTING";
/// nat: sets the masquerade mark.
pub const MARK_MASQ: &str = "KUBE-MARK-MASQ";
/// filter: from INPUT and FORWARD; rejects external traffic without endpoints.
pub const EXTERNAL_SERVICES: &str = "KUBE-EXTERNAL-SERVICES";
/// filter: from FORWARD; conntrack INVALID drop and accepting Service traffic.
pub const FORWARD: &str = "KUBE-FORWARD";
/// filter: from INPUT, OUTPUT and FORWARD; loadBalancerSourceRanges drops.
pub const PROXY_FIREWALL: &str = "KUBE-PROXY-FIREWALL";
/// filter: from INPUT and OUTPUT; the localnet protection rule (CVE-2020-8558). Kubelet keeps a
/// chain of the same name and rule.
pub const FIREWALL: &str = "KUBE-FIREWALL";
/// mangle, nat, filter: an empty chain whose disappearance says a firewall reload flushed us.
pub const CANARY: &str = "KUBE-PROXY-CANARY";

/// Prefix of the per-service-port chain of Cluster-policy endpoints.
pub const SVC_PREFIX: &str = "KUBE-SVC-";
/// Prefix of the per-service-port chain of Local-policy endpoints.
pub const SVL_PREFIX: &str = "KUBE-SVL-";
/// Prefix of the per-service-port chain of external destinations.
pub const EXT_PREFIX: &str = "KUBE-EXT-";
/// Prefix of the per-service-port loadBalancerSourceRanges chain.
pub const FW_PREFIX: &str = "KUBE-FW-";
/// Prefix of the per-endpoint chain.
pub const SEP_PREFIX: &str = "KUBE-SEP-";

/// Chains named `KUBE-*` that are kubelet's or the iptables wrapper's, never kube-proxy's: we
/// neither flush nor delete them.
pub const NOT_OURS: [&str; 3] = [
    "KUBE-KUBELET-CANARY",
    "KUBE-MARK-DROP",
    "KUBE-IPTABLES-HINT",
];

/// Whether a chain found in the kernel is one this mode owns: upstream's prefix, not kubelet's.
/// `KUBE-FIREWALL` counts as ours only where we declare it; the caller decides that.
pub fn ours(chain: &str) -> bool {
    chain.starts_with("KUBE-") && !NOT_OURS.contains(&chain) && chain != FIREWALL
}

/// The comments upstream puts on its jump rules and fixed rules; operators grep them.
pub mod comments {
    pub const SERVICE_PORTALS: &str = "kubernetes service portals";
    pub const POSTROUTING: &str = "kubernetes postrouting rules";
    pub const EXTERNAL_PORTALS: &str = "kubernetes externally-visible service portals";
    pub const HEALTH_CHECK_PORTS: &str = "kubernetes health check service ports";
    pub const FORWARDING: &str = "kubernetes forwarding rules";
    pub const FORWARDING_CONNTRACK: &str = "kubernetes forwarding conntrack rule";
    pub const LB_FIREWALL: &str = "kubernetes load balancer firewall";
    pub const SNAT: &str = "kubernetes service traffic requiring SNAT";
    pub const NODEPORTS_LAST: &str =
        "kubernetes service nodeports; NOTE: this must be the last rule in this chain";
    pub const LOCALNET: &str = "block incoming localnet connections";
}

/// A chain name: a fixed one from this module or a derived `KUBE-XXX-<hash>`. Only `[A-Z0-9-]`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChainName(Arc<str>);

impl ChainName {
    /// One of the fixed names above.
    pub fn fixed(name: &'static str) -> ChainName {
        debug_assert!(valid(name), "{name}");
        ChainName(name.into())
    }

    /// A chain name read back from the kernel, if it is one we could have made.
    pub fn parse(name: &str) -> Option<ChainName> {
        valid(name).then(|| ChainName(name.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is a per-service-port or per-endpoint chain (rewritten only when it changed).
    pub fn is_per_service(&self) -> bool {
        [SVC_PREFIX, SVL_PREFIX, EXT_PREFIX, FW_PREFIX, SEP_PREFIX]
            .iter()
            .any(|p| self.0.starts_with(p))
    }
}

fn valid(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 28
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'-')
}

impl fmt::Display for ChainName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The per-service-port chain kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortChain {
    /// `KUBE-SVC-`: picks among the Cluster-policy endpoints.
    Cluster,
    /// `KUBE-SVL-`: picks among the Local-policy endpoints.
    Local,
    /// `KUBE-EXT-`: NodePort, externalIP and LoadBalancer traffic.
    External,
    /// `KUBE-FW-`: loadBalancerSourceRanges.
    Firewall,
}

/// The chain of `kind` for a service port: `KUBE-SVC-<hash>` and so on, as upstream names it.
pub fn port_chain(kind: PortChain, name: &ServicePortName) -> ChainName {
    let prefix = match kind {
        PortChain::Cluster => SVC_PREFIX,
        PortChain::Local => SVL_PREFIX,
        PortChain::External => EXT_PREFIX,
        PortChain::Firewall => FW_PREFIX,
    };
    let seed = format!("{name}{}", protocol_word(name.protocol));
    ChainName(format!("{prefix}{}", hash16(&seed)).into())
}

/// The chain of one endpoint of a service port: `KUBE-SEP-<hash>`, the hash also covering
/// `ip:port` (`[ip]:port` for IPv6).
pub fn endpoint_chain(name: &ServicePortName, endpoint: &Endpoint) -> ChainName {
    let seed = format!("{name}{}{endpoint}", protocol_word(name.protocol));
    ChainName(format!("{SEP_PREFIX}{}", hash16(&seed)).into())
}

/// The protocol as the hash seed and `-p` spell it.
pub fn protocol_word(p: Protocol) -> &'static str {
    match p {
        Protocol::Tcp => "tcp",
        Protocol::Udp => "udp",
        Protocol::Sctp => "sctp",
    }
}

/// The first 16 characters of base32 (RFC 4648 alphabet, no padding needed) of SHA-256.
fn hash16(seed: &str) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let digest = ring::digest::digest(&ring::digest::SHA256, seed.as_bytes());
    // 16 characters of 5 bits are the first 10 bytes of the digest.
    let bytes = &digest.as_ref()[..10];
    let mut out = String::with_capacity(16);
    let mut buffer: u32 = 0;
    let mut bits = 0;
    for &b in bytes {
        buffer = (buffer << 8) | u32::from(b);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(ALPHABET[((buffer >> bits) & 31) as usize] as char);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::ServiceKey;

    fn spn(ns: &str, name: &str, port: &str, protocol: Protocol) -> ServicePortName {
        ServicePortName {
            service: ServiceKey::new(ns, name),
            port: port.into(),
            protocol,
        }
    }

    #[test]
    fn service_chains_carry_upstreams_hash() {
        // The name upstream's own tests show for ns1/svc1 port p80 over TCP (computed
        // independently: `printf 'ns1/svc1:p80tcp' | sha256sum | xxd -r -p | base32`).
        let name = spn("ns1", "svc1", "p80", Protocol::Tcp);
        assert_eq!(
            port_chain(PortChain::Cluster, &name).as_str(),
            "KUBE-SVC-XPGD46QRK7WJZT7O"
        );
        assert_eq!(
            port_chain(PortChain::External, &name).as_str(),
            "KUBE-EXT-XPGD46QRK7WJZT7O"
        );
    }

    #[test]
    fn protocol_and_endpoint_change_the_hash() {
        let tcp = spn("ns", "web", "", Protocol::Tcp);
        let udp = spn("ns", "web", "", Protocol::Udp);
        assert_ne!(
            port_chain(PortChain::Cluster, &tcp),
            port_chain(PortChain::Cluster, &udp)
        );
        let ep = |ip: &str| Endpoint {
            ip: ip.parse().unwrap(),
            port: 80,
            ready: true,
            serving: true,
            terminating: false,
            placement: Default::default(),
            is_local: false,
        };
        let a = endpoint_chain(&tcp, &ep("10.0.0.1"));
        assert_ne!(a, endpoint_chain(&tcp, &ep("10.0.0.2")));
        assert!(a.as_str().starts_with(SEP_PREFIX) && a.as_str().len() == 25);
        assert!(ChainName::parse(a.as_str()).is_some());
    }

    #[test]
    fn kubelets_chains_are_not_ours() {
        assert!(ours("KUBE-SVC-ABC"));
        assert!(ours("KUBE-SERVICES"));
        assert!(!ours("KUBE-KUBELET-CANARY"));
        assert!(!ours("KUBE-FIREWALL"));
        assert!(!ours("DOCKER"));
        assert!(ChainName::parse("kube-svc").is_none());
        assert!(ChainName::parse("KUBE-X\" -j ACCEPT").is_none());
    }
}
