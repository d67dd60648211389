//! What a frontend did, in terms two proxies can be compared by: which endpoints served (pod
//! and port) and whose address each saw (the client's own or a node's), or how it failed
//! (refused, dropped, unreachable).
//!
//! An outcome is the *set* of distinct observations over all attempts: with random balancing
//! the order and counts differ from run to run, the set does not once every candidate
//! endpoint has had its chance (the probes send enough attempts for that). Under ClientIP
//! affinity each proxy picks the sticky endpoint at random, so for those frontends the pod is
//! compared as "one, always the same" ([`Outcome::sticky`]).

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use super::frontends::Source;
use crate::lab::helper::Reply;
use crate::lab::topology::{
    CLIENT_IP, CLIENT_IP6, OTHER_CLIENT_IP, node_ip, node_ip6, pod_gateway, pod_gateway6,
};

/// Whose address an endpoint saw as the connection's source.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Seen {
    /// The source's own address (for a node: any of its addresses).
    Client,
    /// An address of node `index` (masqueraded, or relayed from there).
    Node(usize),
    /// Anything else, literally.
    Other(IpAddr),
}

impl fmt::Display for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Seen::Client => write!(f, "client address"),
            Seen::Node(i) => write!(f, "node {} address", i + 1),
            Seen::Other(ip) => write!(f, "{ip}"),
        }
    }
}

/// One distinct thing an attempt got.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Obs {
    /// Served by `pod` on its port `port`; `pod` is `(sticky)` for an affinity frontend
    /// that always reached the same pod.
    Served {
        pod: String,
        port: u16,
        seen: Seen,
    },
    Refused,
    /// No answer within the attempt's time.
    Dropped,
    /// ICMP host or network unreachable: nothing took the address.
    Unreachable,
    /// The connection was reset after it was established.
    Reset,
    /// A health check's answer: the HTTP status, and the body's `localEndpoints` and
    /// `serviceProxyHealthy`.
    Health {
        status: u16,
        local_endpoints: Option<u64>,
        healthy: Option<bool>,
    },
    /// Any other error, or a reply that is not an echo line.
    Other(String),
}

impl fmt::Display for Obs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Obs::Served { pod, port, seen } => write!(f, "{pod}:{port} ({seen})"),
            Obs::Refused => write!(f, "refused"),
            Obs::Dropped => write!(f, "dropped"),
            Obs::Unreachable => write!(f, "unreachable"),
            Obs::Reset => write!(f, "reset"),
            Obs::Health {
                status,
                local_endpoints,
                healthy,
            } => write!(
                f,
                "HTTP {status} (localEndpoints {local_endpoints:?}, healthy {healthy:?})"
            ),
            Obs::Other(s) => write!(f, "other: {s}"),
        }
    }
}

/// A frontend's outcome: every distinct observation.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Outcome(pub BTreeSet<Obs>);

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return write!(f, "nothing");
        }
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        write!(f, "{}", parts.join(", "))
    }
}

impl Outcome {
    /// For an affinity frontend: when every served attempt reached one pod, that pod's name
    /// replaced by `(sticky)` and its port by 0 (which endpoint a proxy sticks to is its
    /// random choice).
    pub fn sticky(self) -> Outcome {
        let pods: BTreeSet<&str> = self
            .0
            .iter()
            .filter_map(|o| match o {
                Obs::Served { pod, .. } => Some(pod.as_str()),
                _ => None,
            })
            .collect();
        if pods.len() != 1 {
            return self;
        }
        Outcome(
            self.0
                .into_iter()
                .map(|o| match o {
                    Obs::Served { seen, .. } => Obs::Served {
                        pod: "(sticky)".to_owned(),
                        port: 0,
                        seen,
                    },
                    other => other,
                })
                .collect(),
        )
    }

    /// The union of two outcomes of the same frontend.
    pub fn union(mut self, other: &Outcome) -> Outcome {
        self.0.extend(other.0.iter().cloned());
        self
    }
}

/// What one attempt got, from a probe's reply or error kind.
pub fn observe(source: Source, result: &Result<String, String>) -> Obs {
    match result {
        Ok(text) if text.starts_with("HTTP/") => health(text),
        Ok(text) => match Reply::parse(text) {
            Some(r) => Obs::Served {
                pod: r.pod,
                port: r.dst.port(),
                seen: seen(source, r.src.ip()),
            },
            None => Obs::Other(format!("reply {text:?}")),
        },
        Err(kind) => match kind.as_str() {
            "refused" => Obs::Refused,
            "timeout" => Obs::Dropped,
            "unreachable" => Obs::Unreachable,
            "reset" => Obs::Reset,
            other => Obs::Other(other.to_owned()),
        },
    }
}

