//! Binding and unbinding many addresses as a state machine: batches of requests come out, the
//! kernel's answers go in, and each answer is traced back to its address and counted.
//!
//! Pure: no socket, testable with bytes. The netlink core's [`Batch`] traces each answer to
//! its operation; what is ours here is the order (unbind, then bind), the batch size, and
//! which errno means the address was already as wanted.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::addresses::AddressChanges;
use super::message;
use crate::netlink::batch::{Acks, Answer, Batch, Until};
use crate::netlink::message::{self as framing, FramingError};

/// How many address requests go out in one datagram before their answers are read: few
/// enough that the acknowledgements, each a kernel buffer of its own, fit the socket's
/// default receive buffer (208 KiB) with room to spare; many enough that 6,000 addresses
/// take under a second in the UML test.
pub const ADDRESS_BATCH: usize = 128;

/// `EEXIST`: on adding, the address is on the interface already.
const EEXIST: i32 = 17;
/// `EADDRNOTAVAIL`: on deleting, the address is not on the interface.
const EADDRNOTAVAIL: i32 = 99;

/// One address change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AddressOp {
    Bind(IpAddr),
    Unbind(IpAddr),
}

impl AddressOp {
    pub fn address(&self) -> IpAddr {
        match self {
            AddressOp::Bind(ip) | AddressOp::Unbind(ip) => *ip,
        }
    }

    fn encode(&self, index: u32, seq: u32) -> Vec<u8> {
        match *self {
            AddressOp::Bind(ip) => message::new_address(index, ip, seq),
            AddressOp::Unbind(ip) => message::delete_address(index, ip, seq),
        }
    }
}

/// "bind 10.96.0.1/32", "unbind fd00::1/128": what errors call it.
impl std::fmt::Display for AddressOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ip = self.address();
        let prefix = message::host_prefix_len(ip);
        match self {
            AddressOp::Bind(_) => write!(f, "bind {ip}/{prefix}"),
            AddressOp::Unbind(_) => write!(f, "unbind {ip}/{prefix}"),
        }
    }
}

/// A change the kernel refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub op: AddressOp,
    /// Positive errno.
    pub errno: i32,
    /// The kernel's extended-ack text, when it gave one.
    pub message: Option<String>,
}

/// What a finished update did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Updated {
    /// Addresses the kernel bound.
    pub bound: BTreeSet<IpAddr>,
    /// Addresses to bind that were bound already (`EEXIST`).
    pub already_bound: BTreeSet<IpAddr>,
    /// Addresses the kernel unbound.
    pub unbound: BTreeSet<IpAddr>,
    /// Addresses to unbind that were not bound (`EADDRNOTAVAIL`).
    pub already_unbound: BTreeSet<IpAddr>,
    /// Changes the kernel refused, in the order they were sent.
    pub refused: Vec<Refusal>,
}

/// Applies [`AddressChanges`] to one interface, a batch at a time.
#[derive(Debug)]
pub struct Update {
    index: u32,
    queue: std::vec::IntoIter<AddressOp>,
    next_seq: u32,
    /// The answers to the batch last sent.
    sent: Option<Acks<AddressOp>>,
    outcome: Updated,
}

impl Update {
    /// Plans `changes` on interface `index`, unbinding first; sequence numbers start at
    /// `first_seq`.
    pub fn new(index: u32, changes: &AddressChanges, first_seq: u32) -> Update {
        let unbind = changes.unbind.iter().copied().map(AddressOp::Unbind);
        let bind = changes.bind.iter().copied().map(AddressOp::Bind);
        Update {
            index,
            queue: unbind.chain(bind).collect::<Vec<_>>().into_iter(),
            next_seq: first_seq,
            sent: None,
            outcome: Updated::default(),
        }
    }

    /// The next datagram to send: up to [`ADDRESS_BATCH`] requests, each asking for an
    /// acknowledgement. `None` while answers are outstanding or when nothing is left.
    pub fn next_batch(&mut self) -> Option<Vec<u8>> {
        if self.waiting() {
            return None;
        }
        let first = self.next_seq;
        let mut bytes = Vec::new();
        let mut ops = Vec::new();
        for op in self.queue.by_ref().take(ADDRESS_BATCH) {
            bytes.extend(op.encode(self.index, self.next_seq));
            self.next_seq = self.next_seq.wrapping_add(1);
            ops.push(op);
        }
        if ops.is_empty() {
            return None;
        }
        let (bytes, acks) = Batch::new(bytes, first, ops).send(Until::EveryMessage);
        self.sent = Some(acks);
        Some(bytes)
    }

    /// Takes one datagram of answers; only broken framing is an error.
    pub fn receive(&mut self, datagram: &[u8]) -> Result<(), FramingError> {
        let Update { sent, outcome, .. } = self;
        framing::each(datagram, |m| {
            let Some(Answer {
                origin: Some(op),
                errno,
                message,
            }) = sent.as_mut().and_then(|acks| acks.receive(&m))
            else {
                return;
            };
            match (op, errno) {
                (AddressOp::Bind(ip), 0) => outcome.bound.insert(ip),
                (AddressOp::Bind(ip), EEXIST) => outcome.already_bound.insert(ip),
                (AddressOp::Unbind(ip), 0) => outcome.unbound.insert(ip),
                (AddressOp::Unbind(ip), EADDRNOTAVAIL) => outcome.already_unbound.insert(ip),
                (op, errno) => {
                    outcome.refused.push(Refusal { op, errno, message });
                    true
                }
            };
        })
    }

