//! A batch: many requests sent as one datagram, and the state machine that reads the kernel's
//! answers to them, each mapped back to the operation its message came from.
//!
//! Pure: messages in, answers out, no socket. Generic over the protocol and over what an
//! operation is (an nf_tables transaction's op, a conntrack entry to delete). How the batch
//! ends is the caller's choice ([`Until`]): after every message is answered, when each asked
//! for an acknowledgement; or when a barrier request sent after the batch is answered, when
//! some messages did not ask (netlink answers in order, so nothing of the batch comes later).

use std::ops::Range;

use super::ack::Ack;
use super::message::Message;

/// The encoded messages of a batch and where each came from. Message `i` has sequence number
/// `first + i` and came from operation `origins[i]` (several messages may share one).
#[derive(Debug)]
pub struct Batch<O> {
    /// Every message, framed, to send as one datagram.
    pub bytes: Vec<u8>,
    first: u32,
    origins: Vec<O>,
    whole: Option<u32>,
}

impl<O> Batch<O> {
    pub fn new(bytes: Vec<u8>, first: u32, origins: Vec<O>) -> Batch<O> {
        Batch {
            bytes,
            first,
            origins,
            whole: None,
        }
    }

    /// Marks `seq` as the batch's own: an error answering it refuses the batch as a whole
    /// (nfnetlink answers a failed commit on its `BATCH_BEGIN`).
    pub fn refused_whole_at(self, seq: u32) -> Batch<O> {
        Batch {
            whole: Some(seq),
            ..self
        }
    }

    /// The operation a sequence number belongs to.
    pub fn origin(&self, seq: u32) -> Option<&O> {
        self.origins.get(seq.wrapping_sub(self.first) as usize)
    }

    /// The sequence numbers of the operations' messages.
    pub fn acknowledged(&self) -> Range<u32> {
        self.first..self.first.wrapping_add(self.origins.len() as u32)
    }

    /// Operation messages in the batch.
    pub fn len(&self) -> usize {
        self.origins.len()
    }

    pub fn is_empty(&self) -> bool {
        self.origins.is_empty()
    }

    /// The bytes to send, and the state machine that waits for their answers.
    pub fn send(self, until: Until) -> (Vec<u8>, Acks<O>) {
        let unanswered = self.origins.len();
        let acks = Acks {
            first: self.first,
            origins: self.origins.into_iter().map(Some).collect(),
            whole: self.whole,
            until,
            unanswered,
            done: false,
        };
        (self.bytes, acks)
    }
}

/// When a batch's answers are all in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Until {
    /// Every message asked for an acknowledgement: when each has its answer.
    EveryMessage,
    /// When the request with this sequence number, sent after the batch, is answered.
    Barrier(u32),
}

/// What the kernel answered to one message of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer<O> {
    /// The operation; `None` when the kernel refused the batch as a whole.
    pub origin: Option<O>,
    /// Positive errno; 0 for an acknowledgement.
    pub errno: i32,
    /// The kernel's extended-ack text, when it gave one.
    pub message: Option<String>,
}

/// Waits for a batch's answers.
#[derive(Debug)]
pub struct Acks<O> {
    first: u32,
    /// Taken when answered, so an answer is reported once.
    origins: Vec<Option<O>>,
    whole: Option<u32>,
    until: Until,
    unanswered: usize,
    done: bool,
}

impl<O> Acks<O> {
    /// Takes one received message; returns the answer it is to one of the batch's messages.
    /// Answers to other requests, and messages that are not answers, give `None`.
    pub fn receive(&mut self, m: &Message<'_>) -> Option<Answer<O>> {
        let ack = Ack::of(m)?;
        if self.until == Until::Barrier(ack.seq) {
            self.done = true;
            return None;
        }
        let origin = if self.whole == Some(ack.seq) {
            None
        } else {
            let slot = self
                .origins
                .get_mut(ack.seq.wrapping_sub(self.first) as usize)?;
            let origin = slot.take()?;
            self.unanswered -= 1;
            Some(origin)
        };
        Some(Answer {
            origin,
            errno: ack.errno,
            message: ack.message,
        })
    }

    pub fn done(&self) -> bool {
        match self.until {
            Until::EveryMessage => self.unanswered == 0,
            Until::Barrier(_) => self.done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::message::messages;

    fn answer(seq: u32, errno: i32, text: Option<&str>) -> Vec<u8> {
        Ack {
            seq,
            errno,
            message: text.map(str::to_owned),
        }
        .encode()
    }

    /// Feeds a datagram; returns the answers it held.
    fn feed<O>(acks: &mut Acks<O>, datagram: &[u8]) -> Vec<Answer<O>> {
        messages(datagram)
            .filter_map(|m| acks.receive(&m))
            .collect()
    }

    #[test]
    fn an_error_names_its_operation_and_the_barrier_ends_the_wait() {
        let batch = Batch::new(vec![1, 2, 3], 101, vec!["add", "delete"]).refused_whole_at(100);
        assert_eq!(batch.acknowledged(), 101..103);
        assert_eq!(batch.origin(102), Some(&"delete"));
        assert_eq!(batch.origin(100), None);
        let (bytes, mut acks) = batch.send(Until::Barrier(104));
        assert_eq!(bytes, [1, 2, 3]);
        let got = feed(
            &mut acks,
            &[answer(101, 0, None), answer(102, 2, Some("No such table"))].concat(),
        );
        assert_eq!(got[1].origin, Some("delete"));
        assert_eq!(
            (got[1].errno, got[1].message.as_deref()),
            (2, Some("No such table"))
        );
        assert_eq!(got[0].errno, 0);
        assert!(
            !acks.done(),
            "every message answered, but the barrier is not"
        );
        assert!(feed(&mut acks, &answer(104, 0, None)).is_empty());
        assert!(acks.done());
    }

    #[test]
    fn an_error_on_the_batch_s_own_sequence_number_refuses_it_whole() {
        let (_, mut acks) = Batch::new(Vec::new(), 2, vec!["add"])
            .refused_whole_at(1)
            .send(Until::Barrier(4));
        let got = feed(
            &mut acks,
            &[answer(1, 40, None), answer(4, 0, None)].concat(),
        );
        assert_eq!(
            got,
            [Answer {
                origin: None,
                errno: 40,
                message: None
            }]
        );
        assert!(acks.done());
    }

    #[test]
    fn without_a_barrier_the_batch_ends_when_every_message_is_answered_once() {
        let (_, mut acks) = Batch::new(Vec::new(), 7, vec!['a', 'b']).send(Until::EveryMessage);
        let got = feed(
            &mut acks,
            &[answer(7, 0, None), answer(7, 1, None), answer(99, 0, None)].concat(),
        );
        assert_eq!(
            got.len(),
            1,
            "a repeated or foreign answer is not the batch's"
        );
        assert!(!acks.done());
        let got = feed(&mut acks, &answer(8, 1, None));
        assert_eq!((got[0].origin, got[0].errno), (Some('b'), 1));
        assert!(acks.done());
        let (_, empty) = Batch::<char>::new(Vec::new(), 1, Vec::new()).send(Until::EveryMessage);
        assert!(empty.done());
    }
}
