//! The desired (or last applied) state of one nftables table, as typed values.
//!
//! Plain data, no I/O, no text: rules are typed matches and statements, set elements typed
//! tuples. Ordered maps throughout, so two equal states iterate, diff and render identically.
//! A mode's planner builds it, `diff` compares two, `render` is the only code that turns it
//! into nft syntax, and `trace` interprets it.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use super::Name;
pub use super::tuple::{Tuple, Values};
use crate::cluster::{IpFamily, Protocol};
/// Interface matches come from configuration only (the node policy's detect-local), never from
/// an API object.
pub use crate::dataplane::node::IfName;

/// The nftables family of the table: `ip` for IPv4, `ip6` for IPv6.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    Ip,
    Ip6,
}

impl Family {
    pub fn of(family: IpFamily) -> Family {
        match family {
            IpFamily::V4 => Family::Ip,
            IpFamily::V6 => Family::Ip6,
        }
    }

    pub fn ip_family(self) -> IpFamily {
        match self {
            Family::Ip => IpFamily::V4,
            Family::Ip6 => IpFamily::V6,
        }
    }
}

/// One table: its chains and its sets and maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ruleset {
    pub family: Family,
    pub chains: BTreeMap<Name, Chain>,
    pub sets: BTreeMap<Name, Set>,
}

impl Ruleset {
    /// A table with nothing in it: what a fresh node has, and the start of every plan.
    pub fn empty(family: Family) -> Ruleset {
        Ruleset {
            family,
            chains: BTreeMap::new(),
            sets: BTreeMap::new(),
        }
    }

    /// Adds empty base chains: (name, type, hook, priority) each.
    pub fn add_base_chains(&mut self, chains: &[(&'static str, ChainType, Hook, i32)]) {
        for &(name, kind, hook, priority) in chains {
            self.chains.insert(
                Name::fixed(name),
                Chain {
                    base: Some(BaseChain {
                        kind,
                        hook,
                        priority,
                    }),
                    rules: Vec::new(),
                },
            );
        }
    }

    /// Appends a rule to `chain`, made a regular chain first when the table has none of that
    /// name.
    pub fn push(&mut self, chain: &'static str, matches: Vec<Match>, statements: Vec<Statement>) {
        self.chains
            .entry(Name::fixed(chain))
            .or_default()
            .rules
            .push(Rule::new(matches, statements));
    }

    /// Adds an element to `set`, which must be declared. Of two equal keys the first added
    /// stays: a planner visiting its objects in a fixed order decides deterministically.
    pub fn element(
        &mut self,
        set: &'static str,
        key: Tuple,
        data: Data,
        comment: Option<&Comment>,
    ) {
        self.sets
            .get_mut(&Name::fixed(set))
            .unwrap_or_else(|| panic!("set {set} is not declared"))
            .elements_mut()
            .entry(key)
            .or_insert_with(|| Element {
                data,
                comment: comment.cloned(),
            });
    }

    /// Kernel objects this state consists of (chains, rules, sets, elements), for reports.
    pub fn objects(&self) -> usize {
        self.chains
            .values()
            .map(|c| 1 + c.rules.len())
            .sum::<usize>()
            + self
                .sets
                .values()
                .map(|s| 1 + s.elements.len())
                .sum::<usize>()
    }
}

/// A chain: base (attached to a hook) or regular (reached by jump, goto or a verdict map).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Chain {
    pub base: Option<BaseChain>,
    pub rules: Vec<Rule>,
}

/// Where a base chain hooks in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BaseChain {
    pub kind: ChainType,
    pub hook: Hook,
    /// Numeric priority; `render` prints the standard name where nft accepts it.
    pub priority: i32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainType {
    Filter,
    Nat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Hook {
    Prerouting,
    Input,
    Forward,
    Output,
    Postrouting,
}

impl Hook {
    /// As nft spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Hook::Prerouting => "prerouting",
            Hook::Input => "input",
            Hook::Forward => "forward",
            Hook::Output => "output",
            Hook::Postrouting => "postrouting",
        }
    }
}

