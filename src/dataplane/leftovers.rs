//! After this proxy's first successful sync: the rules another proxy left on the node, removed.
//!
//! A node moved from upstream kube-proxy (or from another mode of ours) keeps what the old
//! proxy programmed: upstream's nftables table `kube-proxy`, its `KUBE-*` iptables chains, IPVS
//! mode's `kube-ipvs0` and virtual servers, our own table from a mode that used it. Those rules
//! still see Service traffic and may answer it first, with endpoints nobody keeps current.
//! Upstream removes the other modes' rules at every start, before its first sync; this proxy
//! removes them once its own rules are in place (its first successful sync), so the node is
//! never without Service rules in between, and says what it removed in one line. Only what
//! this proxy's mode does not use goes: `KUBE-*` chains are its own in iptables mode,
//! `kube-ipvs0` in IPVS mode, and our `kube-proxy-rs` table in the nftables, IPVS and
//! userspace modes. (Two proxies must not run on one node: the other would put its rules back
//! at its next sync. The node opt-in of `deploy/components/node-opt-in` keeps them apart.)
//!
//! [`find`] decides over what [`read`] saw, and is pure; [`remove`] and
//! [`remove_after_first_sync`] act on the kernel.

use std::fmt;

use tokio::sync::watch;

use super::cleanup::Report;
use super::ipvs::backend::link;
use super::tool::{self, Launcher};
use super::{iptables, ipvs};
use crate::nft;
use crate::nft::backend::netlink::Netlink;
use crate::sync::Status;

/// Upstream kube-proxy's nftables table (both `ip` and `ip6`).
const UPSTREAM_TABLE: &str = "kube-proxy";

/// What of a node's Service state a mode programs itself: never a leftover while it runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Owned {
    /// Our nftables table, `kube-proxy-rs`, in both families.
    pub our_table: bool,
    /// The `KUBE-*` iptables chains.
    pub kube_chains: bool,
    /// The `kube-ipvs0` link.
    pub ipvs_link: bool,
}

/// What the kernel holds that [`find`] looks at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// nftables tables as (family, name): `("ip", "kube-proxy")`.
    pub nft_tables: Vec<(String, String)>,
    /// Per iptables flavour that ran (`iptables-nft`, `ip6tables-legacy`, ...), its `-save`
    /// output.
    pub iptables_saves: Vec<(String, String)>,
    /// Whether a link named `kube-ipvs0` exists.
    pub ipvs_link: bool,
}

/// One thing left by another proxy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leftover {
    /// Upstream's nftables mode: its table in `family` (`ip`, `ip6`).
    UpstreamTable { family: String },
    /// Our own table in `family`, from a mode of ours that uses it, while this one does not.
    OurTable { family: String },
    /// Upstream's iptables or IPVS mode: `KUBE-*` chains (`table/CHAIN`) of one flavour.
    Chains {
        flavour: String,
        chains: Vec<String>,
    },
    /// IPVS mode's dummy link, with the virtual services' addresses on it.
    IpvsLink,
}

impl fmt::Display for Leftover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Leftover::UpstreamTable { family } => {
                write!(f, "nftables table {family} {UPSTREAM_TABLE}")
            }
            Leftover::OurTable { family } => {
                write!(f, "nftables table {family} {}", nft::TABLE)
            }
            Leftover::Chains { flavour, chains } => {
                const SHOWN: usize = 3;
                let shown = chains.iter().take(SHOWN).cloned().collect::<Vec<_>>();
                let more = chains.len().saturating_sub(SHOWN);
                write!(f, "{flavour} chains {}", shown.join(" "))?;
                if more > 0 {
                    write!(f, " and {more} more")?;
                }
                Ok(())
            }
            Leftover::IpvsLink => write!(f, "link {} (IPVS mode)", ipvs::names::LINK),
        }
    }
}

/// What another proxy left that this one, owning `owned`, does not use.
pub fn find(owned: Owned, seen: &Seen) -> Vec<Leftover> {
    let mut left = Vec::new();
    for (family, name) in &seen.nft_tables {
        if family != "ip" && family != "ip6" {
            continue;
        }
        if name == UPSTREAM_TABLE {
            left.push(Leftover::UpstreamTable {
                family: family.clone(),
            });
        } else if name == nft::TABLE && !owned.our_table {
            left.push(Leftover::OurTable {
                family: family.clone(),
            });
        }
    }
    if !owned.kube_chains {
        for (flavour, save) in &seen.iptables_saves {
            let chains = iptables::cleanup::kube_proxy_chains(save);
            if !chains.is_empty() {
                left.push(Leftover::Chains {
                    flavour: flavour.clone(),
                    chains,
                });
            }
        }
    }
    if seen.ipvs_link && !owned.ipvs_link {
        left.push(Leftover::IpvsLink);
    }
    left
}

