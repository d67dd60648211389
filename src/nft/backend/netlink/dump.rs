//! nf_tables dump messages (`GETCHAIN`, `GETRULE`, `GETSET`, `GETSETELEM` answers) → our
//! [`Ruleset`], without going through nft's text: what adoption at start-up and the periodic
//! verification read.
//!
//! Pure, never panics on kernel input, and follows the rules of the JSON parser
//! ([`crate::nft::adopt`]): what it cannot express as our values is made to
//! differ (an unreadable rule becomes an empty rule, an unreadable set an empty key) and
//! objects the diff could not name are [`Parsed::foreign`], so the applier rebuilds. Elements
//! of dynamic sets are the kernel's (affinity clients) and are not read at all.

use std::net::IpAddr;
use std::sync::Arc;

use super::expr::{self, Data as KernelData};
use super::object::{self, concat_type, hook_of, kinds_len, range_net};
use super::rule::{self, Layout};
use super::uapi::{self, chain, datatype, elem, set, udata};
use crate::netlink::attr::{self, be32, be64, find, find_be32, find_str};
use crate::netlink::nfnetlink;
use crate::nft::adopt::Parsed;
use crate::nft::ruleset::{
    BaseChain, ChainType, Comment, Data, DataKind, Element, Elements, Family, Kind, Ruleset, Set,
    SetDecl, Tuple, Value,
};
use crate::nft::{self, Name};

/// A set's elements as the reader found them.
pub enum SetElements<'a> {
    /// The bodies of its `GETSETELEM` answers, to parse.
    Answers(&'a [Vec<u8>]),
    /// Already read and compared (a large set read by key): shared with the plan when the
    /// kernel holds exactly what it planned, so adopting an unchanged table copies no element.
    Read(Arc<Elements>),
}

/// Reads one family's table from its dump messages. `elements` gives, for a set name, its
/// elements (only asked for sets [`wants_elements`] says).
pub fn read<'a>(
    family: Family,
    chains: &[Vec<u8>],
    rules: &[Vec<u8>],
    sets: &[Vec<u8>],
    elements: &dyn Fn(&str) -> SetElements<'a>,
) -> Parsed {
    let mut p = Parsed {
        ruleset: Ruleset::empty(family),
        unknown: Vec::new(),
        foreign: Vec::new(),
    };
    // The kernel dumps every chain of the family whatever table the request names (sets and
    // rules it filters): on a node, iptables-nft's `filter`, `nat` and `mangle` chains come
    // too. Only what is in our table is ours.
    let ours = |a: &[u8], table_attribute| find_str(a, table_attribute) == Some(nft::TABLE);
    for body in chains {
        let a = nfnetlink::attributes(body);
        if ours(a, chain::TABLE) {
            read_chain(&mut p, a);
        }
    }
    for body in sets {
        let a = nfnetlink::attributes(body);
        if ours(a, set::TABLE) {
            read_set(&mut p, family, a, elements);
        }
    }
    for body in rules {
        let a = nfnetlink::attributes(body);
        if !ours(a, uapi::rule::TABLE) {
            continue;
        }
        let raw = find_str(a, uapi::rule::CHAIN).unwrap_or("?");
        let Some(name) = Name::parse(raw) else {
            p.foreign.push(format!("rule in chain {raw}"));
            continue;
        };
        let exprs = find(a, uapi::rule::EXPRESSIONS)
            .map(expr::read_list)
            .unwrap_or_default();
        let r = rule::decode(family, &exprs).unwrap_or_else(|why| {
            p.unknown.push(format!("rule in {raw}: {why}"));
            crate::nft::ruleset::Rule::new(Vec::new(), Vec::new())
        });
        p.ruleset.chains.entry(name).or_default().rules.push(r);
    }
    p
}

/// The name, declaration and element count (when the kernel tells it) of the set in this
/// `GETSET` answer, for adopting a large set by key instead of by dump.
pub fn set_summary(family: Family, body: &[u8]) -> Option<(&str, SetDecl, Option<u32>)> {
    let a = nfnetlink::attributes(body);
    Some((
        find_str(a, set::NAME)?,
        set_decl(family, a)?,
        find_be32(a, set::COUNT),
    ))
}

