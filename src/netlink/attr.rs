//! Reads netlink attributes: an iterator over the attributes of a message body or a nest, and
//! lookups of one attribute by type, that never panic on kernel input.
//!
//! Pure byte handling. Values are returned as slices of the input, so reading a large dump
//! copies nothing; `be32`, `be64` and `string` read the value shapes netfilter uses.

use netlink_packet_core::NLA_TYPE_MASK;

/// The attributes in `bytes`, as (type without the nested and byte-order flags, value). Stops
/// at the first malformed one.
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

pub fn find_be32(bytes: &[u8], kind: u16) -> Option<u32> {
    find(bytes, kind).and_then(be32)
}

pub fn find_str(bytes: &[u8], kind: u16) -> Option<&str> {
    find(bytes, kind).and_then(string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::writer::Writer;

    #[test]
    fn attributes_round_trip_with_padding_and_nests() {
        let mut w = Writer::default();
        w.str(1, "abc");
        let n = w.nest(4);
        w.be32(1, 0x0102_0304);
        w.nest_end(n);
        w.be64(5, 7);
        assert_eq!(find_str(&w.buf, 1), Some("abc"));
        assert_eq!(
            find(&w.buf, 4).and_then(|n| find_be32(n, 1)),
            Some(0x0102_0304)
        );
        assert_eq!(find(&w.buf, 5).and_then(be64), Some(7));
        let kinds: Vec<u16> = attrs(&w.buf).map(|(k, _)| k).collect();
        assert_eq!(kinds, [1, 4, 5], "the nested flag is masked off");
    }

    #[test]
    fn malformed_input_ends_the_iteration() {
        assert_eq!(attrs(&[200, 0, 1, 0, 1]).count(), 0);
        assert_eq!(attrs(&[2, 0, 1, 0]).count(), 0);
        assert_eq!(
            attrs(&[5, 0, 1, 0, 9]).count(),
            1,
            "a last attribute without padding"
        );
        assert_eq!(be32(&[1, 2, 3]), None);
        assert_eq!(string(&[0xff, 0]), None);
    }
}