/// The line that says what was removed, and what could not be (with the remedy); `None` when
/// nothing was left.
pub fn message(left: &[Leftover], report: &Report) -> Option<String> {
    if left.is_empty() {
        return None;
    }
    let named = left.iter().map(ToString::to_string).collect::<Vec<_>>();
    let mut line = format!(
        "removed what another proxy left on this node, now that this proxy's rules are in \
         place: {}",
        named.join(", ")
    );
    if !report.errors.is_empty() {
        line.push_str(&format!(
            "; could not remove all of it ({}): once no other proxy runs here, run \
             `kube-proxy-rs --cleanup` (it removes this proxy's rules too) and restart this proxy",
            report.errors.join("; ")
        ));
    }
    Some(line)
}

/// Removes `left` in the network namespace `tools` runs in.
pub fn remove(left: &[Leftover], tools: &Launcher) -> Report {
    let mut report = Report::default();
    let tables: Vec<String> = left
        .iter()
        .filter_map(|l| match l {
            Leftover::UpstreamTable { family } => Some(format!("{family} {UPSTREAM_TABLE}")),
            Leftover::OurTable { family } => Some(format!("{family} {}", nft::TABLE)),
            _ => None,
        })
        .collect();
    if !tables.is_empty() {
        let script: String = tables
            .iter()
            .map(|t| format!("delete table {t}\n"))
            .collect();
        match tool::run_if_installed(tools.command("nft").args(["-f", "-"]), Some(&script)) {
            Ok(Some(_)) => report.tables = tables,
            Ok(None) => report.errors.push("nft is not installed".to_owned()),
            Err(e) => report.errors.push(format!("nft: {e}")),
        }
    }
    for l in left {
        match l {
            Leftover::Chains { flavour, .. } => {
                iptables::cleanup::remove_flavour(tools, flavour, &mut report)
            }
            Leftover::IpvsLink => ipvs::cleanup::remove(tools.netns(), &mut report),
            Leftover::UpstreamTable { .. } | Leftover::OurTable { .. } => {}
        }
    }
    report
}

/// Once the runner behind `status` has synced successfully, removes what another proxy left
/// here (see the module doc) and logs it. Returns at once when the runner ends first.
pub async fn remove_after_first_sync(owned: Owned, mut status: watch::Receiver<Status>) {
    if status.wait_for(|s| s.syncs_ok > 0).await.is_err() {
        return;
    }
    let removed = tokio::task::spawn_blocking(move || {
        let tools = Launcher::here();
        let left = find(owned, &read(&tools));
        let report = remove(&left, &tools);
        (message(&left, &report), report.errors.is_empty())
    })
    .await;
    match removed {
        Ok((Some(line), true)) => tracing::info!("{line}"),
        Ok((Some(line), false)) => tracing::warn!("{line}"),
        Ok((None, _)) => {}
        Err(e) => tracing::debug!(error = %e, "leftovers: the removal did not finish"),
    }
}

