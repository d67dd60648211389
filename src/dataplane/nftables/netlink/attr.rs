//! netlink framing for nf_tables: messages with the nfnetlink header, attributes, nests, and
//! a reader over attributes that never panics on kernel input.
//!
//! Pure byte handling. We frame by hand instead of through `netlink-packet-core`'s `Nla`
//! traits because a cold sync writes a quarter of a million elements: appending to one buffer
//! costs no allocation per attribute.

use super::uapi::{NLA_F_NESTED, NLA_TYPE_MASK};

/// netlink message header (16) + nfgenmsg (4).
pub const HEADER_LEN: usize = 20;

/// Appends nf_tables messages to one buffer.
#[derive(Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

fn pad(buf: &mut Vec<u8>) {
    while !buf.len().is_multiple_of(4) {
        buf.push(0);
    }
}

impl Writer {
    pub fn with_capacity(n: usize) -> Writer {
        Writer {
            buf: Vec::with_capacity(n),
        }
    }

    /// Starts a message; returns where it starts, for [`Writer::end`].
    pub fn begin(&mut self, kind: u16, flags: u16, seq: u32, family: u8, res_id: u16) -> usize {
        let start = self.buf.len();
        self.buf.extend_from_slice(&0u32.to_ne_bytes()); // length, patched by `end`
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(&flags.to_ne_bytes());
        self.buf.extend_from_slice(&seq.to_ne_bytes());
        self.buf.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
        self.buf.push(family);
        self.buf.push(0); // NFNETLINK_V0
        self.buf.extend_from_slice(&res_id.to_be_bytes());
        start
    }

    pub fn end(&mut self, start: usize) {
        let len = (self.buf.len() - start) as u32;
        self.buf[start..start + 4].copy_from_slice(&len.to_ne_bytes());
    }

    pub fn bytes(&mut self, kind: u16, value: &[u8]) {
        let len = (4 + value.len()) as u16;
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(value);
        pad(&mut self.buf);
    }

    pub fn u32(&mut self, kind: u16, value: u32) {
        self.bytes(kind, &value.to_be_bytes());
    }

    pub fn u64(&mut self, kind: u16, value: u64) {
        self.bytes(kind, &value.to_be_bytes());
    }

    /// A NUL-terminated string, as the kernel's `NLA_STRING` policies expect from nft.
    pub fn str(&mut self, kind: u16, value: &str) {
        let len = (4 + value.len() + 1) as u16;
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(value.as_bytes());
        self.buf.push(0);
        pad(&mut self.buf);
    }

    /// Starts a nested attribute; returns where it starts, for [`Writer::nest_end`].
    pub fn nest(&mut self, kind: u16) -> usize {
        let start = self.buf.len();
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf
            .extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        start
    }

    /// Closes a nest. A nest longer than an attribute can say is the caller's bug: element
    /// lists are cut well below it.
    pub fn nest_end(&mut self, start: usize) {
        let len = self.buf.len() - start;
        debug_assert!(len <= usize::from(u16::MAX), "nest of {len} bytes");
        self.buf[start..start + 2].copy_from_slice(&(len as u16).to_ne_bytes());
    }

    /// Bytes written so far (to cut element lists by size).
    pub fn written(&self) -> usize {
        self.buf.len()
    }
}

/// The attributes in `bytes`, as (type without flags, value). Stops at the first malformed one.
pub fn attrs(bytes: &[u8]) -> Attrs<'_> {
    Attrs { rest: bytes }
}

pub struct Attrs<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Attrs<'a> {
    type Item = (u16, &'a [u8]);
    fn next(&mut self) -> Option<(u16, &'a [u8])> {
        if self.rest.len() < 4 {
            return None;
        }
        let len = usize::from(u16::from_ne_bytes([self.rest[0], self.rest[1]]));
        let kind = u16::from_ne_bytes([self.rest[2], self.rest[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > self.rest.len() {
            self.rest = &[];
            return None;
        }
        let value = &self.rest[4..len];
        let advance = len.next_multiple_of(4).min(self.rest.len());
        self.rest = &self.rest[advance..];
        Some((kind, value))
    }
}

/// The first attribute of `kind` in `bytes`.
pub fn find(bytes: &[u8], kind: u16) -> Option<&[u8]> {
    attrs(bytes).find(|(k, _)| *k == kind).map(|(_, v)| v)
}

pub fn be32(value: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(value.get(..4)?.try_into().ok()?))
}

pub fn be64(value: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(value.get(..8)?.try_into().ok()?))
}

/// A string attribute without its NUL.
pub fn string(value: &[u8]) -> Option<&str> {
    let end = value.iter().position(|b| *b == 0).unwrap_or(value.len());
    std::str::from_utf8(&value[..end]).ok()
}

pub fn find_u32(bytes: &[u8], kind: u16) -> Option<u32> {
    find(bytes, kind).and_then(be32)
}

pub fn find_str(bytes: &[u8], kind: u16) -> Option<&str> {
    find(bytes, kind).and_then(string)
}

/// One message of a datagram: type, flags, sequence number, and the body after the netlink
/// header (the nfgenmsg header included).
pub struct Message<'a> {
    pub kind: u16,
    pub flags: u16,
    pub seq: u32,
    pub body: &'a [u8],
}

/// The messages of a datagram. Stops at the first malformed one.
pub fn messages(datagram: &[u8]) -> impl Iterator<Item = Message<'_>> {
    let mut rest = datagram;
    std::iter::from_fn(move || {
        if rest.len() < 16 {
            return None;
        }
        let len = u32::from_ne_bytes(rest[0..4].try_into().ok()?) as usize;
        if len < 16 || len > rest.len() {
            rest = &[];
            return None;
        }
        let m = Message {
            kind: u16::from_ne_bytes([rest[4], rest[5]]),
            flags: u16::from_ne_bytes([rest[6], rest[7]]),
            seq: u32::from_ne_bytes(rest[8..12].try_into().ok()?),
            body: &rest[16..len],
        };
        rest = &rest[len.next_multiple_of(4).min(rest.len())..];
        Some(m)
    })
}

/// The attributes of an nf_tables message body (after the 4-byte nfgenmsg header).
pub fn body_attrs(body: &[u8]) -> &[u8] {
    body.get(4..).unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip_with_padding_and_nests() {
        let mut w = Writer::default();
        let m = w.begin(0x0a00, 1, 7, 2, 0);
        w.str(1, "abc");
        let n = w.nest(4);
        w.u32(1, 0x0102_0304);
        w.nest_end(n);
        w.end(m);
        let msgs: Vec<_> = messages(&w.buf).collect();
        assert_eq!(msgs.len(), 1);
        assert_eq!((msgs[0].kind, msgs[0].seq), (0x0a00, 7));
        let body = body_attrs(msgs[0].body);
        assert_eq!(find_str(body, 1), Some("abc"));
        assert_eq!(
            find(body, 4).and_then(|n| find_u32(n, 1)),
            Some(0x0102_0304)
        );
    }

    #[test]
    fn malformed_input_ends_the_iteration() {
        assert_eq!(attrs(&[200, 0, 1, 0, 1]).count(), 0);
        assert_eq!(attrs(&[2, 0, 1, 0]).count(), 0);
        assert_eq!(messages(&[255; 15]).count(), 0);
    }
}
