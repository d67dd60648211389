//! The rtnetlink messages that manage the dummy link and its addresses, built from
//! `netlink-packet-route`'s types, and the kernel's answers read back into [`Link`] values and
//! (interface, address) pairs.
//!
//! Pure: requests are bytes out, answers are messages in; no socket, never panics on kernel
//! input (what cannot be decoded reads as nothing). Sequence numbers are the caller's.

use std::net::IpAddr;

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage,
    NetlinkPayload,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage, AddressScope};
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkFlags, LinkInfo, LinkMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::netlink::message::Message;

/// A link, as the kernel describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    /// The interface index every address request names it by.
    pub index: u32,
    pub name: String,
    /// `IFLA_INFO_KIND` ("dummy", "veth"); `None` for links without one (a physical NIC,
    /// `lo`).
    pub kind: Option<String>,
    /// `IFF_UP`: set by an administrator, never by us.
    pub up: bool,
}

impl Link {
    pub fn is_dummy(&self) -> bool {
        self.kind.as_deref() == Some(DUMMY_KIND)
    }
}

/// `IFLA_INFO_KIND` of the dummy driver.
const DUMMY_KIND: &str = "dummy";

/// The prefix length a bound address is added with: the address alone (/32, /128), so the
/// kernel makes a local route for it and no subnet route beside it.
pub fn host_prefix_len(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

fn family(ip: IpAddr) -> AddressFamily {
    match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

fn encode(flags: u16, seq: u32, message: RouteNetlinkMessage) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    header.sequence_number = seq;
    let mut msg = NetlinkMessage::new(header, NetlinkPayload::from(message));
    msg.finalize();
    let mut buf = vec![0; msg.buffer_len()];
    msg.serialize(&mut buf);
    buf
}

/// Creates a dummy link named `name`, left down (no `IFF_UP` in its flags or change mask).
/// `NLM_F_EXCL`: a link of that name already there is refused with `EEXIST` and left as it
/// is, whatever its kind; the caller then looks at it.
pub fn new_dummy_link(name: &str, seq: u32) -> Vec<u8> {
    let mut link = LinkMessage::default();
    link.attributes = vec![
        LinkAttribute::IfName(name.to_owned()),
        LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Dummy)]),
    ];
    let flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
    encode(flags, seq, RouteNetlinkMessage::NewLink(link))
}

/// Asks for the one link named `name`; answered by the link then an acknowledgement, or by
/// `ENODEV`.
pub fn get_link(name: &str, seq: u32) -> Vec<u8> {
    let mut link = LinkMessage::default();
    link.attributes = vec![LinkAttribute::IfName(name.to_owned())];
    encode(
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
        RouteNetlinkMessage::GetLink(link),
    )
}

/// Deletes the link with this index (with its addresses and their local routes).
pub fn delete_link(index: u32, seq: u32) -> Vec<u8> {
    let mut link = LinkMessage::default();
    link.header.index = index;
    encode(
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
        RouteNetlinkMessage::DelLink(link),
    )
}

/// Dumps every address of every interface and family. The header names no interface: a
/// kernel filters a dump by it only on sockets with strict checking on, so the answer is
/// sorted by interface on our side ([`super::LinkAddresses`]), which also gives the other
/// interfaces' addresses from the same dump.
pub fn address_dump(seq: u32) -> Vec<u8> {
    encode(
        NLM_F_REQUEST | NLM_F_DUMP,
        seq,
        RouteNetlinkMessage::GetAddress(AddressMessage::default()),
    )
}

/// The message for `ip` alone on interface `index`, global scope, as `ip addr add IP/32`
/// sends it: the address as both `IFA_LOCAL` and `IFA_ADDRESS` (no peer).
fn host_address(index: u32, ip: IpAddr) -> AddressMessage {
    let mut address = AddressMessage::default();
    address.header.family = family(ip);
    address.header.prefix_len = host_prefix_len(ip);
    address.header.scope = AddressScope::Universe;
    address.header.index = index;
    address.attributes = vec![AddressAttribute::Local(ip), AddressAttribute::Address(ip)];
    address
}

/// Binds `ip` to interface `index`; `EEXIST` when it is bound already.
pub fn new_address(index: u32, ip: IpAddr, seq: u32) -> Vec<u8> {
    let flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
    encode(
        flags,
        seq,
        RouteNetlinkMessage::NewAddress(host_address(index, ip)),
    )
}

