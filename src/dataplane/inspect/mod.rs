//! What `explain` and `status` ask of a proxy mode, the same for all five: its plan of a
//! snapshot, the walk of one packet over one family's rules (planned, or read back from the
//! kernel) into one [`Outcome`], and on a live node the kernel's reading with its drift, its
//! draining destinations and the client's affinity state.
//!
//! Each mode implements [`Inspect`] in its own folder (`<mode>/inspect/`), and
//! [`super::mode::Mode::inspect`] hands it out, so the commands keep the request, the sources,
//! the model's reasons and the rendering, and ask the mode for the rest. The types here are
//! plain data every mode fills alike.

pub mod clock;
mod error;
mod outcome;
#[cfg(test)]
pub mod sticky;
pub mod table;

use std::fmt::Debug;
use std::net::{IpAddr, SocketAddr};

use crate::cluster::{IpFamily, Protocol, ServicePortState, Snapshot};
use crate::config::Config;
use crate::dataplane::node::NodePolicy;
use crate::nft;

pub use error::Error;
pub use outcome::{Outcome, Share, Verdict, from_branches, shares};

/// The hook a mode that balances packets from outside at the node's interfaces names in
/// [`Told::hooks`]: what the rendering tells apart from socket hooks.
pub const TC_INGRESS: &str = "tc ingress";

/// A mode's part in `explain` and `status`.
pub trait Inspect: Sync {
    /// The mode's plan of `snapshot` for `config`, with the node policy its tracer reads. On a
    /// live node (`offline` false) the plan is over the host's own addresses where the mode's
    /// sync reads them; offline the Node object's addresses stand in for them.
    fn plan(
        &self,
        config: &Config,
        snapshot: &Snapshot,
        offline: bool,
    ) -> Result<(Box<dyn Plan>, NodePolicy), Error>;
}

/// A mode's plan of one snapshot, both families.
pub trait Plan: Debug + Send + Sync {
    /// The planned rules of `family`.
    fn rules(&self, family: IpFamily) -> &dyn Rules;

    /// `family`'s rules as this node's kernel holds them, through the reader the mode's
    /// applier adopts with, and where they differ from this plan. For one `packet` only what
    /// its path needs, where the mode reads less for it.
    fn read(
        &self,
        config: &Config,
        snapshot: &Snapshot,
        family: IpFamily,
        packet: Option<&Destination>,
    ) -> Result<Box<dyn Read>, Error>;
}

/// One family's rules of a mode, planned or read: what a packet is walked over.
pub trait Rules: Debug + Sync {
    /// The mode's name, as `--proxy-mode` spells it.
    fn mode(&self) -> &'static str;

    /// What the mode's state is called in a sentence ("rules", or "maps").
    fn noun(&self) -> &'static str {
        "rules"
    }

    /// The packet walked over the rules by the mode's tracer.
    fn walk(&self, packet: &Packet) -> Outcome;

    /// What the mode says of the walk beside the model's reasons; `None` when its paths are
    /// NAT rules whose masquerading the caller explains from the node policy.
    fn told(&self, packet: &Packet, frontend: Option<Frontend>, outcome: &Outcome) -> Option<Told> {
        let _ = (packet, frontend, outcome);
        None
    }

    /// Whether every frontend of a whole node is walked quickly enough for `status` to trace
    /// them all (a tracer that walks rule by rule is not).
    fn traces_whole_node(&self) -> bool {
        true
    }

    /// Whether the mode balances only this node's own sockets on external frontends, so
    /// `status` walks them from the node rather than from outside.
    fn external_from_node(&self) -> bool {
        false
    }
}

/// What a mode says of a walk, in place of the NAT account.
#[derive(Debug, Default)]
pub struct Told {
    /// The hooks that act for the call, in order ([`TC_INGRESS`] for a packet from outside).
    pub hooks: Vec<&'static str>,
    /// Reasons told before the model's.
    pub first: Vec<String>,
    /// Reasons told after the model's.
    pub last: Vec<String>,
}

/// One family's rules as this node's kernel holds them.
pub trait Read: Debug + Send {
    /// The rules read, for the tracer.
    fn rules(&self) -> &dyn Rules;

    /// Missing, extra or different objects, one line each, or the repair script's first
    /// lines: where the kernel differs from what the proxy would program now.
    fn drift(&self) -> &[String];

    /// The client's affinity entries in the kernel, put into the rules so the walk is the
    /// client's path now.
    fn remember(
        &mut self,
        config: &Config,
        snapshot: &Snapshot,
        packet: &Packet,
    ) -> Result<Remembered, Error> {
        let _ = (config, snapshot, packet);
        Ok(Remembered::default())
    }

    /// Reasons about destinations of the packet's frontend that take nothing new but keep
    /// their connections (graceful termination).
    fn draining(&self, packet: &Packet) -> Vec<String> {
        let _ = packet;
        Vec::new()
    }