/// Standard priorities (nft's `dstnat`, `filter`, `srcnat`).
pub mod priority {
    pub const DSTNAT: i32 = -100;
    pub const FILTER: i32 = 0;
    pub const SRCNAT: i32 = 100;
}

/// One rule: all matches must hold, then the statements run in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub matches: Vec<Match>,
    pub statements: Vec<Statement>,
}

impl Rule {
    pub fn new(matches: Vec<Match>, statements: Vec<Statement>) -> Rule {
        Rule {
            matches,
            statements,
        }
    }
}

/// A packet field, spelled for the table's family by `render`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Field {
    /// `ip saddr` / `ip6 saddr`.
    Saddr,
    /// `ip daddr` / `ip6 daddr`.
    Daddr,
    /// `meta l4proto`.
    L4Proto,
    /// `th dport`.
    Dport,
    /// `numgen random mod N`: a uniformly random index below N.
    Random(u32),
}

/// A condition of a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Match {
    /// `ct state new` / `ct state invalid`.
    CtState(CtState),
    /// `ct status dnat`: the connection was destination-NATed.
    CtStatusDnat,
    /// `fib saddr type local` (`false`: daddr): the address belongs to this host.
    FibLocal { source: bool },
    /// `ip saddr 10.0.0.0/8`, or with `negate` `ip saddr != 10.0.0.0/8`.
    Net {
        field: Field,
        net: IpNet,
        negate: bool,
    },
    /// `iifname "name"`, `iifname "prefix*"`, or their negation.
    Iifname { name: IfName, negate: bool },
    /// `<fields> @set`, or `<fields> != @set`.
    InSet {
        key: Vec<Field>,
        set: Name,
        negate: bool,
    },
    /// `meta mark & mask != 0`.
    MarkSet(u32),
    /// `meta l4proto tcp`.
    L4Proto(Protocol),
    /// `numgen random mod N == 0`: true with probability 1/N.
    OneIn(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CtState {
    New,
    Invalid,
}

/// An action of a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Statement {
    /// `meta mark set meta mark or M`.
    MarkOr(u32),
    /// `meta mark set meta mark xor M`.
    MarkXor(u32),
    /// `update @set { ip saddr }`: remember (or refresh) the client in a dynamic set.
    RememberSource(Name),
    /// `meta l4proto P dnat to ADDR:PORT`.
    DnatTo {
        protocol: Protocol,
        addr: IpAddr,
        port: u16,
    },
    /// `dnat to <key> map @map`: the map yields address . port; no element, no match.
    DnatMap {
        key: Vec<Field>,
        map: Name,
    },
    /// `masquerade fully-random`.
    Masquerade,
    Verdict(Verdict),
    /// `<key> vmap @map`: no element, no verdict (the next rule runs).
    VerdictMap {
        key: Vec<Field>,
        map: Name,
    },
}

/// A verdict, in a rule or as the data of a verdict-map element.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    Accept,
    Drop,
    /// `reject`: ICMP port unreachable. A statement, not a kernel verdict, but terminal.
    Reject,
    /// `reject with tcp reset`: a TCP RST, for a rule that matched TCP only. A connect() sees
    /// ECONNREFUSED at once; an ICMP error is rate-limited per host and can be lost while the
    /// socket is busy, so a burst of connects would hang. A statement too.
    RejectTcpReset,
    Return,
    Jump(Name),
    Goto(Name),
}

/// A set's elements, by key.
pub type Elements = BTreeMap<Tuple, Element>;

/// A set or map: its declaration and its elements.
///
/// The elements are shared, not owned: a transaction that adds a whole set (a cold start, a
/// new set, a rebuild) holds the plan's elements rather than a copy of them, and copying a
/// ruleset (the last applied state kept to tell an outside change) copies no element, which
/// at scale would be a second copy of the largest part of the plan. Writers go through
/// [`Set::elements_mut`], which copies only while someone else still holds the same elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Set {
    pub decl: SetDecl,
    pub elements: Arc<Elements>,
}

impl Set {
    pub fn new(decl: SetDecl) -> Set {
        Set {
            decl,
            elements: Arc::default(),
        }
    }

