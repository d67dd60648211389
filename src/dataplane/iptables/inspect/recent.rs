//! Whether a client has a ClientIP affinity entry, on a live iptables node: the `recent` lists.
//!
//! The iptables mode remembers affinity as upstream does: each endpoint chain `KUBE-SEP-…`
//! adds the client to the `recent` list of its own name (`--set`), and the Service port's
//! chain sends a client found in a list within the timeout to that endpoint (`--rcheck`). The
//! kernel shows each list as `/proc/net/xt_recent/<list>`, one `src=ADDRESS …` line per
//! client. `explain` reads the lists the port's chains check, and, for each holding this
//! client, lets that check match in the rules it traces, so the tracer follows the path the
//! kernel takes for this client now. A list keeps a client after its timeout (it is removed
//! only when a check passes it by), so an entry counts only if its `last_seen` is within the
//! check's `--seconds`: its age is in jiffies, measured against the kernel's tick count and
//! rate read from `/proc/timer_list` ([`Clock`]); where that cannot be read, an entry is taken
//! as current.
//!
//! Pure but for [`ProcLists`] and [`read_clock`](crate::dataplane::inspect::clock::read_clock).

use std::net::{IpAddr, SocketAddr};

use crate::cluster::Snapshot;
use crate::dataplane::inspect::clock::Clock;
use crate::dataplane::inspect::{Error, Packet, service_port};
use crate::dataplane::iptables::names::{ChainName, PortChain, port_chain};
use crate::dataplane::iptables::ruleset::{Match, Ruleset, Table, Target};

/// Where the kernel shows the `recent` lists of this network namespace.
pub const LISTS: &str = "/proc/net/xt_recent";
/// One client of a list, and when it was last sent there (in jiffies).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub client: IpAddr,
    pub last_seen: u64,
}

impl Entry {
    /// Whether a check of `seconds` matches it at `clock` (unknown clock: taken as current).
    fn current(&self, seconds: u32, clock: Option<Clock>) -> bool {
        clock.is_none_or(|c| c.jiffies.wrapping_sub(self.last_seen) < u64::from(seconds) * c.hz)
    }
}

/// What the kernel can tell of a `recent` list: its clients, or `None` when it has no such
/// list.
pub trait Lists {
    fn clients(&mut self, list: &ChainName) -> Result<Option<Vec<Entry>>, Error>;
}

/// The lists of this node, read from [`LISTS`].
pub struct ProcLists;

impl Lists for ProcLists {
    #[allow(
        clippy::disallowed_methods,
        reason = "the kernel's lists are read where they are asked for"
    )]
    fn clients(&mut self, list: &ChainName) -> Result<Option<Vec<Entry>>, Error> {
        // A chain name is [A-Z0-9-] only: a file name, never a path.
        let path = format!("{LISTS}/{list}");
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(parse(&text))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::proc(path, e)),
        }
    }
}

/// The clients of one list's text: `src=ADDRESS ttl: T last_seen: J oldest_pkt: …` lines.
pub fn parse(text: &str) -> Vec<Entry> {
    text.lines()
        .filter_map(|l| {
            let mut words = l.strip_prefix("src=")?.split_whitespace();
            let client = words.next()?.parse().ok()?;
            let last_seen = words
                .skip_while(|w| *w != "last_seen:")
                .nth(1)?
                .parse()
                .ok()?;
            Some(Entry { client, last_seen })
        })
        .collect()
}

