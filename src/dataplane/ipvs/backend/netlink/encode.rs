//! IPVS requests as values, and each one as the bytes of one generic netlink message.
//!
//! Pure: no I/O, cannot fail. The layout is the kernel's (`ip_vs_ctl.c` reads it; numbers in
//! [`super::uapi`]): a service is identified by its family and either its fwmark or its
//! protocol, address and port; a service that is added or changed also carries its scheduler,
//! flags, timeout and netmask (the kernel refuses those requests without them); a destination
//! is identified by its address and port within its service's. Integers are in host byte order
//! except ports and an IPv4 netmask, which are in network order. Addresses are sent as the
//! kernel answers them, 16 bytes with an IPv4 address in the first four.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use netlink_packet_core::{NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};

use super::uapi::{self, attr, cmd, dest, svc};
use super::value::{Destination, Service, ServiceKey, Timeouts, family_of};
use crate::cluster::IpFamily;
use crate::netlink::genetlink::{self, Header};
use crate::netlink::writer::Writer;

/// One request to the IPVS family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `IPVS_CMD_NEW_SERVICE`: `EEXIST` when it exists.
    NewService(Service),
    /// `IPVS_CMD_SET_SERVICE`: scheduler, flags, timeout and netmask of an existing service,
    /// which keeps its destinations and connections; `ESRCH` when there is none.
    SetService(Service),
    /// `IPVS_CMD_DEL_SERVICE`, with its destinations.
    DelService(ServiceKey),
    /// `IPVS_CMD_NEW_DEST`: `EEXIST` when the service has it.
    NewDest(ServiceKey, Destination),
    /// `IPVS_CMD_SET_DEST`: forwarding, weight and thresholds of an existing destination.
    SetDest(ServiceKey, Destination),
    /// `IPVS_CMD_DEL_DEST`, by address and port.
    DelDest(ServiceKey, SocketAddr),
    /// `IPVS_CMD_GET_SERVICE` as a dump: every service of the network namespace.
    GetServices,
    /// `IPVS_CMD_GET_SERVICE` of one service, not a dump: answered by that service alone, or
    /// refused with `ESRCH` when there is none.
    GetService(ServiceKey),
    /// `IPVS_CMD_GET_DEST` as a dump: every destination of one service (there is no dump of
    /// all destinations); empty, not refused, when there is no such service.
    GetDests(ServiceKey),
    /// `IPVS_CMD_SET_CONFIG`: the timeouts that are not 0.
    SetConfig(Timeouts),
    /// `IPVS_CMD_GET_CONFIG`, answered by one `SET_CONFIG` message.
    GetConfig,
    /// `IPVS_CMD_FLUSH`: every service of the network namespace goes.
    Flush,
}

impl Request {
    /// The `IPVS_CMD_*` it sends.
    pub fn command(&self) -> u8 {
        match self {
            Request::NewService(_) => cmd::NEW_SERVICE,
            Request::SetService(_) => cmd::SET_SERVICE,
            Request::DelService(_) => cmd::DEL_SERVICE,
            Request::NewDest(..) => cmd::NEW_DEST,
            Request::SetDest(..) => cmd::SET_DEST,
            Request::DelDest(..) => cmd::DEL_DEST,
            Request::GetServices | Request::GetService(_) => cmd::GET_SERVICE,
            Request::GetDests(_) => cmd::GET_DEST,
            Request::SetConfig(_) => cmd::SET_CONFIG,
            Request::GetConfig => cmd::GET_CONFIG,
            Request::Flush => cmd::FLUSH,
        }
    }

    /// Whether it asks for a dump (answered by many messages, then `NLMSG_DONE`) rather than
    /// an acknowledgement.
    pub fn is_dump(&self) -> bool {
        matches!(self, Request::GetServices | Request::GetDests(_))
    }

    /// The message, for the family `family` resolved to, with sequence number `seq`.
    pub fn encode(&self, family: u16, seq: u32) -> Vec<u8> {
        let flags = NLM_F_REQUEST
            | if self.is_dump() {
                NLM_F_DUMP
            } else {
                NLM_F_ACK
            };
        let mut w = Writer::default();
        let header = Header {
            cmd: self.command(),
            version: uapi::VERSION,
        };
        let m = genetlink::begin(&mut w, family, flags, seq, header);
        match self {
            Request::NewService(s) | Request::SetService(s) => service(&mut w, &s.key, Some(s)),
            Request::DelService(key) | Request::GetDests(key) | Request::GetService(key) => {
                service(&mut w, key, None)
            }
            Request::NewDest(key, d) | Request::SetDest(key, d) => {
                service(&mut w, key, None);
                destination(&mut w, &d.address, Some(d));
            }
            Request::DelDest(key, address) => {
                service(&mut w, key, None);
                destination(&mut w, address, None);
            }
            Request::SetConfig(t) => {
                w.bytes(attr::TIMEOUT_TCP, &t.tcp.to_ne_bytes());
                w.bytes(attr::TIMEOUT_TCP_FIN, &t.tcp_fin.to_ne_bytes());
                w.bytes(attr::TIMEOUT_UDP, &t.udp.to_ne_bytes());
            }
            Request::GetServices | Request::GetConfig | Request::Flush => {}
        }
        w.end(m);
        w.buf
    }
}