/// Whether the elements of the set in this `GETSET` answer are ours to read (dynamic sets'
/// are the kernel's), and its name.
pub fn wants_elements(body: &[u8]) -> Option<&str> {
    let a = nfnetlink::attributes(body);
    let flags = find_be32(a, set::FLAGS).unwrap_or(0);
    (flags & set::F_TIMEOUT == 0)
        .then(|| find_str(a, set::NAME))
        .flatten()
}

/// A base chain of any table, as `explain` names other programs' chains on a packet's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BaseChainSummary {
    /// nft's name of the table's family: `ip`, `ip6` or `inet` (the families whose chains
    /// see routed IP packets at these hooks).
    pub family: &'static str,
    pub table: String,
    pub chain: String,
    /// `filter`, `nat` or `route`.
    pub kind: String,
    pub hook: crate::nft::ruleset::Hook,
    pub priority: i32,
    /// The chain's policy drops what no rule of it accepts.
    pub drops: bool,
}

/// The table in this `GETTABLE` answer as nft names it, (`ip`, `kube-proxy`); `None` for a
/// family other than `ip`, `ip6` and `inet`.
pub fn table_summary(body: &[u8]) -> Option<(&'static str, String)> {
    let family = match *body.first()? {
        uapi::NFPROTO_INET => "inet",
        uapi::NFPROTO_IPV4 => "ip",
        uapi::NFPROTO_IPV6 => "ip6",
        _ => return None,
    };
    let name = find_str(nfnetlink::attributes(body), uapi::table::NAME)?;
    Some((family, name.to_owned()))
}

/// The base chain in this `GETCHAIN` answer; `None` for a regular chain or another family.
pub fn base_chain_summary(body: &[u8]) -> Option<BaseChainSummary> {
    let family = match *body.first()? {
        uapi::NFPROTO_INET => "inet",
        uapi::NFPROTO_IPV4 => "ip",
        uapi::NFPROTO_IPV6 => "ip6",
        _ => return None,
    };
    let a = nfnetlink::attributes(body);
    let hook = find(a, chain::HOOK)?;
    Some(BaseChainSummary {
        family,
        table: find_str(a, chain::TABLE)?.to_owned(),
        chain: find_str(a, chain::NAME)?.to_owned(),
        kind: find_str(a, chain::TYPE).unwrap_or("filter").to_owned(),
        hook: hook_of(find_be32(hook, chain::HOOK_NUM)?)?,
        priority: find(hook, chain::HOOK_PRIORITY).and_then(be32)? as i32,
        drops: find_be32(a, chain::POLICY).unwrap_or(chain::POLICY_ACCEPT) != chain::POLICY_ACCEPT,
    })
}

fn read_chain(p: &mut Parsed, a: &[u8]) {
    let raw = find_str(a, chain::NAME).unwrap_or("?");
    let Some(name) = Name::parse(raw) else {
        p.foreign.push(format!("chain {raw}"));
        return;
    };
    let base = match find(a, chain::HOOK) {
        None => None,
        Some(hook) => match base_chain(a, hook) {
            Some(b) => Some(b),
            None => {
                p.foreign.push(format!("base chain {raw}"));
                return;
            }
        },
    };
    p.ruleset.chains.entry(name).or_default().base = base;
}

