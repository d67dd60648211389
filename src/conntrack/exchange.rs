//! The two ctnetlink conversations the reconciler has with the kernel, as state machines:
//! bytes to send come out, decoded replies go in, and each says when it is finished.
//!
//! Pure: no sockets, no clocks. `socket.rs` drives them; tests drive them with captured bytes.

use std::collections::BTreeMap;

use super::codec::{self, Reply};
use super::flow::Flow;
use crate::cluster::IpFamily;

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
    seq: u32,
    flows: Vec<Flow>,
    skipped: usize,
    undecodable: Vec<String>,
    done: bool,
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
            seq,
            flows: Vec::new(),
            skipped: 0,
            undecodable: Vec::new(),
            done: false,
        };
        (dump, codec::dump_request(family, seq))
    }

    /// Takes the replies of one datagram. Replies to other requests are ignored.
    pub fn receive(&mut self, replies: Vec<Reply>) -> Result<(), DumpRefused> {
        for reply in replies {
            if reply.seq() != self.seq || self.done {
                continue;
            }
            match reply {
                Reply::Flow { flow, .. } => self.flows.push(flow),
                Reply::Skipped { .. } => self.skipped += 1,
                Reply::Undecodable { reason, .. } => {
                    if self.undecodable.len() < 3 {
                        self.undecodable.push(reason);
                    }
                }
                Reply::Done { .. } | Reply::Ack { .. } => self.done = true,
                Reply::Error { errno, .. } => return Err(DumpRefused { errno }),
            }
        }
        Ok(())
    }

    pub fn done(&self) -> bool {
        self.done
    }

    pub fn finish(self) -> Dumped {
        Dumped {
            flows: self.flows,
            skipped: self.skipped,
            undecodable: self.undecodable,
        }
    }
}

/// Deletes a list of entries, a batch at a time, and counts what happened to each.
#[derive(Debug)]
pub struct Deletion {
    queue: std::vec::IntoIter<Flow>,
    next_seq: u32,
    /// Sent and not yet answered, by sequence number.
    awaiting: BTreeMap<u32, Flow>,
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
            awaiting: BTreeMap::new(),
            outcome: Deleted::default(),
        }
    }

    /// The next datagram to send: up to [`DELETE_BATCH`] requests. `None` while answers are
    /// outstanding or when nothing is left.
    pub fn next_batch(&mut self) -> Option<Vec<u8>> {
        if !self.awaiting.is_empty() {
            return None;
        }
        let mut bytes = Vec::new();
        for flow in self.queue.by_ref().take(DELETE_BATCH) {
            let seq = self.next_seq;
            self.next_seq = self.next_seq.wrapping_add(1);
            bytes.extend(codec::delete_request(&flow, seq));
            self.awaiting.insert(seq, flow);
        }
        (!bytes.is_empty()).then_some(bytes)
    }

    /// Takes the replies of one datagram.
    pub fn receive(&mut self, replies: Vec<Reply>) {
        for reply in replies {
            let seq = reply.seq();
            let Some(flow) = self.awaiting.remove(&seq) else {
                continue;
            };
            match reply {
                Reply::Ack { .. } => self.outcome.deleted += 1,
                Reply::Error { errno: ENOENT, .. } => self.outcome.gone += 1,
                Reply::Error { errno, .. } => self.outcome.failed.push((flow, errno)),
                _ => {
                    // Not an answer to a delete; keep waiting for it.
                    self.awaiting.insert(seq, flow);
                }
            }
        }
    }

    /// Whether answers to the last batch are still outstanding.
    pub fn waiting(&self) -> bool {
        !self.awaiting.is_empty()
    }

    /// The next sequence number nobody used.
    pub fn next_seq(&self) -> u32 {
        self.next_seq
    }

    pub fn finish(self) -> Deleted {
        self.outcome
    }
}
