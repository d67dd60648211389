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
const MARKERS: [&str; 2] = ["KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"];

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
    let has_marker = |save: &str| {
        save.lines().any(|l| {
            l.strip_prefix(':')
                .and_then(|d| d.split_whitespace().next())
                .is_some_and(|c| MARKERS.contains(&c))
        })
    };
    if has_marker(nft) {
        return Flavour::Nft;
    }
    if has_marker(legacy) {
        return Flavour::Legacy;
    }
    let rules = |save: &str| save.lines().filter(|l| l.starts_with("-A ")).count();
    if rules(legacy) > rules(nft) {
        Flavour::Legacy
    } else {
        Flavour::Nft
    }
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
