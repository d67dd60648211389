//! IPVS objects as plain values: a virtual service and how it is identified, a destination
//! (real server), the connection timeouts, and the counters the kernel keeps for each.
//!
//! Pure data. Values the kernel may hold that we never program (another protocol, forwarding
//! method or flag bit) are kept as they are (`Other`, raw bits), so what is read back can be
//! written back unchanged.

use std::fmt;
use std::net::SocketAddr;

use super::uapi::{self, flags};
use crate::cluster::IpFamily;

/// A virtual service's transport protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
    /// Another `IPPROTO_*` number.
    Other(u16),
}

impl Protocol {
    /// The `IPPROTO_*` number.
    pub fn number(self) -> u16 {
        match self {
            Protocol::Tcp => uapi::IPPROTO_TCP,
            Protocol::Udp => uapi::IPPROTO_UDP,
            Protocol::Sctp => uapi::IPPROTO_SCTP,
            Protocol::Other(n) => n,
        }
    }

    pub fn from_number(n: u16) -> Protocol {
        match n {
            uapi::IPPROTO_TCP => Protocol::Tcp,
            uapi::IPPROTO_UDP => Protocol::Udp,
            uapi::IPPROTO_SCTP => Protocol::Sctp,
            n => Protocol::Other(n),
        }
    }
}

impl From<crate::cluster::Protocol> for Protocol {
    fn from(p: crate::cluster::Protocol) -> Protocol {
        match p {
            crate::cluster::Protocol::Tcp => Protocol::Tcp,
            crate::cluster::Protocol::Udp => Protocol::Udp,
            crate::cluster::Protocol::Sctp => Protocol::Sctp,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Protocol::Tcp => f.write_str("TCP"),
            Protocol::Udp => f.write_str("UDP"),
            Protocol::Sctp => f.write_str("SCTP"),
            Protocol::Other(n) => write!(f, "protocol {n}"),
        }
    }
}

/// What identifies a virtual service in the kernel's tables: a (protocol, address, port), or a
/// firewall mark. Two services with the same key are the same service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ServiceKey {
    /// Packets to this address and port over this protocol; the family is the address's.
    Address {
        protocol: Protocol,
        address: SocketAddr,
    },
    /// Packets of this family carrying this firewall mark, whatever their address or
    /// protocol. The kernel reports such a service as TCP.
    Fwmark { family: IpFamily, mark: u32 },
}

impl ServiceKey {
    pub fn family(&self) -> IpFamily {
        match self {
            ServiceKey::Address { address, .. } => family_of(address),
            ServiceKey::Fwmark { family, .. } => *family,
        }
    }
}

impl fmt::Display for ServiceKey {
    /// As `ipvsadm -L` names services: `TCP 10.0.0.1:80`, `UDP [fd00::1]:53`, `FWM 42 IPv6`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServiceKey::Address { protocol, address } => write!(f, "{protocol} {address}"),
            ServiceKey::Fwmark { family, mark } => write!(f, "FWM {mark} {family}"),
        }
    }
}

pub fn family_of(address: &SocketAddr) -> IpFamily {
    match address {
        SocketAddr::V4(_) => IpFamily::V4,
        SocketAddr::V6(_) => IpFamily::V6,
    }
}

/// A scheduler's name (`rr`, `wrr`, `sh`, `mh`, ...): the kernel loads module `ip_vs_<name>`
/// for it, so any name may be asked for and only the kernel knows whether it exists.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Scheduler(pub String);

