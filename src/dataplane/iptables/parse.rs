//! `iptables-save` read back as typed rules: what the kernel holds of our chains, as a
//! [`Ruleset`] the [`trace`](super::trace) walks, so `explain` and `status` trace what the node
//! does rather than what the proxy meant.
//!
//! Pure and total. The input is what [`adopt::parse`](super::adopt::parse) split per table (the
//! applier's own reading); this reads each rule line of our chains word by word, in the
//! vocabulary [`render`](super::render) writes and `iptables-save` prints back (which reorders
//! `-s`/`-d`/`-i`/`-p` first and spells some targets its own way: `--set-xmark` for
//! `--or-mark`, `--reject-with icmp-port-unreachable` for a bare `REJECT`). A line with a word
//! outside that vocabulary is not one we write: it is left out of the rules and returned, for
//! the caller to name as drift. Text from the kernel is untrusted: comments are re-sanitised
//! ([`Comment::sanitised`]) and names checked ([`ChainName::parse`], [`IfName::new`]).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

use super::adopt::Saved;
use super::names::{self, ChainName};
use super::ruleset::{Builtin, Comment, IfName, Match, Rule, Ruleset, Table, Target};
use crate::cluster::{IpFamily, Protocol};

/// The conntrack state lists the planner writes; a rule with another list is not ours.
const CT_STATES: [&str; 4] = [
    "NEW",
    "INVALID",
    "RELATED,ESTABLISHED",
    "RELATED,ESTABLISHED,DNAT",
];

/// Our part of one family's `iptables-save`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    /// Our chains (all in [`Ruleset::tables`], none in `ports`) and the jumps into them from
    /// built-in chains, matches in `iptables-save`'s order (see [`canonical`]).
    pub ruleset: Ruleset,
    /// `-A ...` lines of our chains, or jumps to them, that are not in our vocabulary.
    pub unknown: Vec<String>,
}

/// Reads our chains out of `saved`. `KUBE-FIREWALL` is read only with `firewall` (the plan
/// declares it): otherwise it is the kubelet's.
pub fn parse(family: IpFamily, saved: &BTreeMap<Table, Saved>, firewall: bool) -> Parsed {
    let mut ruleset = Ruleset::empty(family);
    let mut unknown = Vec::new();
    let ours = |c: &str| names::ours(c) || (firewall && c == names::FIREWALL);
    for (&table, s) in saved {
        let chains = ruleset.table_mut(table);
        for c in s.chains.iter().filter(|c| ours(c)) {
            if let Some(name) = ChainName::parse(c) {
                chains.chains.insert(name, Vec::new());
            }
        }
        for (owner, line) in &s.rules {
            let builtin = builtin(owner);
            let jumps_to_ours = super::adopt::jump_target(line).is_some_and(ours);
            if !(ours(owner) || builtin.is_some() && jumps_to_ours) {
                continue;
            }
            // The owner is the first word after `-A ` (adopt's split): the rest follows it.
            let words = line
                .strip_prefix("-A ")
                .map(str::trim_start)
                .and_then(|r| r.strip_prefix(owner.as_str()))
                .unwrap_or("");
            match (rule(words, family), builtin) {
                (Some(r), Some(b)) => chains.jumps.push((b, r)),
                (Some(r), None) => {
                    if let Some(rules) =
                        ChainName::parse(owner).and_then(|n| chains.chains.get_mut(&n))
                    {
                        rules.push(r);
                    }
                }
                (None, _) => unknown.push(line.clone()),
            }
        }
    }
    for table in Table::ALL {
        ruleset.table_mut(table).jumps.sort_by_key(|(b, _)| *b);
    }
    Parsed { ruleset, unknown }
}

