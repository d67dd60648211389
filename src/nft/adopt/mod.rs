//! Kernel dump (`nft -j list table <family> kube-proxy-rs`, nft 1.0.6 JSON) → [`Ruleset`], so a
//! start-up or full resync diffs against what the kernel really holds.
//!
//! Pure. Reads back exactly the forms `render` writes. What it cannot express as our values is
//! not refused but made to differ, so the diff repairs it with the smallest change: a rule it
//! cannot read becomes an empty rule (no planned rule is empty, so the chain is refilled); a set
//! whose declaration or elements it cannot read gets an empty key (so it is re-created). Objects
//! the diff could not even name (a chain with a name we never make, a base chain of another
//! type, hook or policy, a flowtable) set [`Parsed::foreign`]: the applier then rebuilds the
//! table atomically instead of diffing.
//!
//! Kernel-owned state is not ours to diff: elements of dynamic sets (ClientIP affinity clients)
//! are skipped, so a resync keeps them. Handles are ignored.

use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::Value as Json;

use super::Name;
use super::ruleset::{
    BaseChain, ChainType, Comment, Data, DataKind, Element, Family, Hook, Kind, Ruleset, Set,
    SetDecl, Tuple, Value,
};

mod rule;

/// What was read, and what could not be read as our values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    pub ruleset: Ruleset,
    /// Things read as "differs" (so the diff replaces them), for the adoption log.
    pub unknown: Vec<String>,
    /// Objects the diff cannot name: the table must be rebuilt, not diffed.
    pub foreign: Vec<String>,
}

/// The dump is not nft JSON at all.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the dump is not JSON")]
    Json(#[source] serde_json::Error),
    #[error("the dump has no `nftables` list")]
    Shape,
}

/// Reads one family's dump.
pub fn parse(dump: &str, family: Family) -> Result<Parsed, Error> {
    let json: Json = serde_json::from_str(dump).map_err(Error::Json)?;
    let items = json
        .get("nftables")
        .and_then(Json::as_array)
        .ok_or(Error::Shape)?;
    let mut p = Parsed {
        ruleset: Ruleset::empty(family),
        unknown: Vec::new(),
        foreign: Vec::new(),
    };
    let mut rules = Vec::new();
    for item in items {
        let Some((kind, body)) = item.as_object().and_then(|o| o.iter().next()) else {
            continue;
        };
        match kind.as_str() {
            "metainfo" | "table" => {}
            "chain" => chain(&mut p, body),
            "set" | "map" => set(&mut p, body, family),
            "rule" => rules.push(body),
            other => p.foreign.push(format!("{other} {}", name_of(body))),
        }
    }
    // Rules after chains, whatever order the dump has.
    for body in rules {
        let chain = body.get("chain").and_then(Json::as_str).unwrap_or("");
        let Some(name) = Name::parse(chain) else {
            p.foreign.push(format!("rule in chain {chain}"));
            continue;
        };
        let r = rule::parse(body.get("expr"), family).unwrap_or_else(|why| {
            p.unknown.push(format!("rule in {chain}: {why}"));
            rule::unreadable()
        });
        p.ruleset.chains.entry(name).or_default().rules.push(r);
    }
    Ok(p)
}

fn name_of(body: &Json) -> &str {
    body.get("name").and_then(Json::as_str).unwrap_or("?")
}

fn chain(p: &mut Parsed, body: &Json) {
    let raw = name_of(body);
    let Some(name) = Name::parse(raw) else {
        p.foreign.push(format!("chain {raw}"));
        return;
    };
    let base = match body.get("hook") {
        None => None,
        Some(hook) => match base_chain(body, hook) {
            Some(b) => Some(b),
            None => {
                p.foreign.push(format!("base chain {raw}"));
                return;
            }
        },
    };
    p.ruleset.chains.entry(name).or_default().base = base;
}

