//! Times the iptables dataplane against the real kernel (root, iptables-nft): cold sync into an
//! empty network namespace, one endpoint change (a partial sync), and a restart's full sync,
//! at N Services × M endpoints. Not a test: timings are reported, never asserted.
//!
//! Run: `sudo cargo run --release --example iptables_apply [SERVICES ENDPOINTS ...]` (default
//! 1000 10 10000 10). Above 5,000 Services the restart is measured only with
//! `IPTABLES_APPLY_RESTART=1`; `IPTABLES_APPLY_DUMP=FILE` writes the IPv4 full-sync input of the
//! first size instead, to time `iptables-restore` by hand. After the partial syncs it times what
//! a live `explain` reads of the kernel for one packet to the middle Service: the chains its
//! path needs (`iptables-nft -S`, one chain at a time) against the whole `iptables-nft-save`
//! (`IPTABLES_APPLY_EXPLAIN=0` leaves both out; `IPTABLES_APPLY_EXPLAIN_IN=NETNS` times only
//! those reads in a namespace the first size's dump was restored into). Each size runs in its own namespace
//! `ipa-bench-<pid>-<n>`, deleted afterwards (also when a sync fails). Results go to
//! docs/benchmarks.md.

#![allow(
    clippy::disallowed_methods,
    reason = "a timing harness: it reads the clock and its switches, runs ip, writes a dump"
)]

use std::collections::BTreeMap;
use std::time::Instant;

use support::netns;
use support::synthetic;

use kube_proxy_rs::cluster::Changes;
use kube_proxy_rs::cluster::IpFamily;
use kube_proxy_rs::dataplane::Dataplane;
use kube_proxy_rs::dataplane::iptables::inspect::{saved, scoped};
use kube_proxy_rs::dataplane::iptables::{Flavour, IptablesCommand, IptablesDataplane, ModeConfig};
use netns::NetNs;
use synthetic::Synthetic;

/// The same allocator as the binary, so the numbers are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers"))
        .collect();
    let sizes: Vec<(usize, usize)> = if args.is_empty() {
        vec![(1000, 10), (10_000, 10)]
    } else {
        args.chunks(2).map(|c| (c[0], c[1])).collect()
    };
    for (services, endpoints) in sizes {
        let cluster = Synthetic {
            services,
            endpoints,
        };
        let snap = cluster.snapshot();
        let changes = Changes {
            ports: [cluster.moved_port()].into(),
            ..Changes::default()
        };
        if let Ok(path) = std::env::var("IPTABLES_APPLY_DUMP") {
            // The full-sync input for IPv4 on an empty node, to time the tool by hand.
            let want = kube_proxy_rs::dataplane::iptables::plan(
                &snap,
                &ModeConfig::default(),
                IpFamily::V4,
            );
            let input = kube_proxy_rs::dataplane::iptables::diff::full(&want, &BTreeMap::new());
            std::fs::write(path, input.text).expect("write the input");
            return;
        }
        if let Ok(name) = std::env::var("IPTABLES_APPLY_EXPLAIN_IN") {
            // A namespace the caller restored the dump into: only explain's reads, timed.
            explain_reads(&name, &snap, &cluster);
            return;
        }
        let ns = NetNs::new("ipa-bench");
        let mut dp = IptablesDataplane::new(
            ModeConfig::default(),
            IptablesCommand::in_netns(Flavour::Nft, &ns.name),
        );
        let t = Instant::now();
        dp.sync(&snap, &Changes::default(), true)
            .expect("cold sync");
        let cold = t.elapsed();
        println!(
            "{services} x {endpoints}: cold sync {:.2} s",
            cold.as_secs_f64()
        );
        let mut partial = Vec::new();
        for (i, to) in ["10.200.0.1", "10.200.0.2", "10.200.0.3"]
            .iter()
            .enumerate()
        {
            let next = cluster.moved(&snap, to);
            let t = Instant::now();
            let r = dp.sync(&next, &changes, false).expect("partial sync");
            assert!(!r.full, "sync {i} was full");
            partial.push(t.elapsed());
            println!(
                "{services} x {endpoints}: one endpoint change (partial sync) {:.0} ms",
                t.elapsed().as_secs_f64() * 1e3
            );
        }
        if std::env::var("IPTABLES_APPLY_EXPLAIN").as_deref() != Ok("0") {
            explain_reads(&ns.name, &cluster.moved(&snap, "10.200.0.3"), &cluster);
        }
        if services > 5000 && std::env::var("IPTABLES_APPLY_RESTART").is_err() {
            // At this size iptables-nft-save runs minutes and then crashes (1.8.9), and the
            // fallback full restore costs as much as the cold one: opt in.
            continue;
        }
        let mut restarted = IptablesDataplane::new(
            ModeConfig::default(),
            IptablesCommand::in_netns(Flavour::Nft, &ns.name),
        );
        let last = cluster.moved(&snap, "10.200.0.3");
        let t = Instant::now();
        if let Err(e) = restarted.sync(&last, &Changes::default(), true) {
            println!("{services} x {endpoints}: restart failed: {e}");
        }
        let restart = t.elapsed();
        println!(
            "{services} x {endpoints}: restart (full sync) {:.2} s",
            restart.as_secs_f64()
        );
        drop(ns);
        println!(
            "{services} x {endpoints}: cold sync {:.2} s; one endpoint change (partial) {:?}; restart (full) {:.2} s",
            cold.as_secs_f64(),
            partial
                .iter()
                .map(|d| format!("{:.0} ms", d.as_secs_f64() * 1e3))
                .collect::<Vec<_>>(),
            restart.as_secs_f64()
        );
    }
}

/// Times what a live `explain` reads for one packet to the middle Service, both ways, and
/// checks the two readings agree (no drift either way after a sync).
fn explain_reads(ns: &str, snap: &kube_proxy_rs::cluster::Snapshot, cluster: &Synthetic) {
    let want = kube_proxy_rs::dataplane::iptables::plan(snap, &ModeConfig::default(), IpFamily::V4);
    let state = &snap.ports[&cluster.moved_port()];
    let view = state.family(IpFamily::V4).expect("IPv4");
    let packet = scoped::Packet {
        to: view.cluster_ip,
        port: state.port.port,
        protocol: state.port.name.protocol,
    };
    let services = cluster.services;
    for (how, packet) in [("chains of its path", Some(&packet)), ("whole save", None)] {
        let t = Instant::now();
        let read = saved::read_iptables(Some(ns), IpFamily::V4, &want, packet)
            .expect("explain reads the kernel");
        println!(
            "{services} x {}: explain's kernel read ({how}) {:.0} ms, drift {:?}",
            cluster.endpoints,
            t.elapsed().as_secs_f64() * 1e3,
            read.drift
        );
    }
}
