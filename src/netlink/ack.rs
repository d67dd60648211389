//! Reads the kernel's answer to a request: an `NLMSG_ERROR` message, which is an
//! acknowledgement when its code is 0 and an error otherwise, with the request it answers and,
//! with extended acknowledgements on, the kernel's reason as text.
//!
//! Pure, never panics on kernel input. By hand because `netlink-packet-core` keeps the echoed
//! request as opaque bytes and reads no extended-ack attribute (`NLMSGERR_ATTR_MSG`).

use netlink_packet_core::{NLM_F_ACK_TLVS, NLM_F_CAPPED, NLMSG_ERROR};

use super::attr;
use super::message::Message;
use super::writer::HEADER_LEN;

/// `NLMSGERR_ATTR_MSG` (`linux/netlink.h`): the extended-ack text.
const ERR_ATTR_MSG: u16 = 1;

/// An acknowledgement or an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ack {
    /// The sequence number of the request answered (from the echoed request header).
    pub seq: u32,
    /// Positive errno; 0 for an acknowledgement.
    pub errno: i32,
    /// The kernel's extended-ack text, when it gave one.
    pub message: Option<String>,
}

impl Ack {
    /// `m` read as an answer; `None` when it is not an `NLMSG_ERROR` or is too short.
    pub fn of(m: &Message<'_>) -> Option<Ack> {
        if m.kind != NLMSG_ERROR {
            return None;
        }
        let code = i32::from_ne_bytes(m.body.get(..4)?.try_into().ok()?);
        // The echoed request: its header only when capped, else the whole request.
        let echoed = m.body.get(4..4 + HEADER_LEN)?;
        let seq = u32::from_ne_bytes(echoed[8..12].try_into().ok()?);
        let echoed_len = if m.flags & NLM_F_CAPPED != 0 {
            HEADER_LEN
        } else {
            u32::from_ne_bytes(echoed[0..4].try_into().ok()?) as usize
        };
        let message = if m.flags & NLM_F_ACK_TLVS != 0 {
            m.body
                .get(4 + echoed_len.next_multiple_of(4)..)
                .and_then(|tlvs| attr::find_str(tlvs, ERR_ATTR_MSG))
                .map(str::to_owned)
        } else {
            None
        };
        Some(Ack {
            seq,
            errno: code.saturating_abs(),
            message,
        })
    }

    /// The `NLMSG_ERROR` the kernel would send for this answer, capped (the request's header
    /// only), with the text as an extended-ack attribute: for tests of the state machines.
    #[cfg(test)]
    pub fn encode(&self) -> Vec<u8> {
        use super::writer::Writer;
        let mut w = Writer::default();
        let flags = NLM_F_CAPPED | self.message.as_ref().map_or(0, |_| NLM_F_ACK_TLVS);
        let m = w.begin(NLMSG_ERROR, flags, self.seq);
        w.raw(&(-self.errno).to_ne_bytes());
        let mut echoed = [0u8; HEADER_LEN];
        echoed[0..4].copy_from_slice(&20u32.to_ne_bytes());
        echoed[8..12].copy_from_slice(&self.seq.to_ne_bytes());
        w.raw(&echoed);
        if let Some(text) = &self.message {
            w.str(ERR_ATTR_MSG, text);
        }
        w.end(m);
        w.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::message::messages;
    use crate::netlink::writer::Writer;

    fn read(bytes: &[u8]) -> Option<Ack> {
        Ack::of(&messages(bytes).next()?)
    }

    #[test]
    fn an_error_reads_back_with_its_sequence_number_errno_and_text() {
        let error = Ack {
            seq: 41,
            errno: 2,
            message: Some("No such table".into()),
        };
        assert_eq!(read(&error.encode()), Some(error));
        let ack = Ack {
            seq: 42,
            errno: 0,
            message: None,
        };
        assert_eq!(read(&ack.encode()), Some(ack));
    }

    #[test]
    fn an_uncapped_error_skips_the_whole_echoed_request_before_its_text() {
        // The request echoed whole: a 24-byte message, then the extended-ack attributes.
        let mut w = Writer::default();
        let m = w.begin(NLMSG_ERROR, NLM_F_ACK_TLVS, 5);
        w.raw(&(-17i32).to_ne_bytes());
        let request = w.begin(0x0a06, 0x0405, 5);
        w.be32(1, 9);
        w.end(request);
        w.str(ERR_ATTR_MSG, "File exists");
        w.end(m);
        let got = read(&w.buf).unwrap();
        assert_eq!((got.seq, got.errno), (5, 17));
        assert_eq!(got.message.as_deref(), Some("File exists"));
    }

    #[test]
    fn other_messages_and_short_errors_are_not_answers() {
        let mut w = Writer::default();
        let m = w.begin(3, 2, 1);
        w.end(m);
        assert_eq!(read(&w.buf), None, "NLMSG_DONE");
        let mut w = Writer::default();
        let m = w.begin(NLMSG_ERROR, 0, 1);
        w.raw(&[0; 8]);
        w.end(m);
        assert_eq!(read(&w.buf), None, "no echoed header");
    }
}
