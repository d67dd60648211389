//! IPVS messages read back into values: the services of a `GET_SERVICE` dump, the
//! destinations of a `GET_DEST` dump with their connection counts, the counters of both
//! (`STATS64`, or the older 32-bit `STATS`), and the timeouts `GET_CONFIG` answers with.
//!
//! Pure, never panics on kernel input: a message that lacks what identifies its object is
//! [`Undecodable`], with the reason; optional parts that are missing read as 0. It reads the
//! layout [`super::encode`] writes, so a request decodes to the object it carries (the round
//! trip the property tests check).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::uapi::{self, attr, dest, stats, svc};
use super::value::{
    Destination, Flags, Forwarding, ListedDestination, ListedService, Protocol, Scheduler, Service,
    ServiceKey, Stats, Timeouts,
};
use crate::cluster::IpFamily;
use crate::netlink::attr::{attrs, find};
use crate::netlink::genetlink;

/// A message that does not say what object it is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("undecodable IPVS {object}: {reason}")]
pub struct Undecodable {
    pub object: &'static str,
    pub reason: String,
}

fn undecodable(object: &'static str, reason: impl Into<String>) -> Undecodable {
    Undecodable {
        object,
        reason: reason.into(),
    }
}

fn u16_ne(value: &[u8]) -> Option<u16> {
    Some(u16::from_ne_bytes(value.get(..2)?.try_into().ok()?))
}

fn u32_ne(value: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(value.get(..4)?.try_into().ok()?))
}

fn u64_ne(value: &[u8]) -> Option<u64> {
    Some(u64::from_ne_bytes(value.get(..8)?.try_into().ok()?))
}

fn family(af: u16) -> Option<IpFamily> {
    match af {
        uapi::AF_INET => Some(IpFamily::V4),
        uapi::AF_INET6 => Some(IpFamily::V6),
        _ => None,
    }
}

/// An address of `family` from a `union nf_inet_addr` (16 bytes; 4 are enough for IPv4).
fn inet_addr(family: IpFamily, value: &[u8]) -> Option<IpAddr> {
    match family {
        IpFamily::V4 => {
            let b: [u8; 4] = value.get(..4)?.try_into().ok()?;
            Some(IpAddr::V4(Ipv4Addr::from(b)))
        }
        IpFamily::V6 => {
            let b: [u8; 16] = value.get(..16)?.try_into().ok()?;
            Some(IpAddr::V6(Ipv6Addr::from(b)))
        }
    }
}

fn port(value: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes(value.get(..2)?.try_into().ok()?))
}

/// The service nest of a message body (`genlmsghdr`, then the attributes).
fn service_nest(body: &[u8]) -> Result<&[u8], Undecodable> {
    find(genetlink::attributes(body), attr::SERVICE)
        .ok_or_else(|| undecodable("service", "no service attribute"))
}

/// The key of the service a message names (every service and destination request does).
pub fn service_key(body: &[u8]) -> Result<ServiceKey, Undecodable> {
    key(service_nest(body)?)
}

fn key(nest: &[u8]) -> Result<ServiceKey, Undecodable> {
    const OBJECT: &str = "service";
    let a = |kind| find(nest, kind);
    let af = a(svc::AF)
        .and_then(u16_ne)
        .ok_or_else(|| undecodable(OBJECT, "no address family"))?;
    let family = family(af).ok_or_else(|| undecodable(OBJECT, format!("address family {af}")))?;
    if let Some(mark) = a(svc::FWMARK).and_then(u32_ne) {
        return Ok(ServiceKey::Fwmark { family, mark });
    }
    let protocol = a(svc::PROTOCOL)
        .and_then(u16_ne)
        .ok_or_else(|| undecodable(OBJECT, "neither fwmark nor protocol"))?;
    let ip = a(svc::ADDR)
        .and_then(|v| inet_addr(family, v))
        .ok_or_else(|| undecodable(OBJECT, "no address"))?;
    let port = a(svc::PORT)
        .and_then(port)
        .ok_or_else(|| undecodable(OBJECT, format!("{ip}: no port")))?;
    Ok(ServiceKey::Address {
        protocol: Protocol::from_number(protocol),
        address: SocketAddr::new(ip, port),
    })
}

