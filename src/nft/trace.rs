//! Walks a [`Ruleset`] with the first packet of a connection and says what happens to it.
//!
//! Pure. Backs packet-flow tests ("tcp 10.0.1.5 → 10.96.0.10:80 reaches one of {...}") and
//! `explain`. It interprets the typed rules, never rendered text, the way the kernel would:
//! base chains of each hook in priority order, `jump`/`goto`/`return`, verdict maps, sets, `dnat`,
//! the mark and masquerading. Random choices are not drawn but enumerated: the result has one
//! [`Branch`] per way the packet can go. Dynamic (affinity) sets hold what the ruleset gives
//! them: nothing in a plan or a table read back (a client's first connection), or the client's
//! own entries where a live `explain` read them from the kernel.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::Name;
use super::ruleset::{
    Chain, CtState, Data, Field, Hook, Match, Ruleset, Statement, Tuple, Value, Verdict,
};
use crate::cluster::Protocol;

/// Where a packet comes from, which decides its hooks and its input interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Arrives on an interface (a pod's veth or bridge, or the node's uplink).
    Interface(String),
    /// Sent by a process on the node itself (output path, no input interface).
    Host,
}

/// The first packet of a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    pub protocol: Protocol,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub dport: u16,
    pub origin: Origin,
}

/// What happened on one possible path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Branch {
    pub fate: Fate,
    /// Destination after DNAT, when DNAT happened.
    pub dnat: Option<(IpAddr, u16)>,
    /// Source NAT to the node's address happened.
    pub masquerade: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fate {
    Accept,
    Drop,
    Reject,
}

/// Every possible outcome, without duplicates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    pub branches: BTreeSet<Branch>,
}

impl Trace {
    /// The DNAT targets of accepted branches.
    pub fn endpoints(&self) -> BTreeSet<(IpAddr, u16)> {
        self.branches
            .iter()
            .filter(|b| b.fate == Fate::Accept)
            .filter_map(|b| b.dnat)
            .collect()
    }

    /// The fate, when every branch agrees.
    pub fn fate(&self) -> Option<Fate> {
        let fates: BTreeSet<Fate> = self.branches.iter().map(|b| b.fate).collect();
        (fates.len() == 1).then(|| *fates.iter().next().expect("one"))
    }

    /// Whether the packet is masqueraded, when every branch agrees.
    pub fn masquerade(&self) -> Option<bool> {
        let m: BTreeSet<bool> = self.branches.iter().map(|b| b.masquerade).collect();
        (m.len() == 1).then(|| *m.iter().next().expect("one"))
    }
}

/// The packet as it travels: where it goes now, its mark, and what NAT did so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flight {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub dport: u16,
    pub mark: u32,
    pub dnat: Option<(IpAddr, u16)>,
    pub masquerade: bool,
}

impl Flight {
    /// `packet` as it arrives (or leaves its socket), before any rule.
    pub fn start(packet: &Packet) -> Flight {
        Flight {
            src: packet.src,
            dst: packet.dst,
            dport: packet.dport,
            mark: 0,
            dnat: None,
            masquerade: false,
        }
    }

    /// Rewrites the destination, as a DNAT rule (or IPVS) does.
    pub fn dnat(&mut self, addr: IpAddr, port: u16) {
        self.dst = addr;
        self.dport = port;
        self.dnat = Some((addr, port));
    }

    /// How this path ended, with `fate`.
    pub fn branch(&self, fate: Fate) -> Branch {
        Branch {
            fate,
            dnat: self.dnat,
            masquerade: self.masquerade,
        }
    }
}

/// Runs the base chains of `hook` in priority order on a packet in flight: one outcome per way
/// it can go. For a mode whose kernel does part of the walk itself (IPVS schedules between
/// nftables hooks), so it can trace its own part in between; [`trace`] is the whole walk.
pub fn through_hook(
    rules: &Ruleset,
    packet: &Packet,
    local: &[IpAddr],
    hook: Hook,
    flight: Flight,
) -> Vec<(Flight, Fate)> {
    Walker {
        rules,
        packet,
        local,
    }
    .hook(hook, flight)
}

