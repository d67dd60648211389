//! Appends netlink messages and their attributes to one buffer: the `nlmsghdr`, whatever
//! family header follows it, and attributes (plain, string, nested), each aligned to four
//! bytes as the kernel reads them.
//!
//! Pure byte handling. Integers are written in network byte order (`be32`, `be64`), which is
//! what netfilter expects; a protocol that wants host order writes its bytes with
//! [`Writer::bytes`]. Nothing here knows a protocol: [`super::nfnetlink`] adds the nfgenmsg
//! header on top.

use netlink_packet_core::NLA_F_NESTED;

/// The netlink message header's length (`NLMSG_HDRLEN`).
pub const HEADER_LEN: usize = 16;

/// Appends messages to one buffer, without an allocation per attribute.
#[derive(Debug, Default)]
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

    /// Starts a message with its netlink header; returns where it starts, for [`Writer::end`].
    /// The port id is 0: the kernel's.
    pub fn begin(&mut self, kind: u16, flags: u16, seq: u32) -> usize {
        let start = self.buf.len();
        self.buf.extend_from_slice(&0u32.to_ne_bytes()); // length, patched by `end`
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(&flags.to_ne_bytes());
        self.buf.extend_from_slice(&seq.to_ne_bytes());
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        start
    }

    /// Appends bytes as they are: a family header right after [`Writer::begin`] (nfgenmsg,
    /// genlmsghdr), which the kernel expects unframed.
    pub fn raw(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Closes the message started at `start`: writes its length.
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

    pub fn be32(&mut self, kind: u16, value: u32) {
        self.bytes(kind, &value.to_be_bytes());
    }

    pub fn be64(&mut self, kind: u16, value: u64) {
        self.bytes(kind, &value.to_be_bytes());
    }

    /// A NUL-terminated string, as the kernel's `NLA_STRING` and `NLA_NUL_STRING` policies
    /// both accept.
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

    /// Closes a nest. A nest longer than an attribute can say is the caller's bug: callers
    /// cut long lists well below it.
    pub fn nest_end(&mut self, start: usize) {
        let len = self.buf.len() - start;
        debug_assert!(len <= usize::from(u16::MAX), "nest of {len} bytes");
        self.buf[start..start + 2].copy_from_slice(&(len as u16).to_ne_bytes());
    }

    /// Bytes written so far (to cut long lists by size).
    pub fn written(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_framed_with_its_length_and_attributes_are_padded() {
        let mut w = Writer::default();
        let m = w.begin(0x0a01, 0x0305, 9);
        w.raw(&[2, 0, 0, 0]);
        w.str(1, "ab");
        w.be32(2, 0x0102_0304);
        w.end(m);
        #[rustfmt::skip]
        let want: Vec<u8> = [
            &36u32.to_ne_bytes()[..], &0x0a01u16.to_ne_bytes(), &0x0305u16.to_ne_bytes(),
            &9u32.to_ne_bytes(), &[0, 0, 0, 0],
            &[2, 0, 0, 0],
            &7u16.to_ne_bytes(), &1u16.to_ne_bytes(), b"ab\0", &[0],
            &8u16.to_ne_bytes(), &2u16.to_ne_bytes(), &[1, 2, 3, 4],
        ]
        .concat();
        assert_eq!(w.buf, want);
    }

    #[test]
    fn a_nest_carries_the_nested_flag_and_the_length_of_its_content() {
        let mut w = Writer::default();
        let n = w.nest(3);
        w.be64(1, 5);
        w.nest_end(n);
        assert_eq!(&w.buf[..2], &16u16.to_ne_bytes());
        assert_eq!(&w.buf[2..4], &(3 | NLA_F_NESTED).to_ne_bytes());
        assert_eq!(&w.buf[8..16], &5u64.to_be_bytes());
        assert_eq!(w.written(), 16);
    }
}
