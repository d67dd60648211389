//! The pure half of the monitor: which nf_tables notifications are about a mode's objects
//! ([`Watch`], which the mode declares), and the transactions they add up to ([`Events`]),
//! tested on notification bytes.

use std::fmt;

use crate::metrics::RepairSeries;
use crate::netlink::attr::{find_be32, find_str};
use crate::netlink::message::messages;
use crate::netlink::nfnetlink;
use crate::nft::backend::netlink::uapi::{self, GEN_PROC_PID};

/// Who committed a transaction, as its generation notice says: the committing thread's id
/// (`NFTA_GEN_PROC_PID`, in the kernel's initial pid namespace) and the port id of the netlink
/// socket that sent it (the notice's `nlmsg_pid`, the same in every pid namespace).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Committer {
    pub pid: u32,
    pub port_id: u32,
}

/// Which nf_tables objects hold a mode's rules: the notifications that count as a change to
/// them. A mode whose rules live in nf_tables declares one
/// ([`crate::dataplane::mode::Mode::watch`]).
pub trait Watch: Sync + fmt::Debug {
    /// What is watched, as a log line names it.
    fn as_str(&self) -> &'static str;

    /// The repairs counter the full syncs it starts count in.
    fn repairs(&self) -> RepairSeries;

    /// Whether object notification `msg` of the `ip` or `ip6` family (the only families the
    /// monitor reads), about table `table` (every object notification carries its table as
    /// attribute 1), with attributes `attrs`, is about the mode's objects.
    fn concerns(&self, msg: u16, table: Option<&str>, attrs: &[u8]) -> bool;
}

/// Our table, `ip` and `ip6 kube-proxy-rs` (the nf_tables library's), where the nftables,
/// ipvs and userspace modes' rules live: every object of it.
#[derive(Clone, Copy, Debug)]
pub struct OurTable;

impl Watch for OurTable {
    fn as_str(&self) -> &'static str {
        "nftables table"
    }

    fn repairs(&self) -> RepairSeries {
        RepairSeries::Nftables
    }

    fn concerns(&self, _: u16, table: Option<&str>, _: &[u8]) -> bool {
        table == Some(crate::nft::TABLE)
    }
}

/// Whether object notification `msg` (its nfgenmsg and attributes in `body`) is about what
/// `watch` names.
fn concerns(watch: &dyn Watch, msg: u16, body: &[u8]) -> bool {
    let family = nfnetlink::family(body);
    if !matches!(family, Some(uapi::NFPROTO_IPV4 | uapi::NFPROTO_IPV6)) {
        return false;
    }
    let attrs = nfnetlink::attributes(body);
    watch.concerns(msg, find_str(attrs, 1), attrs)
}

/// The state of reading nf_tables notifications: whether the transaction being notified
/// touched our objects.
#[derive(Debug)]
pub struct Events {
    watch: &'static dyn Watch,
    touched: bool,
}

impl Events {
    pub fn new(watch: &'static dyn Watch) -> Events {
        Events {
            watch,
            touched: false,
        }
    }

    /// Feeds one datagram of notifications; returns who committed each finished transaction
    /// that touched our objects (a pid of 0 when the kernel named none).
    pub fn datagram(&mut self, bytes: &[u8]) -> Vec<Committer> {
        let mut found = Vec::new();
        for m in messages(bytes) {
            if nfnetlink::subsystem(m.kind) != uapi::SUBSYS {
                continue;
            }
            let msg = nfnetlink::message(m.kind);
            if msg == uapi::msg::NEWGEN {
                if std::mem::take(&mut self.touched) {
                    let body = nfnetlink::attributes(m.body);
                    found.push(Committer {
                        pid: find_be32(body, GEN_PROC_PID).unwrap_or(0),
                        port_id: m.port_id,
                    });
                }
                continue;
            }
            self.touched |= concerns(self.watch, msg, m.body);
        }
        found
    }
}

/// Notification bytes as the kernel sends them, for the tests of every [`Watch`].
#[cfg(test)]
pub(crate) mod notices {
    use crate::netlink::nfnetlink;
    use crate::netlink::writer::Writer;
    use crate::nft::backend::netlink::uapi::{self, GEN_PROC_PID};

    /// A notification of message `msg` for table `table` of `family`.
    pub(crate) fn object(w: &mut Writer, msg: u16, family: u8, table: &str) {
        let m = nfnetlink::begin(w, nfnetlink::kind(uapi::SUBSYS, msg), 0, 0, family, 0);
        w.str(1, table);
        w.str(2, "x");
        w.end(m);
    }

    pub(crate) fn generation(w: &mut Writer, pid: u32) {
        generation_from(w, pid, 0);
    }

    /// A generation notice naming thread `pid` and, in its header, the sender's `port_id`.
    pub(crate) fn generation_from(w: &mut Writer, pid: u32, port_id: u32) {
        let kind = nfnetlink::kind(uapi::SUBSYS, uapi::msg::NEWGEN);
        let m = nfnetlink::begin(w, kind, 0, 0, 0, 0);
        w.buf[m + 12..m + 16].copy_from_slice(&port_id.to_ne_bytes());
        w.be32(1, 42);
        w.be32(GEN_PROC_PID, pid);
        w.str(3, "nft");
        w.end(m);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::notices::{generation, generation_from, object};
    use crate::netlink::writer::Writer;

    #[test]
    fn transactions_touching_our_table_are_attributed_to_their_process() {
        let mut w = Writer::default();
        object(
            &mut w,
            uapi::msg::NEWCHAIN,
            uapi::NFPROTO_IPV4,
            crate::nft::TABLE,
        );
        generation(&mut w, 19986);
        // Another table, and our table's name in another family: not ours.
        object(&mut w, uapi::msg::NEWTABLE, uapi::NFPROTO_IPV6, "x");
        object(&mut w, uapi::msg::DELTABLE, 1, crate::nft::TABLE);
        generation(&mut w, 20011);
        object(
            &mut w,
            uapi::msg::DELSET,
            uapi::NFPROTO_IPV4,
            crate::nft::TABLE,
        );
        object(
            &mut w,
            uapi::msg::DELTABLE,
            uapi::NFPROTO_IPV6,
            crate::nft::TABLE,
        );
        generation_from(&mut w, 20039, 3_000_000_001);
        let mut events = Events::new(&OurTable);
        let pids = |c: Vec<Committer>| c.iter().map(|c| (c.pid, c.port_id)).collect::<Vec<_>>();
        assert_eq!(
            pids(events.datagram(&w.buf)),
            vec![(19986, 0), (20039, 3_000_000_001)]
        );
    }

    #[test]
    fn a_transaction_spread_over_datagrams_is_one() {
        let mut first = Writer::default();
        object(
            &mut first,
            uapi::msg::NEWSETELEM,
            uapi::NFPROTO_IPV6,
            crate::nft::TABLE,
        );
        let mut second = Writer::default();
        generation(&mut second, 7);
        let mut events = Events::new(&OurTable);
        assert!(events.datagram(&first.buf).is_empty());
        assert_eq!(
            events.datagram(&second.buf),
            vec![Committer { pid: 7, port_id: 0 }]
        );
    }
}
