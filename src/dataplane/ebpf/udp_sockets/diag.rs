//! sock_diag (`NETLINK_SOCK_DIAG`) for UDP sockets: the dump request for connected sockets of
//! one family, what each dumped socket says, and the `SOCK_DESTROY` request for one of them.
//!
//! Pure bytes: requests come out, received messages go in. Written here, beside the netlink
//! core, because the crate that models these messages (`netlink-packet-sock-diag`) has no
//! `SOCK_DESTROY` request and would be a second message model for two fixed-size structs.
//! The structs are the kernel's UAPI (`linux/inet_diag.h`): `inet_diag_req_v2` (56 bytes)
//! and `inet_diag_msg` (72 bytes), both holding an `inet_diag_sockid` (48 bytes).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use netlink_packet_core::{NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};

use crate::cluster::IpFamily;
use crate::netlink::writer::Writer;

/// `SOCK_DIAG_BY_FAMILY`: a dump request, and each socket of its answer.
pub const BY_FAMILY: u16 = 20;
/// `SOCK_DESTROY`: close one socket with `ECONNABORTED`.
pub const DESTROY: u16 = 21;
const IPPROTO_UDP: u8 = 17;
/// `TCP_ESTABLISHED`, the state of a connected UDP socket.
const ESTABLISHED: u8 = 1;
const SOCKID_LEN: usize = 48;
const REQUEST_LEN: usize = 8 + SOCKID_LEN;
const MESSAGE_LEN: usize = 4 + SOCKID_LEN + 20;

fn af(family: IpFamily) -> u8 {
    match family {
        IpFamily::V4 => 2,
        IpFamily::V6 => 10,
    }
}

/// A connected UDP socket, as a dump shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpSocket {
    /// The socket's own family: an IPv6 socket may talk to an IPv4-mapped peer.
    pub family: IpFamily,
    pub local: SocketAddr,
    /// The address it is connected to: for a socket the programs translated, the backend.
    pub peer: SocketAddr,
    pub interface: u32,
    /// The socket cookie, as the programs see it (`bpf_get_socket_cookie`).
    pub cookie: u64,
}

/// The request for every connected UDP socket of `family` in the socket's namespace.
pub fn dump_request(family: IpFamily, seq: u32) -> Vec<u8> {
    let mut w = Writer::with_capacity(16 + REQUEST_LEN);
    let m = w.begin(BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq);
    w.raw(&request(af(family), 1 << ESTABLISHED, &[0; SOCKID_LEN]));
    w.end(m);
    w.buf
}

/// The request that destroys `socket`: the kernel looks it up by its addresses and checks
/// the cookie, so a socket that closed and whose addresses were reused is left alone
/// (`ENOENT`).
pub fn destroy_request(socket: &UdpSocket, seq: u32) -> Vec<u8> {
    let mut w = Writer::with_capacity(16 + REQUEST_LEN);
    let m = w.begin(DESTROY, NLM_F_REQUEST | NLM_F_ACK, seq);
    w.raw(&request(af(socket.family), 0, &sockid(socket)));
    w.end(m);
    w.buf
}

fn request(family: u8, states: u32, id: &[u8; SOCKID_LEN]) -> [u8; REQUEST_LEN] {
    let mut r = [0u8; REQUEST_LEN];
    r[0] = family;
    r[1] = IPPROTO_UDP;
    r[4..8].copy_from_slice(&states.to_ne_bytes());
    r[8..].copy_from_slice(id);
    r
}

/// `inet_diag_sockid` of `socket`: ports and addresses in network order, the interface and
/// the cookie's two halves in host order.
fn sockid(socket: &UdpSocket) -> [u8; SOCKID_LEN] {
    let mut id = [0u8; SOCKID_LEN];
    id[0..2].copy_from_slice(&socket.local.port().to_be_bytes());
    id[2..4].copy_from_slice(&socket.peer.port().to_be_bytes());
    id[4..20].copy_from_slice(&address(socket.family, socket.local.ip()));
    id[20..36].copy_from_slice(&address(socket.family, socket.peer.ip()));
    id[36..40].copy_from_slice(&socket.interface.to_ne_bytes());
    id[40..44].copy_from_slice(&(socket.cookie as u32).to_ne_bytes());
    id[44..48].copy_from_slice(&((socket.cookie >> 32) as u32).to_ne_bytes());
    id
}

/// An address as a socket of `family` holds it: IPv4 in the first four bytes, or IPv6 (an
/// IPv4 address of an IPv6 socket mapped).
fn address(family: IpFamily, ip: IpAddr) -> [u8; 16] {
    let mut out = [0u8; 16];
    match (family, ip) {
        (IpFamily::V4, IpAddr::V4(v4)) => out[..4].copy_from_slice(&v4.octets()),
        (IpFamily::V4, IpAddr::V6(v6)) => out[..4].copy_from_slice(
            &v6.to_ipv4_mapped()
                .unwrap_or(Ipv4Addr::UNSPECIFIED)
                .octets(),
        ),
        (IpFamily::V6, IpAddr::V4(v4)) => out = v4.to_ipv6_mapped().octets(),
        (IpFamily::V6, IpAddr::V6(v6)) => out = v6.octets(),
    }
    out
}

