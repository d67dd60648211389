//! The typed desired state of one IP family: per table, our chains and their rules, and the jump
//! rules we keep in the built-in chains.
//!
//! Plain data, no I/O. Every value that came from an API object is typed (addresses, ports,
//! protocols) or a [`Comment`], which can only hold characters that are harmless inside a quoted
//! `iptables-restore` word; interface names are [`IfName`]s. So rendering cannot be made to add
//! a rule by a hostile name.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use super::names::ChainName;
use crate::cluster::{IpFamily, NodeContext, Protocol, ServicePortName, ServicePortState};
/// Interface matches come from configuration only (the node policy's detect-local), never from
/// an API object; rendered as `name` or `name+`.
pub use crate::dataplane::node::IfName;

/// The tables we write to, in the order they are rendered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    Mangle,
    Nat,
    Filter,
}

impl Table {
    pub const ALL: [Table; 3] = [Table::Mangle, Table::Nat, Table::Filter];

    /// This table's place in [`Table::ALL`], for per-table arrays.
    pub const fn index(self) -> usize {
        match self {
            Table::Mangle => 0,
            Table::Nat => 1,
            Table::Filter => 2,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Table::Mangle => "mangle",
            Table::Nat => "nat",
            Table::Filter => "filter",
        }
    }
}

/// A built-in chain we add jump rules to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Builtin {
    Prerouting,
    Input,
    Forward,
    Output,
    Postrouting,
}

impl Builtin {
    pub fn as_str(self) -> &'static str {
        match self {
            Builtin::Prerouting => "PREROUTING",
            Builtin::Input => "INPUT",
            Builtin::Forward => "FORWARD",
            Builtin::Output => "OUTPUT",
            Builtin::Postrouting => "POSTROUTING",
        }
    }
}

/// The desired state of one family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ruleset {
    pub family: IpFamily,
    /// The fixed chains (with the rules service ports add to them, in snapshot order) and the
    /// jumps from built-in chains.
    pub tables: BTreeMap<Table, Chains>,
    /// Each service port's own chains (`KUBE-SVC/SVL/EXT/FW/SEP`, all in nat) and the rules it
    /// adds to fixed chains. Shared, so an unchanged port is reused by the next plan and
    /// skipped by the partial diff without comparing its rules.
    pub ports: BTreeMap<ServicePortName, Arc<PortRules>>,
    /// What every port's rules were planned under; a next plan reuses a port's rules only
    /// under the same.
    pub context: Context,
}

/// The inputs besides a port's own state that its rules depend on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Context {
    pub node: Arc<NodeContext>,
    /// Large-cluster mode (no per-endpoint comments).
    pub large: bool,
}

/// One service port's part of a ruleset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortRules {
    /// The state these rules were planned from.
    pub source: Arc<ServicePortState>,
    /// Its own nat chains.
    pub chains: BTreeMap<ChainName, Vec<Rule>>,
    /// Rules it appends to fixed chains, in order.
    pub shared: Vec<(Table, ChainName, Rule)>,
}

/// One table: our chains (each declared, so `iptables-restore --noflush` flushes and refills
/// it) and the rules jumping into them from built-in chains (ensured, never flushed: the
/// built-in chains hold other programs' rules too).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Chains {
    pub chains: BTreeMap<ChainName, Vec<Rule>>,
    /// In the order they must appear at the head of their built-in chain.
    pub jumps: Vec<(Builtin, Rule)>,
}

impl Ruleset {
    pub fn empty(family: IpFamily) -> Ruleset {
        Ruleset {
            family,
            tables: Table::ALL.map(|t| (t, Chains::default())).into(),
            ports: BTreeMap::new(),
            context: Context::default(),
        }
    }

    pub fn table(&self, t: Table) -> &Chains {
        &self.tables[&t]
    }

    pub fn table_mut(&mut self, t: Table) -> &mut Chains {
        self.tables.entry(t).or_default()
    }

    /// Every chain of a table, fixed ones first, then each service port's in port order.
    pub fn chains(&self, t: Table) -> impl Iterator<Item = (&ChainName, &Vec<Rule>)> {
        let ports = (t == Table::Nat).then_some(&self.ports);
        self.table(t).chains.iter().chain(
            ports
                .into_iter()
                .flat_map(|p| p.values().flat_map(|r| r.chains.iter())),
        )
    }

