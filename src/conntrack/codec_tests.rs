//! Encoding and decoding ctnetlink messages, against bytes captured from a real kernel by
//! `tests/conntrack.rs` (`UPDATE_GOLDENS=1`; the file names say which part made them): the
//! IPv4 and IPv6 dumps after its traffic, and the answers to deleting one entry twice. The
//! exchanges read them through the netlink core, as the socket does.

use std::net::IpAddr;

use netlink_packet_core::{NLMSG_DONE, NetlinkMessage, NetlinkPayload};
use netlink_packet_netfilter::NetfilterMessage;
use netlink_packet_netfilter::NetfilterMessageInner;
use netlink_packet_netfilter::conntrack::{ConntrackAttribute, ConntrackMessage};

use super::*;
use crate::conntrack::exchange::{DELETE_BATCH, Deletion, Dump, DumpRefused, Dumped};
use crate::conntrack::flow::{IPPROTO_TCP, IPPROTO_UDP};
use crate::netlink::ack::Ack;
use crate::netlink::message::messages;

const DUMP_V4: &[u8] = include_bytes!("testdata/dump_ipv4_conntrack_rs_traffic.bin");
const DUMP_V6: &[u8] = include_bytes!("testdata/dump_ipv6_conntrack_rs_traffic.bin");
const DELETE_ACK: &[u8] = include_bytes!("testdata/delete_ack_conntrack_rs_capture.bin");
const DELETE_ENOENT: &[u8] = include_bytes!("testdata/delete_enoent_conntrack_rs_capture.bin");

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// What a dump with sequence number `seq` reads from `datagram`, which must end it.
fn dumped(family: IpFamily, seq: u32, datagram: &[u8]) -> Dumped {
    let (mut dump, _) = Dump::start(family, seq);
    dump.receive(datagram).unwrap();
    assert!(dump.done());
    dump.finish().unwrap()
}

/// The answers in a datagram.
fn answers(datagram: &[u8]) -> Vec<Ack> {
    messages(datagram).filter_map(|m| Ack::of(&m)).collect()
}

fn ack(seq: u32, errno: i32) -> Vec<u8> {
    Ack {
        seq,
        errno,
        message: None,
    }
    .encode()
}

/// `proto orig-src:port > orig-dst:port reply-from reply-src:port`, in dump order.
fn brief(flows: &[Flow]) -> Vec<String> {
    flows
        .iter()
        .map(|f| {
            let (o, r) = (&f.original, &f.reply);
            format!(
                "{} {}:{} > {}:{} from {}:{}",
                f.protocol, o.src, o.src_port, o.dst, o.dst_port, r.src, r.src_port
            )
        })
        .collect()
}

#[test]
fn the_ipv4_dump_decodes_to_the_flows_the_traffic_made() {
    assert!(messages(DUMP_V4).all(|m| m.seq == 1));
    assert_eq!(messages(DUMP_V4).last().map(|m| m.kind), Some(NLMSG_DONE));
    let flows = dumped(IpFamily::V4, 1, DUMP_V4).flows;
    let mut got = brief(&flows);
    // The TCP client's source port is the kernel's choice.
    let tcp = flows
        .iter()
        .position(|f| f.protocol == IPPROTO_TCP)
        .unwrap();
    got[tcp] = got[tcp].replace(&format!(":{} ", flows[tcp].original.src_port), ":* ");
    got[tcp] = got[tcp].replace(&format!(":{}", flows[tcp].original.src_port), ":*");
    got.sort();
    assert_eq!(
        got,
        [
            "17 10.244.1.1:40001 > 10.96.0.10:53 from 10.244.1.1:5353",
            "17 10.244.1.1:40002 > 10.96.0.10:53 from 10.244.1.2:5353",
            "17 10.244.1.1:40003 > 10.96.0.12:53 from 10.96.0.12:53",
            "17 10.244.1.1:40005 > 10.96.0.10:54 from 10.244.1.1:5353",
            "17 192.168.50.1:40004 > 192.168.50.1:30053 from 10.244.1.1:5353",
            "17 192.168.50.1:40006 > 192.168.50.1:30099 from 192.168.50.1:30099",
            "6 10.244.1.1:* > 10.96.0.10:53 from 10.244.1.1:5353",
        ]
    );
    assert!(flows.iter().all(|f| f.id.is_some() && f.zone.is_none()));
    let not_natted = flows.iter().find(|f| f.original.src_port == 40003).unwrap();
    assert!(!not_natted.dnatted());
    assert!(
        flows
            .iter()
            .find(|f| f.original.src_port == 40001)
            .unwrap()
            .dnatted()
    );
}

