//! iptables-nft, read for one packet: only the chains its path can pass through, chain by chain.
//!
//! Why: `iptables-nft-save` decodes every rule of every table (hundreds of thousands of lines
//! on a large node), which is most of a live `explain`; `iptables-nft -S CHAIN` reads one chain
//! (docs/benchmarks.md, "explain and status"). A packet's path needs the built-in chains we
//! jump from, our fixed chains, and of the per-Service chains only those a rule that can match
//! the packet jumps to. Reading iptables-legacy has no such cost (its save reads one blob from
//! the kernel), so legacy nodes keep the whole save.
//!
//! Drift is told over the chains read: the plan, cut to the same chains, against the kernel's.
//! A per-Service chain the kernel lacks but the plan's path needs is read (and found missing)
//! because the plan's rules are followed too.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::IpAddr;

use crate::cluster::{IpFamily, Protocol};
use crate::dataplane::inspect::Error;
use crate::dataplane::iptables::ruleset::{Match, Rule, Table, Target};
use crate::dataplane::iptables::{self, names, parse};

/// What of a packet decides which of our rules can match it.
#[derive(Clone, Copy, Debug)]
pub struct Packet {
    pub to: IpAddr,
    pub port: u16,
    pub protocol: Protocol,
}

/// The chains read and their text as `iptables-save` prints it.
#[derive(Debug, Default)]
pub struct ScopedRead {
    /// `*table`, the chains read declared, their rules, `COMMIT`: [`adopt::parse`]'s input.
    ///
    /// [`adopt::parse`]: crate::dataplane::iptables::adopt::parse
    pub save: String,
    /// Per table, every chain asked for, whether the kernel had it or not.
    pub asked: BTreeMap<Table, BTreeSet<String>>,
}

/// Reads the chains `packet` can pass through with `list` (one chain's `-S` output, `None` when
/// the table has no such chain): the built-in chains `planned` jumps from, its fixed chains,
/// and every chain of ours that a rule which can match the packet jumps to, in the kernel's
/// rules or the plan's.
pub fn read(
    planned: &iptables::Ruleset,
    packet: &Packet,
    list: impl Fn(Table, &str) -> Result<Option<String>, Error> + Sync,
) -> Result<ScopedRead, Error> {
    let family = planned.family;
    let mut out = ScopedRead::default();
    for table in Table::ALL {
        let chains = planned.table(table);
        let builtins: BTreeSet<&str> = chains.jumps.iter().map(|(b, _)| b.as_str()).collect();
        let mut asked: BTreeSet<String> = BTreeSet::new();
        let mut level: Vec<String> = builtins
            .iter()
            .copied()
            .chain(chains.chains.keys().map(|c| c.as_str()))
            .map(str::to_owned)
            .filter(|c| asked.insert(c.clone()))
            .collect();
        let mut text = String::new();
        let mut declared = String::new();
        // Level by level (built-in and fixed chains, then the Service chains they jump to,
        // then the endpoint chains), each level's chains listed at once: one tool run costs
        // milliseconds of start-up, and a path has a few dozen chains.
        while !level.is_empty() {
            let listed = list_all(&level, |chain| list(table, chain));
            let mut next = Vec::new();
            let mut follow = |target: String| {
                if asked.insert(target.clone()) {
                    next.push(target);
                }
            };
            for (chain, listed) in level.iter().zip(listed) {
                planned_jumps(planned, table, chain, packet)
                    .into_iter()
                    .for_each(&mut follow);
                let Some(listed) = listed? else {
                    continue;
                };
                let policy = if builtins.contains(chain.as_str()) {
                    "ACCEPT"
                } else {
                    "-"
                };
                let _ = writeln!(declared, ":{chain} {policy} [0:0]");
                for line in listed.lines().filter(|l| l.starts_with("-A ")) {
                    if let Some(target) = jump_for(line, chain, family, packet) {
                        follow(target);
                    }
                    text.push_str(line);
                    text.push('\n');
                }
            }
            level = next;
        }
        let _ = write!(out.save, "*{}\n{declared}{text}COMMIT\n", table.as_str());
        out.asked.insert(table, asked);
    }
    Ok(out)
}

