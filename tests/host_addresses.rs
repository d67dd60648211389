//! The host address source (`cluster::source::interfaces`) against the real kernel (root): in a
//! fresh network namespace with addresses of our own, it reports exactly what `ip -j addr`
//! shows, and follows an address added and then removed.
//!
//! The source reads the namespace it runs in, so that part runs in this test binary
//! re-executed under `ip netns exec` (the `host_addresses_helper_process` entry).

#![allow(
    clippy::disallowed_methods,
    reason = "a kernel test: runs ip and re-executes itself in a namespace"
)]

use support::host;

use std::net::IpAddr;
use std::process::Command;
use std::time::Duration;

use futures::StreamExt;
use host::NetNs;
use host::helper_process::{HelperProcess, RESULT};
use kube_proxy_rs::cluster::source::Event;
use kube_proxy_rs::cluster::source::interfaces;

/// Added by the helper while it watches, then removed.
const ADDED: &str = "10.77.9.9";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn reports_what_ip_shows_and_follows_changes() {
    let ns = NetNs::new("kprs-addr");
    for args in [
        "link add kprs-a type veth peer name kprs-b",
        "addr add 10.77.0.1/24 dev kprs-a",
        "-6 addr add fd77::1/64 dev kprs-a nodad",
        "link set kprs-a up",
    ] {
        ns.output("ip", &args.split(' ').collect::<Vec<_>>());
    }
    let shown = ip_shows(&ns);
    for want in ["127.0.0.1", "10.77.0.1", "fd77::1"] {
        assert!(shown.contains(&ip(want)), "ip -j addr: {shown:?}");
    }

    let lists: Vec<Vec<IpAddr>> = HELPER
        .results_in(&ns.name, "watch")
        .iter()
        .map(|l| l.split_whitespace().map(ip).collect())
        .collect();
    assert_eq!(lists.len(), 3, "helper reports: {lists:?}");
    assert_eq!(
        lists[0],
        sorted(shown.clone()),
        "first report vs ip -j addr"
    );
    let mut with_added = shown.clone();
    with_added.push(ip(ADDED));
    assert_eq!(lists[1], sorted(with_added), "after adding {ADDED}");
    assert_eq!(lists[2], sorted(shown), "after removing {ADDED}");
}

fn sorted(mut v: Vec<IpAddr>) -> Vec<IpAddr> {
    v.sort();
    v.dedup();
    v
}

/// The `local` addresses `ip -j addr show` lists in `ns`.
fn ip_shows(ns: &NetNs) -> Vec<IpAddr> {
    let json: serde_json::Value =
        serde_json::from_str(&ns.output("ip", &["-j", "addr", "show"])).expect("ip -j addr");
    let mut out = Vec::new();
    for link in json.as_array().into_iter().flatten() {
        for a in link["addr_info"].as_array().into_iter().flatten() {
            if let Some(local) = a["local"].as_str() {
                out.push(ip(local));
            }
        }
    }
    sorted(out)
}

/// The entry below, run in the namespace: `watch`.
const HELPER: HelperProcess = HelperProcess::new("host_addresses_helper_process");

/// Not a test of its own: the entry point of the helper above. Without the environment
/// variable it does nothing.
#[test]
fn host_addresses_helper_process() {
    HELPER.when_requested(|_| watch());
}

/// Prints the first report, adds an address and prints the next, removes it and prints the
/// next.
fn watch() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut events = Box::pin(interfaces::watch(None));
        let mut next = async || {
            let event = tokio::time::timeout(Duration::from_secs(10), events.next())
                .await
                .expect("an address report within 10 s")
                .expect("the source stays open");
            let Event::HostAddresses(list) = event else {
                panic!("not an address report: {event:?}");
            };
            let words: Vec<String> = list.iter().map(|a| a.to_string()).collect();
            println!("{RESULT}{}", words.join(" "));
        };
        next().await;
        run_ip(&["addr", "add", &format!("{ADDED}/32"), "dev", "lo"]);
        next().await;
        run_ip(&["addr", "del", &format!("{ADDED}/32"), "dev", "lo"]);
        next().await;
    });
}

fn run_ip(args: &[&str]) {
    host::stdout_of(Command::new("ip").args(args));
}