#[test]
fn the_ipv6_dump_decodes_to_its_two_flows() {
    assert_eq!(
        messages(DUMP_V6).last().map(|m| (m.kind, m.seq)),
        Some((NLMSG_DONE, 2))
    );
    let mut got = brief(&dumped(IpFamily::V6, 2, DUMP_V6).flows);
    got.sort();
    assert_eq!(
        got,
        [
            "17 fd00:244::2:40007 > fd00:96::10:53 from fd00:244::1:5353",
            "17 fd00:244::2:40008 > fd00:96::10:53 from fd00:244::2:5353",
        ]
    );
}

#[test]
fn delete_answers_decode_to_an_ack_and_enoent() {
    let answer = |seq, errno| Ack {
        seq,
        errno,
        message: None,
    };
    assert_eq!(answers(DELETE_ACK), [answer(4, 0)]);
    assert_eq!(answers(DELETE_ENOENT), [answer(5, 2)]);
}

#[test]
fn a_dump_request_is_a_get_with_the_dump_flags() {
    #[rustfmt::skip]
    let want: [u8; 20] = [
        20, 0, 0, 0,      // length
        0x01, 0x01,       // NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_GET
        0x01, 0x03,       // NLM_F_REQUEST | NLM_F_DUMP
        9, 0, 0, 0,       // sequence number
        0, 0, 0, 0,       // port id: the kernel's
        10, 0, 0, 0,      // AF_INET6, NFNETLINK_V0, res_id 0
    ];
    assert_eq!(dump_request(IpFamily::V6, 9), want);
    assert_eq!(dump_request(IpFamily::V4, 9)[16], 2, "AF_INET");
}

#[test]
fn a_delete_request_names_the_original_tuple_the_id_and_the_zone() {
    let mut flow = dumped(IpFamily::V4, 1, DUMP_V4)
        .flows
        .into_iter()
        .find(|f| f.original.src_port == 40001)
        .unwrap();
    flow.zone = Some(3);
    let bytes = delete_request(&flow, 77);
    let message = NetlinkMessage::<NetfilterMessage>::deserialize(&bytes).unwrap();
    assert_eq!(message.header.sequence_number, 77);
    assert_eq!(message.header.flags, 0x0005, "NLM_F_REQUEST | NLM_F_ACK");
    assert_eq!(message.header.message_type, 0x0102, "IPCTNL_MSG_CT_DELETE");
    let NetlinkPayload::InnerMessage(NetfilterMessage {
        inner: NetfilterMessageInner::Conntrack(ConntrackMessage::Delete(attributes)),
        ..
    }) = message.payload
    else {
        panic!("not a conntrack delete: {:?}", message.payload);
    };
    // Read back as a dump entry would be (the reply tuple is not sent; reuse the original).
    let tuple = attributes
        .iter()
        .find_map(|a| match a {
            ConntrackAttribute::CtaTupleOrig(t) => Some(t.clone()),
            _ => None,
        })
        .unwrap();
    let mut echoed = attributes.clone();
    echoed.push(ConntrackAttribute::CtaTupleReply(tuple));
    let read = super::flow(&echoed).unwrap();
    assert_eq!(read.protocol, IPPROTO_UDP);
    assert_eq!(read.original, flow.original);
    assert_eq!((read.id, read.zone), (flow.id, Some(3)));
    assert_eq!(read.original.dst, ip("10.96.0.10"));
}