    /// The elements, to change (copied first if a transaction or a copy still shares them).
    pub fn elements_mut(&mut self) -> &mut Elements {
        Arc::make_mut(&mut self.elements)
    }
}

/// What the kernel fixes when a set is created; changing any of it means re-creating the set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetDecl {
    pub key: Vec<Kind>,
    pub data: DataKind,
    /// Elements are ranges (`flags interval`).
    pub interval: bool,
    /// Rules add elements with a timeout (`flags dynamic,timeout` and `timeout Ns`).
    pub dynamic_timeout: Option<u32>,
    pub comment: Option<Comment>,
}

impl SetDecl {
    /// A set or map whose elements are single keys, kept until deleted (no interval, no
    /// timeout), with a comment.
    pub fn plain(key: &[Kind], data: DataKind, comment: &str) -> SetDecl {
        SetDecl {
            key: key.to_vec(),
            data,
            interval: false,
            dynamic_timeout: None,
            comment: Some(Comment::sanitised(comment)),
        }
    }
}

/// The type of one part of a key or of map data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An address of the table's family (an interval set stores networks here too).
    Addr,
    Proto,
    Port,
    /// A `numgen` result.
    Index,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataKind {
    /// A plain set.
    None,
    /// A map to a tuple of these kinds (address . port for DNAT maps).
    Values(Vec<Kind>),
    /// A verdict map.
    Verdict,
}

/// One typed value of a key or of map data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Value {
    Addr(IpAddr),
    Net(IpNet),
    Proto(Protocol),
    Port(u16),
    Index(u32),
}

/// The data of an element (none for a plain set) and its comment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Element {
    pub data: Data,
    pub comment: Option<Comment>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Data {
    None,
    Values(Tuple),
    Verdict(Verdict),
}

/// A comment, made safe once: printable ASCII without quotes or backslashes, at most
/// [`Comment::MAX`] bytes. Object names from the API appear only here.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Comment(Arc<str>);

impl Comment {
    /// Below nft's 128-byte comment limit.
    pub const MAX: usize = 100;

    /// Keeps `[A-Za-z0-9 ./:_-]`, replaces anything else with `_`, and cuts at [`Comment::MAX`].
    pub fn sanitised(text: &str) -> Comment {
        Comment(crate::dataplane::comment::sanitise(text, Comment::MAX, &[]))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn building_appends_rules_in_order_and_keeps_the_first_element_of_a_key() {
        let mut r = Ruleset::empty(Family::Ip);
        r.push("c", vec![], vec![Statement::Masquerade]);
        r.push("c", vec![], vec![Statement::Verdict(Verdict::Accept)]);
        let c = &r.chains[&Name::fixed("c")];
        assert_eq!(c.base, None, "a chain made by push is a regular one");
        assert_eq!(
            c.rules,
            vec![
                Rule::new(vec![], vec![Statement::Masquerade]),
                Rule::new(vec![], vec![Statement::Verdict(Verdict::Accept)]),
            ]
        );

        let decl = SetDecl::plain(&[Kind::Port], DataKind::Verdict, "a \"map\"");
        assert!(!decl.interval && decl.dynamic_timeout.is_none());
        assert_eq!(decl.comment, Some(Comment::sanitised("a _map_")));
        r.sets.insert(Name::fixed("m"), Set::new(decl));
        let key = Tuple::new(&[Value::Port(80)]);
        r.element("m", key, Data::Verdict(Verdict::Drop), None);
        r.element("m", key, Data::Verdict(Verdict::Accept), None);
        assert_eq!(
            r.sets[&Name::fixed("m")].elements[&key].data,
            Data::Verdict(Verdict::Drop)
        );
    }

    #[test]
    fn comments_cannot_carry_quotes_newlines_or_length() {
        let c = Comment::sanitised("a\"b\n}; add rule x\\y\u{202e}");
        assert_eq!(c.as_str(), "a_b___ add rule x_y_");
        assert_eq!(
            Comment::sanitised(&"x".repeat(500)).as_str().len(),
            Comment::MAX
        );
    }
}
