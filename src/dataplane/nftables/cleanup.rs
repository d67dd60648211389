//! `--cleanup`: removes our tables and what upstream kube-proxy leaves behind, then the binary
//! exits.
//!
//! Removes `ip`/`ip6 kube-proxy-rs` (ours), upstream's nftables tables `ip`/`ip6 kube-proxy`,
//! and upstream's iptables state in `nat`, `filter` and `mangle` for iptables-nft and
//! iptables-legacy, IPv4 and IPv6: every chain named `KUBE-*` and the rules that jump to one.
//! Choosing by prefix is what upstream's `--cleanup` documents for its own leftovers (design
//! rule 5 forbids it for anything else). Kubelet's chains (`KUBE-KUBELET-CANARY`,
//! `KUBE-FIREWALL`, `KUBE-MARK-DROP`) share the prefix but are not kube-proxy's: they stay.
//!
//! The decisions ([`nft_script`], [`iptables_script`]) are pure and tested on captured output;
//! [`cleanup`] runs the tools. A tool or table that is not there is not an error.

use std::io::Write as _;
use std::process::Stdio;

use super::backend::NftCommand;
use super::names;

/// nftables tables removed: ours, then upstream's.
const NFT_TABLES: [(&str, &str); 4] = [
    ("ip", names::TABLE),
    ("ip6", names::TABLE),
    ("ip", "kube-proxy"),
    ("ip6", "kube-proxy"),
];

/// The iptables flavours whose state is cleaned: `<tool>-save` and `<tool>-restore`.
const IPTABLES: [&str; 4] = [
    "iptables-nft",
    "ip6tables-nft",
    "iptables-legacy",
    "ip6tables-legacy",
];

/// iptables tables upstream kube-proxy writes to.
const IPTABLES_TABLES: [&str; 3] = ["nat", "filter", "mangle"];

/// Chains with upstream's prefix that belong to kubelet, not kube-proxy.
const KUBELET_CHAINS: [&str; 3] = ["KUBE-KUBELET-CANARY", "KUBE-FIREWALL", "KUBE-MARK-DROP"];

/// What was removed, and what could not be.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// `ip kube-proxy-rs`, ...
    pub tables: Vec<String>,
    /// (tool, chains removed).
    pub iptables: Vec<(String, usize)>,
    /// Tools that ran and refused; empty on success.
    pub errors: Vec<String>,
}

/// Removes everything listed in the module doc, in the namespace `nft` runs in.
pub fn cleanup(nft: &NftCommand) -> Report {
    let mut report = Report::default();
    match run(nft.tool("nft").args(["list", "tables"]), None) {
        Ok(Some(tables)) => {
            let (script, removed) = nft_script(&tables);
            if !script.is_empty() {
                match run(nft.tool("nft").args(["-f", "-"]), Some(&script)) {
                    Ok(_) => report.tables = removed,
                    Err(e) => report.errors.push(format!("nft: {e}")),
                }
            }
        }
        Ok(None) => tracing::debug!("--cleanup: no nft here"),
        Err(e) => report.errors.push(format!("nft list tables: {e}")),
    }
    for tool in IPTABLES {
        let saved = match run(&mut nft.tool(&format!("{tool}-save")), None) {
            Ok(Some(text)) => text,
            Ok(None) => continue,
            Err(e) => {
                // A flavour the kernel does not support (legacy without its modules) has
                // nothing of upstream's in it.
                tracing::debug!(tool, error = %e, "--cleanup: cannot list");
                continue;
            }
        };
        let (script, chains) = iptables_script(&saved);
        if chains == 0 {
            continue;
        }
        let restore = format!("{tool}-restore");
        match run(nft.tool(&restore).arg("--noflush"), Some(&script)) {
            Ok(_) => report.iptables.push((tool.to_string(), chains)),
            Err(e) => report.errors.push(format!("{restore}: {e}")),
        }
    }
    report
}

/// Runs a tool, feeding `input`; `Ok(None)` when the tool is not installed.
fn run(cmd: &mut std::process::Command, input: Option<&str>) -> Result<Option<String>, String> {
    let mut child = match cmd
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        // Small scripts: the pipe buffer holds them, so writing before reading cannot block.
        let _ = stdin.write_all(text.as_bytes());
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    // `ip netns exec` reports a missing program itself, with exit status 255.
    if !out.status.success() && stderr.contains("No such file or directory") && input.is_none() {
        return Ok(None);
    }
    if out.status.success() {
        Ok(Some(String::from_utf8_lossy(&out.stdout).into_owned()))
    } else {
        Err(format!("{} ({})", stderr.trim_end(), out.status))
    }
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

fn ours(chain: &str) -> bool {
    chain.starts_with("KUBE-") && !KUBELET_CHAINS.contains(&chain)
}

/// The chain a rule jumps or goes to (`-j X` / `-g X`), ignoring words inside quotes.
fn jump_target(rule: &str) -> Option<&str> {
    let mut in_quote = false;
    let mut after_jump = false;
    for w in rule.split(' ') {
        let quoted = in_quote || w.contains('"');
        if w.matches('"').count() % 2 == 1 {
            in_quote = !in_quote;
        }
        if quoted {
            after_jump = false;
            continue;
        }
        if after_jump {
            return Some(w);
        }
        after_jump = w == "-j" || w == "-g";
    }
    None
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
    fn nothing_of_upstreams_means_no_script() {
        assert_eq!(
            iptables_script("*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n").1,
            0
        );
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
