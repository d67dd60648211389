//! `explain` over a real kernel in iptables mode (root, a fresh network namespace per test):
//! the mode's chains, read back through the adopting readers (iptables-nft by the packet's
//! path, whole saves, iptables-legacy), explain packets exactly as the plan does, a client's
//! `recent` entry sends it to its endpoint, and a change another program makes to our rules
//! shows as drift. The nftables mode's counterpart is `tests/explain.rs`.

#![allow(
    clippy::disallowed_methods,
    reason = "kernel tests run iptables in their namespace"
)]

use support::example_cluster;
use support::host;

use example_cluster::{PACKETS, assert_explained_alike, reached, synced_example};
use host::NetNs;
use kube_proxy_rs::cli::explain::{Plan as _, Request, Rules, RulesFrom, explain, render};
use kube_proxy_rs::cluster::IpFamily;
use kube_proxy_rs::dataplane::iptables::inspect::Planned;
#[test]
fn iptables_chains_read_back_explain_packets_as_the_plan_does_and_drift_shows() {
    use kube_proxy_rs::dataplane::iptables::inspect::{saved, scoped};
    use kube_proxy_rs::dataplane::iptables::{self, Flavour, IptablesCommand, IptablesDataplane};

    let ns = NetNs::new("explain-ipt");
    let cfg = iptables::ModeConfig::default();
    let mut dp = IptablesDataplane::new(
        cfg.clone(),
        IptablesCommand::in_netns(Flavour::Nft, &ns.name),
    );
    let snap = synced_example(&mut dp);
    let planned = Planned::new(&snap, &cfg);
    let want = &planned.0[IpFamily::V4.index()];
    let read = || saved::read_iptables(Some(&ns.name), IpFamily::V4, want, None).expect("reads");
    let live = read();
    assert_eq!(live.drift, Vec::<String>::new(), "just synced");
    let chains = live.rules.expect("our chains are there");
    let scoped_read = |request: &Request| {
        let packet = scoped::Packet {
            to: request.to.ip(),
            port: request.to.port(),
            protocol: request.protocol,
        };
        saved::read_iptables(Some(&ns.name), IpFamily::V4, want, Some(&packet)).expect("reads")
    };
    for (to, from) in PACKETS {
        let request = Request::parse(to, *from, None).unwrap();
        let alike = |kernel: &dyn Rules, what: &str| {
            let planned = planned.rules(IpFamily::V4);
            assert_explained_alike(&snap, &cfg.node, &request, planned, kernel, what);
        };
        alike(&chains, &format!("{to} from {from:?}"));
        // Only the chains of the packet's path, read one by one (an iptables-nft node).
        let path = scoped_read(&request);
        assert_eq!(path.drift, Vec::<String>::new(), "{to}: just synced");
        alike(
            path.rules.as_ref().expect("our chains"),
            &format!("{to} from {from:?}, its path read"),
        );
    }

    // Another program deletes the DNAT of one endpoint chain on 10.96.1.10:80's path: the
    // path's reading tells it, and a packet to another Service does not read that chain.
    let jump_in = |chain: &str, wanted: &dyn Fn(&str) -> bool| -> String {
        let listed = ns.output("iptables-nft", &["-t", "nat", "-S", chain]);
        let line = listed
            .lines()
            .find(|l| wanted(l))
            .unwrap_or_else(|| panic!("no such rule in {chain}:\n{listed}"));
        line.split(' ')
            .skip_while(|w| *w != "-j")
            .nth(1)
            .expect("a jump")
            .to_owned()
    };
    let svc_chain = jump_in("KUBE-SERVICES", &|l| {
        l.contains("-d 10.96.1.10/32") && l.contains("--dport 80 ")
    });
    let sep_chain = jump_in(&svc_chain, &|l| l.contains("-j KUBE-SEP-"));
    let sep = ns
        .output("iptables-nft", &["-t", "nat", "-S", &sep_chain])
        .lines()
        .find(|l| l.contains("-j DNAT"))
        .expect("the endpoint chain's DNAT")
        .to_owned();
    let deleted = sep.replacen("-A ", "-D ", 1);
    let words: Vec<&str> = std::iter::once("-t")
        .chain(std::iter::once("nat"))
        .chain(deleted.split(' '))
        .collect();
    // The comment's quoted words are whole arguments again.
    let args = quoted_args(&words);
    ns.output(
        "iptables-nft",
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let web = scoped_read(&Request::parse("10.96.1.10:80", None, None).unwrap());
    assert!(
        web.drift.iter().any(|l| l.contains(&sep_chain)),
        "{sep_chain} in {:?}",
        web.drift
    );
    let other = scoped_read(&Request::parse("10.96.2.10:80", None, None).unwrap());
    assert!(
        !other.drift.iter().any(|l| l.contains(&sep_chain)),
        "{:?}",
        other.drift
    );

    // Another program flushes KUBE-SERVICES: the ClusterIP is no longer captured, and the
    // drift is the restore input a sync would send.
    ns.output("iptables-nft", &["-t", "nat", "-F", "KUBE-SERVICES"]);
    let flushed = read();
    assert!(
        flushed.drift[0].contains("would bring the kernel to the plan"),
        "{:?}",
        flushed.drift
    );
    assert!(
        flushed.drift.iter().any(|l| l.contains("KUBE-SERVICES")),
        "{:?}",
        flushed.drift
    );
    let request = Request::parse("10.96.1.10:80", None, None).unwrap();
    let after = explain(
        &snap,
        &cfg.node,
        flushed.rules.as_ref().unwrap(),
        RulesFrom::Kernel,
        &request,
    )
    .unwrap();
    assert_eq!(
        after.outcome.verdict,
        kube_proxy_rs::cli::explain::Verdict::Untouched,
        "{}",
        render::text(&after)
    );

    // Our nat chains gone: none read, and the drift says so.
    ns.output("iptables-nft", &["-t", "nat", "-F"]);
    ns.output("iptables-nft", &["-t", "nat", "-X"]);
    let gone = read();
    assert!(gone.rules.is_none());
    assert!(
        gone.drift[0].contains("our chains are not in the kernel"),
        "{:?}",
        gone.drift
    );
}

/// The `recent` lists of a namespace, read from its `/proc/net/xt_recent` as the kernel shows
/// them (the command's own `ProcLists` reads the caller's namespace).
struct NsLists<'a>(&'a NetNs);

