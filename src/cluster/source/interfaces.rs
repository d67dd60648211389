//! The addresses configured on this host's interfaces, as a source of [`Event::HostAddresses`].
//!
//! `nodePortAddresses` CIDRs select host addresses, not the Node object's (an address on a
//! secondary interface is often not in the Node's status), and upstream reads the interfaces
//! for them. Rather than listing interfaces on every sync, we dump them once over rtnetlink and
//! then follow the kernel's address notifications (`RTNLGRP_IPV4_IFADDR`, `RTNLGRP_IPV6_IFADDR`),
//! re-reading the whole list after any of them, so an address added or removed later reaches
//! the dataplane and the health-check listeners within one sync.
//!
//! Service addresses are not host addresses: a mode that binds every ClusterIP (and the
//! external addresses) to a link of its own names that link (the IPVS mode's dummy
//! interface), and its addresses are left out. Otherwise every Service created or deleted in
//! that mode would be a host address change (a new node context, so a full re-plan, and a
//! second sync), and `nodePortAddresses` could select a Service address.
//!
//! Decoding is pure ([`addresses_in`]); [`watch`] is the thin blocking I/O, on its own thread,
//! over the netlink core's socket and dump state machine. It reads the network namespace the
//! process runs in. Where rtnetlink cannot be used, it warns once and emits nothing, and the
//! Node object's addresses stand in (as before).

use std::net::IpAddr;

use futures::Stream;
use futures::channel::mpsc;
use netlink_packet_core::{
    NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_sys::protocols::NETLINK_ROUTE;

use super::Event;
use crate::netlink::dump::Dump;
use crate::netlink::message::{Message, messages};
use crate::netlink::socket::{self, Options, Protocol, Socket};

/// rtnetlink multicast groups announcing address changes (`linux/rtnetlink.h`).
const RTNLGRP_IPV4_IFADDR: u32 = 5;
const RTNLGRP_IPV6_IFADDR: u32 = 9;

/// rtnetlink's socket, as errors name it.
const PROTOCOL: Protocol = Protocol {
    number: NETLINK_ROUTE,
    socket: "an rtnetlink socket",
    name: "rtnetlink",
};

/// The request that dumps every address of every family.
pub fn dump_request(seq: u32) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    header.sequence_number = seq;
    let mut msg = NetlinkMessage::new(
        header,
        NetlinkPayload::from(RouteNetlinkMessage::GetAddress(AddressMessage::default())),
    );
    msg.finalize();
    let mut buf = vec![0; msg.buffer_len()];
    msg.serialize(&mut buf);
    buf
}

/// The host addresses in one datagram of the dump's answer, without those of the interface
/// with index `except`; `dump` learns whether it ended.
pub fn addresses_in(datagram: &[u8], dump: &mut Dump, except: Option<u32>) -> Vec<IpAddr> {
    messages(datagram)
        .filter(|m| dump.receive(m))
        .filter_map(|m| address(&m))
        .filter(|(index, _)| Some(*index) != except)
        .map(|(_, ip)| ip)
        .collect()
}

/// The host address one message announces (a dump part or a notification), with its
/// interface's index.
///
/// An address message carries `IFA_LOCAL` (the interface's own address) and `IFA_ADDRESS` (the
/// peer's on point-to-point links, else the same); the local one is ours when present.
/// Messages that cannot be decoded are skipped: a later notification re-reads everything.
pub fn address(m: &Message<'_>) -> Option<(u32, IpAddr)> {
    match NetlinkMessage::<RouteNetlinkMessage>::deserialize(m.bytes).map(|m| m.payload) {
        Ok(NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewAddress(msg))) => {
            local_address(&msg).map(|ip| (msg.header.index, ip))
        }
        _ => None,
    }
}

fn local_address(msg: &AddressMessage) -> Option<IpAddr> {
    let find = |want: fn(&AddressAttribute) -> Option<IpAddr>| msg.attributes.iter().find_map(want);
    find(|a| match a {
        AddressAttribute::Local(ip) => Some(*ip),
        _ => None,
    })
    .or_else(|| {
        find(|a| match a {
            AddressAttribute::Address(ip) => Some(*ip),
            _ => None,
        })
    })
}

/// Sorts and deduplicates, so equal address sets compare equal.
pub fn normalised(mut addresses: Vec<IpAddr>) -> Vec<IpAddr> {
    addresses.sort();
    addresses.dedup();
    addresses
}

/// Every address on this host's interfaces (the namespace the thread runs in) but those of
/// `service_link`, the link the mode binds Service addresses to, sorted.
pub fn read(service_link: Option<&str>) -> std::io::Result<Vec<IpAddr>> {
    let io = socket::Error::into_io;
    // Looked up on every read: the mode creates the link after the first read.
    let except = service_link.and_then(|link| nix::net::if_::if_nametoindex(link).ok());
    let mut socket = Socket::open(PROTOCOL, None, Options::default()).map_err(io)?;
    let seq = socket.take_seq();
    socket
        .send(&dump_request(seq), "address dump request")
        .map_err(io)?;
    let mut dump = Dump::new(seq);
    let mut addresses = Vec::new();
    while !dump.done() {
        let datagram = socket.recv("address dump").map_err(io)?;
        addresses.extend(addresses_in(datagram, &mut dump, except));
    }
    match dump.errno() {
        Some(errno) => Err(std::io::Error::from_raw_os_error(errno)),
        None => Ok(normalised(addresses)),
    }
}

