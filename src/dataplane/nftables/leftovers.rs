//! The nftables tables proxies leave on a node: upstream's nftables mode's table `kube-proxy`
//! and our table (`kube-proxy-rs`, of the nftables, ipvs and userspace modes), each in the `ip`
//! and `ip6` families. Read over netlink; removed in one `nft -f` transaction.

use crate::dataplane::cleanup::Report;
use crate::dataplane::leftovers::{Kind, Leftover, OUR_TABLE, State};
use crate::dataplane::tool::{self, Launcher};
use crate::nft;
use crate::nft::backend::netlink::Netlink;

/// Upstream kube-proxy's nftables table (both `ip` and `ip6`).
const UPSTREAM_TABLE_NAME: &str = "kube-proxy";

/// Upstream's nftables mode's table, which no mode of ours owns.
pub const UPSTREAM_TABLE: State = State::new("upstream's nftables table");

/// See the module doc.
pub struct Tables;

impl Kind for Tables {
    fn states(&self) -> &'static [State] {
        &[UPSTREAM_TABLE, OUR_TABLE]
    }

    fn read(&self, tools: &Launcher) -> Vec<Leftover> {
        let mut nft = match tools.netns() {
            Some(name) => Netlink::in_netns(name),
            None => Netlink::new(),
        };
        match nft.tables() {
            Ok(tables) => found(tables.iter().map(|(f, n)| (*f, n.as_str()))),
            Err(e) => {
                tracing::debug!(error = %crate::causes::one_line(&e), "leftovers: cannot list nftables tables");
                Vec::new()
            }
        }
    }

    fn remove(&self, left: &[Leftover], tools: &Launcher, report: &mut Report) {
        let tables: Vec<String> = left.iter().map(|l| l.key.clone()).collect();
        let script: String = tables
            .iter()
            .map(|t| format!("delete table {t}\n"))
            .collect();
        match tool::run_if_installed(tools.command("nft").args(["-f", "-"]), Some(&script)) {
            Ok(Some(_)) => {
                for table in &tables {
                    report.removed(super::cleanup::removed_table(table), 1);
                }
            }
            Ok(None) => report.errors.push("nft is not installed".to_owned()),
            Err(e) => report.errors.push(format!("nft: {e}")),
        }
    }
}

/// Of the nftables tables listed as (family, name), upstream's and ours in `ip` and `ip6`, in
/// the order listed.
pub fn found<'a>(tables: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<Leftover> {
    tables
        .into_iter()
        .filter(|(family, _)| matches!(*family, "ip" | "ip6"))
        .filter_map(|(family, name)| {
            let state = match name {
                UPSTREAM_TABLE_NAME => UPSTREAM_TABLE,
                nft::TABLE => OUR_TABLE,
                _ => return None,
            };
            Some(Leftover {
                state,
                key: format!("{family} {name}"),
                name: format!("nftables table {family} {name}"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::leftovers::find;
    use crate::dataplane::mode::Mode;

    /// The tables of a node upstream's nftables mode ran on, beside ours and someone else's.
    const NODE: [(&str, &str); 5] = [
        ("ip", "kube-proxy"),
        ("ip6", "kube-proxy"),
        ("inet", "kube-proxy"),
        ("ip", "kube-proxy-rs"),
        ("ip", "filter"),
    ];

    fn names(left: &[Leftover]) -> Vec<String> {
        left.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn upstream_s_and_our_tables_of_ip_and_ip6_are_found() {
        assert_eq!(
            names(&found(NODE)),
            [
                "nftables table ip kube-proxy",
                "nftables table ip6 kube-proxy",
                "nftables table ip kube-proxy-rs",
            ]
        );
        assert!(found([("ip", "filter"), ("inet", "kube-proxy-rs")]).is_empty());
    }

    #[test]
    fn in_nftables_mode_upstream_s_tables_are_left_and_ours_is_not() {
        assert_eq!(
            names(&find(super::super::mode::Nftables.owns(), &found(NODE))),
            [
                "nftables table ip kube-proxy",
                "nftables table ip6 kube-proxy"
            ]
        );
    }
}