    /// Whether answers to the last batch are still outstanding.
    pub fn waiting(&self) -> bool {
        self.sent.as_ref().is_some_and(|acks| !acks.done())
    }

    /// The next sequence number nobody used.
    pub fn next_seq(&self) -> u32 {
        self.next_seq
    }

    pub fn finish(self) -> Updated {
        self.outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::ack::Ack;
    use crate::netlink::message::messages;
    use netlink_packet_core::NetlinkMessage;
    use netlink_packet_route::RouteNetlinkMessage;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn answer(seq: u32, errno: i32, text: Option<&str>) -> Vec<u8> {
        Ack {
            seq,
            errno,
            message: text.map(str::to_owned),
        }
        .encode()
    }

    /// The sequence number and kind of each request in a datagram.
    fn requests(datagram: &[u8]) -> Vec<(u32, &'static str)> {
        messages(datagram)
            .map(|m| {
                let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(m.bytes).unwrap();
                let kind = match msg.payload {
                    netlink_packet_core::NetlinkPayload::InnerMessage(
                        RouteNetlinkMessage::NewAddress(_),
                    ) => "bind",
                    netlink_packet_core::NetlinkPayload::InnerMessage(
                        RouteNetlinkMessage::DelAddress(_),
                    ) => "unbind",
                    _ => "other",
                };
                (m.seq, kind)
            })
            .collect()
    }

    #[test]
    fn unbinds_go_first_and_each_answer_is_counted_against_its_address() {
        let changes = AddressChanges {
            bind: [ip("10.96.0.1"), ip("10.96.0.2"), ip("fd00::1")].into(),
            unbind: [ip("10.96.0.9"), ip("10.96.0.8")].into(),
        };
        let mut update = Update::new(7, &changes, 10);
        let batch = update.next_batch().unwrap();
        assert_eq!(
            requests(&batch),
            [
                (10, "unbind"),
                (11, "unbind"),
                (12, "bind"),
                (13, "bind"),
                (14, "bind")
            ]
        );
        assert!(update.next_batch().is_none(), "answers outstanding");
        let answers = [
            answer(10, 0, None),
            answer(11, EADDRNOTAVAIL, None),
            answer(12, 0, None),
            answer(13, EEXIST, None),
            answer(14, 1, Some("Operation not permitted here")),
        ]
        .concat();
        update.receive(&answers).unwrap();
        assert!(!update.waiting());
        assert!(update.next_batch().is_none(), "nothing left");
        assert_eq!(update.next_seq(), 15);
        let done = update.finish();
        assert_eq!(done.unbound, [ip("10.96.0.8")].into());
        assert_eq!(done.already_unbound, [ip("10.96.0.9")].into());
        assert_eq!(done.bound, [ip("10.96.0.1")].into());
        assert_eq!(done.already_bound, [ip("10.96.0.2")].into());
        assert_eq!(
            done.refused,
            [Refusal {
                op: AddressOp::Bind(ip("fd00::1")),
                errno: 1,
                message: Some("Operation not permitted here".into())
            }]
        );
        assert_eq!(done.refused[0].op.to_string(), "bind fd00::1/128");
    }

    #[test]
    fn a_long_list_goes_out_in_batches_each_sent_after_the_last_is_answered() {
        let bind: BTreeSet<IpAddr> = (0..300u32)
            .map(|i| IpAddr::from(std::net::Ipv4Addr::from(0x0a60_0000 + i)))
            .collect();
        let changes = AddressChanges {
            bind: bind.clone(),
            unbind: BTreeSet::new(),
        };
        let mut update = Update::new(3, &changes, 1);
        let mut sizes = Vec::new();
        while let Some(batch) = update.next_batch() {
            let sent = requests(&batch);
            sizes.push(sent.len());
            let acks: Vec<u8> = sent
                .iter()
                .flat_map(|(seq, _)| answer(*seq, 0, None))
                .collect();
            // Answers may arrive over several datagrams.
            let (first, rest) = acks.split_at(acks.len() / 2 / 36 * 36);
            update.receive(first).unwrap();
            update.receive(rest).unwrap();
        }
        assert_eq!(
            sizes,
            [ADDRESS_BATCH, ADDRESS_BATCH, 300 - 2 * ADDRESS_BATCH]
        );
        assert_eq!(update.finish().bound, bind);
    }

    #[test]
    fn no_changes_send_nothing() {
        let mut update = Update::new(3, &AddressChanges::default(), 1);
        assert!(update.next_batch().is_none());
        assert!(!update.waiting());
        assert_eq!(update.finish(), Updated::default());
    }

    #[test]
    fn broken_framing_is_an_error() {
        let changes = AddressChanges {
            bind: [ip("10.96.0.1")].into(),
            unbind: BTreeSet::new(),
        };
        let mut update = Update::new(3, &changes, 1);
        update.next_batch().unwrap();
        let ack = answer(1, 0, None);
        assert!(update.receive(&ack[..ack.len() - 4]).is_err());
        assert!(update.waiting());
    }
}