/// The service in a message body (`genlmsghdr`, then a service nest).
pub fn service(body: &[u8]) -> Result<ListedService, Undecodable> {
    const OBJECT: &str = "service";
    let nest = service_nest(body)?;
    let a = |kind| find(nest, kind);
    let key = key(nest)?;
    let family = key.family();
    let scheduler = a(svc::SCHED_NAME)
        .and_then(crate::netlink::attr::string)
        .ok_or_else(|| undecodable(OBJECT, format!("{key}: no scheduler")))?;
    let flags = a(svc::FLAGS).and_then(u32_ne).unwrap_or(0) & !uapi::flags::HASHED;
    let netmask = a(svc::NETMASK)
        .and_then(|v| match family {
            IpFamily::V4 => crate::netlink::attr::be32(v),
            IpFamily::V6 => u32_ne(v),
        })
        .unwrap_or(0);
    Ok(ListedService {
        service: Service {
            key,
            scheduler: Scheduler::new(scheduler),
            flags: Flags(flags),
            timeout: a(svc::TIMEOUT).and_then(u32_ne).unwrap_or(0),
            netmask,
        },
        stats: counters(nest, svc::STATS64, svc::STATS),
    })
}

/// The destination in a message body (`genlmsghdr`, then a destination nest), of a service of
/// `service_family` (what the destination is when the kernel does not say).
pub fn destination(
    body: &[u8],
    service_family: IpFamily,
) -> Result<ListedDestination, Undecodable> {
    const OBJECT: &str = "destination";
    let nest = find(genetlink::attributes(body), attr::DEST)
        .ok_or_else(|| undecodable(OBJECT, "no destination attribute"))?;
    let a = |kind| find(nest, kind);
    let family = match a(dest::ADDR_FAMILY).and_then(u16_ne) {
        None => service_family,
        Some(af) => {
            family(af).ok_or_else(|| undecodable(OBJECT, format!("address family {af}")))?
        }
    };
    let ip = a(dest::ADDR)
        .and_then(|v| inet_addr(family, v))
        .ok_or_else(|| undecodable(OBJECT, "no address"))?;
    let port = a(dest::PORT)
        .and_then(port)
        .ok_or_else(|| undecodable(OBJECT, format!("{ip}: no port")))?;
    let number = |kind| a(kind).and_then(u32_ne).unwrap_or(0);
    Ok(ListedDestination {
        destination: Destination {
            address: SocketAddr::new(ip, port),
            forwarding: Forwarding::from_number(number(dest::FWD_METHOD)),
            weight: number(dest::WEIGHT),
            upper_threshold: number(dest::U_THRESH),
            lower_threshold: number(dest::L_THRESH),
        },
        active_connections: number(dest::ACTIVE_CONNS),
        inactive_connections: number(dest::INACT_CONNS),
        persistent_connections: number(dest::PERSIST_CONNS),
        stats: counters(nest, dest::STATS64, dest::STATS),
    })
}

/// The counters in an object's nest: the 64-bit ones when the kernel sent them (4.1 and
/// later), else the 32-bit ones, which wrap; zero when neither is there.
fn counters(nest: &[u8], stats64: u16, stats32: u16) -> Stats {
    if let Some(s) = find(nest, stats64) {
        let mut out = Stats::default();
        for (kind, value) in attrs(s) {
            if let (Some(slot), Some(v)) = (slot(&mut out, kind), u64_ne(value)) {
                *slot = v;
            }
        }
        return out;
    }
    let Some(s) = find(nest, stats32) else {
        return Stats::default();
    };
    let mut out = Stats::default();
    for (kind, value) in attrs(s) {
        // Bytes are u64 even in the old nest; every other counter is u32.
        let v = match kind {
            stats::INBYTES | stats::OUTBYTES => u64_ne(value),
            _ => u32_ne(value).map(u64::from),
        };
        if let (Some(slot), Some(v)) = (slot(&mut out, kind), v) {
            *slot = v;
        }
    }
    out
}

fn slot(s: &mut Stats, kind: u16) -> Option<&mut u64> {
    Some(match kind {
        stats::CONNS => &mut s.connections,
        stats::INPKTS => &mut s.packets_in,
        stats::OUTPKTS => &mut s.packets_out,
        stats::INBYTES => &mut s.bytes_in,
        stats::OUTBYTES => &mut s.bytes_out,
        stats::CPS => &mut s.connection_rate,
        stats::INPPS => &mut s.packet_rate_in,
        stats::OUTPPS => &mut s.packet_rate_out,
        stats::INBPS => &mut s.byte_rate_in,
        stats::OUTBPS => &mut s.byte_rate_out,
        _ => return None,
    })
}

/// The timeouts in a `GET_CONFIG` answer (or a `SET_CONFIG` request); a missing one reads 0.
pub fn timeouts(body: &[u8]) -> Timeouts {
    let a = genetlink::attributes(body);
    let get = |kind| find(a, kind).and_then(u32_ne).unwrap_or(0);
    Timeouts {
        tcp: get(attr::TIMEOUT_TCP),
        tcp_fin: get(attr::TIMEOUT_TCP_FIN),
        udp: get(attr::TIMEOUT_UDP),
    }
}
