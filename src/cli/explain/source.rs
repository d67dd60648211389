//! Where the packet comes from, as the tracers take it: `--from` resolved against the node
//! (its addresses, its pod network, the detect-local mode).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use super::{Error, From, Origin, Packet, Request};
use crate::cluster::{IpFamily, Snapshot};
use crate::dataplane::node::NodePolicy;
use crate::dataplane::node::detect_local::Local;

/// The packet's source as the tracers take it.
#[derive(Debug)]
pub(super) struct Source {
    pub(super) address: IpAddr,
    pub(super) origin: Origin,
    pub(super) interface: Option<String>,
    /// This node's own addresses (what `fib daddr type local` and `--dst-type LOCAL` see).
    pub(super) local: Vec<IpAddr>,
    /// detect-local recognises no pod traffic in this family.
    pub(super) detect_off: bool,
}

impl Source {
    pub(super) fn resolve(
        snapshot: &Snapshot,
        node: &NodePolicy,
        request: &Request,
        family: IpFamily,
    ) -> Result<Source, Error> {
        let ctx = &snapshot.node;
        let local = ctx.local_addresses();
        let detect = node.detect_local.resolve(family, &ctx.pod_cidrs);
        let pod_net: Option<IpNet> = ctx
            .pod_cidrs
            .iter()
            .copied()
            .find(|n| IpFamily::of_net(n) == family)
            .or(match &detect {
                Local::Cidr(net) => Some(*net),
                _ => None,
            });
        // The interface a pod's packet arrives on: the user's, else one detect-local counts
        // as a pod's (a bridge, or a name with the configured prefix), else a veth.
        let pod_interface = || {
            request.in_interface.as_ref().map_or_else(
                || match &detect {
                    Local::Interface(i) if i.is_prefix() => format!("{}0", i.as_str()),
                    Local::Interface(i) => i.as_str().to_string(),
                    _ => "veth0".to_string(),
                },
                |i| i.as_str().to_string(),
            )
        };
        let outside_interface = || {
            request
                .in_interface
                .as_ref()
                .map_or_else(|| "eth0".to_string(), |i| i.as_str().to_string())
        };
        let (address, origin) = match &request.from {
            From::Node => (
                ctx.primary_ip(family)
                    .or_else(|| local.iter().copied().find(|a| IpFamily::of(a) == family))
                    .unwrap_or(match family {
                        IpFamily::V4 => IpAddr::V4(Ipv4Addr::LOCALHOST),
                        IpFamily::V6 => IpAddr::V6(Ipv6Addr::LOCALHOST),
                    }),
                Origin::Node,
            ),
            From::Pod => {
                let net = pod_net.ok_or(Error::NoPodNetwork(family))?;
                (pod_address(net, snapshot), Origin::Pod)
            }
            // Documentation addresses (RFC 5737, RFC 3849): only ever a value in a trace.
            From::Outside => (
                match family {
                    IpFamily::V4 => IpAddr::V4(Ipv4Addr::new(203, 0, 113, 10)),
                    IpFamily::V6 => IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 10)),
                },
                Origin::Outside,
            ),
            From::Address(a) => {
                if IpFamily::of(a) != family {
                    return Err(Error::Family(*a, IpFamily::of(a), family));
                }
                let origin = if local.contains(a) || a.is_loopback() {
                    Origin::Node
                } else if pod_net.is_some_and(|n| n.contains(a)) {
                    Origin::Pod
                } else {
                    Origin::Outside
                };
                (*a, origin)
            }
        };
        let interface = match origin {
            Origin::Node => None,
            Origin::Pod => Some(pod_interface()),
            Origin::Outside => Some(outside_interface()),
        };
        Ok(Source {
            address,
            origin,
            interface,
            local,
            detect_off: matches!(detect, Local::None),
        })
    }

    /// The packet of `request` from this source, as every mode walks it.
    pub(super) fn packet(&self, request: &Request) -> Packet {
        Packet {
            protocol: request.protocol,
            to: request.to,
            source: self.address,
            origin: self.origin,
            interface: self.interface.clone(),
            local: self.local.clone(),
        }
    }
}

/// A pod's address inside `net` that no endpoint has (so the answer is not a hairpin): the
/// last host of the network, or the one below it, and so on.
fn pod_address(net: IpNet, snapshot: &Snapshot) -> IpAddr {
    let taken: BTreeSet<IpAddr> = snapshot
        .ports
        .values()
        .flat_map(|s| &s.families)
        .flat_map(|v| v.endpoints.iter().map(|e| e.ip))
        .filter(|ip| net.contains(ip))
        .collect();
    let last = match net.broadcast() {
        IpAddr::V4(b) => u128::from(u32::from(b)) - 1,
        IpAddr::V6(b) => u128::from(b) - 1,
    };
    let at = |n: u128| match net {
        IpNet::V4(_) => IpAddr::V4(Ipv4Addr::from(n as u32)),
        IpNet::V6(_) => IpAddr::V6(Ipv6Addr::from(n)),
    };
    (0..=taken.len() as u128)
        .map(|k| at(last.saturating_sub(k)))
        .find(|ip| net.contains(ip) && !taken.contains(ip))
        .unwrap_or(net.addr())
}
