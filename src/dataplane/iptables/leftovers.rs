//! The `KUBE-*` iptables chains upstream's iptables and IPVS modes (and this mode, which has
//! upstream's names) leave on a node, per iptables flavour whose tools run: found in
//! `<flavour>-save`, removed as `--cleanup` removes them ([`super::cleanup`]).

use super::cleanup::{IPTABLES, kube_proxy_chains, remove_flavour};
use crate::dataplane::cleanup::Report;
use crate::dataplane::leftovers::{Kind, Leftover, State};
use crate::dataplane::tool::{self, Launcher};

/// kube-proxy's `KUBE-*` chains, which the iptables mode owns.
pub const KUBE_CHAINS: State = State::new("kube-proxy's KUBE-* iptables chains");

/// How many chains the log line names before it counts the rest.
const SHOWN: usize = 3;

/// See the module doc.
pub struct Chains;

impl Kind for Chains {
    fn states(&self) -> &'static [State] {
        &[KUBE_CHAINS]
    }

    fn read(&self, tools: &Launcher) -> Vec<Leftover> {
        let mut left = Vec::new();
        for flavour in IPTABLES {
            match tool::run_if_installed(&mut tools.command(&format!("{flavour}-save")), None) {
                Ok(Some(save)) => left.extend(found(flavour, &save)),
                Ok(None) => {}
                // A flavour the kernel does not support holds nothing.
                Err(e) => tracing::debug!(tool = flavour, error = %e, "leftovers: cannot list"),
            }
        }
        left
    }

    fn remove(&self, left: &[Leftover], tools: &Launcher, report: &mut Report) {
        for l in left {
            remove_flavour(tools, &l.key, report);
        }
    }
}

/// kube-proxy's chains in the `-save` output of `flavour` (`iptables-nft`, ...), if any.
pub fn found(flavour: &str, save: &str) -> Option<Leftover> {
    let chains = kube_proxy_chains(save);
    if chains.is_empty() {
        return None;
    }
    let mut name = format!(
        "{flavour} chains {}",
        chains[..chains.len().min(SHOWN)].join(" ")
    );
    if chains.len() > SHOWN {
        name.push_str(&format!(" and {} more", chains.len() - SHOWN));
    }
    Some(Leftover {
        state: KUBE_CHAINS,
        key: flavour.to_owned(),
        name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::leftovers::{OUR_TABLE, find};
    use crate::dataplane::mode::Mode;

    /// Shaped like `iptables-nft-save` on a node upstream's iptables mode ran on.
    const UPSTREAM_IPTABLES: &str = "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-MARK-MASQ - [0:0]\n\
        :KUBE-NODEPORTS - [0:0]\n:KUBE-POSTROUTING - [0:0]\n:KUBE-SERVICES - [0:0]\n\
        -A PREROUTING -j KUBE-SERVICES\nCOMMIT\n*filter\n:KUBE-FIREWALL - [0:0]\nCOMMIT\n";

    #[test]
    fn upstream_s_chains_are_named_three_at_most() {
        assert_eq!(
            found("iptables-nft", UPSTREAM_IPTABLES)
                .unwrap()
                .to_string(),
            "iptables-nft chains nat/KUBE-MARK-MASQ nat/KUBE-NODEPORTS nat/KUBE-POSTROUTING \
             and 1 more"
        );
    }

    #[test]
    fn a_flavour_with_no_chain_of_kube_proxy_s_leaves_nothing() {
        assert_eq!(found("ip6tables-nft", "*nat\nCOMMIT\n"), None);
        let kubelet_s = "*filter\n:KUBE-FIREWALL - [0:0]\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n";
        assert_eq!(found("iptables-nft", kubelet_s), None);
    }

    #[test]
    fn in_iptables_mode_the_chains_are_its_own_and_our_table_is_left() {
        let our_table = Leftover {
            state: OUR_TABLE,
            key: "ip kube-proxy-rs".into(),
            name: "nftables table ip kube-proxy-rs".into(),
        };
        let seen = [
            found("iptables-nft", UPSTREAM_IPTABLES).unwrap(),
            our_table.clone(),
        ];
        assert_eq!(
            find(super::super::mode::Iptables.owns(), &seen),
            [our_table]
        );
    }
}