/// A health check's HTTP answer: its status and the JSON body's two fields (headers such as
/// the date are left out: they differ every time).
fn health(text: &str) -> Obs {
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let json: Option<serde_json::Value> = serde_json::from_str(body).ok();
    Obs::Health {
        status,
        local_endpoints: json.as_ref().and_then(|j| j["localEndpoints"].as_u64()),
        healthy: json
            .as_ref()
            .and_then(|j| j["serviceProxyHealthy"].as_bool()),
    }
}

/// Classifies the source address an endpoint saw, for a probe from `source`.
pub fn seen(source: Source, src: IpAddr) -> Seen {
    let own: Vec<IpAddr> = match source {
        Source::Pod { node } => {
            let name = Source::pod_name(node);
            vec![
                super::objects::pod_ip(&name, crate::lab::cluster::Family::V4),
                super::objects::pod_ip(&name, crate::lab::cluster::Family::V6),
            ]
        }
        Source::Node(i) => node_addresses(i),
        Source::Client => vec![IpAddr::V4(CLIENT_IP), IpAddr::V6(CLIENT_IP6)],
        Source::OtherClient => vec![IpAddr::V4(OTHER_CLIENT_IP)],
    };
    let src = canonical(src);
    if own.contains(&src) {
        return Seen::Client;
    }
    (0..crate::lab::NODES)
        .find(|&i| node_addresses(i).contains(&src))
        .map_or(Seen::Other(src), Seen::Node)
}

/// Every address of node `i`: underlay and pod gateway, both families.
fn node_addresses(i: usize) -> Vec<IpAddr> {
    vec![
        IpAddr::V4(node_ip(i)),
        IpAddr::V6(node_ip6(i)),
        IpAddr::V4(pod_gateway(i)),
        IpAddr::V6(pod_gateway6(i)),
    ]
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_classified_by_whose_address_the_pod_saw() {
        let pod = Source::Pod { node: 0 };
        let line = |src: &str| {
            Ok(format!(
                "pod=n2-a proto=tcp src={src} dst=10.244.2.10:8080\n"
            ))
        };
        let served = |seen| Obs::Served {
            pod: "n2-a".into(),
            port: 8080,
            seen,
        };
        assert_eq!(
            observe(pod, &line("10.244.1.11:4000")),
            served(Seen::Client)
        );
        assert_eq!(
            observe(pod, &line("10.244.1.1:4000")),
            served(Seen::Node(0))
        );
        assert_eq!(
            observe(pod, &line("192.168.200.12:4000")),
            served(Seen::Node(1))
        );
        assert_eq!(
            observe(Source::Node(2), &line("192.168.200.13:4000")),
            served(Seen::Client)
        );
        assert_eq!(
            observe(Source::Client, &line("192.168.200.100:4000")),
            served(Seen::Client)
        );
        assert_eq!(
            observe(Source::OtherClient, &line("192.168.200.100:4000")),
            served(Seen::Other("192.168.200.100".parse().unwrap()))
        );
        assert_eq!(
            observe(pod, &line("[fd00:244:1::11]:4000")),
            served(Seen::Client)
        );
    }

    #[test]
    fn a_health_check_is_its_status_and_counts() {
        let text = "HTTP/1.1 200 OK\r\nDate: Sun, 06 Dec 2026 12:00:00 GMT\r\n\r\n{\n\"service\": \
                    {\"namespace\": \"x\", \"name\": \"s1\"},\n\"localEndpoints\": 2,\n\
                    \"serviceProxyHealthy\": true\n}";
        let want = Obs::Health {
            status: 200,
            local_endpoints: Some(2),
            healthy: Some(true),
        };
        assert_eq!(observe(Source::Client, &Ok(text.to_owned())), want);
    }

    #[test]
    fn errors_are_classified_by_kind() {
        let s = Source::Client;
        assert_eq!(observe(s, &Err("refused".into())), Obs::Refused);
        assert_eq!(observe(s, &Err("timeout".into())), Obs::Dropped);
        assert_eq!(observe(s, &Err("unreachable".into())), Obs::Unreachable);
        assert_eq!(
            observe(s, &Ok("junk".into())),
            Obs::Other("reply \"junk\"".into())
        );
    }

    #[test]
    fn sticky_hides_which_pod_only_when_there_was_one() {
        let served = |pod: &str| Obs::Served {
            pod: pod.into(),
            port: 8080,
            seen: Seen::Client,
        };
        let one = Outcome([served("n1-a")].into());
        let sticky = Obs::Served {
            pod: "(sticky)".into(),
            port: 0,
            seen: Seen::Client,
        };
        assert_eq!(one.sticky(), Outcome([sticky].into()));
        let two = Outcome([served("n1-a"), served("n2-a")].into());
        assert_eq!(two.clone().sticky(), two);
        let refused = Outcome([Obs::Refused].into());
        assert_eq!(refused.clone().sticky(), refused);
    }
}