/// Reads one dumped socket (the body of a [`BY_FAMILY`] message); `None` when it is too short
/// or of a family we do not know. Addresses come back canonical: an IPv4-mapped peer of an
/// IPv6 socket as IPv4.
pub fn decode(body: &[u8]) -> Option<UdpSocket> {
    if body.len() < MESSAGE_LEN {
        return None;
    }
    let family = match body[0] {
        2 => IpFamily::V4,
        10 => IpFamily::V6,
        _ => return None,
    };
    let id = &body[4..4 + SOCKID_LEN];
    let port = |at: usize| u16::from_be_bytes([id[at], id[at + 1]]);
    let ip = |at: usize| -> IpAddr {
        match family {
            IpFamily::V4 => IpAddr::V4(Ipv4Addr::new(id[at], id[at + 1], id[at + 2], id[at + 3])),
            IpFamily::V6 => {
                let octets: [u8; 16] = id[at..at + 16].try_into().unwrap_or([0; 16]);
                Ipv6Addr::from(octets).to_canonical()
            }
        }
    };
    let word = |at: usize| u32::from_ne_bytes([id[at], id[at + 1], id[at + 2], id[at + 3]]);
    Some(UdpSocket {
        family,
        local: SocketAddr::new(ip(4), port(0)),
        peer: SocketAddr::new(ip(20), port(2)),
        interface: word(36),
        cookie: u64::from(word(40)) | (u64::from(word(44)) << 32),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn socket(family: IpFamily, local: &str, peer: &str) -> UdpSocket {
        UdpSocket {
            family,
            local: local.parse().unwrap(),
            peer: peer.parse().unwrap(),
            interface: 0,
            cookie: 0x0000_0001_0000_2a2b,
        }
    }

    /// The message the kernel sends for `s`, built field by field from the UAPI layout.
    fn dumped(s: &UdpSocket) -> Vec<u8> {
        let mut m = vec![af(s.family), ESTABLISHED, 0, 0];
        m.extend_from_slice(&sockid(s));
        m.extend_from_slice(&[0; 20]); // expires, rqueue, wqueue, uid, inode
        m.extend_from_slice(&[8, 0, 1, 0, 0, 0, 0, 0]); // an attribute after the struct
        m
    }

    #[test]
    fn the_dump_asks_for_connected_udp_sockets_of_one_family() {
        let bytes = dump_request(IpFamily::V6, 7);
        assert_eq!(bytes.len(), 16 + 56);
        assert_eq!(u32::from_ne_bytes(bytes[0..4].try_into().unwrap()), 72);
        assert_eq!(u16::from_ne_bytes([bytes[4], bytes[5]]), 20);
        assert_eq!(
            u16::from_ne_bytes([bytes[6], bytes[7]]),
            0x301,
            "request, dump"
        );
        assert_eq!(u32::from_ne_bytes(bytes[8..12].try_into().unwrap()), 7);
        assert_eq!(&bytes[16..20], &[10, 17, 0, 0]);
        assert_eq!(u32::from_ne_bytes(bytes[20..24].try_into().unwrap()), 2);
        assert!(bytes[24..].iter().all(|b| *b == 0), "no socket id");
    }

    #[test]
    fn a_destroy_names_the_socket_by_addresses_and_cookie() {
        let s = socket(IpFamily::V4, "10.0.1.5:40000", "10.0.2.7:8080");
        let bytes = destroy_request(&s, 9);
        assert_eq!(u16::from_ne_bytes([bytes[4], bytes[5]]), 21);
        assert_eq!(
            u16::from_ne_bytes([bytes[6], bytes[7]]),
            0x5,
            "request, ack"
        );
        let id = &bytes[24..];
        assert_eq!(
            &id[0..4],
            &[0x9c, 0x40, 0x1f, 0x90],
            "ports in network order"
        );
        assert_eq!(&id[4..8], &[10, 0, 1, 5]);
        assert!(id[8..20].iter().all(|b| *b == 0));
        assert_eq!(&id[20..24], &[10, 0, 2, 7]);
        assert_eq!(u32::from_ne_bytes(id[40..44].try_into().unwrap()), 0x2a2b);
        assert_eq!(u32::from_ne_bytes(id[44..48].try_into().unwrap()), 1);
    }

    #[test]
    fn dumped_sockets_read_back_as_sent() {
        for s in [
            socket(IpFamily::V4, "10.0.1.5:40000", "10.0.2.7:8080"),
            socket(IpFamily::V6, "[fd00::5]:40000", "[fd00:2::7]:53"),
        ] {
            assert_eq!(decode(&dumped(&s)), Some(s));
        }
    }

    #[test]
    fn an_ipv6_socket_talking_to_a_mapped_peer_reads_as_ipv4() {
        let s = socket(IpFamily::V6, "[::ffff:10.0.1.5]:1", "[::ffff:10.0.2.7]:53");
        let read = decode(&dumped(&s)).unwrap();
        assert_eq!(read.family, IpFamily::V6);
        assert_eq!(read.peer, "10.0.2.7:53".parse().unwrap());
        // And the destroy request maps it back, as the kernel's lookup needs.
        assert_eq!(
            &destroy_request(&read, 1)[16 + 8 + 20..16 + 8 + 36],
            &s_mapped()
        );
    }

    fn s_mapped() -> [u8; 16] {
        "::ffff:10.0.2.7".parse::<Ipv6Addr>().unwrap().octets()
    }

    #[test]
    fn short_or_foreign_messages_are_not_sockets() {
        let s = socket(IpFamily::V4, "10.0.1.5:1", "10.0.2.7:2");
        let bytes = dumped(&s);
        assert_eq!(decode(&bytes[..71]), None);
        let mut foreign = bytes.clone();
        foreign[0] = 1; // AF_UNIX
        assert_eq!(decode(&foreign), None);
        assert_eq!(decode(&[]), None);
    }
}
