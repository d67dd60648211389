//! One rule's `expr` list from nft JSON → a typed [`Rule`]: the inverse of `render`'s rule text.
//!
//! Pure. Knows exactly the matches and statements `render` writes; anything else is an error
//! the caller turns into "this rule differs".

use serde_json::Value as Json;

use super::{address, network, number};
use crate::cluster::Protocol;
use crate::nft::Name;
use crate::nft::ruleset::{CtState, Family, Field, IfName, Match, Rule, Statement, Verdict};

/// A rule no plan has: the chain holding it is flushed and refilled.
pub(super) fn unreadable() -> Rule {
    Rule::new(Vec::new(), Vec::new())
}

/// One parsed expression: a match, a statement, or the address part of `meta l4proto P dnat to
/// ADDR:PORT` (joined with the protocol match before it).
enum Item {
    Match(Match),
    Statement(Statement),
    DnatTo(std::net::IpAddr, u16),
}

/// Why a rule's `expr` is not a rule `render` writes.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ParseError {
    /// The rule has no `expr` array.
    #[error("no expression list")]
    NoExpressions,
    /// An expression `render` never writes.
    #[error("expression {0}")]
    Unknown(Json),
    /// `dnat to ADDR:PORT` not after the `meta l4proto` match `render` puts before it.
    #[error("dnat to an address without a protocol match")]
    DnatWithoutProtocol,
    /// A match after a statement: our rules match first.
    #[error("a match after a statement")]
    MatchAfterStatement,
    /// No expressions: no rule of ours is empty.
    #[error("an empty rule")]
    Empty,
}

pub(super) fn parse(expr: Option<&Json>, family: Family) -> Result<Rule, ParseError> {
    let list = expr
        .and_then(Json::as_array)
        .ok_or(ParseError::NoExpressions)?;
    let mut items: Vec<Item> = Vec::with_capacity(list.len());
    for e in list {
        match item(e, family) {
            Some(Item::DnatTo(addr, port)) => match items.pop() {
                Some(Item::Match(Match::L4Proto(protocol))) => {
                    items.push(Item::Statement(Statement::DnatTo {
                        protocol,
                        addr,
                        port,
                    }));
                }
                _ => return Err(ParseError::DnatWithoutProtocol),
            },
            Some(Item::Statement(Statement::Verdict(Verdict::RejectTcpReset))) => {
                // nft prints `meta l4proto tcp reject with tcp reset` as the bare reject: the
                // match is the reset's implied dependency, still in the kernel, hidden in listings.
                if !matches!(
                    items.last(),
                    Some(Item::Match(Match::L4Proto(Protocol::Tcp)))
                ) {
                    items.push(Item::Match(Match::L4Proto(Protocol::Tcp)));
                }
                items.push(Item::Statement(Statement::Verdict(Verdict::RejectTcpReset)));
            }
            Some(i) => items.push(i),
            None => return Err(ParseError::Unknown(e.clone())),
        }
    }
    let mut rule = unreadable();
    for i in items {
        match i {
            Item::Match(m) if rule.statements.is_empty() => rule.matches.push(m),
            Item::Statement(s) => rule.statements.push(s),
            _ => return Err(ParseError::MatchAfterStatement),
        }
    }
    if rule.matches.is_empty() && rule.statements.is_empty() {
        return Err(ParseError::Empty);
    }
    Ok(rule)
}

