//! The parser on hand-written `nft -j list table` output: what it skips, what it makes differ,
//! what it calls foreign. The nftables mode's golden tests read captured dumps of its plans.

use super::*;

#[test]
fn dynamic_set_elements_are_the_kernels_and_not_read() {
    let dump = r#"{"nftables": [{"set": {"family": "ip", "name": "affinity-1-2", "table": "kube-proxy-rs",
        "type": "ipv4_addr", "handle": 3, "size": 65535, "flags": ["timeout"], "timeout": 10800,
        "elem": [{"elem": {"val": "10.0.0.9", "timeout": 10800, "expires": 10700}}]}}]}"#;
    let got = parse(dump, Family::Ip).unwrap();
    let set = &got.ruleset.sets[&Name::parse("affinity-1-2").unwrap()];
    assert_eq!(set.decl.dynamic_timeout, Some(10800));
    assert!(set.elements.is_empty());
}

#[test]
fn what_cannot_be_read_is_made_to_differ_and_unnameable_objects_are_foreign() {
    let dump = r#"{"nftables": [
        {"chain": {"family": "ip", "table": "kube-proxy-rs", "name": "services", "handle": 1}},
        {"chain": {"family": "ip", "table": "kube-proxy-rs", "name": "Odd Chain", "handle": 2}},
        {"chain": {"family": "ip", "table": "kube-proxy-rs", "name": "filter-input", "handle": 3,
            "type": "filter", "hook": "input", "prio": 0, "policy": "drop"}},
        {"set": {"family": "ip", "name": "marks", "table": "kube-proxy-rs", "type": "mark", "handle": 4}},
        {"rule": {"family": "ip", "table": "kube-proxy-rs", "chain": "services", "handle": 5,
            "expr": [{"counter": {"packets": 0, "bytes": 0}}]}}]}"#;
    let got = parse(dump, Family::Ip).unwrap();
    assert_eq!(
        got.foreign,
        vec!["chain Odd Chain", "base chain filter-input"]
    );
    assert_eq!(got.unknown.len(), 2, "{:?}", got.unknown);
    let services = &got.ruleset.chains[&Name::parse("services").unwrap()];
    assert_eq!(services.rules, vec![rule::unreadable()]);
    assert!(
        got.ruleset.sets[&Name::parse("marks").unwrap()]
            .decl
            .key
            .is_empty()
    );
}

#[test]
fn a_dump_that_is_not_nft_json_is_an_error() {
    assert!(parse("Error: nope", Family::Ip).is_err());
    assert!(parse("{}", Family::Ip).is_err());
}

#[test]
fn why_a_rule_is_not_ours_is_named() {
    use rule::ParseError;
    use serde_json::json;
    let parse = |expr: Json| rule::parse(Some(&expr), Family::Ip);
    assert_eq!(
        rule::parse(None, Family::Ip),
        Err(ParseError::NoExpressions)
    );
    assert_eq!(parse(json!([])), Err(ParseError::Empty));
    let counter = json!({"counter": {"packets": 0, "bytes": 0}});
    let unknown = parse(json!([counter])).unwrap_err();
    assert_eq!(unknown, ParseError::Unknown(counter.clone()));
    assert_eq!(unknown.to_string(), format!("expression {counter}"));
    assert_eq!(
        parse(json!([{"dnat": {"addr": "10.0.0.1", "port": 80}}])),
        Err(ParseError::DnatWithoutProtocol)
    );
    let new = json!({"match": {"op": "==", "left": {"ct": {"key": "state"}}, "right": "new"}});
    assert!(parse(json!([new])).is_ok());
    assert_eq!(
        parse(json!([{"accept": null}, new])),
        Err(ParseError::MatchAfterStatement)
    );
}
