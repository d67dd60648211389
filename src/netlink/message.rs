//! Reads the messages of a received datagram: each one's netlink header and body, in order,
//! stopping at the first whose framing is broken and saying where.
//!
//! Pure byte handling, never panics on kernel input. The body is handed back as a slice: what
//! follows the netlink header is the protocol's to read (its family header, then attributes).

use super::writer::HEADER_LEN;

/// One message of a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    /// `nlmsg_type`: `NLMSG_ERROR`, `NLMSG_DONE`, ..., or the protocol's own.
    pub kind: u16,
    pub flags: u16,
    pub seq: u32,
    /// `nlmsg_pid`: in a notification, the port id of the socket whose request caused it.
    pub port_id: u32,
    /// What follows the netlink header (a family header included).
    pub body: &'a [u8],
    /// The whole message, header included, for decoders that want it (`netlink-packet-*`).
    pub bytes: &'a [u8],
}

/// A datagram whose netlink framing is inconsistent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("netlink message at offset {offset} claims {length} bytes; {available} are left")]
pub struct FramingError {
    pub offset: usize,
    pub length: usize,
    pub available: usize,
}

/// The messages of `datagram`, in order.
pub fn messages(datagram: &[u8]) -> Messages<'_> {
    Messages {
        datagram,
        at: 0,
        broken: None,
    }
}

/// Hands every message of `datagram` to `each`, for callers that cannot use part of a
/// datagram: broken framing is an error, after the messages before the break.
pub fn each<'a>(datagram: &'a [u8], each: impl FnMut(Message<'a>)) -> Result<(), FramingError> {
    let mut all = messages(datagram);
    all.by_ref().for_each(each);
    all.broken.map_or(Ok(()), Err)
}

/// Iterates the messages of a datagram. Ends at the first message whose length runs past the
/// datagram or is shorter than a header; [`Messages::broken`] then tells where. Callers that
/// cannot use a partial datagram check it; the others just stop reading.
pub struct Messages<'a> {
    datagram: &'a [u8],
    at: usize,
    broken: Option<FramingError>,
}

impl Messages<'_> {
    /// Where the framing broke, once the iteration ended there.
    pub fn broken(&self) -> Option<&FramingError> {
        self.broken.as_ref()
    }
}

impl<'a> Iterator for Messages<'a> {
    type Item = Message<'a>;
    fn next(&mut self) -> Option<Message<'a>> {
        let rest = self.datagram.get(self.at..).filter(|r| !r.is_empty())?;
        let len = match rest.first_chunk::<4>() {
            Some(len) if rest.len() >= HEADER_LEN => u32::from_ne_bytes(*len) as usize,
            _ => 0,
        };
        if len < HEADER_LEN || len > rest.len() {
            self.broken = Some(FramingError {
                offset: self.at,
                length: len,
                available: rest.len(),
            });
            self.at = self.datagram.len();
            return None;
        }
        let bytes = &rest[..len];
        self.at = (self.at + len.next_multiple_of(4)).min(self.datagram.len());
        Some(Message {
            kind: u16::from_ne_bytes([bytes[4], bytes[5]]),
            flags: u16::from_ne_bytes([bytes[6], bytes[7]]),
            seq: u32::from_ne_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]),
            port_id: u32::from_ne_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]),
            body: &bytes[HEADER_LEN..],
            bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::writer::Writer;

    fn two_messages() -> Vec<u8> {
        let mut w = Writer::default();
        let m = w.begin(0x0a00, 1, 7);
        w.str(1, "abc");
        w.end(m);
        let m = w.begin(3, 2, 8);
        w.end(m);
        w.buf
    }

    #[test]
    fn every_message_of_a_datagram_is_read_with_its_header() {
        let bytes = two_messages();
        let mut it = messages(&bytes);
        let first = it.next().unwrap();
        assert_eq!((first.kind, first.flags, first.seq), (0x0a00, 1, 7));
        assert_eq!(first.body.len(), 8);
        assert_eq!(first.bytes.len(), 24);
        let second = it.next().unwrap();
        assert_eq!((second.kind, second.seq, second.body), (3, 8, &[][..]));
        assert!(it.next().is_none());
        assert!(it.broken().is_none());
    }

    #[test]
    fn broken_framing_ends_the_iteration_and_says_where() {
        let bytes = two_messages();
        let mut it = messages(&bytes[..bytes.len() - 4]);
        assert_eq!(it.by_ref().count(), 1);
        assert_eq!(
            it.broken(),
            Some(&FramingError {
                offset: 24,
                length: 0,
                available: 12
            })
        );
        let mut it = messages(&[255; 15]);
        assert_eq!(it.by_ref().count(), 0);
        assert_eq!(it.broken().map(|b| b.length), Some(0));
        let mut empty = messages(&[]);
        assert!(empty.next().is_none() && empty.broken().is_none());
    }

    #[test]
    fn each_message_is_handed_over_and_then_the_break_is_an_error() {
        let bytes = two_messages();
        let mut seqs = Vec::new();
        assert_eq!(each(&bytes, |m| seqs.push(m.seq)), Ok(()));
        let cut = each(&bytes[..bytes.len() - 4], |m| seqs.push(m.seq));
        assert_eq!(cut.map_err(|e| e.offset), Err(24));
        assert_eq!(seqs, [7, 8, 7]);
    }
}