fn base_chain(a: &[u8], hook: &[u8]) -> Option<BaseChain> {
    let kind = match find_str(a, chain::TYPE)? {
        "filter" => ChainType::Filter,
        "nat" => ChainType::Nat,
        _ => return None,
    };
    let policy = find_be32(a, chain::POLICY).unwrap_or(chain::POLICY_ACCEPT);
    if policy != chain::POLICY_ACCEPT
        || find(hook, chain::HOOK_DEV).is_some()
        || find(hook, chain::HOOK_DEVS).is_some()
    {
        return None;
    }
    Some(BaseChain {
        kind,
        hook: hook_of(find_be32(hook, chain::HOOK_NUM)?)?,
        priority: find(hook, chain::HOOK_PRIORITY).and_then(be32)? as i32,
    })
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

fn read_set<'a>(
    p: &mut Parsed,
    family: Family,
    a: &[u8],
    elements: &dyn Fn(&str) -> SetElements<'a>,
) {
    let raw = find_str(a, set::NAME).unwrap_or("?");
    let Some(name) = Name::parse(raw) else {
        p.foreign.push(format!("set {raw}"));
        return;
    };
    let Some(decl) = set_decl(family, a) else {
        p.unknown.push(format!("set {raw}: declaration"));
        p.ruleset.sets.insert(name, Set::new(unreadable_decl()));
        return;
    };
    let mut s = Set::new(decl);
    if s.decl.dynamic_timeout.is_none() {
        match elements(raw) {
            SetElements::Read(read) => s.elements = read,
            SetElements::Answers(bodies) => {
                let mut read = Elements::new();
                for body in bodies {
                    for found in elements_in(family, &s.decl, body) {
                        let Some((key, element)) = found else {
                            p.unknown.push(format!("set {raw}: an element"));
                            p.ruleset.sets.insert(name, Set::new(unreadable_decl()));
                            return;
                        };
                        read.insert(key, element);
                    }
                }
                s.elements = Arc::new(read);
            }
        }
    }
    p.ruleset.sets.insert(name, s);
}

/// The elements in one `GETSETELEM` answer of a set declared `decl`; `None` for one we cannot
/// read as our values.
pub fn elements_in<'b>(
    family: Family,
    decl: &'b SetDecl,
    body: &'b [u8],
) -> impl Iterator<Item = Option<(Tuple, Element)>> + 'b {
    let list = find(nfnetlink::attributes(body), elem::LIST_ELEMENTS).unwrap_or(&[]);
    attr::attrs(list)
        .filter(|(k, _)| *k == uapi::LIST_ELEM)
        .map(move |(_, e)| element(family, decl, e))
}

/// The kinds of a (concatenated) datatype id.
fn kinds(family: Family, mut id: u32) -> Option<Vec<Kind>> {
    let mut out = Vec::new();
    while id != 0 {
        let part = id & ((1 << datatype::CONCAT_BITS) - 1);
        out.push(match (part, family) {
            (datatype::IPADDR, Family::Ip) | (datatype::IP6ADDR, Family::Ip6) => Kind::Addr,
            (datatype::INET_PROTOCOL, _) => Kind::Proto,
            (datatype::INET_SERVICE, _) => Kind::Port,
            (datatype::INTEGER, _) => Kind::Index,
            _ => return None,
        });
        id >>= datatype::CONCAT_BITS;
    }
    out.reverse();
    (!out.is_empty() && out.len() <= Tuple::MAX).then_some(out)
}

fn set_decl(family: Family, a: &[u8]) -> Option<SetDecl> {
    let flags = find_be32(a, set::FLAGS).unwrap_or(0);
    let ours = set::F_MAP | set::F_INTERVAL | set::F_CONCAT | set::F_TIMEOUT | set::F_EVAL;
    if flags & !ours != 0 || find(a, set::EXPR).is_some() || find(a, set::EXPRESSIONS).is_some() {
        return None;
    }
    let key_type = find_be32(a, set::KEY_TYPE)?;
    let key = kinds(family, key_type)?;
    // A key type we would write differently (an `integer` of another width) reads as changed.
    if find_be32(a, set::KEY_LEN)? != kinds_len(family, &key)
        || concat_type(family, &key) != key_type
    {
        return None;
    }
    let data = if flags & set::F_MAP == 0 {
        DataKind::None
    } else {
        match find_be32(a, set::DATA_TYPE)? {
            set::DATA_VERDICT => DataKind::Verdict,
            id => {
                let v = kinds(family, id)?;
                if find_be32(a, set::DATA_LEN)? != kinds_len(family, &v) {
                    return None;
                }
                DataKind::Values(v)
            }
        }
    };
    let dynamic_timeout = if flags & set::F_TIMEOUT != 0 {
        Some(u32::try_from(find(a, set::TIMEOUT).and_then(be64)? / 1000).ok()?)
    } else {
        None
    };
    let comment = find(a, set::USERDATA)
        .and_then(|ud| tlv(ud, udata::SET_COMMENT))
        .and_then(attr::string)
        .map(Comment::sanitised);
    Some(SetDecl {
        key,
        data,
        interval: flags & set::F_INTERVAL != 0,
        dynamic_timeout,
        comment,
    })
}

