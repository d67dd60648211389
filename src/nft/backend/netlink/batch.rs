//! [`Transaction`]s → one nf_tables batch: `BATCH_BEGIN`, one message per table, chain, rule
//! and set operation and one per slice of elements, `BATCH_END`. The kernel applies a batch
//! atomically, both families at once.
//!
//! Pure. Every message asks for an acknowledgement (up to [`ACKED_MESSAGES_MAX`] messages; a
//! larger batch relies on the kernel reporting every error whether asked or not, since
//! hundreds of thousands of acknowledgements would overflow any receive buffer), and
//! [`Batch::origin`] maps each sequence number back to the operation it came from, so a kernel
//! error names the object that failed.

use std::collections::BTreeSet;

use netlink_packet_core::{NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE, NLM_F_REQUEST};

use super::expr;
use super::object;
use super::rule::{self, Layout};
use super::uapi::{self, msg};
use crate::netlink::nfnetlink;
use crate::netlink::writer::Writer;
use crate::nft::Name;
use crate::nft::diff::{Op, Transaction};
use crate::nft::ruleset::{Data, Family, Verdict};

/// Element lists are cut before a nest outgrows an attribute's 16-bit length.
const ELEMENT_BYTES: usize = 48 * 1024;
/// Batches of more messages than this ask for errors only: their acknowledgements (about 1 KiB
/// of receive buffer each) would not fit the socket's 8 MiB.
pub const ACKED_MESSAGES_MAX: usize = 4096;

/// Where a message came from: transaction `transaction`, operation `op`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin {
    pub transaction: usize,
    pub op: usize,
}

/// One encoded batch: `BATCH_BEGIN` (whose sequence number a commit error answers), one
/// message per operation or slice of elements, each traced to its [`Origin`], `BATCH_END`.
pub type Batch = crate::netlink::batch::Batch<Origin>;

/// An operation the kernel cannot express.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("operation {op} of the {family:?} transaction cannot be encoded: {why}")]
pub struct Unencodable {
    pub family: Family,
    pub op: usize,
    pub why: &'static str,
}

/// What the encoder must know beyond the transaction: which sets are interval sets (a rule
/// looking one up is shaped differently). Kept by the backend across transactions.
#[derive(Clone, Debug, Default)]
pub struct Known {
    pub interval: BTreeSet<(Family, Name)>,
}

impl Known {
    /// Notes the sets `t` creates and deletes.
    pub fn learn(&mut self, t: &Transaction) {
        for op in &t.ops {
            match op {
                Op::AddSet { name, decl } => {
                    let key = (t.family, name.clone());
                    if decl.interval {
                        self.interval.insert(key);
                    } else {
                        self.interval.remove(&key);
                    }
                }
                Op::DeleteSet(name) => {
                    self.interval.remove(&(t.family, name.clone()));
                }
                Op::DeleteTable => self.interval.retain(|(f, _)| *f != t.family),
                _ => {}
            }
        }
    }
}

/// Encodes `transactions` as one batch, sequence numbers from `first_seq`. `known` must
/// already have learnt these transactions.
pub fn encode(
    transactions: &[Transaction],
    known: &Known,
    first_seq: u32,
) -> Result<Batch, Unencodable> {
    let batch = encode_with(transactions, known, first_seq, true)?;
    if batch.len() <= ACKED_MESSAGES_MAX {
        return Ok(batch);
    }
    encode_with(transactions, known, first_seq, false)
}

fn encode_with(
    transactions: &[Transaction],
    known: &Known,
    first_seq: u32,
    ack: bool,
) -> Result<Batch, Unencodable> {
    let size: usize = transactions.iter().map(|t| 64 * t.operations() + 64).sum();
    let mut w = Writer::with_capacity(size);
    nfnetlink::batch_begin(&mut w, first_seq, uapi::SUBSYS);
    let mut b = Encoder {
        w,
        seq: first_seq,
        origins: Vec::new(),
        set_id: 0,
        ack: if ack { NLM_F_ACK } else { 0 },
    };
    for (ti, t) in transactions.iter().enumerate() {
        let interval = |n: &Name| known.interval.contains(&(t.family, n.clone()));
        for (oi, op) in t.ops.iter().enumerate() {
            let origin = Origin {
                transaction: ti,
                op: oi,
            };
            b.op(t.family, op, origin, &interval)
                .map_err(|why| Unencodable {
                    family: t.family,
                    op: oi,
                    why,
                })?;
        }
    }
    nfnetlink::batch_end(&mut b.w, b.seq + 1, uapi::SUBSYS);
    Ok(Batch::new(b.w.buf, first_seq.wrapping_add(1), b.origins).refused_whole_at(first_seq))
}