fn base_chain(body: &Json, hook: &Json) -> Option<BaseChain> {
    let kind = match body.get("type")?.as_str()? {
        "filter" => ChainType::Filter,
        "nat" => ChainType::Nat,
        _ => return None,
    };
    let hook = match hook.as_str()? {
        "prerouting" => Hook::Prerouting,
        "input" => Hook::Input,
        "forward" => Hook::Forward,
        "output" => Hook::Output,
        "postrouting" => Hook::Postrouting,
        _ => return None,
    };
    // We never set a policy; a chain someone switched to `drop` must be rebuilt.
    if body
        .get("policy")
        .and_then(Json::as_str)
        .unwrap_or("accept")
        != "accept"
        || body.get("dev").is_some()
    {
        return None;
    }
    let priority = i32::try_from(body.get("prio")?.as_i64()?).ok()?;
    Some(BaseChain {
        kind,
        hook,
        priority,
    })
}

fn set(p: &mut Parsed, body: &Json, family: Family) {
    let raw = name_of(body);
    let Some(name) = Name::parse(raw) else {
        p.foreign.push(format!("set {raw}"));
        return;
    };
    let decl = match set_decl(body, family) {
        Some(d) => d,
        None => {
            p.unknown.push(format!("set {raw}: declaration"));
            p.ruleset.sets.insert(name, Set::new(unreadable_decl()));
            return;
        }
    };
    let mut set = Set::new(decl);
    // Dynamic sets hold the kernel's clients, not ours: keep them out of the diff.
    if set.decl.dynamic_timeout.is_none()
        && let Some(elements) = body.get("elem").and_then(Json::as_array)
    {
        for e in elements {
            match element(e, &set.decl, family) {
                Some((key, element)) => {
                    set.elements_mut().insert(key, element);
                }
                None => {
                    p.unknown.push(format!("set {raw}: element {e}"));
                    set = Set::new(unreadable_decl());
                    break;
                }
            }
        }
    }
    p.ruleset.sets.insert(name, set);
}

/// A declaration no plan has (an empty key): the diff re-creates the set.
fn unreadable_decl() -> SetDecl {
    SetDecl {
        key: Vec::new(),
        data: DataKind::None,
        interval: false,
        dynamic_timeout: None,
        comment: None,
    }
}

fn set_decl(body: &Json, family: Family) -> Option<SetDecl> {
    let key = kinds(body.get("type")?, family)?;
    let data = match body.get("map") {
        None => DataKind::None,
        Some(Json::String(s)) if s == "verdict" => DataKind::Verdict,
        Some(other) => DataKind::Values(kinds(other, family)?),
    };
    let mut interval = false;
    let mut timeout = false;
    for flag in body
        .get("flags")
        .and_then(Json::as_array)
        .unwrap_or(&vec![])
    {
        match flag.as_str()? {
            "interval" => interval = true,
            "timeout" => timeout = true,
            "dynamic" => {}
            _ => return None,
        }
    }
    let dynamic_timeout = if timeout {
        Some(u32::try_from(body.get("timeout")?.as_u64()?).ok()?)
    } else {
        None
    };
    Some(SetDecl {
        key,
        data,
        interval,
        dynamic_timeout,
        comment: body
            .get("comment")
            .and_then(Json::as_str)
            .map(Comment::sanitised),
    })
}

/// `"ipv4_addr"`, `["ipv4_addr", "inet_proto"]` or `"ipv4_addr . inet_service"`.
fn kinds(json: &Json, family: Family) -> Option<Vec<Kind>> {
    let words: Vec<&str> = match json {
        Json::String(s) => s.split(" . ").collect(),
        Json::Array(a) => a.iter().map(Json::as_str).collect::<Option<_>>()?,
        _ => return None,
    };
    words
        .into_iter()
        .map(|w| match (w, family) {
            ("ipv4_addr", Family::Ip) | ("ipv6_addr", Family::Ip6) => Some(Kind::Addr),
            ("inet_proto", _) => Some(Kind::Proto),
            ("inet_service", _) => Some(Kind::Port),
            ("integer", _) => Some(Kind::Index),
            _ => None,
        })
        .collect()
}