/// Unbinds `ip` from interface `index`; `EADDRNOTAVAIL` when it is not bound there.
pub fn delete_address(index: u32, ip: IpAddr, seq: u32) -> Vec<u8> {
    encode(
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
        RouteNetlinkMessage::DelAddress(host_address(index, ip)),
    )
}

fn decoded(m: &Message<'_>) -> Option<RouteNetlinkMessage> {
    match NetlinkMessage::<RouteNetlinkMessage>::deserialize(m.bytes)
        .ok()?
        .payload
    {
        NetlinkPayload::InnerMessage(inner) => Some(inner),
        _ => None,
    }
}

/// The link an `RTM_NEWLINK` answer describes.
pub fn link(m: &Message<'_>) -> Option<Link> {
    let Some(RouteNetlinkMessage::NewLink(msg)) = decoded(m) else {
        return None;
    };
    let name = msg.attributes.iter().find_map(|a| match a {
        LinkAttribute::IfName(name) => Some(name.clone()),
        _ => None,
    })?;
    let kind = msg
        .attributes
        .iter()
        .filter_map(|a| match a {
            LinkAttribute::LinkInfo(infos) => Some(infos),
            _ => None,
        })
        .flatten()
        .find_map(|info| match info {
            LinkInfo::Kind(kind) => Some(kind.to_string()),
            _ => None,
        });
    Some(Link {
        index: msg.header.index,
        name,
        kind,
        up: msg.header.flags.contains(LinkFlags::Up),
    })
}

