//! A conntrack entry as the reconciler sees it: the original and reply tuples of one flow, and
//! what the kernel needs to delete exactly that entry (its id and zone).
//!
//! Plain values; no I/O. Built by [`super::codec`] from the kernel's dump, judged by
//! [`super::plan`], and turned back into a delete request by the codec.

use std::fmt;
use std::net::IpAddr;

use crate::cluster::{IpFamily, Protocol};

/// `IPPROTO_TCP`.
pub const IPPROTO_TCP: u8 = 6;
/// `IPPROTO_UDP`.
pub const IPPROTO_UDP: u8 = 17;
/// `IPPROTO_SCTP`.
pub const IPPROTO_SCTP: u8 = 132;

/// One direction of a flow. Ports are 0 for protocols without ports (ICMP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tuple {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
}

/// One conntrack entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Flow {
    /// The layer-4 protocol number (`IPPROTO_*`).
    pub protocol: u8,
    /// As the first packet arrived: the client and the address it asked for (a frontend).
    pub original: Tuple,
    /// As replies arrive: the source is the endpoint the flow was DNATed to, or the frontend
    /// itself when nothing rewrote the destination.
    pub reply: Tuple,
    /// `CTA_ID`: sent back with a delete so the kernel deletes this entry and not a newer one
    /// with the same tuple that took its place since the dump.
    pub id: Option<u32>,
    /// `CTA_ZONE`, when the entry is not in the default zone.
    pub zone: Option<u16>,
}

impl Flow {
    pub fn family(&self) -> IpFamily {
        IpFamily::of(&self.original.src)
    }

    /// The Service protocol this flow would belong to; `None` for every other protocol.
    pub fn service_protocol(&self) -> Option<Protocol> {
        match self.protocol {
            IPPROTO_TCP => Some(Protocol::Tcp),
            IPPROTO_UDP => Some(Protocol::Udp),
            IPPROTO_SCTP => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// Whether something rewrote the destination: replies come from elsewhere than the
    /// original destination.
    pub fn dnatted(&self) -> bool {
        (self.reply.src, self.reply.src_port) != (self.original.dst, self.original.dst_port)
    }
}

/// `proto src:sport -> dst:dport` of the original tuple, then `reply from src:sport`, as logs
/// show a flow.
impl fmt::Display for Flow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let proto = match self.service_protocol() {
            Some(p) => p.as_str().to_owned(),
            None => format!("proto-{}", self.protocol),
        };
        let o = &self.original;
        let r = &self.reply;
        write!(
            f,
            "{proto} {} -> {} reply from {}",
            addr(o.src, o.src_port),
            addr(o.dst, o.dst_port),
            addr(r.src, r.src_port)
        )
    }
}

fn addr(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(ip) => format!("{ip}:{port}"),
        IpAddr::V6(ip) => format!("[{ip}]:{port}"),
    }
}