/// The client's entries for the port `packet` reaches, applied to `rules` (our chains as the
/// kernel holds them) for the tracer. Returns the endpoints the kernel remembers this client
/// for (`Some(empty)`: none), or `None` when the port has no affinity or a list it checks is
/// not in the kernel. An entry older than its check's timeout at `clock` does not count.
pub fn add_entries(
    snapshot: &Snapshot,
    packet: &Packet,
    rules: &mut Ruleset,
    lists: &mut dyn Lists,
    clock: Option<Clock>,
) -> Result<Option<Vec<SocketAddr>>, Error> {
    let Some((state, _)) = service_port(snapshot, packet.protocol, packet.to) else {
        return Ok(None);
    };
    if state.port.affinity_timeout_seconds.is_none() {
        return Ok(None);
    }
    let client = packet.source;
    let nat = &rules.table(Table::Nat).chains;
    // (chain, rule index, list) of every check that holds the client; read before a change.
    let mut holding = Vec::new();
    for kind in [PortChain::Cluster, PortChain::Local] {
        let chain = port_chain(kind, &state.port.name);
        let Some(list) = nat.get(&chain) else {
            continue;
        };
        for (i, rule) in list.iter().enumerate() {
            for m in &rule.matches {
                if let Match::RecentCheck { name, seconds } = m {
                    let Some(entries) = lists.clients(name)? else {
                        return Ok(None);
                    };
                    if entries
                        .iter()
                        .any(|e| e.client == client && e.current(*seconds, clock))
                    {
                        holding.push((chain.clone(), i, name.clone()));
                    }
                }
            }
        }
    }
    let mut remembered = Vec::new();
    for (chain, i, name) in holding {
        let nat = &mut rules.table_mut(Table::Nat).chains;
        if let Some(rule) = nat.get_mut(&chain).and_then(|l| l.get_mut(i)) {
            rule.matches
                .retain(|m| !matches!(m, Match::RecentCheck { name: n, .. } if *n == name));
        }
        let dnat = nat
            .get(&name)
            .into_iter()
            .flatten()
            .find_map(|r| match r.target {
                Target::Dnat { ip, port } => Some(SocketAddr::new(ip, port)),
                _ => None,
            });
        remembered.extend(dnat);
    }
    remembered.sort();
    remembered.dedup();
    Ok(Some(remembered))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::IpFamily;
    use crate::dataplane::inspect::clock::clock;
    use crate::dataplane::inspect::sticky::{listed, sticky};
    use crate::dataplane::iptables::inspect::Planned;
    use crate::dataplane::iptables::parse::canonical;
    use crate::testing::plans::packet;
    use crate::testing::snapshots::{node, node_policy, snapshot};

    /// Shaped like `/proc/net/xt_recent/KUBE-SEP-…` after two clients connected.
    const LIST: &str = "\
src=10.244.1.7 ttl: 64 last_seen: 4295581122 oldest_pkt: 1 4295581122
src=10.244.1.8 ttl: 63 last_seen: 4295590000 oldest_pkt: 2 4295588000, 4295590000
src=fd00:0010:0244:0001:0000:0000:0000:0007 ttl: 64 last_seen: 4295581122 oldest_pkt: 1 4295581122
";

    #[test]
    fn a_list_is_its_clients_in_either_family() {
        let c = parse(LIST);
        assert_eq!(c.len(), 3);
        assert_eq!(
            c[1],
            Entry {
                client: "10.244.1.8".parse().unwrap(),
                last_seen: 4295590000
            }
        );
        assert_eq!(c[2].client, "fd00:10:244:1::7".parse::<IpAddr>().unwrap());
        assert!(parse("src=not-an-address ttl: 1\nsrc=10.0.0.1 ttl: 1\nnoise\n").is_empty());
    }

    /// The head of `/proc/timer_list` on a 6.1 kernel built with HZ=250, 2,615 s after boot.
    const TIMER: &str = "\
Timer List Version: v0.9
HRTIMER_MAX_CLOCK_BASES: 8
now at 2615779170626 nsecs

cpu: 0
 clock 0:
  .base:       ffff88803ec1e0c0
jiffies: 4295546176
";

    #[test]
    fn the_tick_rate_is_the_one_that_puts_the_count_at_the_clock() {
        let c = clock(TIMER).unwrap();
        assert_eq!(
            c,
            Clock {
                jiffies: 4295546176,
                hz: 250
            }
        );
        // The same uptime on a HZ=1000 kernel.
        let k = TIMER.replace(
            "4295546176",
            &(4294967296u64 - 300_000 + 2_615_779).to_string(),
        );
        assert_eq!(clock(&k).unwrap().hz, 1000);
        assert_eq!(clock("jiffies: 12\n"), None);
        let entry = Entry {
            client: "10.244.1.7".parse().unwrap(),
            last_seen: c.jiffies - 250 * 5,
        };
        assert!(entry.current(600, Some(c)), "5 s old, timeout 600 s");
        assert!(!entry.current(2, Some(c)), "5 s old, timeout 2 s");
        assert!(entry.current(2, None), "no clock: taken as current");
    }

    /// The kernel's lists, by name.
    struct Kernel(Vec<(ChainName, Vec<Entry>)>);

    impl Lists for Kernel {
        fn clients(&mut self, list: &ChainName) -> Result<Option<Vec<Entry>>, Error> {
            Ok(Some(listed(&self.0, list)))
        }
    }

    #[test]
    fn a_remembered_client_is_traced_to_its_endpoint_alone() {
        let snap = snapshot(node(), vec![sticky(600)]);
        let policy = node_policy();
        let planned = Planned::with_policy(&snap, &policy);
        // Our chains as `iptables::parse` reads them back from the kernel: one flat table.
        let kernel = canonical(&planned.0[IpFamily::V4.index()]);
        let request = packet(&snap, &policy, "10.96.0.10:80", Some("10.244.1.7"));
        let reach = |r: &Ruleset| {
            crate::dataplane::inspect::Rules::walk(r, &request)
                .endpoints
                .iter()
                .map(|s| s.endpoint.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(reach(&kernel).len(), 2);
        let b = kernel
            .table(Table::Nat)
            .chains
            .iter()
            .find(|(n, rules)| {
                n.as_str().starts_with("KUBE-SEP-")
                    && rules.iter().any(|r| {
                        r.target
                            == Target::Dnat {
                                ip: "10.244.2.2".parse().unwrap(),
                                port: 8080,
                            }
                    })
            })
            .unwrap()
            .0
            .clone();

        let mut traced = kernel.clone();
        let mut lists = Kernel(vec![(b.clone(), vec![parse(LIST)[1]])]);
        let found = add_entries(&snap, &request, &mut traced, &mut lists, None).unwrap();
        assert_eq!(found, Some(vec![]));
        assert_eq!(traced, kernel, "another client's entry changes nothing");

        // This client's entry, 10 minutes old: past the 600 s timeout, the check passes it by.
        let seen = parse(LIST)[0].last_seen;
        let later = Clock {
            jiffies: seen + 250 * 600,
            hz: 250,
        };
        let mut lists = Kernel(vec![(b.clone(), parse(LIST))]);
        let found = add_entries(&snap, &request, &mut traced, &mut lists, Some(later)).unwrap();
        assert_eq!(found, Some(vec![]));
        assert_eq!(traced, kernel);

        // A minute old: remembered.
        let soon = Clock {
            jiffies: seen + 250 * 60,
            hz: 250,
        };
        let found = add_entries(&snap, &request, &mut traced, &mut lists, Some(soon)).unwrap();
        assert_eq!(found, Some(vec!["10.244.2.2:8080".parse().unwrap()]));
        assert_eq!(reach(&traced), ["10.244.2.2:8080"]);
    }
}
