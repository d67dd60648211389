//! The cases of `tests/ipvs_apply.rs` that read a live IPVS node back through `explain` and
//! `status`: the virtual services and helper table as the plan has them, drift when another
//! program deletes a destination, and a ClientIP persistence template sending its client to
//! one real server.

use crate::*;

/// `explain` on a live IPVS node: the kernel's virtual services and helper table, read back,
/// explain ClusterIP packets as the plan does; a destination `ipvsadm -d` removes is drift,
/// and no longer among the endpoints reached.
pub fn explain_live() {
    use kube_proxy_rs::cli::explain::{Plan as _, Request, RulesFrom, explain};
    use kube_proxy_rs::cluster::IpFamily;
    use kube_proxy_rs::dataplane::inspect::table as nft_kernel;
    use kube_proxy_rs::dataplane::ipvs::inspect::{IpvsRules, Planned, kernel};
    let ns = node("ipa-explain");
    let cfg = ModeConfig::default();
    let snap = example();
    let (mut dp, _) = dataplane(&ns, cfg.clone());
    dp.sync(&snap, &Changes::default(), true)
        .expect("first sync");
    let host = HostAddresses(BTreeSet::from(["192.0.2.99".parse().unwrap()]));
    let planned = Planned::on(&snap, &cfg, &host);
    let IpvsRules { desired, tables } = &planned.0[IpFamily::V4.index()];
    let read = || {
        let ipvs = kernel::read_ipvs(Some(&ns.name), IpFamily::V4).expect("reads IPVS");
        let table =
            nft_kernel::read_nftables(NftablesEncoder::Netlink, Some(&ns.name), nft::Family::Ip)
                .expect("reads our table")
                .expect("our table exists");
        let read = kernel::ipvs_as_read(desired, &ipvs);
        let mut drift = read.drift;
        drift.extend(nft_kernel::drift(Some(&table), tables));
        (read.services, table, drift)
    };
    let (services, table, drift) = read();
    assert!(drift.is_empty(), "just synced: {drift:?}");
    let ask = |to: &str, from: Option<&str>, rules: &dyn kube_proxy_rs::cli::explain::Rules| {
        let request = Request::parse(to, from, None).unwrap();
        explain(&snap, &cfg.node, rules, RulesFrom::Kernel, &request).unwrap()
    };
    let live = || IpvsRules {
        desired: services.clone(),
        tables: table.clone(),
    };
    for (to, from) in [
        ("10.96.1.10:80", None),
        ("10.96.1.10:80", Some("outside")),
        ("10.96.1.15:80", None),
        ("10.96.2.10:80", Some("node")),
    ] {
        let a = ask(to, from, planned.rules(IpFamily::V4));
        let b = ask(to, from, &live());
        assert_eq!(a.outcome, b.outcome, "{to} from {from:?}");
    }
    let web = ask("10.96.1.10:80", None, &live());
    assert!(web.outcome.endpoints.len() >= 2, "{:?}", web.outcome);
    let gone = web.outcome.endpoints[0].endpoint.to_string();
    ns.output("ipvsadm", &["-d", "-t", "10.96.1.10:80", "-r", &gone]);
    let (services, table, drift) = read();
    assert!(
        drift
            .iter()
            .any(|d| d.contains(&format!("destination {gone} is not in the kernel"))),
        "{drift:?}"
    );
    let after = explain(
        &snap,
        &cfg.node,
        &IpvsRules {
            desired: services.clone(),
            tables: table.clone(),
        },
        RulesFrom::Kernel,
        &Request::parse("10.96.1.10:80", None, None).unwrap(),
    )
    .unwrap();
    assert!(
        after
            .outcome
            .endpoints
            .iter()
            .all(|s| s.endpoint.to_string() != gone),
        "{:?}",
        after.outcome
    );

    // `status` over the same read: the port programmed with one endpoint fewer than its
    // model, and the ClusterIP frontend named as drift.
    use kube_proxy_rs::cli::status::{self, Inputs, Runtime};
    let runtime = Runtime::default();
    let read_v4 = IpvsRules {
        desired: services.clone(),
        tables: table.clone(),
    };
    let st = status::build(Inputs {
        snapshot: &snap,
        node: &cfg.node,
        planned: IpFamily::ALL.map(|f| planned.rules(f)),
        kernel: Some([&read_v4, planned.rules(IpFamily::V6)]),
        drift,
        runtime: &runtime,
        service: None,
    });
    let text = status::render::text(&st, false);
    let web = st
        .service_ports
        .iter()
        .find(|p| {
            p.frontends
                .iter()
                .any(|f| f.address.to_string() == "10.96.1.10:80")
        })
        .expect("the web port");
    assert_eq!(web.programmed, Some(web.endpoints - 1), "{text}");
    assert_eq!(web.drifted(), 1, "{text}");
    assert!(text.contains("kernel: DIFFERS from the plan"), "{text}");
    assert!(
        text.contains(&format!("destination {gone} is not in the kernel")),
        "{text}"
    );
    let mut others = st.service_ports.iter().filter(|p| p.name != web.name);
    assert!(others.clone().all(|p| p.drifted() == 0), "{text}");
    assert!(others.all(|p| p.programmed == Some(p.endpoints)), "{text}");
}

