//! [`Transaction`] → input for `nft -f -`: the only place nftables rule text is made.
//!
//! Pure, total. Written for nft 1.0.6 (Debian 12): no `destroy` command, and standard priority
//! names only on the hooks that version accepts them on (`dstnat` on prerouting, `srcnat` on
//! postrouting, `filter` anywhere), numbers elsewhere.
//!
//! Nothing needs escaping here by construction: names are [`Name`](super::Name)s (`[a-z0-9-]`), interface
//! names [`IfName`]s, comments [`Comment`]s (no quotes, no backslashes, no newlines), and every
//! other value is a typed number or address. So no input can end a string or add a statement.
//! The text encoder is selectable with `--nftables-encoder=nft` (the default is the netlink
//! encoder, `super::backend::netlink`); its text also quotes failing operations in netlink errors.

use std::fmt::Write as _;
use std::net::IpAddr;

use super::diff::{Op, Transaction, diff};
use super::ruleset::{
    BaseChain, ChainType, Comment, CtState, Data, DataKind, Element, Family, Field, Hook, IfName,
    Kind, Match, Rule, Ruleset, SetDecl, Statement, Tuple, Value, Verdict, priority,
};
use super::{TABLE, TABLE_COMMENT};
use crate::cluster::Protocol;

/// Turns a transaction into what a backend sends to the kernel.
pub trait Encoder {
    type Output;
    fn encode(&self, transaction: &Transaction) -> Self::Output;
}

/// The `nft -f -` text encoder.
#[derive(Clone, Copy, Debug, Default)]
pub struct NftText;

impl Encoder for NftText {
    type Output = String;
    fn encode(&self, transaction: &Transaction) -> String {
        render(transaction)
    }
}

/// Elements per `add element` command: keeps lines of a cold load at a size nft parses quickly.
const ELEMENTS_PER_COMMAND: usize = 1000;

/// The script for one transaction; empty for an empty transaction.
pub fn render(t: &Transaction) -> String {
    let mut out = String::with_capacity(64 * t.operations() + 64);
    let table = format!(
        "{} {}",
        match t.family {
            Family::Ip => "ip",
            Family::Ip6 => "ip6",
        },
        TABLE
    );
    for op in &t.ops {
        match op {
            Op::AddTable => {
                let _ = writeln!(
                    out,
                    "add table {table} {{ comment \"{}\" ; }}",
                    TABLE_COMMENT
                );
            }
            Op::DeleteTable => {
                let _ = writeln!(out, "delete table {table}");
            }
            Op::AddChain { name, base: None } => {
                let _ = writeln!(out, "add chain {table} {name}");
            }
            Op::AddChain {
                name,
                base: Some(base),
            } => {
                let _ = writeln!(out, "add chain {table} {name} {{ {} }}", base_chain(base));
            }
            Op::FlushChain(name) => {
                let _ = writeln!(out, "flush chain {table} {name}");
            }
            Op::DeleteChain(name) => {
                let _ = writeln!(out, "delete chain {table} {name}");
            }
            Op::AddRule { chain, rule: r } => {
                let _ = write!(out, "add rule {table} {chain} ");
                rule(&mut out, t.family, r);
                out.push('\n');
            }
            Op::AddSet { name, decl } => {
                let what = if decl.data == DataKind::None {
                    "set"
                } else {
                    "map"
                };
                let _ = writeln!(
                    out,
                    "add {what} {table} {name} {{ {}}}",
                    set_decl(t.family, decl)
                );
            }
            Op::DeleteSet(name) => {
                // nft 1.0.6 deletes a map with `delete set` as well (the kernel has one kind).
                let _ = writeln!(out, "delete set {table} {name}");
            }
            Op::AddElements { set, elements } => {
                let mut rest = elements.iter().peekable();
                while rest.peek().is_some() {
                    let _ = write!(out, "add element {table} {set} {{ ");
                    for (i, (key, e)) in rest.by_ref().take(ELEMENTS_PER_COMMAND).enumerate() {
                        if i > 0 {
                            out.push_str(", ");
                        }
                        element(&mut out, key, e);
                    }
                    out.push_str(" }\n");
                }
            }
            Op::DeleteElements { set, keys } => {
                for chunk in keys.chunks(ELEMENTS_PER_COMMAND) {
                    let _ = write!(out, "delete element {table} {set} {{ ");
                    for (i, key) in chunk.iter().enumerate() {
                        if i > 0 {
                            out.push_str(", ");
                        }
                        tuple(&mut out, key);
                    }
                    out.push_str(" }\n");
                }
            }
        }
    }
    out
}

/// The scripts of several transactions (both families) as one batch: `nft -f` applies a whole
/// file atomically.
pub fn render_all(transactions: &[Transaction]) -> String {
    transactions.iter().map(render).collect()
}

/// The full scripts that create these tables (both families) from nothing: what `plan`
/// prints for a mode that programs nf_tables, and the nftables mode's goldens.
pub fn render_from_scratch(rulesets: &[Ruleset]) -> String {
    let ts: Vec<Transaction> = rulesets
        .iter()
        .map(|r| diff(&Ruleset::empty(r.family), r))
        .collect();
    render_all(&ts)
}

