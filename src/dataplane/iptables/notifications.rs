//! What the monitor watches of the iptables mode on the nft back end, where iptables-nft keeps
//! each iptables table as an nf_tables table (`ip nat` and so on): [`IptablesNft`].

use super::names;
use crate::dataplane::monitor::Watch;
use crate::metrics::RepairSeries;
use crate::nft::backend::netlink::uapi;

/// In the `ip`/`ip6` mangle, nat and filter tables: a deleted table, a deleted chain of ours,
/// or a deleted rule in or jumping to one. Other programs add and remove their own rules in
/// these tables all the time (CNI plugins, container runtimes), and rules added beside ours do
/// not break ours, so only these count.
#[derive(Clone, Copy, Debug)]
pub struct IptablesNft;

impl Watch for IptablesNft {
    fn as_str(&self) -> &'static str {
        "iptables-nft chains"
    }

    fn repairs(&self) -> RepairSeries {
        RepairSeries::Iptables
    }

    fn concerns(&self, msg: u16, table: Option<&str>, attrs: &[u8]) -> bool {
        matches!(table, Some("mangle" | "nat" | "filter"))
            && match msg {
                uapi::msg::DELTABLE => true,
                uapi::msg::DELCHAIN | uapi::msg::DELRULE => names_our_chain(attrs),
                _ => false,
            }
    }
}

/// Whether a chain or rule notification names a `KUBE-*` chain of ours anywhere: as the chain
/// itself (`NFTA_CHAIN_NAME`, `NFTA_RULE_CHAIN`) or as a jump target inside the rule's
/// expressions. Read as the NUL-terminated strings that start with `KUBE-`, so nested
/// expression attributes need no decoding.
fn names_our_chain(attrs: &[u8]) -> bool {
    const PREFIX: &[u8] = b"KUBE-";
    let mut rest = attrs;
    while let Some(at) = rest.windows(PREFIX.len()).position(|w| w == PREFIX) {
        let tail = &rest[at..];
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        if let Ok(name) = std::str::from_utf8(&tail[..end])
            && names::ours(name)
        {
            return true;
        }
        rest = &tail[PREFIX.len()..];
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::monitor::Events;
    use crate::dataplane::monitor::notices::{generation, object};
    use crate::netlink::nfnetlink;
    use crate::netlink::writer::Writer;

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
            Events::new(&IptablesNft).datagram(&w.buf).len()
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
}