/// How a chain ended.
#[derive(Clone, Debug)]
enum End {
    /// Fell off the end or returned: the caller continues.
    Continue,
    Fate(Fate),
    /// A `goto`: the target's end is this chain's end (resolved before a chain returns).
    Goto(Name),
}

/// Traces `packet` through `rules`. `local` are the node's own addresses (loopback is always
/// local); they decide `fib ... type local` and whether a packet is delivered or forwarded.
pub fn trace(rules: &Ruleset, packet: &Packet, local: &[IpAddr]) -> Trace {
    let walker = Walker {
        rules,
        packet,
        local,
    };
    let start = Flight::start(packet);
    let first = match packet.origin {
        Origin::Host => Hook::Output,
        Origin::Interface(_) => Hook::Prerouting,
    };
    let mut branches = BTreeSet::new();
    for (state, fate) in walker.hook(first, start) {
        if fate != Fate::Accept {
            branches.insert(branch(&state, fate));
            continue;
        }
        let next = match packet.origin {
            // Looped back to the node itself: it arrives in the input hook (NAT was decided in
            // the output hook; the nat chains of prerouting see it no more).
            Origin::Host if walker.is_local(&state.dst) => vec![Hook::Postrouting, Hook::Input],
            Origin::Host => vec![Hook::Postrouting],
            Origin::Interface(_) if walker.is_local(&state.dst) => vec![Hook::Input],
            Origin::Interface(_) => vec![Hook::Forward, Hook::Postrouting],
        };
        let mut states = vec![(state, Fate::Accept)];
        for hook in next {
            let mut after = Vec::new();
            for (s, fate) in states {
                if fate == Fate::Accept {
                    after.extend(walker.hook(hook, s));
                } else {
                    after.push((s, fate));
                }
            }
            states = after;
        }
        branches.extend(states.into_iter().map(|(s, f)| branch(&s, f)));
    }
    Trace { branches }
}

fn branch(s: &Flight, fate: Fate) -> Branch {
    s.branch(fate)
}

struct Walker<'a> {
    rules: &'a Ruleset,
    packet: &'a Packet,
    local: &'a [IpAddr],
}