fn base_chain(b: &BaseChain) -> String {
    let kind = match b.kind {
        ChainType::Filter => "filter",
        ChainType::Nat => "nat",
    };
    let hook = b.hook.as_str();
    format!(
        "type {kind} hook {hook} priority {} ;",
        priority_text(b.hook, b.priority)
    )
}

/// A standard name plus offset where nft 1.0.6 allows that name on the hook, else a number.
/// Any `i32` renders: a base chain read from the kernel may hold the extremes, whose distance
/// to a name does not fit an `i32`.
fn priority_text(hook: Hook, value: i32) -> String {
    let named = [
        ("filter", priority::FILTER, true),
        ("dstnat", priority::DSTNAT, hook == Hook::Prerouting),
        ("srcnat", priority::SRCNAT, hook == Hook::Postrouting),
    ];
    let best = named
        .iter()
        .filter(|(_, base, allowed)| *allowed && value.abs_diff(*base) <= 50)
        .min_by_key(|(_, base, _)| value.abs_diff(*base));
    match best {
        Some((name, base, _)) if value == *base => (*name).to_string(),
        Some((name, base, _)) if value > *base => format!("{name} + {}", value - base),
        Some((name, base, _)) => format!("{name} - {}", base - value),
        None => value.to_string(),
    }
}

fn family_word(family: Family) -> &'static str {
    match family {
        Family::Ip => "ip",
        Family::Ip6 => "ip6",
    }
}

fn field(out: &mut String, family: Family, f: Field) {
    match f {
        Field::Saddr => {
            let _ = write!(out, "{} saddr", family_word(family));
        }
        Field::Daddr => {
            let _ = write!(out, "{} daddr", family_word(family));
        }
        Field::L4Proto => out.push_str("meta l4proto"),
        Field::Dport => out.push_str("th dport"),
        Field::Random(n) => {
            let _ = write!(out, "numgen random mod {n}");
        }
    }
}

fn fields(out: &mut String, family: Family, key: &[Field]) {
    for (i, f) in key.iter().enumerate() {
        if i > 0 {
            out.push_str(" . ");
        }
        field(out, family, *f);
    }
}

fn rule(out: &mut String, family: Family, r: &Rule) {
    let mut first = true;
    let mut sep = |out: &mut String| {
        if !first {
            out.push(' ');
        }
        first = false;
    };
    for m in &r.matches {
        sep(out);
        match_text(out, family, m);
    }
    for s in &r.statements {
        sep(out);
        statement(out, family, s);
    }
}

fn match_text(out: &mut String, family: Family, m: &Match) {
    let not = |negate: bool| if negate { "!= " } else { "" };
    match m {
        Match::CtState(CtState::New) => out.push_str("ct state new"),
        Match::CtState(CtState::Invalid) => out.push_str("ct state invalid"),
        Match::CtStatusDnat => out.push_str("ct status dnat"),
        Match::FibLocal { source } => {
            let _ = write!(
                out,
                "fib {} type local",
                if *source { "saddr" } else { "daddr" }
            );
        }
        Match::Net {
            field: f,
            net,
            negate,
        } => {
            field(out, family, *f);
            let _ = write!(out, " {}{net}", not(*negate));
        }
        Match::Iifname { name, negate } => {
            let _ = write!(out, "iifname {}{}", not(*negate), ifname(name));
        }
        Match::InSet { key, set, negate } => {
            fields(out, family, key);
            let _ = write!(out, " {}@{set}", not(*negate));
        }
        Match::MarkSet(mask) => {
            let _ = write!(out, "meta mark & {mask:#010x} != 0");
        }
        Match::L4Proto(p) => {
            let _ = write!(out, "meta l4proto {}", proto(*p));
        }
        Match::OneIn(n) => {
            let _ = write!(out, "numgen random mod {n} == 0");
        }
    }
}

fn ifname(name: &IfName) -> String {
    format!(
        "\"{}{}\"",
        name.as_str(),
        if name.is_prefix() { "*" } else { "" }
    )
}

fn statement(out: &mut String, family: Family, s: &Statement) {
    match s {
        Statement::MarkOr(mask) => {
            let _ = write!(out, "meta mark set meta mark or {mask:#010x}");
        }
        Statement::MarkXor(mask) => {
            let _ = write!(out, "meta mark set meta mark xor {mask:#010x}");
        }
        Statement::RememberSource(set) => {
            let _ = write!(out, "update @{set} {{ {} saddr }}", family_word(family));
        }
        Statement::DnatTo {
            protocol,
            addr,
            port,
        } => {
            let _ = match addr {
                IpAddr::V4(a) => {
                    write!(out, "meta l4proto {} dnat to {a}:{port}", proto(*protocol))
                }
                IpAddr::V6(a) => {
                    write!(
                        out,
                        "meta l4proto {} dnat to [{a}]:{port}",
                        proto(*protocol)
                    )
                }
            };
        }
        Statement::DnatMap { key, map } => {
            out.push_str("dnat to ");
            fields(out, family, key);
            let _ = write!(out, " map @{map}");
        }
        Statement::Masquerade => out.push_str("masquerade fully-random"),
        Statement::Verdict(v) => verdict(out, v),
        Statement::VerdictMap { key, map } => {
            fields(out, family, key);
            let _ = write!(out, " vmap @{map}");
        }
    }
}

