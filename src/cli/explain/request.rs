//! What the user asks about: `--to ADDR:PORT[/tcp|udp|sctp]`, `--from`, `--in-interface`.
//!
//! Parsed here, once, into plain values, so nothing a user types reaches the output or a
//! tracer unparsed: an address is an [`IpAddr`], an interface name a checked [`IfName`].

use std::net::{IpAddr, SocketAddr};

use crate::cluster::Protocol;
use crate::dataplane::node::detect_local::IfName;

/// Where the packet comes from, as the user said it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum From {
    /// A pod on this node (the default): an address inside this node's pod network.
    Pod,
    /// A process on the node itself.
    Node,
    /// A client outside the cluster, arriving on the node's uplink.
    Outside,
    /// This address; where it comes from follows from the address (a node address is the
    /// node, one inside this node's pod network a pod, any other address outside).
    Address(IpAddr),
}

/// One question: the first packet of a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub protocol: Protocol,
    pub to: SocketAddr,
    pub from: From,
    /// The interface it arrives on (pods and outside clients only).
    pub in_interface: Option<IfName>,
}

/// Why a request cannot be parsed: one line naming the flag and what it accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error(
        "--to {0:?}: expected ADDRESS:PORT[/tcp|udp|sctp] (IPv6 as [ADDRESS]:PORT), port 1-65535"
    )]
    To(String),
    #[error("--from {0:?}: expected pod, node, outside or an IP address")]
    From(String),
    #[error(
        "--in-interface {0:?}: expected an interface name of 1 to {max} characters of [A-Za-z0-9._-]",
        max = IfName::MAX_LEN
    )]
    Interface(String),
    #[error("--in-interface: a packet from the node itself arrives on no interface")]
    InterfaceFromNode,
}

impl Request {
    /// Parses the three flags as given.
    pub fn parse(
        to: &str,
        from: Option<&str>,
        in_interface: Option<&str>,
    ) -> Result<Request, Error> {
        let (protocol, to) = parse_to(to)?;
        let from = match from.map(str::trim) {
            None | Some("pod") => From::Pod,
            Some("node") => From::Node,
            Some("outside") => From::Outside,
            Some(other) => From::Address(other.parse().map_err(|_| Error::From(clip(other)))?),
        };
        let in_interface = match in_interface {
            None => None,
            Some(name) => {
                Some(IfName::new(name, false).ok_or_else(|| Error::Interface(clip(name)))?)
            }
        };
        if from == From::Node && in_interface.is_some() {
            return Err(Error::InterfaceFromNode);
        }
        Ok(Request {
            protocol,
            to,
            from,
            in_interface,
        })
    }
}

fn parse_to(text: &str) -> Result<(Protocol, SocketAddr), Error> {
    let bad = || Error::To(clip(text));
    let (address, protocol) = match text.rsplit_once('/') {
        Some((a, p)) => {
            let protocol = match p.to_ascii_lowercase().as_str() {
                "tcp" => Protocol::Tcp,
                "udp" => Protocol::Udp,
                "sctp" => Protocol::Sctp,
                _ => return Err(bad()),
            };
            (a, protocol)
        }
        None => (text, Protocol::Tcp),
    };
    let to: SocketAddr = address.trim().parse().map_err(|_| bad())?;
    if to.port() == 0 {
        return Err(bad());
    }
    Ok((protocol, to))
}

/// A user's text as an error message quotes it: at most 64 characters, so a flag of a
/// megabyte does not become a megabyte of error (`{:?}` escapes what remains).
fn clip(text: &str) -> String {
    text.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_parse_with_and_without_a_protocol() {
        let r = Request::parse("10.96.0.10:80", None, None).unwrap();
        assert_eq!(
            (r.protocol, r.to.to_string()),
            (Protocol::Tcp, "10.96.0.10:80".into())
        );
        assert_eq!(r.from, From::Pod);
        let r = Request::parse("[fd00::10]:53/UDP", Some("node"), None).unwrap();
        assert_eq!(
            (r.protocol, r.to.to_string()),
            (Protocol::Udp, "[fd00::10]:53".into())
        );
        assert_eq!(r.from, From::Node);
        let r = Request::parse("10.0.0.11:30080/sctp", Some("192.0.2.7"), Some("eth0")).unwrap();
        assert_eq!(r.from, From::Address("192.0.2.7".parse().unwrap()));
        assert_eq!(r.protocol, Protocol::Sctp);
    }

    #[test]
    fn bad_input_is_one_line_naming_the_flag() {
        for (to, from, iif) in [
            ("10.96.0.10", None, None),
            ("10.96.0.10:0", None, None),
            ("10.96.0.10:80/icmp", None, None),
            ("fd00::1:80", None, None),
            ("10.96.0.10:80", Some("a pod"), None),
            ("10.96.0.10:80", None, Some("eth0; drop")),
            ("10.96.0.10:80", None, Some("a-very-long-interface-name")),
            ("10.96.0.10:80", Some("node"), Some("eth0")),
        ] {
            let e = Request::parse(to, from, iif).unwrap_err().to_string();
            assert!(e.starts_with("--"), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let huge = "x".repeat(1 << 20);
        let e = Request::parse(&huge, None, None).unwrap_err().to_string();
        assert!(e.len() < 200, "{} bytes", e.len());
    }
}
