//! Hostile input for every mode's property tests: service ports whose names an attacker chose,
//! and how to compare a rule file made from them with the same file made from benign names.
//!
//! Every mode's `hostile_props.rs` plans these, renders them and checks the result with its own
//! tool; what they share is here: the strings built against each rule language ([`NFT`],
//! [`IPTABLES_RESTORE`]) beside long and arbitrary unicode names, the service ports that carry
//! the names into every kind of frontend, and blanking what may depend on a name (comment text;
//! the mode unhashes its own names).

use proptest::prelude::*;

use super::snapshots::{Svc, svc};
use crate::cluster::model::ServiceKey;

/// A rule language, as hostile-name tests need it.
pub struct Language {
    /// Strings built to close its quotes, or to add a rule or statement.
    pub attacks: &'static [&'static str],
    /// The longest arbitrary name tried.
    pub max_len: usize,
    /// What opens a comment's quoted text (ends in `"`).
    pub comment: &'static str,
}

/// `nft -f` scripts.
pub const NFT: Language = Language {
    attacks: &[
        "x\" ; flush ruleset ; add rule ip t c accept comment \"",
        "a\nadd table ip evil\n",
        "}} ; delete table ip kube-proxy-rs ; {{",
        "\\\"\\n\u{0}\u{202e}#",
    ],
    max_len: 200,
    comment: "comment \"",
};

/// `iptables-restore` input.
pub const IPTABLES_RESTORE: Language = Language {
    attacks: &[
        "x\" -j ACCEPT\n-A INPUT -j DROP\n#",
        "a\nCOMMIT\n*filter\n-F\n",
        "\\\"\\n\u{0}\u{202e}'$(reboot)",
    ],
    max_len: 120,
    comment: "--comment \"",
};

impl Language {
    /// Names to try: the attacks, long non-ASCII text, and arbitrary unicode up to `max_len`
    /// characters.
    pub fn names(&self) -> impl Strategy<Value = String> + use<> {
        let fixed: Vec<BoxedStrategy<String>> = self
            .attacks
            .iter()
            .map(|s| s.to_string())
            .chain(["é".repeat(300)])
            .map(|s| Just(s).boxed())
            .chain([
                proptest::string::string_regex(&format!(".{{0,{}}}", self.max_len))
                    .expect("a valid pattern")
                    .boxed(),
            ])
            .collect();
        proptest::strategy::Union::new(fixed)
    }

    /// The lines of `script` with comment text blanked and each line through `unhash`
    /// (hashed name parts), sorted (hashes of names decide the order of hashed objects): what
    /// must not depend on names.
    pub fn shape(&self, script: &str, unhash: impl Fn(&str) -> String) -> Vec<String> {
        let mut lines: Vec<String> = script
            .lines()
            .map(|line| unhash(&blank_comments(line, self.comment)))
            .collect();
        lines.sort();
        lines
    }
}

/// One service port per name, named `name/name:name`, with every kind of frontend (ClusterIP,
/// NodePort, LoadBalancer with a source range), endpoints on this node and another, and ClientIP
/// affinity with Local external policy on every other one.
pub fn services(names: &[String]) -> Vec<Svc> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut s = svc("ns/placeholder", &format!("10.96.0.{}", i + 1), 80)
                .node_port(30000 + i as u16)
                .lb(&format!("192.0.2.{}", i + 1))
                .range("198.51.100.0/24")
                .ep(&format!("10.244.1.{}", i + 2), 8080, "node-a")
                .ep(&format!("10.244.2.{}", i + 2), 8080, "node-b");
            if i % 2 == 0 {
                s = s.affinity(30).external_local();
            }
            s.port.name.service = ServiceKey::new(name, name);
            s.port.name.port = name.as_str().into();
            s
        })
        .collect()
}

/// `line` with the text of every comment that starts with `opener` (which ends in `"`) blanked
/// to `""`: comments carry names, and must be all they change.
pub fn blank_comments(line: &str, opener: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find(opener) {
        out.push_str(&rest[..at + opener.len()]);
        let after = &rest[at + opener.len()..];
        let end = after.find('"').expect("comments are closed on their line");
        out.push('"');
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comment_text_is_blanked_and_the_rest_kept() {
        assert_eq!(
            blank_comments("a comment \"x y\" b comment \"z\"", "comment \""),
            "a comment \"\" b comment \"\""
        );
        assert_eq!(
            blank_comments("no comment here", "--comment \""),
            "no comment here"
        );
    }
}