/// Reads what [`find`] looks at, in the network namespace `tools` runs in. What cannot be read
/// (no iptables tools, a kernel without nf_tables) counts as absent.
pub fn read(tools: &Launcher) -> Seen {
    let mut nft = match tools.netns() {
        Some(name) => Netlink::in_netns(name),
        None => Netlink::new(),
    };
    let nft_tables = match nft.tables() {
        Ok(tables) => tables
            .into_iter()
            .map(|(family, name)| (family.to_owned(), name))
            .collect(),
        Err(e) => {
            tracing::debug!(error = %crate::causes::one_line(&e), "leftovers: cannot list nftables tables");
            Vec::new()
        }
    };
    let mut iptables_saves = Vec::new();
    for flavour in iptables::cleanup::IPTABLES {
        match tool::run_if_installed(&mut tools.command(&format!("{flavour}-save")), None) {
            Ok(Some(text)) => iptables_saves.push((flavour.to_owned(), text)),
            Ok(None) => {}
            // A flavour the kernel does not support holds nothing.
            Err(e) => tracing::debug!(tool = flavour, error = %e, "leftovers: cannot list"),
        }
    }
    let ipvs_link =
        match link::Client::open(tools.netns()).and_then(|mut c| c.find(ipvs::names::LINK)) {
            Ok(found) => found.is_some(),
            Err(e) => {
                tracing::debug!(error = %e, "leftovers: cannot look up {}", ipvs::names::LINK);
                false
            }
        };
    Seen {
        nft_tables,
        iptables_saves,
        ipvs_link,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProxyMode;

    /// What `mode` declares it owns, so the tests check every mode's declaration.
    fn find(mode: ProxyMode, seen: &Seen) -> Vec<Leftover> {
        super::find(crate::dataplane::modes::of(mode).owns(), seen)
    }

    fn tables(names: &[(&str, &str)]) -> Vec<(String, String)> {
        names
            .iter()
            .map(|(f, n)| ((*f).to_owned(), (*n).to_owned()))
            .collect()
    }

    /// Shaped like `iptables-nft-save` on a node upstream's iptables mode ran on.
    const UPSTREAM_IPTABLES: &str = "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-MARK-MASQ - [0:0]\n\
        :KUBE-NODEPORTS - [0:0]\n:KUBE-POSTROUTING - [0:0]\n:KUBE-SERVICES - [0:0]\n\
        -A PREROUTING -j KUBE-SERVICES\nCOMMIT\n*filter\n:KUBE-FIREWALL - [0:0]\nCOMMIT\n";

    fn node_after_upstream() -> Seen {
        Seen {
            nft_tables: tables(&[
                ("ip", "kube-proxy"),
                ("ip6", "kube-proxy"),
                ("inet", "kube-proxy"),
                ("ip", "kube-proxy-rs"),
                ("ip", "filter"),
            ]),
            iptables_saves: vec![
                ("iptables-nft".into(), UPSTREAM_IPTABLES.into()),
                ("ip6tables-nft".into(), "*nat\nCOMMIT\n".into()),
            ],
            ipvs_link: true,
        }
    }

    #[test]
    fn in_nftables_mode_upstream_s_table_chains_and_link_are_left() {
        let left = find(ProxyMode::Nftables, &node_after_upstream());
        assert_eq!(
            left.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "nftables table ip kube-proxy",
                "nftables table ip6 kube-proxy",
                "iptables-nft chains nat/KUBE-MARK-MASQ nat/KUBE-NODEPORTS nat/KUBE-POSTROUTING \
                 and 1 more",
                "link kube-ipvs0 (IPVS mode)",
            ]
        );
    }

    #[test]
    fn what_this_mode_uses_is_not_left() {
        let seen = node_after_upstream();
        let names = |mode| {
            find(mode, &seen)
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        // iptables mode: the KUBE-* chains are its own; our nftables table is not.
        assert_eq!(
            names(ProxyMode::Iptables),
            [
                "nftables table ip kube-proxy",
                "nftables table ip6 kube-proxy",
                "nftables table ip kube-proxy-rs",
                "link kube-ipvs0 (IPVS mode)",
            ]
        );
        // IPVS mode: kube-ipvs0 is its own.
        assert!(
            !names(ProxyMode::Ipvs)
                .iter()
                .any(|n| n.contains("kube-ipvs0"))
        );
        // eBPF mode programs no table.
        assert!(
            names(ProxyMode::Ebpf)
                .iter()
                .any(|n| n == "nftables table ip kube-proxy-rs")
        );
    }

    #[test]
    fn a_clean_node_gets_no_warning() {
        let seen = Seen {
            nft_tables: tables(&[("ip", "kube-proxy-rs"), ("ip6", "kube-proxy-rs")]),
            iptables_saves: vec![(
                "iptables-nft".into(),
                "*filter\n:KUBE-FIREWALL - [0:0]\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n".into(),
            )],
            ipvs_link: false,
        };
        assert!(find(ProxyMode::Nftables, &seen).is_empty());
        assert_eq!(message(&[], &Report::default()), None);
    }

    #[test]
    fn the_line_names_what_was_removed_and_gives_the_remedy_only_for_what_was_not() {
        let left = find(ProxyMode::Nftables, &node_after_upstream());
        let line = message(&left, &Report::default()).unwrap();
        assert!(!line.contains('\n'), "{line}");
        assert!(line.contains("nftables table ip kube-proxy, "), "{line}");
        assert!(!line.contains("--cleanup"), "{line}");
        let failed = Report {
            errors: vec!["iptables-nft-restore: exit status 4".into()],
            ..Report::default()
        };
        let line = message(&left, &failed).unwrap();
        assert!(!line.contains('\n'), "{line}");
        assert!(line.contains("exit status 4"), "{line}");
        assert!(line.contains("`kube-proxy-rs --cleanup`"), "{line}");
    }
}
