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

use super::attr::Writer;
use super::expr;
use super::object;
use super::rule::{self, Layout};
use super::uapi::{self, msg, nlm};
use crate::dataplane::nftables::diff::{Op, Transaction};
use crate::dataplane::nftables::names::Name;
use crate::dataplane::nftables::ruleset::{Data, Family, Verdict};

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

/// One encoded batch.
#[derive(Debug)]
pub struct Batch {
    pub bytes: Vec<u8>,
    /// Sequence number of `BATCH_BEGIN`; messages follow it one by one.
    pub first_seq: u32,
    /// Origin of each acknowledged message, in order from `first_seq + 1`.
    pub origins: Vec<Origin>,
}

impl Batch {
    /// The operation a sequence number belongs to; `None` for the batch itself (commit).
    pub fn origin(&self, seq: u32) -> Option<Origin> {
        let i = seq.wrapping_sub(self.first_seq).wrapping_sub(1);
        self.origins.get(i as usize).copied()
    }

    /// The sequence numbers the kernel acknowledges.
    pub fn acknowledged(&self) -> std::ops::Range<u32> {
        self.first_seq + 1..self.first_seq + 1 + self.origins.len() as u32
    }

    pub fn is_empty(&self) -> bool {
        self.origins.is_empty()
    }
}

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
    if batch.origins.len() <= ACKED_MESSAGES_MAX {
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
    let begin = w.begin(
        uapi::BATCH_BEGIN,
        nlm::REQUEST,
        first_seq,
        uapi::NFPROTO_UNSPEC,
        uapi::SUBSYS,
    );
    w.end(begin);
    let mut b = Encoder {
        w,
        seq: first_seq,
        origins: Vec::new(),
        set_id: 0,
        ack: if ack { nlm::ACK } else { 0 },
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
    let seq = b.seq + 1;
    let end = b.w.begin(
        uapi::BATCH_END,
        nlm::REQUEST,
        seq,
        uapi::NFPROTO_UNSPEC,
        uapi::SUBSYS,
    );
    b.w.end(end);
    Ok(Batch {
        bytes: b.w.buf,
        first_seq,
        origins: b.origins,
    })
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
        self.w.begin(
            (uapi::SUBSYS << 8) | kind,
            nlm::REQUEST | self.ack | flags,
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
        let create = nlm::CREATE;
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
                self.w
                    .str(uapi::rule::TABLE, crate::dataplane::nftables::names::TABLE);
                self.w.str(uapi::rule::CHAIN, name.as_str());
                self.w.end(m);
            }
            Op::AddRule { chain, rule: r } => {
                let exprs = rule::encode(family, r, interval);
                let m = self.begin(family, msg::NEWRULE, create | nlm::APPEND, origin);
                self.w
                    .str(uapi::rule::TABLE, crate::dataplane::nftables::names::TABLE);
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
                if elements
                    .iter()
                    .any(|(_, e)| e.data == Data::Verdict(Verdict::Reject))
                {
                    return Err("reject is a statement, not a verdict a map can hold");
                }
                let mut rest = elements.as_slice();
                while !rest.is_empty() {
                    let m = self.begin(family, msg::NEWSETELEM, create, origin);
                    let list = self.elements_head(set);
                    let start = self.w.written();
                    let mut taken = 0;
                    for (k, e) in rest {
                        object::element(&mut self.w, k, Some(e));
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
        self.w.str(
            uapi::elem::LIST_TABLE,
            crate::dataplane::nftables::names::TABLE,
        );
        self.w.str(uapi::elem::LIST_SET, set.as_str());
        self.w.nest(uapi::elem::LIST_ELEMENTS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::nftables::netlink::attr::messages;
    use crate::dataplane::nftables::ruleset::{Family, Rule};

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
            .filter(|m| m.flags & nlm::ACK != 0)
            .count()
    }

    #[test]
    fn every_message_is_acknowledged_up_to_the_limit_and_none_beyond() {
        let small = encode(&[flush_chains(10)], &Known::default(), 1).unwrap();
        assert_eq!((small.origins.len(), acked(&small)), (11, 11));
        let large = encode(&[flush_chains(ACKED_MESSAGES_MAX)], &Known::default(), 1).unwrap();
        assert_eq!(large.origins.len(), ACKED_MESSAGES_MAX + 1);
        assert_eq!(acked(&large), 0);
        // Either way the batch is framed and every message traces to its operation.
        assert_eq!(messages(&large.bytes).count(), ACKED_MESSAGES_MAX + 3);
        assert_eq!(
            large.origin(large.first_seq + 2),
            Some(Origin {
                transaction: 0,
                op: 1
            })
        );
    }
}
