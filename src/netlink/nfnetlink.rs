//! nfnetlink, netfilter's layer over `NETLINK_NETFILTER` that nf_tables and ctnetlink share:
//! the nfgenmsg header after every netlink header, message types as subsystem and message,
//! and the `BATCH_BEGIN` / `BATCH_END` frame a transaction travels in
//! (`include/uapi/linux/netfilter/nfnetlink.h`).
//!
//! Pure byte handling and constants; these numbers are the kernel's ABI.

use netlink_packet_core::NLM_F_REQUEST;
use netlink_sys::protocols::NETLINK_NETFILTER;

use super::socket::Protocol;
use super::writer::Writer;

/// `NFNETLINK_V0`: the nfgenmsg version.
pub const NFNETLINK_V0: u8 = 0;
/// `NFNL_MSG_BATCH_BEGIN` / `NFNL_MSG_BATCH_END`.
pub const BATCH_BEGIN: u16 = 16;
pub const BATCH_END: u16 = 17;
/// `NFNLGRP_NFTABLES`: the multicast group of nf_tables changes.
pub const NFNLGRP_NFTABLES: u32 = 7;
/// `AF_UNSPEC`: the family of a message about no family (a batch frame, a generation).
pub const UNSPEC: u8 = 0;

/// A `NETLINK_NETFILTER` protocol, named for errors as `socket` and `name` say.
pub const fn protocol(socket: &'static str, name: &'static str) -> Protocol {
    Protocol {
        number: NETLINK_NETFILTER,
        socket,
        name,
    }
}

/// The message type of message `msg` of subsystem `subsys` (`NFNL_SUBSYS_*`).
pub const fn kind(subsys: u16, msg: u16) -> u16 {
    (subsys << 8) | msg
}

/// The subsystem of a message type.
pub const fn subsystem(kind: u16) -> u16 {
    kind >> 8
}

/// The message of a message type, without its subsystem.
pub const fn message(kind: u16) -> u16 {
    kind & 0xff
}

/// Starts a message with its netlink and nfgenmsg headers; close it with [`Writer::end`].
pub fn begin(w: &mut Writer, kind: u16, flags: u16, seq: u32, family: u8, res_id: u16) -> usize {
    let start = w.begin(kind, flags, seq);
    w.raw(&[family, NFNETLINK_V0]);
    w.raw(&res_id.to_be_bytes());
    start
}

/// Opens a batch for subsystem `subsys`: the kernel applies what follows, up to
/// [`batch_end`], as one transaction.
pub fn batch_begin(w: &mut Writer, seq: u32, subsys: u16) {
    let m = begin(w, BATCH_BEGIN, NLM_F_REQUEST, seq, UNSPEC, subsys);
    w.end(m);
}

/// Closes a batch opened by [`batch_begin`].
pub fn batch_end(w: &mut Writer, seq: u32, subsys: u16) {
    let m = begin(w, BATCH_END, NLM_F_REQUEST, seq, UNSPEC, subsys);
    w.end(m);
}

/// The family in a message body's nfgenmsg header.
pub fn family(body: &[u8]) -> Option<u8> {
    body.first().copied()
}

/// The attributes of a message body, after its nfgenmsg header.
pub fn attributes(body: &[u8]) -> &[u8] {
    body.get(4..).unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::attr::find_str;
    use crate::netlink::message::messages;

    #[test]
    fn the_nfgenmsg_header_follows_the_netlink_header() {
        let mut w = Writer::default();
        let m = begin(&mut w, kind(10, 6), NLM_F_REQUEST, 3, 2, 0x0102);
        w.str(1, "t");
        w.end(m);
        let msg = messages(&w.buf).next().unwrap();
        assert_eq!((subsystem(msg.kind), message(msg.kind)), (10, 6));
        assert_eq!(
            &msg.body[..4],
            &[2, NFNETLINK_V0, 1, 2],
            "res_id in network order"
        );
        assert_eq!(family(msg.body), Some(2));
        assert_eq!(find_str(attributes(msg.body), 1), Some("t"));
    }

    #[test]
    fn a_batch_is_framed_by_begin_and_end_naming_the_subsystem() {
        let mut w = Writer::default();
        batch_begin(&mut w, 1, 10);
        batch_end(&mut w, 2, 10);
        let got: Vec<_> = messages(&w.buf).map(|m| (m.kind, m.seq, m.body)).collect();
        assert_eq!(
            got,
            [
                (BATCH_BEGIN, 1, &[0, 0, 0, 10][..]),
                (BATCH_END, 2, &[0, 0, 0, 10][..])
            ]
        );
        assert_eq!(attributes(&[0, 0]), &[] as &[u8]);
    }
}