fn verdict(out: &mut String, v: &Verdict) {
    match v {
        Verdict::Accept => out.push_str("accept"),
        Verdict::Drop => out.push_str("drop"),
        Verdict::Reject => out.push_str("reject"),
        Verdict::RejectTcpReset => out.push_str("reject with tcp reset"),
        Verdict::Return => out.push_str("return"),
        Verdict::Jump(to) => {
            let _ = write!(out, "jump {to}");
        }
        Verdict::Goto(to) => {
            let _ = write!(out, "goto {to}");
        }
    }
}

fn proto(p: Protocol) -> &'static str {
    match p {
        Protocol::Tcp => "tcp",
        Protocol::Udp => "udp",
        Protocol::Sctp => "sctp",
    }
}

/// `type ...` where every part has a named type, else `typeof` (an index has no named type of
/// the right width: nft 1.0.6 refuses `mark` for a `numgen` result).
fn set_decl(family: Family, d: &SetDecl) -> String {
    let typed = !d.key.contains(&Kind::Index);
    let kinds = |kinds: &[Kind]| -> String {
        let parts: Vec<String> = kinds.iter().map(|k| kind_text(family, *k, typed)).collect();
        parts.join(" . ")
    };
    let mut s = format!(
        "{} {}",
        if typed { "type" } else { "typeof" },
        kinds(&d.key)
    );
    match &d.data {
        DataKind::None => {}
        DataKind::Values(v) => {
            let _ = write!(s, " : {}", kinds(v));
        }
        DataKind::Verdict => s.push_str(" : verdict"),
    }
    s.push_str(" ; ");
    if d.interval {
        s.push_str("flags interval ; ");
    }
    if let Some(timeout) = d.dynamic_timeout {
        let _ = write!(s, "flags dynamic,timeout ; timeout {timeout}s ; ");
    }
    if let Some(c) = &d.comment {
        let _ = write!(s, "comment {} ; ", comment(c));
    }
    s
}

fn kind_text(family: Family, k: Kind, typed: bool) -> String {
    match (k, typed) {
        (Kind::Addr, true) => match family {
            Family::Ip => "ipv4_addr".into(),
            Family::Ip6 => "ipv6_addr".into(),
        },
        (Kind::Addr, false) => format!("{} daddr", family_word(family)),
        (Kind::Proto, true) => "inet_proto".into(),
        (Kind::Proto, false) => "meta l4proto".into(),
        (Kind::Port, true) => "inet_service".into(),
        (Kind::Port, false) => "th dport".into(),
        (Kind::Index, _) => "numgen random mod 1".into(),
    }
}

fn comment(c: &Comment) -> String {
    format!("\"{}\"", c.as_str())
}

fn value(out: &mut String, v: &Value) {
    let _ = match v {
        Value::Addr(a) => write!(out, "{a}"),
        Value::Net(n) => write!(out, "{n}"),
        Value::Proto(p) => write!(out, "{}", proto(*p)),
        Value::Port(p) => write!(out, "{p}"),
        Value::Index(i) => write!(out, "{i}"),
    };
}

fn tuple(out: &mut String, t: &Tuple) {
    for (i, v) in t.values().iter().enumerate() {
        if i > 0 {
            out.push_str(" . ");
        }
        value(out, v);
    }
}

fn element(out: &mut String, key: &Tuple, e: &Element) {
    tuple(out, key);
    if let Some(c) = &e.comment {
        let _ = write!(out, " comment {}", comment(c));
    }
    match &e.data {
        Data::None => {}
        Data::Values(t) => {
            out.push_str(" : ");
            tuple(out, t);
        }
        Data::Verdict(v) => {
            out.push_str(" : ");
            verdict(out, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_use_names_only_where_nft_1_0_6_accepts_them() {
        assert_eq!(priority_text(Hook::Prerouting, -100), "dstnat");
        assert_eq!(priority_text(Hook::Prerouting, -110), "dstnat - 10");
        assert_eq!(priority_text(Hook::Output, -100), "-100");
        assert_eq!(priority_text(Hook::Output, -110), "-110");
        assert_eq!(priority_text(Hook::Postrouting, 100), "srcnat");
        assert_eq!(priority_text(Hook::Forward, 0), "filter");
    }

    #[test]
    fn the_extreme_priorities_render_as_numbers() {
        for hook in [Hook::Prerouting, Hook::Postrouting, Hook::Forward] {
            assert_eq!(priority_text(hook, i32::MIN), "-2147483648");
            assert_eq!(priority_text(hook, i32::MAX), "2147483647");
        }
    }

    #[test]
    fn an_empty_transaction_renders_nothing() {
        let t = Transaction {
            family: Family::Ip,
            ops: vec![],
        };
        assert_eq!(render(&t), "");
    }
}