/// The value of the first libnftnl userdata TLV of `kind`.
fn tlv(mut ud: &[u8], kind: u8) -> Option<&[u8]> {
    while ud.len() >= 2 {
        let (k, len) = (ud[0], usize::from(ud[1]));
        let value = ud.get(2..2 + len)?;
        if k == kind {
            return Some(value);
        }
        ud = &ud[2 + len..];
    }
    None
}

/// The keys of the elements in a set's `GETSETELEM` answers, whatever the set (a dynamic
/// set's too); unreadable elements are left out.
pub fn keys(family: Family, decl: &SetDecl, bodies: &[Vec<u8>]) -> Vec<Tuple> {
    bodies
        .iter()
        .flat_map(|body| elements_in(family, decl, body))
        .filter_map(|found| found.map(|(key, _)| key))
        .collect()
}

fn element(family: Family, d: &SetDecl, e: &[u8]) -> Option<(Tuple, Element)> {
    if find_be32(e, elem::FLAGS).unwrap_or(0) & elem::F_INTERVAL_END != 0 {
        return None;
    }
    let value = |kind| find(find(e, kind)?, uapi::data::VALUE);
    let start = value(elem::KEY)?;
    let end = match value(elem::KEY_END) {
        Some(end) if d.interval => Some(end),
        Some(_) => return None,
        None => None,
    };
    let key = tuple(family, &d.key, start, end)?;
    let data = match (&d.data, find(e, elem::DATA).and_then(expr::read_data)) {
        (DataKind::None, None) => Data::None,
        (DataKind::Values(kinds), Some(KernelData::Value(bytes))) => {
            Data::Values(tuple(family, kinds, &bytes, None)?)
        }
        (DataKind::Verdict, Some(KernelData::Verdict(v))) => Data::Verdict(rule::verdict(&v)?),
        _ => return None,
    };
    let comment = find(e, elem::USERDATA)
        .and_then(|ud| tlv(ud, udata::ELEM_COMMENT))
        .and_then(attr::string)
        .map(Comment::sanitised);
    Some((key, Element { data, comment }))
}

/// A key or data from its bytes; with `end`, the last address is a network (a range).
fn tuple(family: Family, kinds: &[Kind], bytes: &[u8], end: Option<&[u8]>) -> Option<Tuple> {
    if bytes.len() != kinds_len(family, kinds) as usize
        || end.is_some_and(|e| e.len() != bytes.len())
    {
        return None;
    }
    let concat = kinds.len() > 1;
    let last_addr = kinds.iter().rposition(|k| *k == Kind::Addr);
    let mut offset = 0;
    let mut values = Vec::with_capacity(kinds.len());
    for (i, k) in kinds.iter().enumerate() {
        let len = object::kind_len(family, *k) as usize;
        let part = bytes.get(offset..offset + len)?;
        let end_part = end.map(|e| &e[offset..offset + len]);
        let v = match k {
            Kind::Addr => {
                let a = address(family, part)?;
                match end_part {
                    Some(e) if Some(i) == last_addr => {
                        Value::Net(range_net(a, address(family, e)?)?)
                    }
                    Some(e) if e != part => return None,
                    _ => Value::Addr(a),
                }
            }
            other => {
                if end_part.is_some_and(|e| e != part) {
                    return None;
                }
                match other {
                    Kind::Proto => Value::Proto(rule::protocol(part[0])?),
                    Kind::Port => Value::Port(u16::from_be_bytes(part.try_into().ok()?)),
                    _ => Value::Index(u32::from_ne_bytes(part.try_into().ok()?)),
                }
            }
        };
        values.push(v);
        offset += if concat { len.next_multiple_of(4) } else { len };
    }
    Tuple::try_new(&values)
}

fn address(family: Family, bytes: &[u8]) -> Option<IpAddr> {
    let l = Layout { family };
    (bytes.len() == l.addr_len() as usize).then_some(())?;
    match family {
        Family::Ip => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
        Family::Ip6 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
    }
}
