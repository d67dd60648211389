//! At start-up: another proxy's rules left on the node, named in one warning.
//!
//! A node moved from upstream kube-proxy (or from another mode of ours) keeps what the old
//! proxy programmed: upstream's nftables table `kube-proxy`, its `KUBE-*` iptables chains, IPVS
//! mode's `kube-ipvs0`. Those rules still see Service traffic, and may answer it before ours
//! with endpoints nobody keeps current. This proxy does not remove them at start-up (the other
//! proxy may still be running on the node while it hands over); it says what is left and how
//! to remove it, once.
//!
//! What counts as left depends on this proxy's mode: `KUBE-*` chains are this proxy's own in
//! iptables mode, `kube-ipvs0` in IPVS mode, and our `kube-proxy-rs` table in the nftables,
//! IPVS and userspace modes. [`find`] decides over what [`read`] saw, and is pure;
//! [`spawn_warning`] reads the kernel and logs.

use std::fmt;

use super::ipvs::backend::link;
use super::nftables::backend::netlink::Netlink;
use super::tool::{self, Launcher};
use super::{iptables, ipvs, nftables};
use crate::config::ProxyMode;

/// Upstream kube-proxy's nftables table (both `ip` and `ip6`).
const UPSTREAM_TABLE: &str = "kube-proxy";

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
                write!(f, "nftables table {family} {}", nftables::names::TABLE)
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

/// What another proxy left that this one, in `mode`, does not use.
pub fn find(mode: ProxyMode, seen: &Seen) -> Vec<Leftover> {
    let uses_our_table = matches!(
        mode,
        ProxyMode::Nftables | ProxyMode::Ipvs | ProxyMode::Userspace
    );
    let mut left = Vec::new();
    for (family, name) in &seen.nft_tables {
        if family != "ip" && family != "ip6" {
            continue;
        }
        if name == UPSTREAM_TABLE {
            left.push(Leftover::UpstreamTable {
                family: family.clone(),
            });
        } else if name == nftables::names::TABLE && !uses_our_table {
            left.push(Leftover::OurTable {
                family: family.clone(),
            });
        }
    }
    if mode != ProxyMode::Iptables {
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
    if seen.ipvs_link && mode != ProxyMode::Ipvs {
        left.push(Leftover::IpvsLink);
    }
    left
}

/// The one warning line for `left`; `None` when nothing is left.
pub fn message(left: &[Leftover]) -> Option<String> {
    if left.is_empty() {
        return None;
    }
    let named = left.iter().map(ToString::to_string).collect::<Vec<_>>();
    Some(format!(
        "another proxy's rules are left on this node and still see Service traffic: {}; once \
         no other proxy runs here, remove them with `kube-proxy-rs --cleanup` (it removes this \
         proxy's rules too) and restart this proxy",
        named.join(", ")
    ))
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

/// Logs one warning naming what another proxy left here, if anything (see the module doc), from
/// a thread of its own: start-up does not wait for the iptables tools.
pub fn spawn_warning(mode: ProxyMode) {
    let spawned = std::thread::Builder::new()
        .name("leftovers".into())
        .spawn(move || {
            if let Some(line) = message(&find(mode, &read(&Launcher::here()))) {
                tracing::warn!("{line}");
            }
        });
    if let Err(e) = spawned {
        tracing::debug!(error = %e, "leftovers: cannot start the check");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(message(&[]), None);
    }

    #[test]
    fn the_warning_is_one_line_naming_what_is_left_and_the_remedy() {
        let line = message(&find(ProxyMode::Nftables, &node_after_upstream())).unwrap();
        assert!(!line.contains('\n'), "{line}");
        assert!(line.contains("nftables table ip kube-proxy, "), "{line}");
        assert!(line.contains("`kube-proxy-rs --cleanup`"), "{line}");
    }
}
