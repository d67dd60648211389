//! What `--cleanup` removes of nftables: our tables `ip`/`ip6 kube-proxy-rs` and upstream's
//! `ip`/`ip6 kube-proxy`, whole.
//!
//! The decision ([`nft_script`]) is pure and tested on captured output; [`remove`] runs `nft`.

use crate::dataplane::cleanup::Report;
use crate::dataplane::tool::{self, Launcher};
use crate::nft::TABLE;

/// nftables tables removed: ours, then upstream's.
const NFT_TABLES: [(&str, &str); 4] = [
    ("ip", TABLE),
    ("ip6", TABLE),
    ("ip", "kube-proxy"),
    ("ip6", "kube-proxy"),
];

/// Deletes the tables that exist, adding them (or nft's refusal) to `report`.
pub fn remove(tools: &Launcher, report: &mut Report) {
    match tool::run_if_installed(tools.command("nft").args(["list", "tables"]), None) {
        Ok(Some(tables)) => {
            let (script, removed) = nft_script(&tables);
            if !script.is_empty() {
                match tool::run_if_installed(tools.command("nft").args(["-f", "-"]), Some(&script))
                {
                    Ok(_) => {
                        for table in &removed {
                            report.removed(removed_table(table), 1);
                        }
                    }
                    Err(e) => report.errors.push(format!("nft: {e}")),
                }
            }
        }
        Ok(None) => tracing::debug!("--cleanup: no nft here"),
        Err(e) => report.errors.push(format!("nft list tables: {e}")),
    }
}

/// How a [`Report`] names the table `family name` (`ip kube-proxy-rs`) once removed.
pub fn removed_table(table: &str) -> String {
    format!("nftables table {table}")
}

/// From `nft list tables` output, the `delete table` script for the tables we remove, and
/// their names.
pub fn nft_script(list_tables: &str) -> (String, Vec<String>) {
    let present: Vec<(&str, &str)> = list_tables
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("table")).then_some(())?;
            Some((w.next()?, w.next()?))
        })
        .collect();
    let mut script = String::new();
    let mut removed = Vec::new();
    for (family, name) in NFT_TABLES {
        if present.contains(&(family, name)) {
            script.push_str(&format!("delete table {family} {name}\n"));
            removed.push(format!("{family} {name}"));
        }
    }
    (script, removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_of_ours_or_upstreams_means_no_script() {
        assert_eq!(nft_script("table inet filter\n").0, "");
    }

    #[test]
    fn only_our_and_upstreams_nft_tables_are_deleted() {
        let (script, removed) = nft_script(
            "table ip kube-proxy-rs\ntable ip filter\ntable ip6 kube-proxy\ntable inet kube-proxy\n",
        );
        assert_eq!(
            script,
            "delete table ip kube-proxy-rs\ndelete table ip6 kube-proxy\n"
        );
        assert_eq!(removed, vec!["ip kube-proxy-rs", "ip6 kube-proxy"]);
    }
}