    /// Whether other tables' base chains on the packet's path matter, and our own table they
    /// stand before or after: `None` when nothing of the mode's is ordered among nf_tables'
    /// base chains.
    fn beside(&self) -> Option<Option<&nft::Ruleset>>;
}

/// What a mode's kernel remembers of a client.
#[derive(Debug, Default)]
pub struct Remembered {
    /// The endpoints the kernel remembers for the client (empty: none); `None` when the port
    /// has no affinity or the kernel cannot tell.
    pub endpoints: Option<Vec<SocketAddr>>,
    /// Reasons told after the trace's own (a remembered endpoint that is gone, entries the
    /// mode cannot tie to the client).
    pub later: Vec<String>,
    /// What of the client's state could not be read, one line each, told at the end.
    pub unread: Vec<String>,
}

impl Remembered {
    /// The endpoints the kernel remembers for the client, and nothing else to tell.
    pub fn endpoints(endpoints: Option<Vec<SocketAddr>>) -> Remembered {
        Remembered {
            endpoints,
            ..Remembered::default()
        }
    }
}

/// Where a packet of one connection goes, without where it comes from: what a mode reads
/// less of the kernel for.
#[derive(Clone, Copy, Debug)]
pub struct Destination {
    pub protocol: Protocol,
    pub to: SocketAddr,
}

/// Which path through the node a packet takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// From a pod of this node, through its interface.
    Pod,
    /// From a process on the node.
    Node,
    /// From outside, through the node's uplink.
    Outside,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Pod => "pod",
            Origin::Node => "node",
            Origin::Outside => "outside",
        }
    }
}

/// The first packet of a connection, its source resolved: what every mode walks.
#[derive(Clone, Debug)]
pub struct Packet {
    pub protocol: Protocol,
    pub to: SocketAddr,
    /// The client's address.
    pub source: IpAddr,
    pub origin: Origin,
    /// The interface it arrives on (`None`: from the node itself).
    pub interface: Option<String>,
    /// The node's own addresses.
    pub local: Vec<IpAddr>,
}

impl Packet {
    /// Where it goes.
    pub fn destination(&self) -> Destination {
        Destination {
            protocol: self.protocol,
            to: self.to,
        }
    }

    /// The packet as the nftables tracer takes it (the modes whose rules live in nf_tables).
    pub fn nft(&self) -> nft::trace::Packet {
        nft::trace::Packet {
            protocol: self.protocol,
            src: self.source,
            dst: self.to.ip(),
            dport: self.to.port(),
            origin: match &self.interface {
                None => nft::trace::Origin::Host,
                Some(i) => nft::trace::Origin::Interface(i.clone()),
            },
        }
    }
}

/// Which kind of frontend a destination is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frontend {
    ClusterIp,
    NodePort,
    ExternalIp,
    LoadBalancer,
}

impl Frontend {
    pub fn as_str(self) -> &'static str {
        match self {
            Frontend::ClusterIp => "ClusterIP",
            Frontend::NodePort => "NodePort",
            Frontend::ExternalIp => "externalIP",
            Frontend::LoadBalancer => "LoadBalancer",
        }
    }

    /// NodePort, externalIP or LoadBalancer: under the external traffic policy.
    pub fn is_external(self) -> bool {
        self != Frontend::ClusterIp
    }
}

/// The Service port whose frontend `to` is, first in snapshot order (as the planners give a
/// contested frontend to the first port).
pub fn service_port(
    snapshot: &Snapshot,
    protocol: Protocol,
    to: SocketAddr,
) -> Option<(&ServicePortState, Frontend)> {
    let (ip, port) = (to.ip(), to.port());
    let family = IpFamily::of(&ip);
    let local = snapshot.node.local_addresses();
    snapshot.ports.values().find_map(|state| {
        if state.port.name.protocol != protocol {
            return None;
        }
        let view = state.family(family)?;
        let frontend = if view.cluster_ip == ip && state.port.port == port {
            Frontend::ClusterIp
        } else if view.external_ips.contains(&ip) && state.port.port == port {
            Frontend::ExternalIp
        } else if view.load_balancer_ips.contains(&ip) && state.port.port == port {
            Frontend::LoadBalancer
        } else if state.port.node_port == Some(port) && (local.contains(&ip) || ip.is_loopback()) {
            Frontend::NodePort
        } else {
            return None;
        };
        Some((state.as_ref(), frontend))
    })
}

/// The ClientIP affinity timeout of the Service port whose frontend `to` is, if it has one.
pub fn affinity_of(snapshot: &Snapshot, protocol: Protocol, to: SocketAddr) -> Option<u32> {
    service_port(snapshot, protocol, to).and_then(|(s, _)| s.port.affinity_timeout_seconds)
}