/// `rules` with every rule's matches in the order `iptables-save` prints them: `-s`, `-d`,
/// `-i`, `-p` first, then the `-m` matches as written. The planner writes some in another
/// order; comparing a plan with what [`parse`] read takes both through this.
pub fn canonical(rules: &Ruleset) -> Ruleset {
    let sorted = |r: &Rule| {
        let mut r = r.clone();
        r.matches.sort_by_key(|m| match m {
            Match::Source { .. } => 0,
            Match::Destination { .. } => 1,
            Match::InInterface { .. } => 2,
            Match::Protocol(_) => 3,
            _ => 4,
        });
        r
    };
    let mut out = Ruleset::empty(rules.family);
    for table in Table::ALL {
        let chains = out.table_mut(table);
        for (name, list) in rules.chains(table) {
            chains
                .chains
                .insert(name.clone(), list.iter().map(sorted).collect());
        }
        for (b, r) in &rules.table(table).jumps {
            chains.jumps.push((*b, sorted(r)));
        }
        // iptables-save prints the built-in chains in hook order.
        chains.jumps.sort_by_key(|(b, _)| *b);
    }
    out.context = rules.context.clone();
    out
}

fn builtin(chain: &str) -> Option<Builtin> {
    [
        Builtin::Prerouting,
        Builtin::Input,
        Builtin::Forward,
        Builtin::Output,
        Builtin::Postrouting,
    ]
    .into_iter()
    .find(|b| b.as_str() == chain)
}

/// `iptables-save`'s words: split on spaces, a `"..."` word kept whole with `\"` and `\\`
/// unescaped.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        let Some(&first) = chars.peek() else {
            return out;
        };
        let mut w = String::new();
        if first == '"' {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => w.extend(chars.next()),
                    '"' => break,
                    c => w.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != ' ') {
                w.push(c);
            }
        }
        out.push(w);
    }
}

/// One rule's words after `-A CHAIN`; `None` when a word is not ours.
pub fn rule(text: &str, family: IpFamily) -> Option<Rule> {
    let words = words(text);
    let mut w = words.iter().map(String::as_str).peekable();
    let mut matches = Vec::new();
    let mut target = Target::None;
    let mut negate = false;
    let mut module: Option<&str> = None;
    while let Some(word) = w.next() {
        if word == "!" {
            negate = true;
            continue;
        }
        let neg = std::mem::take(&mut negate);
        match word {
            "-s" | "-d" => {
                let net = net(w.next()?)?;
                matches.push(if word == "-s" {
                    Match::Source { net, negate: neg }
                } else {
                    Match::Destination { net, negate: neg }
                });
            }
            "-i" => {
                let name = w.next()?;
                let (name, prefix) = match name.strip_suffix('+') {
                    Some(n) => (n, true),
                    None => (name, false),
                };
                let name = IfName::new(name, prefix)?;
                matches.push(Match::InInterface { name, negate: neg });
            }
            "-p" if !neg => matches.push(Match::Protocol(protocol(w.next()?)?)),
            "-m" if !neg => module = Some(w.next()?),
            "-j" if !neg => {
                target = self::target(&mut w, family)?;
                // Nothing follows a target in what we write.
                return w.next().is_none().then_some(Rule::new(matches, target));
            }
            _ => {
                let m = option(module?, word, neg, &mut w)?;
                if let Some(m) = m {
                    matches.push(m);
                }
            }
        }
    }
    (!negate).then_some(Rule::new(matches, target))
}

/// One option of the match module in effect; `Some(None)` for an option that only completes
/// a match already pushed (none in our vocabulary), `None` when it is not ours.
fn option<'a>(
    module: &str,
    word: &str,
    neg: bool,
    w: &mut std::iter::Peekable<impl Iterator<Item = &'a str>>,
) -> Option<Option<Match>> {
    let m = match (module, word) {
        ("comment", "--comment") if !neg => Match::Comment(Comment::sanitised(w.next()?)),
        ("tcp" | "udp" | "sctp", "--dport") if !neg => {
            Match::DestinationPort(protocol(module)?, w.next()?.parse().ok()?)
        }
        ("addrtype", "--src-type" | "--dst-type") => {
            (w.next()? == "LOCAL").then_some(())?;
            Match::AddrTypeLocal {
                source: word == "--src-type",
                negate: neg,
            }
        }
        ("conntrack", "--ctstate") => {
            let list = w.next()?;
            let states = CT_STATES.into_iter().find(|s| *s == list)?;
            Match::CtState {
                states,
                negate: neg,
            }
        }
        ("mark", "--mark") => {
            let (value, mask) = w.next()?.split_once('/')?;
            let (value, mask) = (hex(value)?, hex(mask)?);
            (value == mask).then_some(())?;
            Match::Mark {
                mark: value,
                negate: neg,
            }
        }
        ("statistic", "--mode") if !neg => {
            (w.next()? == "random" && w.next()? == "--probability").then_some(())?;
            let p: f64 = w.next()?.parse().ok()?;
            (p > 0.0 && p <= 1.0).then_some(())?;
            let remaining = (1.0 / p).round();
            Match::Probability {
                remaining: remaining as u32,
            }
        }
        ("recent", _) if !neg => return recent(word, w).map(Some),
        _ => return None,
    };
    Some(Some(m))
}

