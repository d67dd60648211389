//! Encoding and decoding ctnetlink messages, against bytes captured from a real kernel by
//! `tests/conntrack.rs` (`UPDATE_GOLDENS=1`; the file names say which part made them): the
//! IPv4 and IPv6 dumps after its traffic, and the answers to deleting one entry twice.

use std::net::IpAddr;

use netlink_packet_core::{NetlinkMessage, NetlinkPayload};
use netlink_packet_netfilter::NetfilterMessage;
use netlink_packet_netfilter::NetfilterMessageInner;
use netlink_packet_netfilter::conntrack::{ConntrackAttribute, ConntrackMessage};

use super::*;
use crate::conntrack::exchange::{DELETE_BATCH, Deletion, Dump, DumpRefused};
use crate::conntrack::flow::{IPPROTO_TCP, IPPROTO_UDP};

const DUMP_V4: &[u8] = include_bytes!("testdata/dump_ipv4_conntrack_rs_traffic.bin");
const DUMP_V6: &[u8] = include_bytes!("testdata/dump_ipv6_conntrack_rs_traffic.bin");
const DELETE_ACK: &[u8] = include_bytes!("testdata/delete_ack_conntrack_rs_capture.bin");
const DELETE_ENOENT: &[u8] = include_bytes!("testdata/delete_enoent_conntrack_rs_capture.bin");

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn flows(replies: &[Reply]) -> Vec<&Flow> {
    replies
        .iter()
        .filter_map(|r| match r {
            Reply::Flow { flow, .. } => Some(flow),
            _ => None,
        })
        .collect()
}

/// `proto orig-src:port > orig-dst:port reply-from reply-src:port`, in dump order.
fn brief(flows: &[&Flow]) -> Vec<String> {
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
    let replies = parse(DUMP_V4).unwrap();
    assert!(replies.iter().all(|r| r.seq() == 1));
    assert_eq!(replies.last(), Some(&Reply::Done { seq: 1 }));
    let flows = flows(&replies);
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
    let replies = parse(DUMP_V6).unwrap();
    assert_eq!(replies.last(), Some(&Reply::Done { seq: 2 }));
    let mut got = brief(&flows(&replies));
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
    assert_eq!(parse(DELETE_ACK).unwrap(), [Reply::Ack { seq: 4 }]);
    assert_eq!(
        parse(DELETE_ENOENT).unwrap(),
        [Reply::Error { seq: 5, errno: 2 }]
    );
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
    let replies = parse(DUMP_V4).unwrap();
    let mut flow = flows(&replies)
        .into_iter()
        .find(|f| f.original.src_port == 40001)
        .unwrap()
        .clone();
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
    assert!(parse(&DUMP_V4[..DUMP_V4.len() - 8]).is_err());
    // A well-framed conntrack message whose attribute claims more bytes than it has.
    let mut bytes = dump_request(IpFamily::V4, 3);
    bytes[4] = 0; // IPCTNL_MSG_CT_NEW, as dump entries are
    bytes.extend([200, 0, 1, 0]);
    bytes[0] = bytes.len() as u8;
    assert!(matches!(
        parse(&bytes).unwrap()[..],
        [Reply::Undecodable { seq: 3, .. }]
    ));
    assert_eq!(parse(&[]).unwrap(), []);
}

#[test]
fn a_dump_collects_flows_until_done_and_ignores_other_requests() {
    let (mut dump, request) = Dump::start(IpFamily::V4, 1);
    assert_eq!(request, dump_request(IpFamily::V4, 1));
    let mut replies = parse(DUMP_V4).unwrap();
    let done = replies.pop().unwrap();
    replies.push(Reply::Flow {
        seq: 8,
        flow: flows(&parse(DUMP_V6).unwrap())[0].clone(),
    });
    dump.receive(replies).unwrap();
    assert!(!dump.done());
    dump.receive(vec![done]).unwrap();
    assert!(dump.done());
    assert_eq!(dump.finish().flows.len(), 7);

    let (mut dump, _) = Dump::start(IpFamily::V4, 5);
    assert_eq!(
        dump.receive(parse(DELETE_ENOENT).unwrap()),
        Err(DumpRefused { errno: 2 })
    );
}

#[test]
fn a_deletion_sends_batches_and_counts_acks_gone_and_refusals() {
    let flows: Vec<Flow> = flows(&parse(DUMP_V4).unwrap())
        .into_iter()
        .cloned()
        .collect();
    let mut deletion = Deletion::new(flows[..3].to_vec(), 4);
    let batch = deletion.next_batch().unwrap();
    let sent = parse(&batch).unwrap();
    assert_eq!(sent.len(), 3, "three requests in one datagram");
    assert!(deletion.next_batch().is_none(), "waits for the answers");
    deletion.receive(parse(DELETE_ACK).unwrap()); // seq 4
    deletion.receive(parse(DELETE_ENOENT).unwrap()); // seq 5
    assert!(deletion.waiting());
    deletion.receive(vec![
        Reply::Ack { seq: 99 },
        Reply::Error { seq: 6, errno: 1 },
    ]);
    assert!(!deletion.waiting());
    assert!(deletion.next_batch().is_none());
    assert_eq!(deletion.next_seq(), 7);
    let done = deletion.finish();
    assert_eq!((done.deleted, done.gone), (1, 1));
    assert_eq!(done.failed, vec![(flows[2].clone(), 1)]);

    let many = vec![flows[0].clone(); DELETE_BATCH + 1];
    let mut deletion = Deletion::new(many, 1);
    assert_eq!(
        parse(&deletion.next_batch().unwrap()).unwrap().len(),
        DELETE_BATCH
    );
    deletion.receive(
        (1..=DELETE_BATCH as u32)
            .map(|seq| Reply::Ack { seq })
            .collect(),
    );
    assert_eq!(parse(&deletion.next_batch().unwrap()).unwrap().len(), 1);
}
