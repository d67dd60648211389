//! What `--cleanup` removes of iptables: upstream kube-proxy's state (and ours, which has
//! upstream's names) in `nat`, `filter` and `mangle`, for iptables-nft and iptables-legacy,
//! IPv4 and IPv6: every chain named `KUBE-*` and the rules that jump to one.
//!
//! Choosing by prefix is what upstream's `--cleanup` documents for its own leftovers (design
//! rule 5 forbids it for anything else). Kubelet's chains (`KUBE-KUBELET-CANARY`,
//! `KUBE-FIREWALL`, `KUBE-MARK-DROP`) share the prefix but are not kube-proxy's: they stay.
//! The decision ([`iptables_script`]) is pure and tested on captured output; [`remove`] runs
//! the tools.

use super::adopt::jump_target;
use crate::dataplane::cleanup::Report;
use crate::dataplane::tool::{self, Launcher};

/// The iptables flavours whose state is cleaned: `<tool>-save` and `<tool>-restore`.
pub const IPTABLES: [&str; 4] = [
    "iptables-nft",
    "ip6tables-nft",
    "iptables-legacy",
    "ip6tables-legacy",
];

/// iptables tables upstream kube-proxy writes to.
const IPTABLES_TABLES: [&str; 3] = ["nat", "filter", "mangle"];

/// Chains with upstream's prefix that belong to kubelet, not kube-proxy.
const KUBELET_CHAINS: [&str; 3] = ["KUBE-KUBELET-CANARY", "KUBE-FIREWALL", "KUBE-MARK-DROP"];

/// Removes kube-proxy's chains from every flavour and family whose tools run, adding what was
/// removed (or the tool's refusal) to `report`.
pub fn remove(tools: &Launcher, report: &mut Report) {
    for flavour in IPTABLES {
        remove_flavour(tools, flavour, report);
    }
}

/// Removes kube-proxy's chains from one flavour (`iptables-nft`, ...), if its tools run.
pub fn remove_flavour(tools: &Launcher, flavour: &str, report: &mut Report) {
    let saved = match tool::run_if_installed(&mut tools.command(&format!("{flavour}-save")), None) {
        Ok(Some(text)) => text,
        Ok(None) => return,
        Err(e) => {
            // A flavour the kernel does not support (legacy without its modules) has
            // nothing of upstream's in it.
            tracing::debug!(tool = flavour, error = %e, "cleanup: cannot list");
            return;
        }
    };
    let (script, chains) = iptables_script(&saved);
    if chains == 0 {
        return;
    }
    let restore = format!("{flavour}-restore");
    match tool::run_if_installed(tools.command(&restore).arg("--noflush"), Some(&script)) {
        Ok(_) => report.removed(format!("KUBE-* chains of {flavour}"), chains),
        Err(e) => report.errors.push(format!("{restore}: {e}")),
    }
}

/// From `iptables-save` output, the `iptables-restore --noflush` script that removes
/// kube-proxy's `KUBE-*` chains and every rule elsewhere that jumps to one, and how many chains
/// it removes. Per table: delete the jumps, flush the chains, then delete them (so chains that
/// jump to each other can go in any order).
pub fn iptables_script(save: &str) -> (String, usize) {
    let mut script = String::new();
    let mut total = 0;
    let mut table: Option<&str> = None;
    let mut chains: Vec<&str> = Vec::new();
    let mut rules: Vec<&str> = Vec::new();
    for line in save.lines() {
        if let Some(name) = line.strip_prefix('*') {
            table = IPTABLES_TABLES.contains(&name).then_some(name);
            chains.clear();
            rules.clear();
        } else if let Some(decl) = line.strip_prefix(':') {
            let chain = decl.split_whitespace().next().unwrap_or("");
            if ours(chain) {
                chains.push(chain);
            }
        } else if line.starts_with("-A ") {
            rules.push(line);
        } else if line == "COMMIT"
            && let Some(t) = table.take()
        {
            if chains.is_empty() {
                continue;
            }
            script.push_str(&format!("*{t}\n"));
            for rule in &rules {
                let mut words = rule.split_whitespace().skip(1);
                let owner = words.next().unwrap_or("");
                let target = jump_target(rule);
                if !chains.contains(&owner) && target.is_some_and(|t| chains.contains(&t)) {
                    script.push_str(&format!("-D{}\n", &rule[2..]));
                }
            }
            for c in &chains {
                script.push_str(&format!("-F {c}\n"));
            }
            for c in &chains {
                script.push_str(&format!("-X {c}\n"));
            }
            script.push_str("COMMIT\n");
            total += chains.len();
        }
    }
    (script, total)
}

/// From `iptables-save` output, the chains [`iptables_script`] removes, as `table/CHAIN`, in the
/// order printed.
pub fn kube_proxy_chains(save: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut table: Option<&str> = None;
    for line in save.lines() {
        if let Some(name) = line.strip_prefix('*') {
            table = IPTABLES_TABLES.contains(&name).then_some(name);
        } else if let (Some(t), Some(decl)) = (table, line.strip_prefix(':')) {
            let chain = decl.split_whitespace().next().unwrap_or("");
            if ours(chain) {
                found.push(format!("{t}/{chain}"));
            }
        }
    }
    found
}

fn ours(chain: &str) -> bool {
    chain.starts_with("KUBE-") && !KUBELET_CHAINS.contains(&chain)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shaped like `iptables-nft-save` output of a node upstream kube-proxy ran on.
    const SAVED: &str = r#"# Generated by iptables-nft-save v1.8.9 (nf_tables)
*mangle
:PREROUTING ACCEPT [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:KUBE-PROXY-CANARY - [0:0]
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-ABC - [0:0]
:MY-CHAIN - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals -j KUBE-X" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A POSTROUTING -j MY-CHAIN
-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -j KUBE-SVC-ABC
-A KUBE-SVC-ABC -j KUBE-MARK-MASQ
COMMIT
*raw
:KUBE-ODD - [0:0]
COMMIT
"#;

    #[test]
    fn upstream_chains_and_the_jumps_into_them_go_kubelets_stay() {
        let (script, chains) = iptables_script(SAVED);
        assert_eq!(chains, 5);
        assert_eq!(
            script,
            "*mangle\n-F KUBE-PROXY-CANARY\n-X KUBE-PROXY-CANARY\nCOMMIT\n\
             *nat\n\
             -D PREROUTING -m comment --comment \"kubernetes service portals -j KUBE-X\" -j KUBE-SERVICES\n\
             -D OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
             -D POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING\n\
             -F KUBE-MARK-MASQ\n-F KUBE-POSTROUTING\n-F KUBE-SERVICES\n-F KUBE-SVC-ABC\n\
             -X KUBE-MARK-MASQ\n-X KUBE-POSTROUTING\n-X KUBE-SERVICES\n-X KUBE-SVC-ABC\nCOMMIT\n"
        );
    }

    #[test]
    fn the_chains_listed_are_the_ones_the_script_removes() {
        let chains = kube_proxy_chains(SAVED);
        assert_eq!(
            chains,
            [
                "mangle/KUBE-PROXY-CANARY",
                "nat/KUBE-MARK-MASQ",
                "nat/KUBE-POSTROUTING",
                "nat/KUBE-SERVICES",
                "nat/KUBE-SVC-ABC"
            ]
        );
        assert_eq!(chains.len(), iptables_script(SAVED).1);
    }

    #[test]
    fn nothing_of_upstreams_means_no_script() {
        assert_eq!(
            iptables_script("*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n").1,
            0
        );
    }
}