fn element(e: &Json, decl: &SetDecl, family: Family) -> Option<(Tuple, Element)> {
    let (key_json, data_json) = match (&decl.data, e) {
        (DataKind::None, _) => (e, None),
        (_, Json::Array(pair)) if pair.len() == 2 => (&pair[0], Some(&pair[1])),
        _ => return None,
    };
    // `{"elem": {"val": .., "comment": ..}}` carries a comment (and, in dynamic sets, timeouts).
    let (key_json, comment) = match key_json.get("elem") {
        Some(inner) => (
            inner.get("val")?,
            inner
                .get("comment")
                .and_then(Json::as_str)
                .map(Comment::sanitised),
        ),
        None => (key_json, None),
    };
    let key = tuple(key_json, &decl.key, decl.interval, family)?;
    let data = match (&decl.data, data_json) {
        (DataKind::None, _) => Data::None,
        (DataKind::Verdict, Some(d)) => Data::Verdict(rule::verdict(d)?),
        (DataKind::Values(kinds), Some(d)) => Data::Values(tuple(d, kinds, false, family)?),
        _ => return None,
    };
    Some((key, Element { data, comment }))
}

/// A value or `{"concat": [..]}` of the given kinds. In an interval set the last address is a
/// network (the kernel shows a /32 or /128 as a plain address); earlier ones are addresses.
fn tuple(json: &Json, kinds: &[Kind], interval: bool, family: Family) -> Option<Tuple> {
    let parts: Vec<&Json> = match json.get("concat") {
        Some(Json::Array(a)) => a.iter().collect(),
        Some(_) => return None,
        None => vec![json],
    };
    if parts.len() != kinds.len() || parts.len() > Tuple::MAX {
        return None;
    }
    let last_addr = kinds.iter().rposition(|k| *k == Kind::Addr);
    let values = parts
        .iter()
        .zip(kinds)
        .enumerate()
        .map(|(i, (part, kind))| {
            let as_net = interval && Some(i) == last_addr;
            value(part, *kind, as_net, family)
        })
        .collect::<Option<Vec<Value>>>()?;
    Tuple::try_new(&values)
}

fn value(json: &Json, kind: Kind, as_net: bool, family: Family) -> Option<Value> {
    match kind {
        Kind::Addr if as_net => network(json, family).map(Value::Net),
        Kind::Addr => address(json.as_str()?, family).map(Value::Addr),
        Kind::Proto => rule::protocol(json).map(Value::Proto),
        Kind::Port => number(json)
            .and_then(|n| u16::try_from(n).ok())
            .map(Value::Port),
        Kind::Index => number(json)
            .and_then(|n| u32::try_from(n).ok())
            .map(Value::Index),
    }
}

fn number(json: &Json) -> Option<u64> {
    match json {
        Json::Number(n) => n.as_u64(),
        Json::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// An address of the table's family.
fn address(text: &str, family: Family) -> Option<IpAddr> {
    let addr: IpAddr = text.parse().ok()?;
    (matches!(
        (family, addr),
        (Family::Ip, IpAddr::V4(_)) | (Family::Ip6, IpAddr::V6(_))
    ))
    .then_some(addr)
}

/// A network from a plain address (full length) or `{"prefix": {"addr", "len"}}`.
fn network(json: &Json, family: Family) -> Option<IpNet> {
    if let Some(text) = json.as_str() {
        return Some(IpNet::from(address(text, family)?));
    }
    let prefix = json.get("prefix")?;
    let addr = address(prefix.get("addr")?.as_str()?, family)?;
    let len = u8::try_from(prefix.get("len")?.as_u64()?).ok()?;
    IpNet::new(addr, len).ok()
}

#[cfg(test)]
mod tests;