impl kube_proxy_rs::dataplane::iptables::inspect::recent::Lists for NsLists<'_> {
    fn clients(
        &mut self,
        list: &kube_proxy_rs::dataplane::iptables::names::ChainName,
    ) -> Result<
        Option<Vec<kube_proxy_rs::dataplane::iptables::inspect::recent::Entry>>,
        kube_proxy_rs::dataplane::inspect::Error,
    > {
        let path = format!(
            "{}/{list}",
            kube_proxy_rs::dataplane::iptables::inspect::recent::LISTS
        );
        Ok(self
            .0
            .try_output("cat", &[&path])
            .ok()
            .map(|t| kube_proxy_rs::dataplane::iptables::inspect::recent::parse(&t)))
    }
}

#[test]
fn a_clients_recent_entry_in_the_kernel_sends_it_to_its_endpoint_in_iptables_mode() {
    use kube_proxy_rs::dataplane::iptables::inspect::{recent, saved};
    use kube_proxy_rs::dataplane::iptables::ruleset::{Match, Table, Target};
    use kube_proxy_rs::dataplane::iptables::{self, Flavour, IptablesCommand, IptablesDataplane};

    let ns = NetNs::new("explain-recent");
    let cfg = iptables::ModeConfig::default();
    let mut dp = IptablesDataplane::new(
        cfg.clone(),
        IptablesCommand::in_netns(Flavour::Nft, &ns.name),
    );
    let snap = synced_example(&mut dp);
    let planned = Planned::new(&snap, &cfg);
    let want = &planned.0[IpFamily::V4.index()];
    let read = || {
        saved::read_iptables(Some(&ns.name), IpFamily::V4, want, None)
            .expect("reads")
            .rules
            .expect("our chains are there")
    };
    // default/web-sticky (10.96.1.14:80, ClientIP for 3 h) over 10.244.1.10 and 10.244.2.10.
    let request = Request::parse("10.96.1.14:80", Some("10.244.1.77"), None).unwrap();
    let packet = kube_proxy_rs::cli::explain::packet(&snap, &cfg.node, &request).unwrap();
    let ask = |rules: &iptables::Ruleset| {
        explain(&snap, &cfg.node, rules, RulesFrom::Kernel, &request).unwrap()
    };
    let mut live = read();
    let to_b = Target::Dnat {
        ip: "10.244.2.10".parse().unwrap(),
        port: 8080,
    };
    let list = live
        .table(Table::Nat)
        .chains
        .values()
        .flatten()
        .flat_map(|r| &r.matches)
        .find_map(|m| match m {
            Match::RecentCheck { name, .. }
                if live.table(Table::Nat).chains[name]
                    .iter()
                    .any(|r| r.target == to_b) =>
            {
                Some(name.clone())
            }
            _ => None,
        })
        .expect("a recent list for 10.244.2.10");
    // No client yet: the lists (made with the rules that name them) are empty.
    let clock = kube_proxy_rs::dataplane::inspect::clock::read_clock();
    assert!(clock.is_some(), "this kernel's tick count is read");
    let found = recent::add_entries(&snap, &packet, &mut live, &mut NsLists(&ns), clock)
        .expect("reads the lists");
    assert_eq!(found, Some(vec![]));
    assert_eq!(ask(&live).outcome.endpoints.len(), 2);

    // The lists as the kernel fills them on connections: this client to 10.244.2.10, another
    // to the other endpoint.
    let other = live
        .table(Table::Nat)
        .chains
        .values()
        .flatten()
        .flat_map(|r| &r.matches)
        .find_map(|m| match m {
            Match::RecentCheck { name, .. } if *name != list => Some(name.clone()),
            _ => None,
        })
        .expect("the other endpoint's list");
    let write = |list: &str, client: &str| {
        ns.output(
            "sh",
            &["-c", &format!("echo +{client} > {}/{list}", recent::LISTS)],
        )
    };
    write(list.as_str(), "10.244.1.77");
    write(other.as_str(), "10.244.1.78");
    let mut live = read();
    let found = recent::add_entries(
        &snap,
        &packet,
        &mut live,
        &mut NsLists(&ns),
        kube_proxy_rs::dataplane::inspect::clock::read_clock(),
    )
    .expect("reads the lists");
    assert_eq!(found, Some(vec!["10.244.2.10:8080".parse().unwrap()]));
    let e = ask(&live);
    assert_eq!(reached(&e), ["10.244.2.10:8080"], "{}", render::text(&e));
}

