//! The pure half of the monitor: which nf_tables notifications are about our objects
//! ([`Watch`], one per mode), and the transactions they add up to ([`Events`]), tested on
//! notification bytes.

use crate::dataplane::iptables::names as iptables_names;
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

/// Which nf_tables objects are ours to watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watch {
    /// nftables mode: every object of `ip` and `ip6 kube-proxy-rs`.
    NftablesTable,
    /// iptables mode on the nft back end: in the `ip`/`ip6` mangle, nat and filter tables, a
    /// deleted table, a deleted chain of ours, or a deleted rule in or jumping to one. Other
    /// programs add and remove their own rules in these tables all the time (CNI plugins,
    /// container runtimes), and rules added beside ours do not break ours, so only these count.
    IptablesNft,
}

impl Watch {
    /// What is watched, as a log line names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Watch::NftablesTable => "nftables table",
            Watch::IptablesNft => "iptables-nft chains",
        }
    }

    /// Whether object notification `msg` (its nfgenmsg and attributes in `body`) is about ours.
    fn concerns(self, msg: u16, body: &[u8]) -> bool {
        let family = nfnetlink::family(body);
        if !matches!(family, Some(uapi::NFPROTO_IPV4 | uapi::NFPROTO_IPV6)) {
            return false;
        }
        // Every object notification carries its table as attribute 1 (`NFTA_TABLE_NAME`,
        // `NFTA_CHAIN_TABLE`, `NFTA_RULE_TABLE`, `NFTA_SET_TABLE`, ...).
        let attrs = nfnetlink::attributes(body);
        let table = find_str(attrs, 1);
        match self {
            Watch::NftablesTable => table == Some(crate::nft::TABLE),
            Watch::IptablesNft => {
                matches!(table, Some("mangle" | "nat" | "filter"))
                    && match msg {
                        uapi::msg::DELTABLE => true,
                        uapi::msg::DELCHAIN | uapi::msg::DELRULE => names_our_chain(attrs),
                        _ => false,
                    }
            }
        }
    }
}

/// Whether a chain or rule notification names a `KUBE-*` chain of iptables mode anywhere: as
/// the chain itself (`NFTA_CHAIN_NAME`, `NFTA_RULE_CHAIN`) or as a jump target inside the
/// rule's expressions. Read as the NUL-terminated strings that start with `KUBE-`, so nested
/// expression attributes need no decoding.
fn names_our_chain(attrs: &[u8]) -> bool {
    const PREFIX: &[u8] = b"KUBE-";
    let mut rest = attrs;
    while let Some(at) = rest.windows(PREFIX.len()).position(|w| w == PREFIX) {
        let tail = &rest[at..];
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        if let Ok(name) = std::str::from_utf8(&tail[..end])
            && iptables_names::ours(name)
        {
            return true;
        }
        rest = &tail[PREFIX.len()..];
    }
    false
}

/// The state of reading nf_tables notifications: whether the transaction being notified
/// touched our objects.
#[derive(Debug)]
pub struct Events {
    watch: Watch,
    touched: bool,
}

impl Events {
    pub fn new(watch: Watch) -> Events {
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
            self.touched |= self.watch.concerns(msg, m.body);
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::netlink::writer::Writer;

    /// A notification of message `msg` for table `table` of `family`.
    fn object(w: &mut Writer, msg: u16, family: u8, table: &str) {
        let m = nfnetlink::begin(w, nfnetlink::kind(uapi::SUBSYS, msg), 0, 0, family, 0);
        w.str(1, table);
        w.str(2, "x");
        w.end(m);
    }

    fn generation(w: &mut Writer, pid: u32) {
        generation_from(w, pid, 0);
    }

    /// A generation notice naming thread `pid` and, in its header, the sender's `port_id`.
    fn generation_from(w: &mut Writer, pid: u32, port_id: u32) {
        let kind = nfnetlink::kind(uapi::SUBSYS, uapi::msg::NEWGEN);
        let m = nfnetlink::begin(w, kind, 0, 0, 0, 0);
        w.buf[m + 12..m + 16].copy_from_slice(&port_id.to_ne_bytes());
        w.be32(1, 42);
        w.be32(GEN_PROC_PID, pid);
        w.str(3, "nft");
        w.end(m);
    }

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
        let mut events = Events::new(Watch::NftablesTable);
        let pids = |c: Vec<Committer>| c.iter().map(|c| (c.pid, c.port_id)).collect::<Vec<_>>();
        assert_eq!(
            pids(events.datagram(&w.buf)),
            vec![(19986, 0), (20039, 3_000_000_001)]
        );
    }

    /// A rule notification in `table`'s `chain`, with `target` as a jump inside its
    /// expressions (nested, as the kernel sends them).
    fn rule(w: &mut Writer, msg: u16, table: &str, chain: &str, target: Option<&str>) {
        let m = nfnetlink::begin(
            w,
            nfnetlink::kind(uapi::SUBSYS, msg),
            0,
            0,
            uapi::NFPROTO_IPV4,
            0,
        );
        w.str(1, table);
        w.str(2, chain);
        let exprs = w.nest(4);
        let elem = w.nest(1);
        w.str(1, "immediate");
        if let Some(t) = target {
            let data = w.nest(2);
            w.str(2, t);
            w.nest_end(data);
        }
        w.nest_end(elem);
        w.nest_end(exprs);
        w.end(m);
    }

    #[test]
    fn iptables_nft_counts_deletions_of_our_chains_rules_and_jumps_and_of_tables() {
        let count = |build: &dyn Fn(&mut Writer)| {
            let mut w = Writer::default();
            build(&mut w);
            generation(&mut w, 5);
            Events::new(Watch::IptablesNft).datagram(&w.buf).len()
        };
        let del = uapi::msg::DELRULE;
        // A firewall reload: `iptables -t nat -F` deletes our rules, `-X` our chains.
        assert_eq!(count(&|w| rule(w, del, "nat", "KUBE-SERVICES", None)), 1);
        assert_eq!(
            count(&|w| rule(w, uapi::msg::DELCHAIN, "filter", "KUBE-SVC-ABC", None)),
            1
        );
        // Our jump from a built-in chain deleted.
        assert_eq!(
            count(&|w| rule(w, del, "nat", "PREROUTING", Some("KUBE-SERVICES"))),
            1
        );
        // `nft flush ruleset` deletes the tables.
        assert_eq!(
            count(&|w| object(w, uapi::msg::DELTABLE, uapi::NFPROTO_IPV6, "filter")),
            1
        );
        // Not ours: another program's rules, rules added beside ours, kubelet's chains, tables
        // iptables does not use, our nftables table.
        assert_eq!(count(&|w| rule(w, del, "nat", "DOCKER", Some("RETURN"))), 0);
        assert_eq!(
            count(&|w| rule(w, uapi::msg::NEWRULE, "nat", "KUBE-SERVICES", None)),
            0
        );
        assert_eq!(
            count(&|w| rule(w, del, "nat", "POSTROUTING", Some("KUBE-MARK-DROP"))),
            0
        );
        assert_eq!(count(&|w| rule(w, del, "raw", "KUBE-SERVICES", None)), 0);
        assert_eq!(
            count(&|w| object(
                w,
                uapi::msg::DELTABLE,
                uapi::NFPROTO_IPV4,
                crate::nft::TABLE
            )),
            0
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
        let mut events = Events::new(Watch::NftablesTable);
        assert!(events.datagram(&first.buf).is_empty());
        assert_eq!(
            events.datagram(&second.buf),
            vec![Committer { pid: 7, port_id: 0 }]
        );
    }
}