fn item(e: &Json, family: Family) -> Option<Item> {
    let (kind, body) = e.as_object()?.iter().next()?;
    let statement = |s| Some(Item::Statement(s));
    match kind.as_str() {
        "match" => matcher(body, family).map(Item::Match),
        "mangle" => mark(body).map(Item::Statement),
        "set" => {
            // `update @set { ip saddr }`
            (body.get("op")?.as_str()? == "update"
                && fields(body.get("elem")?, family)? == [Field::Saddr])
            .then_some(())?;
            statement(Statement::RememberSource(set_ref(body.get("set")?)?))
        }
        "dnat" => {
            let addr = body.get("addr")?;
            if let Some(map) = addr.get("map") {
                return statement(Statement::DnatMap {
                    key: fields(map.get("key")?, family)?,
                    map: set_ref(map.get("data")?)?,
                });
            }
            let addr = address(addr.as_str()?, family)?;
            let port = u16::try_from(number(body.get("port")?)?).ok()?;
            Some(Item::DnatTo(addr, port))
        }
        "masquerade" => {
            let flags = body.get("flags")?;
            let fully_random = flags.as_str() == Some("fully-random")
                || flags
                    .as_array()
                    .is_some_and(|a| a.len() == 1 && a[0].as_str() == Some("fully-random"));
            fully_random.then_some(())?;
            statement(Statement::Masquerade)
        }
        "vmap" => statement(Statement::VerdictMap {
            key: fields(body.get("key")?, family)?,
            map: set_ref(body.get("data")?)?,
        }),
        "reject" if body.get("type").and_then(Json::as_str) == Some("tcp reset") => {
            statement(Statement::Verdict(Verdict::RejectTcpReset))
        }
        "reject" => {
            let default = body.is_null()
                || (matches!(
                    body.get("type").and_then(Json::as_str),
                    Some("icmp" | "icmpv6" | "icmpx")
                ) && body.get("expr").and_then(Json::as_str) == Some("port-unreachable"));
            default.then_some(())?;
            statement(Statement::Verdict(Verdict::Reject))
        }
        _ => statement(Statement::Verdict(verdict(e)?)),
    }
}

/// A verdict, in a rule or as verdict-map data: `{"accept": null}`, `{"goto": {"target": ..}}`.
pub(super) fn verdict(e: &Json) -> Option<Verdict> {
    let (kind, body) = e.as_object()?.iter().next()?;
    let target = || Name::parse(body.get("target")?.as_str()?);
    match kind.as_str() {
        "accept" => Some(Verdict::Accept),
        "drop" => Some(Verdict::Drop),
        "return" => Some(Verdict::Return),
        "jump" => target().map(Verdict::Jump),
        "goto" => target().map(Verdict::Goto),
        _ => None,
    }
}

/// `"tcp"` or its number.
pub(super) fn protocol(json: &Json) -> Option<Protocol> {
    match json {
        Json::String(s) if s == "tcp" => Some(Protocol::Tcp),
        Json::String(s) if s == "udp" => Some(Protocol::Udp),
        Json::String(s) if s == "sctp" => Some(Protocol::Sctp),
        other => match number(other)? {
            6 => Some(Protocol::Tcp),
            17 => Some(Protocol::Udp),
            132 => Some(Protocol::Sctp),
            _ => None,
        },
    }
}

/// `"@name"` → the set's name.
fn set_ref(json: &Json) -> Option<Name> {
    Name::parse(json.as_str()?.strip_prefix('@')?)
}

fn field(json: &Json, family: Family) -> Option<Field> {
    let family_word = match family {
        Family::Ip => "ip",
        Family::Ip6 => "ip6",
    };
    if let Some(p) = json.get("payload") {
        return match (p.get("protocol")?.as_str()?, p.get("field")?.as_str()?) {
            (proto, "saddr") if proto == family_word => Some(Field::Saddr),
            (proto, "daddr") if proto == family_word => Some(Field::Daddr),
            // The same bytes (the transport header's destination port): nft 1.0.6 can list a
            // `th dport` key as `tcp dport` when the map it feeds was declared with `tcp dport`,
            // as a table written by another version might be.
            ("th" | "tcp" | "udp" | "sctp", "dport") => Some(Field::Dport),
            _ => None,
        };
    }
    if json.get("meta")?.get("key")?.as_str()? == "l4proto" {
        return Some(Field::L4Proto);
    }
    None
}

/// One field, a `numgen`, or `{"concat": [..]}` of them.
fn fields(json: &Json, family: Family) -> Option<Vec<Field>> {
    let one = |j: &Json| match j.get("numgen") {
        Some(n) => numgen(n).map(Field::Random),
        None => field(j, family),
    };
    match json.get("concat") {
        Some(parts) => parts.as_array()?.iter().map(one).collect(),
        None => one(json).map(|f| vec![f]),
    }
}

