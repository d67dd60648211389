//! iptables-nft or iptables-legacy: which one a node uses, decided the way upstream's
//! kube-proxy image decides it (its `iptables-wrapper`), in our words: follow the kubelet. Its
//! marker chains (`KUBE-IPTABLES-HINT`, `KUBE-KUBELET-CANARY`) in one flavour decide; without
//! them, the flavour holding more rules wins; on a tie (a fresh node), nft.
//!
//! Pure: [`choose`] reads the two flavours' `-save` outputs; the backend runs the tools.

use crate::cluster::IpFamily;

/// The iptables back end whose tools we run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavour {
    /// `iptables-nft`: iptables rules stored as nftables objects.
    Nft,
    /// `iptables-legacy`: the x_tables kernel interface.
    Legacy,
}

/// Chains the kubelet (or its wrapper) keeps: where they live is where the node's rules live.
pub const MARKERS: [&str; 2] = ["KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"];

impl Flavour {
    pub fn as_str(self) -> &'static str {
        match self {
            Flavour::Nft => "nft",
            Flavour::Legacy => "legacy",
        }
    }

    /// `iptables-nft`, `ip6tables-legacy-restore`, ...: the tool for `family`, with `suffix`
    /// (`""`, `"-save"`, `"-restore"`).
    pub fn tool(self, family: IpFamily, suffix: &str) -> String {
        let base = match family {
            IpFamily::V4 => "iptables",
            IpFamily::V6 => "ip6tables",
        };
        format!("{base}-{}{suffix}", self.as_str())
    }
}

/// Chooses from the `-save` outputs (both families concatenated) of each flavour.
pub fn choose(nft: &str, legacy: &str) -> Flavour {
    if has_marker(nft) {
        return Flavour::Nft;
    }
    if has_marker(legacy) {
        return Flavour::Legacy;
    }
    if rule_count(legacy) > rule_count(nft) {
        Flavour::Legacy
    } else {
        Flavour::Nft
    }
}

/// [`choose`]'s answer when it is nft and can be told without nft's `-save` output (which
/// decodes every table's rules even for `-t mangle`, slow on a node with many Services): nft
/// holds one of the kubelet's [`MARKERS`] (`nft_marker`, asked chain by chain), or `legacy`
/// holds neither a marker nor a rule. `false`: ask [`choose`].
pub fn nft_for_sure(nft_marker: bool, legacy: &str) -> bool {
    nft_marker || (!has_marker(legacy) && rule_count(legacy) == 0)
}

/// Whether a `-save` output declares one of the kubelet's marker chains.
fn has_marker(save: &str) -> bool {
    save.lines().any(|l| {
        l.strip_prefix(':')
            .and_then(|d| d.split_whitespace().next())
            .is_some_and(|c| MARKERS.contains(&c))
    })
}

/// The rules a `-save` output holds.
fn rule_count(save: &str) -> usize {
    save.lines().filter(|l| l.starts_with("-A ")).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    const WITH_CANARY: &str = "*mangle\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n";
    const RULES: &str =
        "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j ACCEPT\n-A INPUT -j DROP\nCOMMIT\n";

    #[test]
    fn the_kubelets_marker_decides() {
        assert_eq!(choose(WITH_CANARY, RULES), Flavour::Nft);
        assert_eq!(choose(RULES, WITH_CANARY), Flavour::Legacy);
    }

    #[test]
    fn nft_is_told_for_sure_only_when_choose_would_say_so() {
        assert!(nft_for_sure(true, RULES), "nft's marker");
        assert!(
            nft_for_sure(false, ""),
            "nothing in legacy: nft wins or ties"
        );
        assert!(
            !nft_for_sure(false, RULES),
            "legacy's rules: nft's count is needed"
        );
        assert!(!nft_for_sure(false, WITH_CANARY), "legacy's marker");
        // Where it is sure, choose agrees whatever the rest of nft holds.
        for rest in ["", RULES] {
            assert_eq!(choose(&format!("{WITH_CANARY}{rest}"), RULES), Flavour::Nft);
            assert_eq!(choose(rest, ""), Flavour::Nft);
        }
    }

    #[test]
    fn without_markers_more_rules_win_and_a_tie_is_nft() {
        assert_eq!(choose("", RULES), Flavour::Legacy);
        assert_eq!(choose(RULES, ""), Flavour::Nft);
        assert_eq!(choose("", ""), Flavour::Nft);
    }

    #[test]
    fn tools_are_named_per_family_and_flavour() {
        assert_eq!(
            Flavour::Nft.tool(IpFamily::V4, "-restore"),
            "iptables-nft-restore"
        );
        assert_eq!(
            Flavour::Legacy.tool(IpFamily::V6, "-save"),
            "ip6tables-legacy-save"
        );
    }
}
