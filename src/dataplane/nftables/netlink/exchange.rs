//! The two conversations with nf_tables, as state machines over received datagrams: a batch
//! and its acknowledgements, and a dump. Bytes in, outcome out; no sockets.
//!
//! Pure, never panics on kernel input. A batch is followed by a barrier request (`GETGEN`):
//! netlink delivers in order, so once the barrier is answered every answer to the batch,
//! including a commit error addressed to `BATCH_BEGIN`, has arrived.

use super::attr::{self, Message, messages};
use super::batch::{Batch, Origin};
use super::uapi::nlm;

/// One message the kernel refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The operation; `None` when the kernel refused the batch as a whole (at commit).
    pub origin: Option<Origin>,
    /// Positive errno.
    pub errno: i32,
    /// The kernel's extended-ack text, when it gave one.
    pub message: Option<String>,
}

/// An error or acknowledgement: sequence number, errno (0: success), extended-ack text.
fn error_of(m: &Message<'_>) -> Option<(u32, i32, Option<String>)> {
    if m.kind != nlm::ERROR {
        return None;
    }
    let code = i32::from_ne_bytes(m.body.get(..4)?.try_into().ok()?);
    // The echoed request: its header only when capped, else the whole request.
    let echoed = m.body.get(4..20)?;
    let seq = u32::from_ne_bytes(echoed[8..12].try_into().ok()?);
    let echoed_len = if m.flags & nlm::CAPPED != 0 {
        16
    } else {
        u32::from_ne_bytes(echoed[0..4].try_into().ok()?) as usize
    };
    let text = if m.flags & nlm::ACK_TLVS != 0 {
        m.body
            .get(4 + echoed_len.next_multiple_of(4)..)
            .and_then(|tlvs| attr::find_str(tlvs, nlm::ERR_ATTR_MSG))
            .map(str::to_owned)
    } else {
        None
    };
    Some((seq, -code, text))
}

/// Waits for a batch's answers up to its barrier.
#[derive(Debug)]
pub struct Acks<'a> {
    batch: &'a Batch,
    barrier: u32,
    done: bool,
    failures: Vec<Failure>,
}

impl<'a> Acks<'a> {
    pub fn new(batch: &'a Batch, barrier: u32) -> Acks<'a> {
        Acks {
            batch,
            barrier,
            done: false,
            failures: Vec::new(),
        }
    }

    pub fn receive(&mut self, datagram: &[u8]) {
        for m in messages(datagram) {
            let Some((seq, errno, message)) = error_of(&m) else {
                continue;
            };
            if seq == self.barrier {
                self.done = true;
            } else if errno != 0 {
                let in_batch = self.batch.acknowledged().contains(&seq);
                if in_batch || seq == self.batch.first_seq {
                    self.failures.push(Failure {
                        origin: self.batch.origin(seq),
                        errno,
                        message,
                    });
                }
            }
        }
    }

    pub fn done(&self) -> bool {
        self.done
    }

    /// What the kernel refused; empty: the batch was committed.
    pub fn finish(self) -> Vec<Failure> {
        self.failures
    }
}

/// A dump's messages, owned, and how it ended.
#[derive(Debug, Default)]
pub struct Dump {
    seq: u32,
    /// Bodies (nfgenmsg header included) of the messages of the requested type.
    pub bodies: Vec<Vec<u8>>,
    done: bool,
    /// The kernel refused the dump (positive errno).
    pub errno: Option<i32>,
    /// The kernel changed the objects while dumping: the caller dumps again.
    pub interrupted: bool,
}

impl Dump {
    pub fn new(seq: u32) -> Dump {
        Dump {
            seq,
            ..Dump::default()
        }
    }

    pub fn receive(&mut self, datagram: &[u8]) {
        for m in messages(datagram) {
            if m.seq != self.seq || self.done {
                continue;
            }
            if m.flags & nlm::DUMP_INTR != 0 {
                self.interrupted = true;
            }
            match m.kind {
                nlm::DONE => self.done = true,
                nlm::ERROR => {
                    let errno = error_of(&m).map_or(0, |(_, e, _)| e);
                    if errno != 0 {
                        self.errno = Some(errno);
                    }
                    self.done = true;
                }
                nlm::NOOP => {}
                _ => self.bodies.push(m.body.to_vec()),
            }
        }
    }

    pub fn done(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::nftables::diff::{Op, Transaction};
    use crate::dataplane::nftables::netlink::batch::{Known, encode};
    use crate::dataplane::nftables::ruleset::Family;

    /// An `NLMSG_ERROR` answering `seq` with `errno` (0: an acknowledgement), capped, with an
    /// extended-ack text.
    fn answer(seq: u32, errno: i32, text: Option<&str>) -> Vec<u8> {
        let mut tlvs = Vec::new();
        if let Some(t) = text {
            let len = (4 + t.len() + 1) as u16;
            tlvs.extend_from_slice(&len.to_ne_bytes());
            tlvs.extend_from_slice(&nlm::ERR_ATTR_MSG.to_ne_bytes());
            tlvs.extend_from_slice(t.as_bytes());
            tlvs.push(0);
            tlvs.resize(tlvs.len().next_multiple_of(4), 0);
        }
        let len = 16 + 4 + 16 + tlvs.len();
        let mut out = Vec::new();
        out.extend_from_slice(&(len as u32).to_ne_bytes());
        out.extend_from_slice(&nlm::ERROR.to_ne_bytes());
        let flags = nlm::CAPPED | if text.is_some() { nlm::ACK_TLVS } else { 0 };
        out.extend_from_slice(&flags.to_ne_bytes());
        out.extend_from_slice(&seq.to_ne_bytes());
        out.extend_from_slice(&0u32.to_ne_bytes());
        out.extend_from_slice(&(-errno).to_ne_bytes());
        let mut echoed = [0u8; 16];
        echoed[0..4].copy_from_slice(&20u32.to_ne_bytes());
        echoed[8..12].copy_from_slice(&seq.to_ne_bytes());
        out.extend_from_slice(&echoed);
        out.extend_from_slice(&tlvs);
        out
    }

    #[test]
    fn an_error_names_its_operation_and_the_barrier_ends_the_wait() {
        let t = Transaction {
            family: Family::Ip,
            ops: vec![Op::AddTable, Op::DeleteTable],
        };
        let batch = encode(&[t], &Known::default(), 100).expect("encodes");
        assert_eq!(batch.acknowledged(), 101..103);
        let mut acks = Acks::new(&batch, 104);
        acks.receive(&[answer(101, 0, None), answer(102, 2, Some("No such table"))].concat());
        assert!(!acks.done());
        acks.receive(&answer(104, 0, None));
        assert!(acks.done());
        assert_eq!(
            acks.finish(),
            [Failure {
                origin: Some(Origin {
                    transaction: 0,
                    op: 1
                }),
                errno: 2,
                message: Some("No such table".into()),
            }]
        );
    }

    #[test]
    fn a_commit_error_is_the_batch_s_own() {
        let t = Transaction {
            family: Family::Ip,
            ops: vec![Op::AddTable],
        };
        let batch = encode(&[t], &Known::default(), 1).expect("encodes");
        let mut acks = Acks::new(&batch, 3);
        acks.receive(&[answer(1, 40, None), answer(3, 0, None)].concat());
        let failures = acks.finish();
        assert_eq!(failures.len(), 1);
        assert_eq!((failures[0].origin, failures[0].errno), (None, 40));
    }
}