impl Scheduler {
    pub fn new(name: &str) -> Scheduler {
        Scheduler(name.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A service's flags (`IP_VS_SVC_F_*`), without `HASHED`, which the kernel sets on every
/// service it holds. The scheduler flags mean what the scheduler says: for `sh` and `mh`
/// alike, flag 1 is "fallback" (skip an unavailable destination) and flag 2 is "port" (hash
/// the source port too); ipvsadm calls them `flag-1` .. `flag-3` for other schedulers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Flags(pub u32);

impl Flags {
    pub const NONE: Flags = Flags(0);
    /// Persistence: one client goes to one destination for the service's timeout.
    pub const PERSISTENT: Flags = Flags(flags::PERSISTENT);
    /// Schedule every packet on its own (UDP), no connection entry.
    pub const ONE_PACKET: Flags = Flags(flags::ONEPACKET);
    pub const SCHED1: Flags = Flags(flags::SCHED1);
    pub const SCHED2: Flags = Flags(flags::SCHED2);
    pub const SCHED3: Flags = Flags(flags::SCHED3);
    /// `sh-fallback` (`IP_VS_SVC_F_SCHED_SH_FALLBACK`).
    pub const SH_FALLBACK: Flags = Flags::SCHED1;
    /// `sh-port` (`IP_VS_SVC_F_SCHED_SH_PORT`).
    pub const SH_PORT: Flags = Flags::SCHED2;
    /// `mh-fallback` (defined in the kernel's `ip_vs_mh.c` as the same bit as sh-fallback).
    pub const MH_FALLBACK: Flags = Flags::SCHED1;
    /// `mh-port` (the same bit as sh-port).
    pub const MH_PORT: Flags = Flags::SCHED2;

    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Flags {
    type Output = Flags;
    fn bitor(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }
}

/// The netmask that groups clients for persistence when it covers one address: `/32` for IPv4
/// (a mask, `0xffff_ffff`) and `/128` for IPv6 (a prefix length), as the kernel holds them.
pub fn single_address_netmask(family: IpFamily) -> u32 {
    match family {
        IpFamily::V4 => u32::MAX,
        IpFamily::V6 => 128,
    }
}

/// A virtual service, as programmed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Service {
    pub key: ServiceKey,
    pub scheduler: Scheduler,
    pub flags: Flags,
    /// Persistence timeout in seconds; used when `flags` has [`Flags::PERSISTENT`].
    pub timeout: u32,
    /// Which clients share one persistence entry, as the kernel holds it: for IPv4 a mask
    /// (`0xffff_ff00`: a /24), for IPv6 a prefix length (1-128). See
    /// [`single_address_netmask`].
    pub netmask: u32,
}

impl Service {
    /// A service with no flags, no persistence and a single-address netmask.
    pub fn new(key: ServiceKey, scheduler: &str) -> Service {
        Service {
            key,
            scheduler: Scheduler::new(scheduler),
            flags: Flags::NONE,
            timeout: 0,
            netmask: single_address_netmask(key.family()),
        }
    }
}

/// How packets reach a destination (`IP_VS_CONN_F_*`, the `ipvsadm` option in brackets).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Forwarding {
    /// NAT: the destination address is rewritten (`-m`); what kube-proxy uses.
    Masquerade,
    /// A local process serves it.
    Local,
    /// IP-in-IP (`-i`).
    Tunnel,
    /// Direct routing: the frame goes to the destination unchanged (`-g`).
    DirectRoute,
    Bypass,
    Other(u32),
}

impl Forwarding {
    pub fn number(self) -> u32 {
        match self {
            Forwarding::Masquerade => uapi::fwd::MASQ,
            Forwarding::Local => uapi::fwd::LOCALNODE,
            Forwarding::Tunnel => uapi::fwd::TUNNEL,
            Forwarding::DirectRoute => uapi::fwd::DROUTE,
            Forwarding::Bypass => uapi::fwd::BYPASS,
            Forwarding::Other(n) => n,
        }
    }

    pub fn from_number(n: u32) -> Forwarding {
        match n {
            uapi::fwd::MASQ => Forwarding::Masquerade,
            uapi::fwd::LOCALNODE => Forwarding::Local,
            uapi::fwd::TUNNEL => Forwarding::Tunnel,
            uapi::fwd::DROUTE => Forwarding::DirectRoute,
            uapi::fwd::BYPASS => Forwarding::Bypass,
            n => Forwarding::Other(n),
        }
    }
}

/// A destination (real server) of a service, as programmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Destination {
    pub address: SocketAddr,
    pub forwarding: Forwarding,
    /// 0 takes no new connections (graceful termination); existing ones stay.
    pub weight: u32,
    /// Connections above which it takes no new ones; 0: no limit.
    pub upper_threshold: u32,
    /// Connections below which an overloaded destination takes new ones again; 0: none.
    pub lower_threshold: u32,
}

impl Destination {
    /// A NAT destination without thresholds.
    pub fn masquerade(address: SocketAddr, weight: u32) -> Destination {
        Destination {
            address,
            forwarding: Forwarding::Masquerade,
            weight,
            upper_threshold: 0,
            lower_threshold: 0,
        }
    }
}

/// The connection timeouts of a network namespace, in seconds (`ipvsadm --set`). In a
/// request, 0 leaves that timeout as it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timeouts {
    pub tcp: u32,
    pub tcp_fin: u32,
    pub udp: u32,
}

/// The counters the kernel keeps for a service or a destination: totals since it was made
/// (or zeroed), and rates estimated every two seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Connections scheduled.
    pub connections: u64,
    pub packets_in: u64,
    pub packets_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Per second.
    pub connection_rate: u64,
    pub packet_rate_in: u64,
    pub packet_rate_out: u64,
    pub byte_rate_in: u64,
    pub byte_rate_out: u64,
}

/// A service as the kernel lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedService {
    pub service: Service,
    pub stats: Stats,
}

/// A destination as the kernel lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedDestination {
    pub destination: Destination,
    /// Established connections.
    pub active_connections: u32,
    /// Connections in any other state (closing, TIME_WAIT, UDP).
    pub inactive_connections: u32,
    /// Persistence templates pointing at it.
    pub persistent_connections: u32,
    pub stats: Stats,
}
