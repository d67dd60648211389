//! A dump, or any request answered by objects then an acknowledgement: the state machine
//! that picks the answer's messages out of received datagrams and tells when it has ended.
//!
//! Pure: messages in, verdicts out, no socket. The objects themselves are the caller's to
//! read ([`Dump::receive`] says which messages they are), so a large dump is decoded as it
//! arrives and never held as bytes.

use netlink_packet_core::{NLM_F_DUMP_INTR, NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP};

use super::ack::Ack;
use super::message::Message;

/// The answer to the request with one sequence number.
#[derive(Debug, Default)]
pub struct Dump {
    seq: u32,
    done: bool,
    errno: Option<i32>,
    message: Option<String>,
    interrupted: bool,
}

impl Dump {
    /// Waits for the answer to the request sent with `seq`.
    pub fn new(seq: u32) -> Dump {
        Dump {
            seq,
            ..Dump::default()
        }
    }

    /// Takes one received message; `true` when it is one of the answer's objects, for the
    /// caller to read. Messages of other requests, and any after the end, are not.
    pub fn receive(&mut self, m: &Message<'_>) -> bool {
        if m.seq != self.seq || self.done {
            return false;
        }
        if m.flags & NLM_F_DUMP_INTR != 0 {
            self.interrupted = true;
        }
        match m.kind {
            NLMSG_DONE => self.done = true,
            NLMSG_ERROR => {
                if let Some(ack) = Ack::of(m).filter(|a| a.errno != 0) {
                    self.errno = Some(ack.errno);
                    self.message = ack.message;
                }
                self.done = true;
            }
            NLMSG_NOOP => {}
            _ => return true,
        }
        false
    }

    pub fn done(&self) -> bool {
        self.done
    }

    /// The kernel refused the request (positive errno).
    pub fn errno(&self) -> Option<i32> {
        self.errno
    }

    /// The kernel's extended-ack text with its refusal, when it gave one.
    pub fn message(&self) -> Option<String> {
        self.message.clone()
    }

    /// The kernel changed the objects while dumping them: what came is not a consistent
    /// picture, and the caller dumps again.
    pub fn interrupted(&self) -> bool {
        self.interrupted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::message::messages;
    use crate::netlink::writer::Writer;

    fn message(w: &mut Writer, kind: u16, flags: u16, seq: u32) {
        let m = w.begin(kind, flags, seq);
        w.be32(1, seq);
        w.end(m);
    }

    /// Feeds a datagram; returns the sequence numbers of the objects picked.
    fn feed(dump: &mut Dump, datagram: &[u8]) -> Vec<u32> {
        messages(datagram)
            .filter(|m| dump.receive(m))
            .map(|m| m.seq)
            .collect()
    }

    #[test]
    fn a_dump_takes_its_own_objects_until_done() {
        let mut w = Writer::default();
        message(&mut w, 0x0a04, 2, 5);
        message(&mut w, 0x0a04, 2, 6);
        message(&mut w, NLMSG_NOOP, 0, 5);
        message(&mut w, 0x0a04, 2 | NLM_F_DUMP_INTR, 5);
        let mut dump = Dump::new(5);
        assert_eq!(feed(&mut dump, &w.buf), [5, 5]);
        assert!(!dump.done() && dump.interrupted());
        let mut w = Writer::default();
        message(&mut w, NLMSG_DONE, 2, 5);
        message(&mut w, 0x0a04, 2, 5);
        assert!(feed(&mut dump, &w.buf).is_empty(), "nothing after the end");
        assert!(dump.done());
        assert_eq!(dump.errno(), None);
    }

    #[test]
    fn an_error_ends_the_answer_and_an_acknowledgement_is_no_error() {
        let refused = Ack {
            seq: 3,
            errno: 2,
            message: Some("no such thing".into()),
        };
        let mut dump = Dump::new(3);
        assert!(feed(&mut dump, &refused.encode()).is_empty());
        assert!(dump.done());
        assert_eq!(dump.errno(), Some(2));
        assert_eq!(dump.message().as_deref(), Some("no such thing"));
        let acked = Ack {
            errno: 0,
            message: None,
            ..refused
        };
        let mut dump = Dump::new(3);
        feed(&mut dump, &acked.encode());
        assert!(dump.done());
        assert_eq!(dump.errno(), None);
    }
}