    /// One chain's rules.
    pub fn chain(&self, t: Table, name: &ChainName) -> Option<&Vec<Rule>> {
        if let Some(rules) = self.table(t).chains.get(name) {
            return Some(rules);
        }
        if t != Table::Nat || !name.is_per_service() {
            return None;
        }
        self.ports.values().find_map(|p| p.chains.get(name))
    }

    /// Rules in our chains of a table (upstream's `sync_proxy_rules_iptables_total{table}`).
    pub fn rule_count(&self, t: Table) -> usize {
        self.chains(t).map(|(_, r)| r.len()).sum()
    }

    /// Chains and rules we own, for the `objects` count of a report.
    pub fn objects(&self) -> usize {
        Table::ALL
            .iter()
            .map(|&t| self.chains(t).map(|(_, r)| 1 + r.len()).sum::<usize>())
            .sum()
    }
}

/// One rule: matches in order, then a target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub matches: Vec<Match>,
    pub target: Target,
}

impl Rule {
    pub fn new(matches: Vec<Match>, target: Target) -> Rule {
        Rule { matches, target }
    }
}

/// A match, rendered in the order of the rule's list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Match {
    /// `[!] -s net`
    Source { net: IpNet, negate: bool },
    /// `[!] -d net`
    Destination { net: IpNet, negate: bool },
    /// `[!] -i name[+]`
    InInterface { name: IfName, negate: bool },
    /// `-p proto`, and `-m proto` when a port follows.
    Protocol(Protocol),
    /// `-m <proto> --dport port` (after [`Match::Protocol`]).
    DestinationPort(Protocol, u16),
    /// `-m comment --comment "..."`
    Comment(Comment),
    /// `-m addrtype --src-type LOCAL` / `--dst-type LOCAL`, optionally negated.
    AddrTypeLocal { source: bool, negate: bool },
    /// `-m conntrack [!] --ctstate S[,S]`
    CtState { states: &'static str, negate: bool },
    /// `-m mark [!] --mark M/M`
    Mark { mark: u32, negate: bool },
    /// `-m statistic --mode random --probability P`, P printed with 10 decimals as upstream.
    Probability { remaining: u32 },
    /// `-m recent --name C --mask M --rsource --rcheck --seconds S --reap`: the client was sent
    /// to chain C within S seconds.
    RecentCheck { name: ChainName, seconds: u32 },
    /// `-m recent --name C --mask M --rsource --set`: remember the client for chain C.
    RecentSet { name: ChainName },
}

/// What a rule does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Jump(ChainName),
    /// No target: a rule that only counts (upstream's comment-only rule in `KUBE-FW-`).
    None,
    Return,
    Accept,
    Drop,
    /// `-j REJECT`: ICMP port unreachable.
    Reject,
    /// `-j REJECT --reject-with tcp-reset`, for a rule that matches `-p tcp`: connect() fails at
    /// once, where an ICMP error is rate-limited per host and a burst of connects would hang.
    RejectTcpReset,
    /// `-j DNAT --to-destination ip:port`
    Dnat {
        ip: IpAddr,
        port: u16,
    },
    /// `-j MARK --or-mark M`
    OrMark(u32),
    /// `-j MARK --xor-mark M`
    XorMark(u32),
    /// `-j MASQUERADE --random-fully`
    Masquerade,
}

/// Comment text safe inside a double-quoted `iptables-restore` word: `[A-Za-z0-9 ./:_>-]` only,
/// anything else replaced with `_`, cut at [`Comment::MAX`] characters.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Comment(Arc<str>);

impl Comment {
    /// Below the kernel's 256-byte comment limit with room to spare.
    pub const MAX: usize = 200;

    pub fn sanitised(text: &str) -> Comment {
        // `>` reads well in `ns/svc:port -> endpoint` and is harmless inside `"..."`.
        Comment(crate::dataplane::comment::sanitise(
            text,
            Comment::MAX,
            &['>'],
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_keep_only_harmless_characters() {
        let c = Comment::sanitised("ns/web:http \"-j ACCEPT\n\\x");
        assert_eq!(c.as_str(), "ns/web:http _-j ACCEPT__x");
        assert_eq!(Comment::sanitised(&"é".repeat(500)).as_str().len(), 200);
    }
}