impl Walker<'_> {
    fn is_local(&self, ip: &IpAddr) -> bool {
        ip.is_loopback() || self.local.contains(ip)
    }

    /// Runs the base chains of a hook in priority order; stops a branch at a drop or reject.
    /// A NAT verdict ends only its own chain (the packet goes on to the next base chain).
    fn hook(&self, hook: Hook, state: Flight) -> Vec<(Flight, Fate)> {
        let mut chains: Vec<&Chain> = self
            .rules
            .chains
            .values()
            .filter(|c| c.base.is_some_and(|b| b.hook == hook))
            .collect();
        chains.sort_by_key(|c| c.base.map(|b| b.priority));
        let mut states = vec![(state, Fate::Accept)];
        for chain in chains {
            let mut next = Vec::new();
            for (s, fate) in states {
                if fate != Fate::Accept {
                    next.push((s, fate));
                    continue;
                }
                for (s, end) in self.chain(chain, s, 0) {
                    let fate = match end {
                        End::Continue | End::Goto(_) => Fate::Accept,
                        End::Fate(f) => f,
                    };
                    next.push((s, fate));
                }
            }
            states = next;
        }
        states
    }

    fn chain(&self, chain: &Chain, state: Flight, depth: usize) -> Vec<(Flight, End)> {
        assert!(depth < 16, "chain recursion too deep");
        self.rules_from(chain, 0, state, depth)
    }

    fn named(&self, name: &Name, state: Flight, depth: usize) -> Vec<(Flight, End)> {
        let chain = self
            .rules
            .chains
            .get(name)
            .expect("verdicts name existing chains");
        self.chain(chain, state, depth + 1)
    }

    /// Evaluates `chain` from rule `at` on.
    fn rules_from(
        &self,
        chain: &Chain,
        at: usize,
        state: Flight,
        depth: usize,
    ) -> Vec<(Flight, End)> {
        let Some(rule) = chain.rules.get(at) else {
            return vec![(state, End::Continue)];
        };
        let mut out = Vec::new();
        for (state, matched) in self.matches(&rule.matches, state) {
            if !matched {
                out.extend(self.rules_from(chain, at + 1, state, depth));
                continue;
            }
            for (state, end) in self.statements(&rule.statements, state) {
                match end {
                    Step::Next => out.extend(self.rules_from(chain, at + 1, state, depth)),
                    Step::End(End::Goto(name)) => out.extend(self.named(&name, state, depth)),
                    Step::End(e) => out.push((state, e)),
                    Step::Jumped(name) => {
                        for (s, e) in self.named(&name, state, depth) {
                            match e {
                                End::Continue => {
                                    out.extend(self.rules_from(chain, at + 1, s, depth))
                                }
                                fate => out.push((s, fate)),
                            }
                        }
                    }
                }
            }
        }
        out
    }

    /// All matches of a rule; a random match splits the state in two.
    fn matches(&self, matches: &[Match], state: Flight) -> Vec<(Flight, bool)> {
        for (i, m) in matches.iter().enumerate() {
            if let Match::OneIn(_) = m {
                let mut out = self.matches(&matches[i + 1..], state.clone());
                out.push((state, false));
                return out;
            }
            if !self.test(m, &state) {
                return vec![(state, false)];
            }
        }
        vec![(state, true)]
    }

    fn field(&self, f: Field, s: &Flight) -> Value {
        match f {
            Field::Saddr => Value::Addr(s.src),
            Field::Daddr => Value::Addr(s.dst),
            Field::L4Proto => Value::Proto(self.packet.protocol),
            Field::Dport => Value::Port(s.dport),
            Field::Random(_) => unreachable!("random fields are expanded by the caller"),
        }
    }

    /// The key a lookup builds; `None` for a shape no set of ours can hold (no element).
    fn key(&self, fields: &[Field], s: &Flight) -> Option<Tuple> {
        let v: Vec<Value> = fields.iter().map(|f| self.field(*f, s)).collect();
        Tuple::try_new(&v)
    }

    fn lookup(&self, set: &Name, key: &Tuple) -> Option<&Data> {
        let set = self.rules.sets.get(set).expect("rules name existing sets");
        if let Some(e) = set.elements.get(key) {
            return Some(&e.data);
        }
        if !set.decl.interval {
            return None;
        }
        set.elements
            .iter()
            .find(|(k, _)| covers(k, key))
            .map(|(_, e)| &e.data)
    }

    fn test(&self, m: &Match, s: &Flight) -> bool {
        match m {
            Match::CtState(CtState::New) => true,
            Match::CtState(CtState::Invalid) => false,
            Match::CtStatusDnat => s.dnat.is_some(),
            Match::FibLocal { source: true } => {
                self.packet.origin == Origin::Host || self.is_local(&s.src)
            }
            Match::FibLocal { source: false } => self.is_local(&s.dst),
            Match::Net { field, net, negate } => {
                let Value::Addr(a) = self.field(*field, s) else {
                    return false;
                };
                net.contains(&a) != *negate
            }
            Match::Iifname { name, negate } => {
                let iif = match &self.packet.origin {
                    Origin::Interface(i) => i.as_str(),
                    Origin::Host => "",
                };
                name.matches(iif) != *negate
            }
            Match::InSet { key, set, negate } => {
                self.key(key, s)
                    .and_then(|k| self.lookup(set, &k))
                    .is_some()
                    != *negate
            }
            Match::MarkSet(mask) => s.mark & mask != 0,
            Match::L4Proto(p) => *p == self.packet.protocol,
            Match::OneIn(_) => unreachable!("handled by matches"),
        }
    }

    fn statements(&self, stmts: &[Statement], mut s: Flight) -> Vec<(Flight, Step)> {
        for st in stmts {
            match st {
                Statement::MarkOr(m) => s.mark |= m,
                Statement::MarkXor(m) => s.mark ^= m,
                Statement::RememberSource(_) => {}
                Statement::DnatTo { addr, port, .. } => {
                    dnat(&mut s, *addr, *port);
                    return vec![(s, Step::End(End::Fate(Fate::Accept)))];
                }
                Statement::DnatMap { key, map } => {
                    let mut out = Vec::new();
                    for k in self.expand(key, &s) {
                        if let Some(Data::Values(t)) = self.lookup(map, &k)
                            && let [Value::Addr(a), Value::Port(p)] = t.values().as_slice()
                        {
                            let mut s = s.clone();
                            dnat(&mut s, *a, *p);
                            out.push((s, Step::End(End::Fate(Fate::Accept))));
                        }
                    }
                    if out.is_empty() {
                        // No element: the rule does not match.
                        out.push((s, Step::Next));
                    }
                    return out;
                }
                Statement::Masquerade => {
                    s.masquerade = true;
                    return vec![(s, Step::End(End::Fate(Fate::Accept)))];
                }
                Statement::Verdict(v) => return vec![(s, verdict_step(v))],
                Statement::VerdictMap { key, map } => {
                    return match self.key(key, &s).and_then(|k| self.lookup(map, &k)) {
                        Some(Data::Verdict(v)) => vec![(s, verdict_step(v))],
                        _ => vec![(s, Step::Next)],
                    };
                }
            }
        }
        vec![(s, Step::Next)]
    }

    /// Every concrete key a field list can produce (one per value of a random index).
    fn expand(&self, fields: &[Field], s: &Flight) -> Vec<Tuple> {
        let mut keys: Vec<Vec<Value>> = vec![vec![]];
        for f in fields {
            keys = match f {
                Field::Random(n) => keys
                    .into_iter()
                    .flat_map(|k| {
                        (0..*n).map(move |i| {
                            let mut k = k.clone();
                            k.push(Value::Index(i));
                            k
                        })
                    })
                    .collect(),
                other => keys
                    .into_iter()
                    .map(|mut k| {
                        k.push(self.field(*other, s));
                        k
                    })
                    .collect(),
            };
        }
        keys.iter().filter_map(|k| Tuple::try_new(k)).collect()
    }
}