#[test]
fn iptables_legacy_chains_are_read_from_the_flavour_that_holds_them() {
    use kube_proxy_rs::dataplane::iptables::inspect::saved;
    use kube_proxy_rs::dataplane::iptables::{self, Flavour, IptablesCommand, IptablesDataplane};

    let ns = NetNs::new("explain-legacy");
    let cfg = iptables::ModeConfig::default();
    let mut dp = IptablesDataplane::new(
        cfg.clone(),
        IptablesCommand::in_netns(Flavour::Legacy, &ns.name),
    );
    let snap = synced_example(&mut dp);
    assert_eq!(
        IptablesCommand::detect(&["ip", "netns", "exec", &ns.name].map(String::from)),
        Flavour::Legacy,
        "the flavour holding more rules is the node's"
    );
    let planned = Planned::new(&snap, &cfg);
    let want = &planned.0[IpFamily::V4.index()];
    let read = saved::read_iptables(Some(&ns.name), IpFamily::V4, want, None).expect("reads");
    assert_eq!(read.drift, Vec::<String>::new(), "just synced");
    let chains = read.rules.expect("our chains are there");
    let request = Request::parse("10.96.1.10:80", None, None).unwrap();
    let e = explain(&snap, &cfg.node, &chains, RulesFrom::Kernel, &request).unwrap();
    assert_eq!(e.outcome.endpoints.len(), 3, "{}", render::text(&e));
}

/// `words` of a saved rule split at spaces, with the words of a quoted comment joined again
/// into one argument (without its quotes), as a shell would pass them.
fn quoted_args(words: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut open: Option<String> = None;
    for w in words {
        match open.take() {
            Some(mut acc) => {
                acc.push(' ');
                acc.push_str(w);
                if w.ends_with('"') {
                    out.push(acc.trim_matches('"').to_owned());
                } else {
                    open = Some(acc);
                }
            }
            None if w.starts_with('"') && !(w.len() > 1 && w.ends_with('"')) => {
                open = Some((*w).to_owned());
            }
            None => out.push(w.trim_matches('"').to_owned()),
        }
    }
    out
}