/// The host's addresses now and after every change, as events. The first event comes as soon
/// as the first dump is read; later ones only when the list differs. `service_link`'s
/// addresses are left out, as [`read`] leaves them.
pub fn watch(service_link: Option<&'static str>) -> impl Stream<Item = Event> + Send + 'static {
    let (tx, rx) = mpsc::unbounded();
    let spawned = std::thread::Builder::new()
        .name("host-addresses".into())
        .spawn(move || {
            if let Err(e) = follow(service_link, |addresses| {
                tx.unbounded_send(Event::HostAddresses(addresses)).is_ok()
            }) {
                tracing::warn!(
                    error = %e,
                    "cannot read this host's interface addresses; nodePortAddresses CIDRs are \
                     matched against the Node object's addresses instead"
                );
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the host address reader");
    }
    rx
}

/// Emits the address list, then waits for notifications and emits again when it changed, until
/// `emit` returns false (the receiver is gone).
fn follow(
    service_link: Option<&str>,
    mut emit: impl FnMut(Vec<IpAddr>) -> bool,
) -> std::io::Result<()> {
    let io = socket::Error::into_io;
    let groups = [RTNLGRP_IPV4_IFADDR];
    let mut notifications =
        Socket::listen(PROTOCOL, None, Options::default(), &groups).map_err(io)?;
    // A host without IPv6 has no such group to join; IPv4 changes are still followed.
    let _ = notifications.join(RTNLGRP_IPV6_IFADDR);
    // Subscribed before the first read, so no change between the two is missed.
    let mut last = read(service_link)?;
    if !emit(last.clone()) {
        return Ok(());
    }
    loop {
        // What changed does not matter: the whole list is read again.
        let received = notifications.recv("address notifications").map(drop);
        match received.map_err(io) {
            Ok(()) => {}
            // Notifications were dropped; re-reading covers them.
            Err(e) if e.raw_os_error() == Some(nix::libc::ENOBUFS) => {}
            Err(e) => return Err(e),
        }
        let now = read(service_link)?;
        if now != last {
            last = now;
            if !emit(last.clone()) {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_route::AddressFamily;

    fn datagram(messages: Vec<NetlinkPayload<RouteNetlinkMessage>>) -> Vec<u8> {
        let mut out = Vec::new();
        for payload in messages {
            let mut msg = NetlinkMessage::new(NetlinkHeader::default(), payload);
            msg.finalize();
            let mut buf = vec![0; msg.buffer_len()];
            msg.serialize(&mut buf);
            out.extend(buf);
        }
        out
    }

    fn address(family: AddressFamily, attributes: Vec<AddressAttribute>) -> AddressMessage {
        let mut msg = AddressMessage::default();
        msg.header.family = family;
        msg.attributes = attributes;
        msg
    }

    #[test]
    fn the_local_address_wins_over_the_peer_address() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let bytes = datagram(vec![
            RouteNetlinkMessage::NewAddress(address(
                AddressFamily::Inet,
                vec![
                    AddressAttribute::Address(ip("10.0.0.2")),
                    AddressAttribute::Local(ip("10.0.0.1")),
                ],
            ))
            .into(),
            RouteNetlinkMessage::NewAddress(address(
                AddressFamily::Inet6,
                vec![AddressAttribute::Address(ip("fd00::1"))],
            ))
            .into(),
            // Not an address: ignored.
            RouteNetlinkMessage::NewLink(Default::default()).into(),
        ]);
        let mut dump = Dump::new(0);
        let got = addresses_in(&bytes, &mut dump, None);
        assert_eq!(got, vec![ip("10.0.0.1"), ip("fd00::1")]);
        assert!(!dump.done());
    }

    #[test]
    fn the_service_links_addresses_are_left_out() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let on = |index: u32, addr: &str| {
            let mut msg = address(AddressFamily::Inet, vec![AddressAttribute::Local(ip(addr))]);
            msg.header.index = index;
            RouteNetlinkMessage::NewAddress(msg).into()
        };
        let bytes = datagram(vec![
            on(2, "10.0.0.1"),
            on(7, "10.96.0.1"),
            on(3, "10.0.1.1"),
        ]);
        let got = addresses_in(&bytes, &mut Dump::new(0), Some(7));
        assert_eq!(got, vec![ip("10.0.0.1"), ip("10.0.1.1")]);
    }

    #[test]
    fn a_dump_ends_with_done_and_truncated_input_is_not_read_past() {
        let mut done = datagram(vec![NetlinkPayload::Done(Default::default())]);
        let mut dump = Dump::new(0);
        assert!(addresses_in(&done, &mut dump, None).is_empty());
        assert!(dump.done());
        done.truncate(10);
        let mut dump = Dump::new(0);
        assert!(addresses_in(&done, &mut dump, None).is_empty());
        assert!(!dump.done());
    }

    #[test]
    fn the_dump_request_asks_for_every_address() {
        let req = dump_request(7);
        let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&req).unwrap();
        assert_eq!(msg.header.sequence_number, 7);
        assert_eq!(msg.header.flags, NLM_F_REQUEST | NLM_F_DUMP);
        assert!(matches!(
            msg.payload,
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::GetAddress(_))
        ));
    }
}