impl fmt::Display for Request {
    /// What it does, for errors: "adding service TCP 10.0.0.1:80 (scheduler rr)".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Request::NewService(s) => {
                write!(f, "adding service {} (scheduler {})", s.key, s.scheduler)
            }
            Request::SetService(s) => {
                write!(f, "updating service {} (scheduler {})", s.key, s.scheduler)
            }
            Request::DelService(k) => write!(f, "deleting service {k}"),
            Request::NewDest(k, d) => write!(f, "adding destination {} to service {k}", d.address),
            Request::SetDest(k, d) => {
                write!(f, "updating destination {} of service {k}", d.address)
            }
            Request::DelDest(k, a) => write!(f, "deleting destination {a} of service {k}"),
            Request::GetServices => f.write_str("listing services"),
            Request::GetService(k) => write!(f, "reading service {k}"),
            Request::GetDests(k) => write!(f, "listing destinations of service {k}"),
            Request::SetConfig(_) => f.write_str("setting timeouts"),
            Request::GetConfig => f.write_str("reading timeouts"),
            Request::Flush => f.write_str("flushing services"),
        }
    }
}

pub fn address_family(family: IpFamily) -> u16 {
    match family {
        IpFamily::V4 => uapi::AF_INET,
        IpFamily::V6 => uapi::AF_INET6,
    }
}

/// `union nf_inet_addr`: 16 bytes, an IPv4 address in the first four.
fn inet_addr(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => {
            let mut bytes = [0; 16];
            bytes[..4].copy_from_slice(&v4.octets());
            bytes
        }
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The service nest: its key, and with `full` the settings NEW and SET need.
fn service(w: &mut Writer, key: &ServiceKey, full: Option<&Service>) {
    let n = w.nest(attr::SERVICE);
    w.bytes(svc::AF, &address_family(key.family()).to_ne_bytes());
    match key {
        ServiceKey::Address { protocol, address } => {
            w.bytes(svc::PROTOCOL, &protocol.number().to_ne_bytes());
            w.bytes(svc::ADDR, &inet_addr(address.ip()));
            w.bytes(svc::PORT, &address.port().to_be_bytes());
        }
        ServiceKey::Fwmark { mark, .. } => w.bytes(svc::FWMARK, &mark.to_ne_bytes()),
    }
    if let Some(s) = full {
        w.str(svc::SCHED_NAME, s.scheduler.as_str());
        // Every flag bit is ours to set: the kernel keeps only the bits outside the mask.
        let flags = [s.flags.0.to_ne_bytes(), u32::MAX.to_ne_bytes()].concat();
        w.bytes(svc::FLAGS, &flags);
        w.bytes(svc::TIMEOUT, &s.timeout.to_ne_bytes());
        let netmask = match key.family() {
            IpFamily::V4 => s.netmask.to_be_bytes(),
            IpFamily::V6 => s.netmask.to_ne_bytes(),
        };
        w.bytes(svc::NETMASK, &netmask);
    }
    w.nest_end(n);
}

/// The destination nest: its address and port, and with `full` the settings NEW and SET need.
fn destination(w: &mut Writer, address: &SocketAddr, full: Option<&Destination>) {
    let n = w.nest(attr::DEST);
    w.bytes(dest::ADDR, &inet_addr(address.ip()));
    w.bytes(dest::PORT, &address.port().to_be_bytes());
    if let Some(d) = full {
        w.bytes(dest::FWD_METHOD, &d.forwarding.number().to_ne_bytes());
        w.bytes(dest::WEIGHT, &d.weight.to_ne_bytes());
        w.bytes(dest::U_THRESH, &d.upper_threshold.to_ne_bytes());
        w.bytes(dest::L_THRESH, &d.lower_threshold.to_ne_bytes());
    }
    w.bytes(
        dest::ADDR_FAMILY,
        &address_family(family_of(address)).to_ne_bytes(),
    );
    w.nest_end(n);
}