#[test]
fn broken_framing_is_an_error_and_a_broken_message_is_only_undecodable() {
    let (mut dump, _) = Dump::start(IpFamily::V4, 1);
    assert!(dump.receive(&DUMP_V4[..DUMP_V4.len() - 8]).is_err());
    // A well-framed conntrack message whose attribute claims more bytes than it has.
    let mut bytes = dump_request(IpFamily::V4, 3);
    bytes[4] = 0; // IPCTNL_MSG_CT_NEW, as dump entries are
    bytes.extend([200, 0, 1, 0]);
    bytes[0] = bytes.len() as u8;
    let message = messages(&bytes).next().unwrap();
    assert!(matches!(entry(&message), Entry::Undecodable(_)));
    let (mut dump, _) = Dump::start(IpFamily::V4, 3);
    dump.receive(&bytes).unwrap();
    dump.receive(&[]).unwrap();
    assert!(!dump.done());
    dump.receive(&ack(3, 0)).unwrap();
    assert_eq!(dump.finish().unwrap().undecodable.len(), 1);
}

/// An nf_tables `GETSET` message whose nested expression attribute claims 256 bytes of 16:
/// the crate's nf_tables decoder panics on it (kept by the fuzzer, `fuzz/regressions/`).
const NFTABLES_SET_BROKEN_EXPR: &[u8] = include_bytes!(
    "../../fuzz/regressions/conntrack/crash-814b951bdc389bd09540686705aab427d1903262"
);

#[test]
fn a_message_of_another_nfnetlink_subsystem_is_skipped_unread() {
    let message = messages(NFTABLES_SET_BROKEN_EXPR).next().unwrap();
    assert_eq!(nfnetlink::subsystem(message.kind), 10, "nf_tables");
    assert_eq!(entry(&message), Entry::Skipped);
    let (mut dump, _) = Dump::start(IpFamily::V4, message.seq);
    dump.receive(message.bytes).unwrap();
    assert_eq!(dump.finish().unwrap().skipped, 1);
}

#[test]
fn a_dump_collects_flows_until_done_and_ignores_other_requests() {
    let (mut dump, request) = Dump::start(IpFamily::V4, 1);
    assert_eq!(request, dump_request(IpFamily::V4, 1));
    let done = messages(DUMP_V4).last().unwrap().bytes;
    dump.receive(&DUMP_V4[..DUMP_V4.len() - done.len()])
        .unwrap();
    assert!(!dump.done());
    dump.receive(DUMP_V6).unwrap(); // another request's, its end included
    assert!(!dump.done());
    dump.receive(done).unwrap();
    assert!(dump.done());
    assert_eq!(dump.finish().unwrap().flows.len(), 7);

    let (mut dump, _) = Dump::start(IpFamily::V4, 5);
    dump.receive(DELETE_ENOENT).unwrap();
    assert!(dump.done());
    assert_eq!(dump.finish(), Err(DumpRefused { errno: 2 }));
}

#[test]
fn a_deletion_sends_batches_and_counts_acks_gone_and_refusals() {
    let flows = dumped(IpFamily::V4, 1, DUMP_V4).flows;
    let mut deletion = Deletion::new(flows[..3].to_vec(), 4);
    let batch = deletion.next_batch().unwrap();
    assert_eq!(
        messages(&batch).count(),
        3,
        "three requests in one datagram"
    );
    assert!(deletion.next_batch().is_none(), "waits for the answers");
    deletion.receive(DELETE_ACK).unwrap(); // seq 4
    deletion.receive(DELETE_ENOENT).unwrap(); // seq 5
    assert!(deletion.waiting());
    deletion.receive(&[ack(99, 0), ack(6, 1)].concat()).unwrap();
    assert!(!deletion.waiting());
    assert!(deletion.next_batch().is_none());
    assert_eq!(deletion.next_seq(), 7);
    let done = deletion.finish();
    assert_eq!((done.deleted, done.gone), (1, 1));
    assert_eq!(done.failed, vec![(flows[2].clone(), 1)]);

    let many = vec![flows[0].clone(); DELETE_BATCH + 1];
    let mut deletion = Deletion::new(many, 1);
    assert_eq!(
        messages(&deletion.next_batch().unwrap()).count(),
        DELETE_BATCH
    );
    let acks: Vec<u8> = (1..=DELETE_BATCH as u32)
        .flat_map(|seq| ack(seq, 0))
        .collect();
    deletion.receive(&acks).unwrap();
    assert_eq!(messages(&deletion.next_batch().unwrap()).count(), 1);
}
