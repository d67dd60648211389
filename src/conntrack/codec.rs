//! ctnetlink messages as bytes: the dump and delete requests we send, and the kernel's dumped
//! entries read back into [`Flow`]s.
//!
//! Pure: no I/O, never panics on kernel input. Message layouts come from
//! `netlink-packet-netfilter` (its conntrack types cover the tuples, status and timeout); the
//! two attributes it has no variant for, `CTA_ID` and `CTA_ZONE`, are carried as raw
//! attributes here. Framing, acknowledgements and the end of a dump are the netlink core's
//! ([`crate::netlink`]). A message that cannot be decoded becomes [`Entry::Undecodable`]
//! rather than an error, so one entry the crate does not understand never stops a reconcile.

use std::net::IpAddr;

use netlink_packet_core::{
    DefaultNla, NLA_TYPE_MASK, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage,
    NetlinkPayload,
};
use netlink_packet_netfilter::conntrack::{
    ConntrackAttribute, ConntrackMessage, IPTuple, ProtoTuple, Protocol as L4, Tuple as Nested,
};
use netlink_packet_netfilter::{
    NetfilterHeader, NetfilterMessage, NetfilterMessageInner, NetfilterProtoFamily,
};

use super::flow::{Flow, Tuple};
use crate::cluster::IpFamily;
use crate::netlink::message::Message;
use crate::netlink::nfnetlink::{self, NFNETLINK_V0};

/// `NFNL_SUBSYS_CTNETLINK`: the nfnetlink subsystem of conntrack's messages.
const SUBSYS_CTNETLINK: u16 = 1;
/// `CTA_ID` (`include/uapi/linux/netfilter/nfnetlink_conntrack.h`), a big-endian u32.
const CTA_ID: u16 = 12;
/// `CTA_ZONE`, a big-endian u16.
const CTA_ZONE: u16 = 18;

/// One message of a dump's answer, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A conntrack entry.
    Flow(Flow),
    /// A conntrack message without the tuples a flow needs (or of a protocol family we do not
    /// track); counted, not an error.
    Skipped,
    /// A message the decoder could not read; counted, not an error.
    Undecodable(String),
}

fn nf_family(family: IpFamily) -> NetfilterProtoFamily {
    match family {
        IpFamily::V4 => NetfilterProtoFamily::IPv4,
        IpFamily::V6 => NetfilterProtoFamily::IPv6,
    }
}

fn serialize(family: IpFamily, flags: u16, seq: u32, message: ConntrackMessage) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    header.sequence_number = seq;
    let payload = NetfilterMessage::new(
        NetfilterHeader::new(nf_family(family), NFNETLINK_V0, 0),
        message,
    );
    let mut message = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(payload));
    message.finalize();
    let mut bytes = vec![0; message.buffer_len()];
    message.serialize(&mut bytes);
    bytes
}

/// Asks for every conntrack entry of one family.
pub fn dump_request(family: IpFamily, seq: u32) -> Vec<u8> {
    serialize(
        family,
        NLM_F_REQUEST | NLM_F_DUMP,
        seq,
        ConntrackMessage::Get(Vec::new()),
    )
}

/// Asks to delete exactly this entry: by its original tuple, and by id and zone when the dump
/// gave them. The kernel acknowledges it (or answers `ENOENT` when the entry is gone already).
pub fn delete_request(flow: &Flow, seq: u32) -> Vec<u8> {
    let o = &flow.original;
    let mut attributes = vec![ConntrackAttribute::CtaTupleOrig(vec![
        Nested::Ip(vec![
            IPTuple::SourceAddress(o.src),
            IPTuple::DestinationAddress(o.dst),
        ]),
        Nested::Proto(vec![
            ProtoTuple::Protocol(L4::from(flow.protocol)),
            ProtoTuple::SourcePort(o.src_port),
            ProtoTuple::DestinationPort(o.dst_port),
        ]),
    ])];
    if let Some(zone) = flow.zone {
        attributes.push(ConntrackAttribute::Other(DefaultNla::new(
            CTA_ZONE,
            zone.to_be_bytes().to_vec(),
        )));
    }
    if let Some(id) = flow.id {
        attributes.push(ConntrackAttribute::Other(DefaultNla::new(
            CTA_ID,
            id.to_be_bytes().to_vec(),
        )));
    }
    serialize(
        flow.family(),
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
        ConntrackMessage::Delete(attributes),
    )
}

/// Reads one message of a dump's answer (an object, not its end: the core's dump state
/// machine tells which).
///
/// Only conntrack's messages reach the crate's decoder: its decoders of the other nfnetlink
/// subsystems (nf_tables sets and expressions) trust the lengths inside nested attributes and
/// panic on a malformed one, so a message of another subsystem is [`Entry::Skipped`] unread.
pub fn entry(message: &Message<'_>) -> Entry {
    if nfnetlink::subsystem(message.kind) != SUBSYS_CTNETLINK {
        return Entry::Skipped;
    }
    match NetlinkMessage::<NetfilterMessage>::deserialize(message.bytes).map(|m| m.payload) {
        Ok(NetlinkPayload::InnerMessage(NetfilterMessage {
            inner: NetfilterMessageInner::Conntrack(ConntrackMessage::New(attributes)),
            ..
        })) => flow(&attributes).map_or(Entry::Skipped, Entry::Flow),
        Ok(_) => Entry::Skipped,
        Err(e) => Entry::Undecodable(e.to_string()),
    }
}

/// Builds a flow from a dumped entry's attributes; `None` when a tuple is incomplete.
fn flow(attributes: &[ConntrackAttribute]) -> Option<Flow> {
    let mut original = None;
    let mut reply = None;
    let mut id = None;
    let mut zone = None;
    for attribute in attributes {
        match attribute {
            ConntrackAttribute::CtaTupleOrig(t) => original = tuple(t),
            ConntrackAttribute::CtaTupleReply(t) => reply = tuple(t),
            ConntrackAttribute::Other(nla) => {
                use netlink_packet_core::Nla;
                let mut value = vec![0; nla.value_len()];
                nla.emit_value(&mut value);
                match nla.kind() & NLA_TYPE_MASK {
                    CTA_ID => id = value.try_into().ok().map(u32::from_be_bytes),
                    CTA_ZONE => zone = value.try_into().ok().map(u16::from_be_bytes),
                    _ => {}
                }
            }
            _ => {}
        }
    }
    let ((protocol, original), (_, reply)) = (original?, reply?);
    Some(Flow {
        protocol,
        original,
        reply,
        id,
        zone,
    })
}

/// One tuple: addresses, protocol and ports (0 where the protocol has none).
fn tuple(nested: &[Nested]) -> Option<(u8, Tuple)> {
    let (mut src, mut dst): (Option<IpAddr>, Option<IpAddr>) = (None, None);
    let (mut protocol, mut src_port, mut dst_port) = (None, 0, 0);
    for n in nested {
        match n {
            Nested::Ip(ips) => {
                for ip in ips {
                    match ip {
                        IPTuple::SourceAddress(a) => src = Some(*a),
                        IPTuple::DestinationAddress(a) => dst = Some(*a),
                        _ => {}
                    }
                }
            }
            Nested::Proto(parts) => {
                for part in parts {
                    match part {
                        ProtoTuple::Protocol(p) => protocol = Some(u8::from(*p)),
                        ProtoTuple::SourcePort(p) => src_port = *p,
                        ProtoTuple::DestinationPort(p) => dst_port = *p,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some((
        protocol?,
        Tuple {
            src: src?,
            dst: dst?,
            src_port,
            dst_port,
        },
    ))
}

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;
