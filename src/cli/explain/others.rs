//! Other tables' base chains on the packet's path: a firewall, an upstream kube-proxy's
//! leftover table, iptables-nft's `ip nat` and `ip filter`. They see the packet too, before or
//! after ours, and can drop or rewrite it; `explain` traces only our table, so it names them.
//! (Rules of iptables-legacy live outside nf_tables and are not seen here.)

use crate::cluster::IpFamily;
use crate::nft::TABLE;
use crate::nft::backend::BaseChainSummary;
use crate::nft::ruleset::{Hook, Ruleset};

/// One line per base chain of another table at a hook of the packet's path (the output path
/// for a packet from the node, the input or forward path otherwise), in hook order, then
/// priority, saying whether it runs before or after ours.
pub(super) fn on_path(
    ours: Option<&Ruleset>,
    chains: &[BaseChainSummary],
    family: IpFamily,
    from_node: bool,
) -> Vec<String> {
    let own_family = match family {
        IpFamily::V4 => "ip",
        IpFamily::V6 => "ip6",
    };
    let hooks: &[Hook] = if from_node {
        &[Hook::Output, Hook::Postrouting]
    } else {
        &[
            Hook::Prerouting,
            Hook::Forward,
            Hook::Input,
            Hook::Postrouting,
        ]
    };
    let mut found: Vec<&BaseChainSummary> = chains
        .iter()
        .filter(|c| c.family == own_family || c.family == "inet")
        .filter(|c| !(c.family == own_family && c.table == TABLE))
        .filter(|c| hooks.contains(&c.hook))
        .collect();
    let order = |h: Hook| hooks.iter().position(|x| *x == h).unwrap_or(usize::MAX);
    found.sort_by_key(|c| (order(c.hook), c.priority, c.table.clone(), c.chain.clone()));
    found
        .into_iter()
        .map(|c| {
            let mine = ours.and_then(|r| {
                r.chains
                    .values()
                    .filter_map(|ch| ch.base.as_ref())
                    .filter(|b| b.hook == c.hook)
                    .map(|b| b.priority)
                    .min()
            });
            let relation = match mine {
                None => String::new(),
                Some(p) if c.priority < p => ", before ours".into(),
                Some(p) if c.priority == p => {
                    ", at our priority (which of the two runs first is not defined)".into()
                }
                Some(_) => ", after ours".into(),
            };
            format!(
                "{} {} chain {}: {} at {}, priority {}{}{relation}",
                c.family,
                c.table,
                c.chain,
                c.kind,
                c.hook.as_str(),
                c.priority,
                if c.drops { ", policy drop" } else { "" },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::IpFamily;
    use crate::dataplane::nft_table::skeleton::BASE_CHAINS;
    use crate::nft::ruleset::Family;

    fn chain(family: &'static str, table: &str, hook: Hook, priority: i32) -> BaseChainSummary {
        BaseChainSummary {
            family,
            table: table.into(),
            chain: "c".into(),
            kind: "filter".into(),
            hook,
            priority,
            drops: false,
        }
    }

    #[test]
    fn other_tables_on_the_path_are_named_in_order_with_ours_left_out() {
        // Our table with every base chain a mode hooks in it (the nftables mode hooks them
        // all): all of it that `on_path` reads.
        let mut table = Ruleset::empty(Family::of(IpFamily::V4));
        table.add_base_chains(&BASE_CHAINS);
        let ours = &table;
        let ours_at_prerouting = ours
            .chains
            .values()
            .filter_map(|c| c.base.as_ref())
            .filter(|b| b.hook == Hook::Prerouting)
            .map(|b| b.priority)
            .min()
            .expect("our table hooks prerouting");
        let chains = vec![
            chain("ip", TABLE, Hook::Prerouting, ours_at_prerouting),
            chain("ip", "kube-proxy", Hook::Prerouting, ours_at_prerouting - 1),
            BaseChainSummary {
                drops: true,
                ..chain("inet", "firewalld", Hook::Forward, 10)
            },
            chain("ip6", "other-family", Hook::Prerouting, -300),
            chain("ip", "output-only", Hook::Output, 0),
        ];
        let lines = on_path(Some(ours), &chains, IpFamily::V4, false);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("ip kube-proxy chain c: filter at prerouting")
                && lines[0].ends_with("before ours"),
            "{lines:?}"
        );
        assert!(
            lines[1].contains("inet firewalld") && lines[1].contains("policy drop"),
            "{lines:?}"
        );
        let from_node = on_path(Some(ours), &chains, IpFamily::V4, true);
        assert_eq!(from_node.len(), 1);
        assert!(from_node[0].contains("output-only"), "{from_node:?}");
        assert!(on_path(Some(ours), &chains, IpFamily::V6, false)[0].contains("other-family"));
    }
}