/// IPVS persistence on a live node: a connection attempt from the node to default/web-sticky
/// (ClientIP for 3 h) is scheduled by IPVS, which keeps the client's template; the kernel's
/// text, parsed, names the real server, and `explain` for that client reaches it alone.
pub fn persistence_live() {
    use kube_proxy_rs::cli::explain::{Request, RulesFrom, explain};
    use kube_proxy_rs::cluster::{IpFamily, Protocol};
    use kube_proxy_rs::dataplane::ipvs::inspect::{IpvsRules, Planned, kernel, persistence};
    let ns = node("ipa-persist");
    let cfg = ModeConfig::default();
    let snap = example();
    let (mut dp, _) = dataplane(&ns, cfg.clone());
    dp.sync(&snap, &Changes::default(), true)
        .expect("first sync");
    // No pod answers (the real servers sit behind a dummy link): the SYN is scheduled, the
    // template kept, and the attempt times out.
    ns.output(
        "sh",
        &[
            "-c",
            "timeout 2 bash -c 'echo > /dev/tcp/10.96.1.14/80' 2>/dev/null; true",
        ],
    );
    let text = ns.output("cat", &[persistence::CONNECTIONS]);
    let templates = persistence::parse(&text);
    let t = templates
        .iter()
        .find(|t| t.service.to_string() == "10.96.1.14:80")
        .unwrap_or_else(|| panic!("a template for 10.96.1.14:80 in\n{text}"));
    assert!(t.expires_seconds > 0, "{t:?}");

    let host = HostAddresses(BTreeSet::from(["192.0.2.99".parse().unwrap()]));
    let planned = Planned::on(&snap, &cfg, &host);
    let IpvsRules { desired, tables } = &planned.0[IpFamily::V4.index()];
    let ipvs = kernel::read_ipvs(Some(&ns.name), IpFamily::V4).expect("reads IPVS");
    let mut services = kernel::ipvs_as_read(desired, &ipvs).services;
    let key = ServiceKey::Address {
        protocol: Protocol::Tcp.into(),
        address: t.service,
    };
    let remembered = persistence::apply(&mut services, &key, t.client, &templates);
    assert_eq!(remembered.destinations, vec![t.destination], "{text}");
    let request =
        Request::parse("10.96.1.14:80", Some(&t.client.to_string()), None).expect("request");
    let e = explain(
        &snap,
        &cfg.node,
        &IpvsRules {
            desired: services,
            tables: tables.clone(),
        },
        RulesFrom::Kernel,
        &request,
    )
    .unwrap();
    let reached: Vec<_> = e.outcome.endpoints.iter().map(|s| s.endpoint).collect();
    assert_eq!(reached, vec![t.destination], "{:?}", e.outcome);
}