struct Encoder {
    w: Writer,
    seq: u32,
    origins: Vec<Origin>,
    set_id: u32,
    /// `NLM_F_ACK`, or nothing for a batch too large to acknowledge message by message.
    ack: u16,
}

impl Encoder {
    fn begin(&mut self, family: Family, kind: u16, flags: u16, origin: Origin) -> usize {
        self.seq += 1;
        self.origins.push(origin);
        nfnetlink::begin(
            &mut self.w,
            nfnetlink::kind(uapi::SUBSYS, kind),
            NLM_F_REQUEST | self.ack | flags,
            self.seq,
            Layout { family }.nfproto(),
            0,
        )
    }

    fn op(
        &mut self,
        family: Family,
        op: &Op,
        origin: Origin,
        interval: &dyn Fn(&Name) -> bool,
    ) -> Result<(), &'static str> {
        let create = NLM_F_CREATE;
        match op {
            Op::AddTable => {
                let m = self.begin(family, msg::NEWTABLE, create, origin);
                object::add_table(&mut self.w);
                self.w.end(m);
            }
            Op::DeleteTable => {
                let m = self.begin(family, msg::DELTABLE, 0, origin);
                object::name_table(&mut self.w);
                self.w.end(m);
            }
            Op::AddChain { name, base } => {
                let m = self.begin(family, msg::NEWCHAIN, create, origin);
                object::chain(&mut self.w, name, base.as_ref());
                self.w.end(m);
            }
            Op::DeleteChain(name) => {
                let m = self.begin(family, msg::DELCHAIN, 0, origin);
                object::chain(&mut self.w, name, None);
                self.w.end(m);
            }
            Op::FlushChain(name) => {
                let m = self.begin(family, msg::DELRULE, 0, origin);
                self.w.str(uapi::rule::TABLE, crate::nft::TABLE);
                self.w.str(uapi::rule::CHAIN, name.as_str());
                self.w.end(m);
            }
            Op::AddRule { chain, rule: r } => {
                let exprs = rule::encode(family, r, interval);
                let m = self.begin(family, msg::NEWRULE, create | NLM_F_APPEND, origin);
                self.w.str(uapi::rule::TABLE, crate::nft::TABLE);
                self.w.str(uapi::rule::CHAIN, chain.as_str());
                let n = self.w.nest(uapi::rule::EXPRESSIONS);
                expr::write_list(&mut self.w, &exprs);
                self.w.nest_end(n);
                self.w.end(m);
            }
            Op::AddSet { name, decl } => {
                self.set_id += 1;
                let m = self.begin(family, msg::NEWSET, create, origin);
                object::add_set(&mut self.w, family, name, decl, self.set_id);
                self.w.end(m);
            }
            Op::DeleteSet(name) => {
                let m = self.begin(family, msg::DELSET, 0, origin);
                object::name_set(&mut self.w, name);
                self.w.end(m);
            }
            Op::AddElements { set, elements } => {
                if elements.iter().any(|(_, e)| {
                    matches!(
                        e.data,
                        Data::Verdict(Verdict::Reject | Verdict::RejectTcpReset)
                    )
                }) {
                    return Err("reject is a statement, not a verdict a map can hold");
                }
                let mut rest = elements.iter().peekable();
                while rest.peek().is_some() {
                    let m = self.begin(family, msg::NEWSETELEM, create, origin);
                    let list = self.elements_head(set);
                    let start = self.w.written();
                    for (k, e) in rest.by_ref() {
                        object::element(&mut self.w, k, Some(e));
                        if self.w.written() - start > ELEMENT_BYTES {
                            break;
                        }
                    }
                    self.w.nest_end(list);
                    self.w.end(m);
                }
            }
            Op::DeleteElements { set, keys } => {
                let mut rest = keys.as_slice();
                while !rest.is_empty() {
                    let m = self.begin(family, msg::DELSETELEM, 0, origin);
                    let list = self.elements_head(set);
                    let start = self.w.written();
                    let mut taken = 0;
                    for k in rest {
                        object::element(&mut self.w, k, None);
                        taken += 1;
                        if self.w.written() - start > ELEMENT_BYTES {
                            break;
                        }
                    }
                    self.w.nest_end(list);
                    self.w.end(m);
                    rest = &rest[taken..];
                }
            }
        }
        Ok(())
    }

    /// Table and set of an element message; returns the open element list.
    fn elements_head(&mut self, set: &Name) -> usize {
        self.w.str(uapi::elem::LIST_TABLE, crate::nft::TABLE);
        self.w.str(uapi::elem::LIST_SET, set.as_str());
        self.w.nest(uapi::elem::LIST_ELEMENTS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::ack::Ack;
    use crate::netlink::batch::{Answer, Until};
    use crate::netlink::message::messages;
    use crate::nft::ruleset::{Family, Rule};

    fn flush_chains(n: usize) -> Transaction {
        Transaction {
            family: Family::Ip,
            ops: (0..n)
                .map(|i| Op::FlushChain(Name::parse(&format!("c{i}")).unwrap()))
                .chain([Op::AddRule {
                    chain: Name::parse("c0").unwrap(),
                    rule: Rule::new(vec![], vec![]),
                }])
                .collect(),
        }
    }

    fn acked(batch: &Batch) -> usize {
        messages(&batch.bytes)
            .filter(|m| m.flags & NLM_F_ACK != 0)
            .count()
    }

    #[test]
    fn every_message_is_acknowledged_up_to_the_limit_and_none_beyond() {
        let small = encode(&[flush_chains(10)], &Known::default(), 1).unwrap();
        assert_eq!((small.len(), acked(&small)), (11, 11));
        let large = encode(&[flush_chains(ACKED_MESSAGES_MAX)], &Known::default(), 1).unwrap();
        assert_eq!(large.len(), ACKED_MESSAGES_MAX + 1);
        assert_eq!(acked(&large), 0);
        // Either way the batch is framed and every message traces to its operation.
        assert_eq!(messages(&large.bytes).count(), ACKED_MESSAGES_MAX + 3);
        assert_eq!(
            large.origin(large.acknowledged().start + 1),
            Some(&Origin {
                transaction: 0,
                op: 1
            })
        );
    }

    #[test]
    fn a_kernel_error_names_its_operation_and_a_commit_error_the_batch() {
        let t = Transaction {
            family: Family::Ip,
            ops: vec![Op::AddTable, Op::DeleteTable],
        };
        let batch = encode(&[t], &Known::default(), 100).expect("encodes");
        assert_eq!(batch.acknowledged(), 101..103);
        let (bytes, mut acks) = batch.send(Until::Barrier(104));
        assert_eq!(messages(&bytes).count(), 4, "begin, two operations, end");
        let answer = |seq, errno, text: Option<&str>| {
            Ack {
                seq,
                errno,
                message: text.map(str::to_owned),
            }
            .encode()
        };
        let datagram = [
            answer(101, 0, None),
            answer(102, 2, Some("No such table")),
            answer(100, 40, None),
            answer(104, 0, None),
        ]
        .concat();
        let failures: Vec<_> = messages(&datagram)
            .filter_map(|m| acks.receive(&m))
            .filter(|a| a.errno != 0)
            .collect();
        assert!(acks.done());
        assert_eq!(
            failures,
            [
                Answer {
                    origin: Some(Origin {
                        transaction: 0,
                        op: 1
                    }),
                    errno: 2,
                    message: Some("No such table".into()),
                },
                Answer {
                    origin: None,
                    errno: 40,
                    message: None
                }
            ]
        );
    }
}