/// Tool runs at once, at most.
const LISTING_AT_ONCE: usize = 8;

/// `list` of every chain, in order, [`LISTING_AT_ONCE`] at a time on threads of their own.
fn list_all<T: Send>(chains: &[String], list: impl Fn(&str) -> T + Sync) -> Vec<T> {
    let mut out = Vec::with_capacity(chains.len());
    for batch in chains.chunks(LISTING_AT_ONCE) {
        std::thread::scope(|s| {
            let running: Vec<_> = batch.iter().map(|c| s.spawn(|| list(c))).collect();
            for r in running {
                out.push(r.join().expect("a listing thread does not panic"));
            }
        });
    }
    out
}

/// The chain of ours a kernel rule line of `chain` jumps to, when the rule can match `packet`.
/// A line that does not parse as one of our rules counts as matching (reading one chain too
/// many costs milliseconds; one too few would trace a wrong path).
fn jump_for(line: &str, chain: &str, family: IpFamily, packet: &Packet) -> Option<String> {
    let target = crate::dataplane::iptables::adopt::jump_target(line)?;
    if !names::ours(target) {
        return None;
    }
    let words = line
        .strip_prefix("-A ")
        .and_then(|r| r.trim_start().strip_prefix(chain))
        .unwrap_or("");
    match parse::rule(words, family) {
        Some(rule) if !can_match(&rule, packet) => None,
        _ => Some(target.to_owned()),
    }
}

/// The chains `planned`'s own rules in `chain` jump to for `packet`.
fn planned_jumps(
    planned: &iptables::Ruleset,
    table: Table,
    chain: &str,
    packet: &Packet,
) -> Vec<String> {
    let Some(name) = names::ChainName::parse(chain) else {
        return Vec::new();
    };
    let rules: Vec<&Rule> = match planned.chain(table, &name) {
        Some(rules) => rules.iter().collect(),
        None => planned
            .table(table)
            .jumps
            .iter()
            .filter(|(b, _)| b.as_str() == chain)
            .map(|(_, r)| r)
            .collect(),
    };
    rules
        .into_iter()
        .filter(|r| can_match(r, packet))
        .filter_map(|r| match &r.target {
            Target::Jump(to) => Some(to.as_str().to_owned()),
            _ => None,
        })
        .collect()
}

/// Whether a rule's destination, protocol and port tests let `packet` through; every other
/// match (source, interface, marks, affinity) is taken as passing.
fn can_match(rule: &Rule, packet: &Packet) -> bool {
    rule.matches.iter().all(|m| match m {
        Match::Destination { net, negate } => net.contains(&packet.to) != *negate,
        Match::Protocol(p) => *p == packet.protocol,
        Match::DestinationPort(p, port) => *p == packet.protocol && *port == packet.port,
        _ => true,
    })
}

/// `planned` cut to the chains `asked` (jumps from built-in chains kept): what drift is told
/// against when only those were read.
pub fn cut(
    planned: &iptables::Ruleset,
    asked: &BTreeMap<Table, BTreeSet<String>>,
) -> iptables::Ruleset {
    let mut want = parse::canonical(planned);
    for table in Table::ALL {
        let keep = asked.get(&table);
        want.table_mut(table)
            .chains
            .retain(|name, _| keep.is_some_and(|k| k.contains(name.as_str())));
    }
    want
}

