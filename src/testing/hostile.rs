//! Hostile input for every mode's property tests: service ports whose names an attacker chose,
//! and how to compare a rule file made from them with the same file made from benign names.
//!
//! Each mode adds the strings built against its own rule language (`hostile_props.rs` in the
//! mode); what is the same for every mode is here: arbitrary unicode and long names, the
//! service ports that carry the names into every kind of frontend, and blanking the parts of a
//! line that may depend on a name (comment text, hashed name parts).

use proptest::prelude::*;

use super::snapshots::{Svc, svc};
use crate::cluster::model::ServiceKey;

/// Strings every mode must survive: `specific` (built against its own quoting), then long
/// non-ASCII text and arbitrary unicode up to `max_len` characters.
pub fn names(specific: Vec<String>, max_len: usize) -> impl Strategy<Value = String> {
    let fixed: Vec<BoxedStrategy<String>> = specific
        .into_iter()
        .chain(["é".repeat(300)])
        .map(|s| Just(s).boxed())
        .chain(
            [proptest::string::string_regex(&format!(".{{0,{max_len}}}"))
                .expect("a valid pattern")
                .boxed()],
        )
        .collect();
    proptest::strategy::Union::new(fixed)
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

/// The lines of `script`, each through `line`, sorted (hashes of names decide the order of
/// hashed objects): what must not depend on names.
pub fn shape(script: &str, line: impl Fn(&str) -> String) -> Vec<String> {
    let mut lines: Vec<String> = script.lines().map(line).collect();
    lines.sort();
    lines
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