/// The (interface index, address) an `RTM_NEWADDR` answer announces. The local address
/// (`IFA_LOCAL`) is the interface's own; `IFA_ADDRESS` is the peer's on point-to-point
/// links, and the only one IPv6 sends.
pub fn address(m: &Message<'_>) -> Option<(u32, IpAddr)> {
    let Some(RouteNetlinkMessage::NewAddress(msg)) = decoded(m) else {
        return None;
    };
    let local = msg.attributes.iter().find_map(|a| match a {
        AddressAttribute::Local(ip) => Some(*ip),
        _ => None,
    });
    let address = || {
        msg.attributes.iter().find_map(|a| match a {
            AddressAttribute::Address(ip) => Some(*ip),
            _ => None,
        })
    };
    Some((msg.header.index, local.or_else(address)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::message::messages;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn decode(bytes: &[u8]) -> NetlinkMessage<RouteNetlinkMessage> {
        NetlinkMessage::deserialize(bytes).expect("decodes with netlink-packet-route")
    }

    #[test]
    fn the_new_link_request_creates_a_dummy_exclusively_and_does_not_set_it_up() {
        let msg = decode(&new_dummy_link("kube-ipvs0", 7));
        assert_eq!(msg.header.sequence_number, 7);
        assert_eq!(
            msg.header.flags,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
        );
        let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(link)) = msg.payload else {
            panic!("not a new link: {:?}", msg.payload);
        };
        assert_eq!(link.header.flags, LinkFlags::empty(), "IFF_UP not asked");
        assert_eq!(link.header.change_mask, LinkFlags::empty());
        assert!(
            link.attributes
                .contains(&LinkAttribute::IfName("kube-ipvs0".into()))
        );
        assert!(
            link.attributes
                .contains(&LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
                    InfoKind::Dummy
                )]))
        );
    }

    #[test]
    fn the_new_link_request_carries_the_kind_as_a_nested_info_kind_string() {
        // IFLA_LINKINFO (18) nesting IFLA_INFO_KIND (1) = "dummy\0", as the kernel reads it.
        let bytes = new_dummy_link("kube-ipvs0", 1);
        let want: &[u8] = &[
            16, 0, 18, 0, // IFLA_LINKINFO, 16 bytes
            10, 0, 1, 0, b'd', b'u', b'm', b'm', b'y', 0, 0,
            0, // IFLA_INFO_KIND "dummy\0" + pad
        ];
        assert!(
            bytes.windows(want.len()).any(|w| w == want),
            "no IFLA_LINKINFO {{ IFLA_INFO_KIND \"dummy\" }} in {bytes:?}"
        );
    }

    #[test]
    fn address_requests_carry_the_host_prefix_the_interface_and_the_address_twice() {
        for (text, family, prefix) in [
            ("10.96.0.1", AddressFamily::Inet, 32),
            ("fd00:96::a", AddressFamily::Inet6, 128),
        ] {
            let add = decode(&new_address(9, ip(text), 3));
            assert_eq!(
                add.header.flags,
                NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
            );
            let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewAddress(a)) = add.payload
            else {
                panic!("not a new address");
            };
            assert_eq!(
                (a.header.family, a.header.prefix_len, a.header.index),
                (family, prefix, 9)
            );
            assert_eq!(a.header.scope, AddressScope::Universe);
            assert_eq!(
                a.attributes,
                [
                    AddressAttribute::Local(ip(text)),
                    AddressAttribute::Address(ip(text))
                ]
            );
            let del = decode(&delete_address(9, ip(text), 4));
            assert_eq!(del.header.flags, NLM_F_REQUEST | NLM_F_ACK);
            assert!(matches!(
                del.payload,
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelAddress(d)) if d == a
            ));
        }
    }

    #[test]
    fn link_lookup_and_deletion_name_the_link_by_name_and_by_index() {
        let get = decode(&get_link("kube-ipvs0", 2));
        assert_eq!(get.header.flags, NLM_F_REQUEST | NLM_F_ACK);
        let NetlinkPayload::InnerMessage(RouteNetlinkMessage::GetLink(l)) = get.payload else {
            panic!("not a get link");
        };
        assert_eq!(l.attributes, [LinkAttribute::IfName("kube-ipvs0".into())]);
        let del = decode(&delete_link(12, 3));
        let NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelLink(l)) = del.payload else {
            panic!("not a delete link");
        };
        assert_eq!((l.header.index, l.attributes.len()), (12, 0));
        let dump = decode(&address_dump(4));
        assert_eq!(dump.header.flags, NLM_F_REQUEST | NLM_F_DUMP);
    }

    fn answer(message: RouteNetlinkMessage) -> Vec<u8> {
        encode(0, 5, message)
    }

    #[test]
    fn a_link_answer_reads_back_with_its_index_kind_and_state() {
        let mut msg = LinkMessage::default();
        msg.header.index = 4;
        msg.header.flags = LinkFlags::Broadcast | LinkFlags::Noarp;
        msg.attributes = vec![
            LinkAttribute::IfName("kube-ipvs0".into()),
            LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Veth)]),
        ];
        let bytes = answer(RouteNetlinkMessage::NewLink(msg.clone()));
        let got = link(&messages(&bytes).next().unwrap()).unwrap();
        let veth = Link {
            index: 4,
            name: "kube-ipvs0".into(),
            kind: Some("veth".into()),
            up: false,
        };
        assert_eq!(got, veth);
        assert!(!got.is_dummy());
        msg.header.flags |= LinkFlags::Up;
        msg.attributes[1] = LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Dummy)]);
        let bytes = answer(RouteNetlinkMessage::NewLink(msg));
        let got = link(&messages(&bytes).next().unwrap()).unwrap();
        assert!(got.is_dummy() && got.up);
    }

    #[test]
    fn address_answers_read_back_with_their_interface_and_other_messages_do_not() {
        let mut v4 = AddressMessage::default();
        v4.header.index = 3;
        v4.attributes = vec![
            AddressAttribute::Address(ip("10.0.0.2")),
            AddressAttribute::Local(ip("10.0.0.1")),
        ];
        let mut v6 = AddressMessage::default();
        v6.header.family = AddressFamily::Inet6;
        v6.header.index = 4;
        v6.attributes = vec![AddressAttribute::Address(ip("fd00::1"))];
        let bytes = [
            answer(RouteNetlinkMessage::NewAddress(v4)),
            answer(RouteNetlinkMessage::NewAddress(v6)),
            answer(RouteNetlinkMessage::NewLink(LinkMessage::default())),
            answer(RouteNetlinkMessage::NewAddress(AddressMessage::default())),
        ]
        .concat();
        let got: Vec<_> = messages(&bytes).filter_map(|m| address(&m)).collect();
        assert_eq!(got, [(3, ip("10.0.0.1")), (4, ip("fd00::1"))]);
        let links: Vec<_> = messages(&bytes).filter_map(|m| link(&m)).collect();
        assert!(links.is_empty(), "a link without a name is not read");
    }
}