/// `numgen random mod N` (offset 0) → N.
fn numgen(n: &Json) -> Option<u32> {
    (n.get("mode")?.as_str()? == "random"
        && n.get("offset").and_then(Json::as_u64).unwrap_or(0) == 0)
        .then_some(())?;
    u32::try_from(n.get("mod")?.as_u64()?).ok()
}

fn meta_key(json: &Json) -> Option<&str> {
    json.get("meta")?.get("key")?.as_str()
}

fn matcher(body: &Json, family: Family) -> Option<Match> {
    let op = body.get("op")?.as_str()?;
    let left = body.get("left")?;
    let right = body.get("right")?;
    let negate = match op {
        "==" | "in" => false,
        "!=" => true,
        _ => return None,
    };
    if let Some(set) = right.as_str().and_then(|r| r.strip_prefix('@')) {
        return Some(Match::InSet {
            key: fields(left, family)?,
            set: Name::parse(set)?,
            negate,
        });
    }
    if let Some(ct) = left.get("ct") {
        if negate {
            return None;
        }
        return match (ct.get("key")?.as_str()?, one_word(right)?) {
            ("state", "new") => Some(Match::CtState(CtState::New)),
            ("state", "invalid") => Some(Match::CtState(CtState::Invalid)),
            ("status", "dnat") => Some(Match::CtStatusDnat),
            _ => None,
        };
    }
    if let Some(fib) = left.get("fib") {
        let flags = fib.get("flags")?.as_array()?;
        let source = match flags.iter().map(Json::as_str).collect::<Vec<_>>()[..] {
            [Some("saddr")] => true,
            [Some("daddr")] => false,
            _ => return None,
        };
        return (!negate && fib.get("result")?.as_str()? == "type" && one_word(right)? == "local")
            .then_some(Match::FibLocal { source });
    }
    if let Some(and) = left.get("&") {
        // `meta mark & M != 0`
        let [mark, mask] = and.as_array()?.as_slice() else {
            return None;
        };
        return (negate && meta_key(mark)? == "mark" && number(right)? == 0)
            .then_some(Match::MarkSet(u32::try_from(number(mask)?).ok()?));
    }
    if let Some(n) = left.get("numgen") {
        return (!negate && number(right)? == 0).then_some(Match::OneIn(numgen(n)?));
    }
    match meta_key(left) {
        Some("iifname") => {
            let text = right.as_str()?;
            let (name, prefix) = match text.strip_suffix('*') {
                Some(stem) => (stem, true),
                None => (text, false),
            };
            return Some(Match::Iifname {
                name: IfName::new(name, prefix)?,
                negate,
            });
        }
        Some("l4proto") if !negate => return protocol(right).map(Match::L4Proto),
        Some(_) => return None,
        None => {}
    }
    let f = field(left, family)?;
    matches!(f, Field::Saddr | Field::Daddr).then_some(())?;
    Some(Match::Net {
        field: f,
        net: network(right, family)?,
        negate,
    })
}

/// `"new"` or `["new"]`.
fn one_word(json: &Json) -> Option<&str> {
    match json {
        Json::String(s) => Some(s),
        Json::Array(a) if a.len() == 1 => a[0].as_str(),
        _ => None,
    }
}

/// `meta mark set meta mark or|xor M`.
fn mark(body: &Json) -> Option<Statement> {
    (meta_key(body.get("key")?)? == "mark").then_some(())?;
    let value = body.get("value")?;
    let (op, operands) = value.as_object()?.iter().next()?;
    let [left, mask] = operands.as_array()?.as_slice() else {
        return None;
    };
    (meta_key(left)? == "mark").then_some(())?;
    let mask = u32::try_from(number(mask)?).ok()?;
    match op.as_str() {
        "|" => Some(Statement::MarkOr(mask)),
        "^" => Some(Statement::MarkXor(mask)),
        _ => None,
    }
}
