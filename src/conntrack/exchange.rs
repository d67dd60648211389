//! The two ctnetlink conversations the reconciler has with the kernel, as state machines:
//! bytes to send come out, received datagrams go in, and each says when it is finished.
//!
//! Pure: no sockets, no clocks. `socket.rs` drives them; tests drive them with captured bytes.
//! The netlink core does the bookkeeping ([`crate::netlink::dump`] picks a dump's messages and
//! sees its end, [`crate::netlink::batch`] traces each delete's answer to its flow); what is
//! ctnetlink's own here is what a message means and what an errno says about a flow.

use super::codec::{self, Entry};
use super::flow::Flow;
use crate::cluster::IpFamily;
use crate::netlink::batch::{Acks, Answer, Batch, Until};
use crate::netlink::dump;
use crate::netlink::message::{self, FramingError};

/// How many delete requests go out in one datagram before their acknowledgements are read.
/// Small enough that the acknowledgements fit the socket's default receive buffer.
pub const DELETE_BATCH: usize = 64;

/// `ENOENT`: the entry is gone already (it expired, or the kernel replaced it).
const ENOENT: i32 = 2;

/// The kernel refused a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the kernel refused the conntrack dump: errno {errno}")]
pub struct DumpRefused {
    pub errno: i32,
}

/// A dump of one family's conntrack table.
#[derive(Debug)]
pub struct Dump {
    answer: dump::Dump,
    found: Dumped,
}

/// What a finished dump found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dumped {
    pub flows: Vec<Flow>,
    /// Entries without complete tuples.
    pub skipped: usize,
    /// Why entries could not be decoded (at most a few kept).
    pub undecodable: Vec<String>,
}

impl Dump {
    /// Starts a dump; returns it and the request to send.
    pub fn start(family: IpFamily, seq: u32) -> (Dump, Vec<u8>) {
        let dump = Dump {
            answer: dump::Dump::new(seq),
            found: Dumped::default(),
        };
        (dump, codec::dump_request(family, seq))
    }

    /// Takes one datagram of the answer. Messages answering other requests are ignored; only
    /// broken framing is an error.
    pub fn receive(&mut self, datagram: &[u8]) -> Result<(), FramingError> {
        message::each(datagram, |m| {
            if !self.answer.receive(&m) {
                return;
            }
            match codec::entry(&m) {
                Entry::Flow(flow) => self.found.flows.push(flow),
                Entry::Skipped => self.found.skipped += 1,
                Entry::Undecodable(reason) => {
                    if self.found.undecodable.len() < 3 {
                        self.found.undecodable.push(reason);
                    }
                }
            }
        })
    }

    pub fn done(&self) -> bool {
        self.answer.done()
    }

    /// What the dump found, or the kernel's refusal of it.
    pub fn finish(self) -> Result<Dumped, DumpRefused> {
        match self.answer.errno() {
            Some(errno) => Err(DumpRefused { errno }),
            None => Ok(self.found),
        }
    }
}

/// Deletes a list of entries, a batch at a time, and counts what happened to each.
#[derive(Debug)]
pub struct Deletion {
    queue: std::vec::IntoIter<Flow>,
    next_seq: u32,
    /// The answers to the batch last sent.
    sent: Option<Acks<Flow>>,
    outcome: Deleted,
}

/// What a finished deletion did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Deleted {
    /// Entries the kernel deleted.
    pub deleted: u64,
    /// Entries that were gone already (expired, or replaced by a newer entry with the same
    /// tuple, which the entry id protects).
    pub gone: u64,
    /// Entries the kernel refused to delete, with the errno.
    pub failed: Vec<(Flow, i32)>,
}

impl Deletion {
    /// Plans deleting `flows`; sequence numbers start at `first_seq`.
    pub fn new(flows: Vec<Flow>, first_seq: u32) -> Deletion {
        Deletion {
            queue: flows.into_iter(),
            next_seq: first_seq,
            sent: None,
            outcome: Deleted::default(),
        }
    }

    /// The next datagram to send: up to [`DELETE_BATCH`] requests, each asking for an
    /// acknowledgement. `None` while answers are outstanding or when nothing is left.
    pub fn next_batch(&mut self) -> Option<Vec<u8>> {
        if self.waiting() {
            return None;
        }
        let first = self.next_seq;
        let mut bytes = Vec::new();
        let mut flows = Vec::new();
        for flow in self.queue.by_ref().take(DELETE_BATCH) {
            bytes.extend(codec::delete_request(&flow, self.next_seq));
            self.next_seq = self.next_seq.wrapping_add(1);
            flows.push(flow);
        }
        if flows.is_empty() {
            return None;
        }
        let (bytes, acks) = Batch::new(bytes, first, flows).send(Until::EveryMessage);
        self.sent = Some(acks);
        Some(bytes)
    }

    /// Takes one datagram of answers; only broken framing is an error.
    pub fn receive(&mut self, datagram: &[u8]) -> Result<(), FramingError> {
        let Deletion { sent, outcome, .. } = self;
        message::each(datagram, |m| {
            let Some(Answer {
                origin: Some(flow),
                errno,
                ..
            }) = sent.as_mut().and_then(|acks| acks.receive(&m))
            else {
                return;
            };
            match errno {
                0 => outcome.deleted += 1,
                ENOENT => outcome.gone += 1,
                errno => outcome.failed.push((flow, errno)),
            }
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

    pub fn finish(self) -> Deleted {
        self.outcome
    }
}