/// A `recent` match's options, in any order, starting at `first`.
fn recent<'a>(
    first: &str,
    w: &mut std::iter::Peekable<impl Iterator<Item = &'a str>>,
) -> Option<Match> {
    let (mut name, mut seconds, mut check, mut set) = (None, None, false, false);
    let mut word = Some(first);
    while let Some(opt) = word {
        match opt {
            "--name" => name = Some(ChainName::parse(w.next()?)?),
            "--mask" => {
                w.next()?;
            }
            "--seconds" => seconds = Some(w.next()?.parse().ok()?),
            "--rcheck" => check = true,
            "--set" => set = true,
            "--rsource" | "--reap" => {}
            _ => return None,
        }
        word = w.next_if(|n| n.starts_with("--"));
    }
    match (name?, check, set, seconds) {
        (name, true, false, Some(seconds)) => Some(Match::RecentCheck { name, seconds }),
        (name, false, true, None) => Some(Match::RecentSet { name }),
        _ => None,
    }
}

fn target<'a>(
    w: &mut std::iter::Peekable<impl Iterator<Item = &'a str>>,
    family: IpFamily,
) -> Option<Target> {
    Some(match w.next()? {
        "RETURN" => Target::Return,
        "ACCEPT" => Target::Accept,
        "DROP" => Target::Drop,
        "REJECT" => match w.next() {
            None => Target::Reject,
            Some("--reject-with") => match (w.next()?, family) {
                ("tcp-reset", _) => Target::RejectTcpReset,
                ("icmp-port-unreachable", IpFamily::V4)
                | ("icmp6-port-unreachable", IpFamily::V6) => Target::Reject,
                _ => return None,
            },
            Some(_) => return None,
        },
        "DNAT" => {
            (w.next()? == "--to-destination").then_some(())?;
            let to: SocketAddr = w.next()?.parse().ok()?;
            Target::Dnat {
                ip: to.ip(),
                port: to.port(),
            }
        }
        "MARK" => match w.next()? {
            "--or-mark" => Target::OrMark(hex(w.next()?)?),
            "--xor-mark" => Target::XorMark(hex(w.next()?)?),
            // --or-mark M is saved as --set-xmark M/M, --xor-mark M as --set-xmark M/0x0.
            "--set-xmark" => {
                let (value, mask) = w.next()?.split_once('/')?;
                match (hex(value)?, hex(mask)?) {
                    (v, m) if v == m => Target::OrMark(v),
                    (v, 0) => Target::XorMark(v),
                    _ => return None,
                }
            }
            _ => return None,
        },
        "MASQUERADE" => {
            (w.next()? == "--random-fully").then_some(())?;
            Target::Masquerade
        }
        chain => Target::Jump(ChainName::parse(chain)?),
    })
}

fn net(text: &str) -> Option<IpNet> {
    text.parse()
        .ok()
        .or_else(|| text.parse::<IpAddr>().ok().map(IpNet::from))
}

fn protocol(word: &str) -> Option<Protocol> {
    [Protocol::Tcp, Protocol::Udp, Protocol::Sctp]
        .into_iter()
        .find(|p| names::protocol_word(*p) == word)
}

fn hex(text: &str) -> Option<u32> {
    u32::from_str_radix(text.strip_prefix("0x")?, 16).ok()
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