/// What a rule's statements lead to.
enum Step {
    Next,
    End(End),
    /// `jump`: the caller continues after the target returns.
    Jumped(Name),
}

fn verdict_step(v: &Verdict) -> Step {
    match v {
        Verdict::Accept => Step::End(End::Fate(Fate::Accept)),
        Verdict::Drop => Step::End(End::Fate(Fate::Drop)),
        Verdict::Reject | Verdict::RejectTcpReset => Step::End(End::Fate(Fate::Reject)),
        Verdict::Return => Step::End(End::Continue),
        Verdict::Jump(name) => Step::Jumped(name.clone()),
        // A goto never comes back: the target's end is this chain's end.
        Verdict::Goto(name) => Step::End(End::Goto(name.clone())),
    }
}

fn dnat(s: &mut Flight, addr: IpAddr, port: u16) {
    s.dnat(addr, port);
}

/// Whether an interval-set element covers a concrete key: networks contain addresses, other
/// parts are equal.
fn covers(element: &Tuple, key: &Tuple) -> bool {
    element.len() == key.len()
        && element
            .values()
            .iter()
            .zip(&key.values())
            .all(|(e, k)| match (e, k) {
                (Value::Net(n), Value::Addr(a)) => n.contains(a),
                (e, k) => e == k,
            })
}

#[cfg(test)]
#[path = "trace_tests.rs"]
mod tests;
