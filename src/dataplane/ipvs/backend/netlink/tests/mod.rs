//! Tests of the IPVS netlink layers: byte-level goldens of the encoder (hand-checked against
//! `include/uapi/linux/ip_vs.h`; each attribute's number is written out with its name),
//! decoder tests on messages shaped as the kernel's `ip_vs_genl_fill_service` /
//! `ip_vs_genl_fill_dest` write them, and property round trips through both. The helpers below
//! frame bytes by hand, apart from the netlink core's writer, so the goldens check it too.

mod captured;
mod decode;
mod encode;
mod props;

use std::net::SocketAddr;

use crate::netlink::message::messages;

/// The family id the tests pretend the controller gave (it is dynamic in the kernel).
pub const FAMILY: u16 = 0x25;
pub const NESTED: u16 = 0x8000;

pub fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// An attribute as the kernel frames it: length (header included), type, value, padding.
pub fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
    let mut out = [
        &((4 + value.len()) as u16).to_ne_bytes()[..],
        &kind.to_ne_bytes(),
        value,
    ]
    .concat();
    while out.len() % 4 != 0 {
        out.push(0);
    }
    out
}

/// A nested attribute around already framed attributes.
pub fn nest(kind: u16, content: &[Vec<u8>]) -> Vec<u8> {
    let content = content.concat();
    [
        &((4 + content.len()) as u16).to_ne_bytes()[..],
        &(kind | NESTED).to_ne_bytes(),
        &content,
    ]
    .concat()
}

/// A netlink header and a genlmsghdr (version 1) around attributes.
pub fn message(flags: u16, seq: u32, cmd: u8, attrs: &[Vec<u8>]) -> Vec<u8> {
    let attrs = attrs.concat();
    let len = (16 + 4 + attrs.len()) as u32;
    #[rustfmt::skip]
    let out = [
        &len.to_ne_bytes()[..], &FAMILY.to_ne_bytes(), &flags.to_ne_bytes(), &seq.to_ne_bytes(),
        &[0, 0, 0, 0], &[cmd, 1, 0, 0], &attrs,
    ]
    .concat();
    out
}

/// `NLM_F_REQUEST | NLM_F_ACK`, and `NLM_F_REQUEST | NLM_F_DUMP`.
pub const ACKED: u16 = 0x0005;
pub const DUMP: u16 = 0x0301;

/// `union nf_inet_addr` of an IPv4 address: 16 bytes, the address first.
pub fn v4_union(octets: [u8; 4]) -> Vec<u8> {
    [&octets[..], &[0; 12]].concat()
}

/// The body of the first message in `bytes`.
pub fn body(bytes: &[u8]) -> Vec<u8> {
    messages(bytes).next().unwrap().body.to_vec()
}

/// A kernel answer: `NLM_F_MULTI`, the command the kernel answers a dump with.
pub fn answer(cmd: u8, attrs: &[Vec<u8>]) -> Vec<u8> {
    body(&message(0x0002, 11, cmd, attrs))
}