/// A plan's chains as `iptables -S CHAIN` prints them, for tests that stand in for the kernel.
#[cfg(test)]
pub fn listed(planned: &iptables::Ruleset, table: Table, chain: &str) -> Option<String> {
    use crate::dataplane::iptables::render;
    let want = parse::canonical(planned);
    let mut text = String::new();
    if let Some(name) = names::ChainName::parse(chain)
        && let Some(rules) = want.chain(table, &name)
    {
        let _ = writeln!(text, "-N {chain}");
        for r in rules {
            render::append_line(&mut text, chain, r, want.family);
        }
        return Some(text);
    }
    let jumps: Vec<_> = want
        .table(table)
        .jumps
        .iter()
        .filter(|(b, _)| b.as_str() == chain)
        .collect();
    if jumps.is_empty()
        && !["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"].contains(&chain)
    {
        return None;
    }
    let _ = writeln!(text, "-P {chain} ACCEPT");
    for (b, r) in jumps {
        render::append_line(&mut text, b.as_str(), r, want.family);
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::super::saved::as_read;
    use super::*;
    use crate::dataplane::iptables::{ModeConfig, adopt};
    use crate::testing::snapshots::{node, snapshot, svc};

    fn plan() -> iptables::Ruleset {
        let snap = snapshot(
            node(),
            (0..50)
                .map(|i| {
                    svc(&format!("default/s{i}"), &format!("10.96.0.{}", i + 10), 80)
                        .ep(&format!("10.244.1.{}", i + 2), 8080, "node-a")
                        .ep(&format!("10.244.2.{}", i + 2), 8080, "node-b")
                })
                .collect(),
        );
        iptables::plan(&snap, &ModeConfig::default(), IpFamily::V4)
    }

    fn packet(to: &str, port: u16) -> Packet {
        Packet {
            to: to.parse().unwrap(),
            port,
            protocol: Protocol::Tcp,
        }
    }

    #[test]
    fn only_the_packets_service_chains_are_read_and_the_plan_has_no_drift_over_them() {
        let planned = plan();
        let calls = std::sync::Mutex::new(Vec::new());
        let read = read(&planned, &packet("10.96.0.20", 80), |t, c| {
            calls.lock().unwrap().push(c.to_owned());
            Ok(listed(&planned, t, c))
        })
        .unwrap();
        let calls = calls.into_inner().unwrap();
        let per_service: Vec<&String> = calls
            .iter()
            .filter(|c| names::ChainName::parse(c).is_some_and(|n| n.is_per_service()))
            .collect();
        // s10's service chain and its two endpoints' chains: nothing of the 49 others.
        assert_eq!(per_service.len(), 3, "{per_service:?}");
        let kernel = as_read(&adopt::parse(&read.save), &planned, Some(&read.asked));
        assert!(kernel.rules.is_some(), "our chains were read");
        assert_eq!(
            kernel.drift,
            Vec::<String>::new(),
            "the kernel holds the plan's chains"
        );
    }

    #[test]
    fn a_chain_the_kernel_lacks_is_still_asked_for_from_the_plans_path() {
        let planned = plan();
        let svc_chain = listed(&planned, Table::Nat, names::SERVICES)
            .unwrap()
            .lines()
            .find(|l| l.contains("10.96.0.20/32"))
            .and_then(|l| adopt::jump_target(l).map(str::to_owned))
            .unwrap();
        let read = read(&planned, &packet("10.96.0.20", 80), |t, c| {
            Ok(if c == svc_chain {
                None
            } else {
                listed(&planned, t, c)
            })
        })
        .unwrap();
        assert!(read.asked[&Table::Nat].contains(&svc_chain));
        let kernel = as_read(&adopt::parse(&read.save), &planned, Some(&read.asked));
        assert!(
            kernel.drift.iter().any(|l| l.contains(&svc_chain)),
            "{:?}",
            kernel.drift
        );
    }

    #[test]
    fn another_port_or_protocol_reads_no_service_chain() {
        let planned = plan();
        for p in [
            packet("10.96.0.20", 81),
            Packet {
                protocol: Protocol::Udp,
                ..packet("10.96.0.20", 80)
            },
        ] {
            let per_service = std::sync::atomic::AtomicUsize::new(0);
            read(&planned, &p, |t, c| {
                if names::ChainName::parse(c).is_some_and(|n| n.is_per_service()) {
                    per_service.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(listed(&planned, t, c))
            })
            .unwrap();
            assert_eq!(per_service.into_inner(), 0, "{p:?}");
        }
    }
}
