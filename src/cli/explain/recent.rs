//! Whether a client has a ClientIP affinity entry, on a live iptables node: the `recent` lists.
//!
//! The iptables mode remembers affinity as upstream does: each endpoint chain `KUBE-SEP-…`
//! adds the client to the `recent` list of its own name (`--set`), and the Service port's
//! chain sends a client found in a list within the timeout to that endpoint (`--rcheck`). The
//! kernel shows each list as `/proc/net/xt_recent/<list>`, one `src=ADDRESS …` line per
//! client. `explain` reads the lists the port's chains check, and, for each holding this
//! client, lets that check match in the rules it traces, so the tracer follows the path the
//! kernel takes for this client now. (A list may still hold a client whose last connection is
//! older than the timeout; `--rcheck --seconds` then passes it by. The lists do not say the
//! age in seconds, so such an entry is taken as current.)
//!
//! Pure but for [`ProcLists`].

use std::net::{IpAddr, SocketAddr};

use super::source::Source;
use super::{Request, find};
use crate::cluster::{IpFamily, Snapshot};
use crate::dataplane::iptables::names::{ChainName, PortChain, port_chain};
use crate::dataplane::iptables::ruleset::{Match, Ruleset, Table, Target};
use crate::dataplane::node::NodePolicy;

/// Where the kernel shows the `recent` lists of this network namespace.
pub const LISTS: &str = "/proc/net/xt_recent";

/// What the kernel can tell of a `recent` list: its clients, or `None` when it has no such
/// list.
pub trait Lists {
    fn clients(&mut self, list: &ChainName) -> Result<Option<Vec<IpAddr>>, String>;
}

/// The lists of this node, read from [`LISTS`].
pub struct ProcLists;

impl Lists for ProcLists {
    #[allow(
        clippy::disallowed_methods,
        reason = "the kernel's lists are read where they are asked for"
    )]
    fn clients(&mut self, list: &ChainName) -> Result<Option<Vec<IpAddr>>, String> {
        // A chain name is [A-Z0-9-] only: a file name, never a path.
        let path = format!("{LISTS}/{list}");
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(parse(&text))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("reading {path}: {e}")),
        }
    }
}

/// The clients of one list's text: `src=ADDRESS ttl: … last_seen: … oldest_pkt: …` lines.
pub fn parse(text: &str) -> Vec<IpAddr> {
    text.lines()
        .filter_map(|l| l.strip_prefix("src="))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect()
}

/// The client's entries for the port `request` reaches, applied to `rules` (our chains as the
/// kernel holds them) for the tracer. Returns the endpoints the kernel remembers this client
/// for (`Some(empty)`: none), or `None` when the port has no affinity or a list it checks is
/// not in the kernel.
pub fn add_entries(
    snapshot: &Snapshot,
    node: &NodePolicy,
    request: &Request,
    rules: &mut Ruleset,
    lists: &mut dyn Lists,
) -> Result<Option<Vec<SocketAddr>>, String> {
    let family = IpFamily::of(&request.to.ip());
    let Some((state, _)) = find(snapshot, request, family) else {
        return Ok(None);
    };
    if state.port.affinity_timeout_seconds.is_none() {
        return Ok(None);
    }
    let client = Source::resolve(snapshot, node, request, family)
        .map_err(|e| e.to_string())?
        .address;
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
                if let Match::RecentCheck { name, .. } = m {
                    let Some(clients) = lists.clients(name)? else {
                        return Ok(None);
                    };
                    if clients.contains(&client) {
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
    use crate::cli::explain::{Planned, Rules, RulesFrom, explain};
    use crate::dataplane::iptables::parse::canonical;
    use crate::testing::snapshots::{node, node_policy, snapshot, svc};

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
        assert_eq!(c[2], "fd00:10:244:1::7".parse::<IpAddr>().unwrap());
        assert!(parse("src=not-an-address ttl: 1\nnoise\n").is_empty());
    }

    /// The kernel's lists, by name.
    struct Kernel(Vec<(ChainName, Vec<IpAddr>)>);

    impl Lists for Kernel {
        fn clients(&mut self, list: &ChainName) -> Result<Option<Vec<IpAddr>>, String> {
            Ok(Some(
                self.0
                    .iter()
                    .find(|(n, _)| n == list)
                    .map(|(_, c)| c.clone())
                    .unwrap_or_default(),
            ))
        }
    }

    #[test]
    fn a_remembered_client_is_traced_to_its_endpoint_alone() {
        let snap = snapshot(
            node(),
            vec![
                svc("default/sticky", "10.96.0.10", 80)
                    .affinity(600)
                    .ep("10.244.1.2", 8080, "node-a")
                    .ep("10.244.2.2", 8080, "node-b"),
            ],
        );
        let policy = node_policy();
        let [_, ipt, _] = Planned::every_mode(&snap, &policy);
        let Rules::Iptables(planned) = ipt.rules(IpFamily::V4) else {
            unreachable!()
        };
        // Our chains as `iptables::parse` reads them back from the kernel: one flat table.
        let kernel = canonical(planned);
        let request = Request::parse("10.96.0.10:80", Some("10.244.1.7"), None).unwrap();
        let reach = |r: &Ruleset| {
            let e = explain(
                &snap,
                &policy,
                Rules::Iptables(r),
                RulesFrom::Kernel,
                &request,
            );
            e.unwrap()
                .outcome
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
        let mut lists = Kernel(vec![(b.clone(), vec!["10.244.1.8".parse().unwrap()])]);
        let found = add_entries(&snap, &policy, &request, &mut traced, &mut lists).unwrap();
        assert_eq!(found, Some(vec![]));
        assert_eq!(traced, kernel, "another client's entry changes nothing");

        let mut lists = Kernel(vec![(b, parse(LIST))]);
        let found = add_entries(&snap, &policy, &request, &mut traced, &mut lists).unwrap();
        assert_eq!(found, Some(vec!["10.244.2.2:8080".parse().unwrap()]));
        assert_eq!(reach(&traced), ["10.244.2.2:8080"]);
    }
}
