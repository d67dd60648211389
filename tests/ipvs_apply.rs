//! The IPVS dataplane against a real IPVS kernel: one boot of the User-mode Linux
//! kernel (`support/uml.rs`, with IPVS and nf_tables built in) re-runs this binary inside it
//! (`ipvs_apply_helper_process`), which
//! programs the example cluster into a network namespace of its own (`ipa-…`, removed when the
//! case ends, also on failure) and checks, with `ipvsadm`, `ip` and `nft`:
//! - the first sync programs every virtual service and destination of the plan (as `ipvsadm
//!   -Sn` lists them), binds every ClusterIP on `kube-ipvs0`, and installs the planned helper
//!   tables (read back by the nftables mode's reader);
//! - a sync with nothing changed sends no netlink message at all (counted, IPVS and nf_tables,
//!   by the wrappers' calls and by the sockets' own count in `SyncReport::netlink_messages`);
//! - an endpoint that leaves goes to weight 0 first and is deleted once it has no connection;
//! - a restarted dataplane adopts the kernel and changes nothing;
//! - a stale virtual service is deleted by the next full sync, one in `excludeCIDRs` is kept;
//! - the start-up scheduler check passes for `rr` and names a scheduler the kernel lacks; the
//!   configured timeouts are set and a 0 one left as it was;
//! - `--cleanup`'s IPVS part flushes every virtual service and deletes `kube-ipvs0`, and a
//!   second run finds nothing;
//! - `explain` and `status` over what they read from the kernel (virtual services and the
//!   helper table) answer as over the plan, and a destination another program deletes shows
//!   as drift;
//! - IPVS objects another program deletes between syncs: a destination the next sync drains
//!   is read gone, one still wanted is put back by the next sync of its Service, and a virtual
//!   service a sync touches fails that sync (the others stay as they were) and is repaired by
//!   the full retry;
//! - a connection to a Service with ClientIP affinity leaves a persistence template in
//!   `/proc/net/ip_vs_conn`, which `explain` reads back to send that client to its real
//!   server alone.
//!
//! No traffic leaves the namespace.

#![allow(
    clippy::disallowed_methods,
    reason = "a kernel test: boots a UML guest, runs ip and ipvsadm, re-executes itself"
)]

use support::example_cluster;
#[path = "ipvs_apply/explained.rs"]
mod explained;
use support::uml;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use example_cluster::{example, without_one_web_endpoint};
use kube_proxy_rs::cluster::Changes;
use kube_proxy_rs::config::NftablesEncoder;
use kube_proxy_rs::dataplane::Dataplane;
use kube_proxy_rs::dataplane::ipvs::apply::{
    Backend, Error, IpvsDataplane, KernelBackend, MonotonicClock, check_scheduler, set_timeouts,
};
use kube_proxy_rs::dataplane::ipvs::backend::link::{AddressChanges, Link, LinkAddresses};
use kube_proxy_rs::dataplane::ipvs::backend::netlink::{
    ListedDestination, ListedService, Request, ServiceKey,
};
use kube_proxy_rs::dataplane::ipvs::backend::netlink::{Scheduler, Timeouts};
use kube_proxy_rs::dataplane::ipvs::{HostAddresses, ModeConfig, plan_all, render_all};
use kube_proxy_rs::dataplane::monitor::Drift;
use kube_proxy_rs::nft::{self, Backend as _};
use uml::host::NetNs;
use uml::host::helper_process::{HelperProcess, RESULT};

const MODULES: &[&str] = &["dummy", "ip_vs", "ip_vs_rr"];
const CASES: &[&str] = &[
    "scheduler-check",
    "sync",
    "idle-messages",
    "init-only",
    "explain",
    "persistence",
    "destination-removed",
];

#[test]
fn the_ipvs_dataplane_programs_adopts_and_drains_on_a_real_ipvs_kernel() {
    let found = uml::run_cases(MODULES, &HELPER, "guest", CASES, Duration::from_secs(300));
    for line in found.unwrap_or_default() {
        println!("{line}");
    }
}

const HELPER: HelperProcess = HelperProcess::new("ipvs_apply_helper_process");

/// Not a test of its own: the cases, run inside the guest.
#[test]
fn ipvs_apply_helper_process() {
    HELPER.when_requested(|role| {
        assert_eq!(role, "guest", "unknown role");
        scheduler_check();
        println!("{RESULT}scheduler-check ok");
        sync();
        println!("{RESULT}sync ok");
        idle_messages();
        println!("{RESULT}idle-messages ok");
        init_only();
        println!("{RESULT}init-only ok");
        explained::explain_live();
        println!("{RESULT}explain ok");
        explained::persistence_live();
        println!("{RESULT}persistence ok");
        destination_removed();
        println!("{RESULT}destination-removed ok");
    });
}

/// `--init-only` in ipvs mode (the DaemonSet's privileged init container) sets the IPVS
/// sysctls, which the unprivileged proxy cannot write: `vs/conntrack` above all, without which
/// the helper rules' masquerade never sees IPVS's connections.
fn init_only() {
    let path = "/proc/sys/net/ipv4/vs/conntrack";
    let read = || {
        std::fs::read_to_string(path)
            .expect("read vs/conntrack")
            .trim()
            .to_owned()
    };
    std::fs::write(path, "0").expect("reset vs/conntrack");
    assert_eq!(read(), "0");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_kube-proxy-rs"))
        .args([
            "--proxy-mode=ipvs",
            "--init-only",
            "--hostname-override=guest",
        ])
        .status()
        .expect("run kube-proxy-rs --init-only");
    assert!(status.success(), "--init-only: {status}");
    assert_eq!(read(), "1", "--init-only left vs/conntrack unset");
}

/// The real backend, counting every call that reaches the kernel.
struct Counting {
    inner: KernelBackend,
    calls: usize,
}

impl Backend for Counting {
    fn ensure_link(&mut self) -> Result<Link, Error> {
        self.calls += 1;
        self.inner.ensure_link()
    }
    fn addresses(&mut self, link: &Link) -> Result<LinkAddresses, Error> {
        self.calls += 1;
        self.inner.addresses(link)
    }
    fn update_addresses(&mut self, link: &Link, changes: &AddressChanges) -> Result<(), Error> {
        self.calls += 1;
        self.inner.update_addresses(link, changes)
    }
    fn services(&mut self) -> Result<Vec<ListedService>, Error> {
        self.calls += 1;
        self.inner.services()
    }
    fn destinations(&mut self, key: &ServiceKey) -> Result<Vec<ListedDestination>, Error> {
        self.calls += 1;
        self.inner.destinations(key)
    }
    fn send(&mut self, request: &Request) -> Result<(), Error> {
        self.calls += 1;
        self.inner.send(request)
    }
    fn send_all(
        &mut self,
        requests: &[Request],
        accepted: &mut dyn FnMut(usize),
    ) -> Result<(), Error> {
        self.calls += 1;
        self.inner.send_all(requests, accepted)
    }
    fn messages_sent(&self) -> u64 {
        self.inner.messages_sent()
    }
}

/// The helper rules' real backend (nf_tables netlink), counting every transaction it sends.
struct CountingRules {
    inner: Box<dyn nft::Backend>,
    batches: Arc<AtomicUsize>,
}

impl nft::Backend for CountingRules {
    fn run(&mut self, t: &[nft::Transaction]) -> Result<(), nft::backend::Error> {
        self.batches.fetch_add(1, Ordering::SeqCst);
        self.inner.run(t)
    }
    fn dump(
        &mut self,
        family: nft::Family,
    ) -> Result<Option<nft::adopt::Parsed>, nft::backend::Error> {
        self.inner.dump(family)
    }
    fn watched_by(&mut self, drift: Arc<Drift>) {
        self.inner.watched_by(drift)
    }
    fn messages_sent(&self) -> u64 {
        self.inner.messages_sent()
    }
}

type Dp = IpvsDataplane<Counting, MonotonicClock, CountingRules>;

fn dataplane(ns: &NetNs, cfg: ModeConfig) -> (Dp, Arc<AtomicUsize>) {
    let backend = Counting {
        inner: KernelBackend::new(Some(&ns.name)),
        calls: 0,
    };
    let batches = Arc::new(AtomicUsize::new(0));
    let rules = CountingRules {
        inner: nft::backend::for_encoder(NftablesEncoder::Netlink, Some(&ns.name)),
        batches: batches.clone(),
    };
    let dp = IpvsDataplane::new(cfg, backend, rules, MonotonicClock, Drift::new());
    (dp, batches)
}

/// Our table of `family` in the namespace, as the nftables mode's reader parses it.
fn helper_table(ns: &NetNs, family: nft::Family) -> nft::Ruleset {
    let mut backend = nft::backend::for_encoder(NftablesEncoder::Netlink, Some(&ns.name));
    backend
        .dump(family)
        .expect("read our table")
        .expect("our table exists")
        .ruleset
}

/// `ipvsadm -Sn`'s lines, as a set (its order is its own).
fn saved(ns: &NetNs) -> BTreeSet<String> {
    ns.output("ipvsadm", &["-Sn"])
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The plan's lines as `ipvsadm -Sn` prints them, over the namespace's host addresses (none
/// but loopback: no NodePort virtual services).
fn planned(snap: &kube_proxy_rs::cluster::Snapshot, cfg: &ModeConfig) -> BTreeSet<String> {
    let host = HostAddresses(BTreeSet::from(["192.0.2.99".parse().unwrap()]));
    render_all(&plan_all(snap, cfg, &host))
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// The weight `ipvsadm -Ln` shows for destination `dest` of the virtual service `vs` (as
/// "TCP 10.96.0.1:80").
fn weight(ns: &NetNs, vs: &str, dest: &str) -> Option<u32> {
    let listed = ns.output("ipvsadm", &["-Ln"]);
    let mut current = String::new();
    for line in listed.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["->", addr, _fwd, w, ..] if current == vs && *addr == dest => return w.parse().ok(),
            [proto @ ("TCP" | "UDP" | "SCTP"), addr, ..] => current = format!("{proto} {addr}"),
            _ => {}
        }
    }
    None
}

/// The sockets' own count, over the real backends as `main` makes them (no wrapper): the first
/// sync sends messages, one with nothing changed sends none, a change sends some, and a full
/// sync reads the kernel back (dumps) even when nothing changed.
fn idle_messages() {
    let ns = node("ipa-idle");
    let cfg = ModeConfig::default();
    let snap = example();
    let no_changes = Changes::default();
    let mut dp = IpvsDataplane::new(
        cfg,
        KernelBackend::new(Some(&ns.name)),
        nft::backend::for_encoder(NftablesEncoder::Netlink, Some(&ns.name)),
        MonotonicClock,
        Drift::new(),
    );
    let first = dp.sync(&snap, &no_changes, true).expect("first sync");
    assert!(first.netlink_messages > 0, "{first:?}");
    for _ in 0..2 {
        let idle = dp.sync(&snap, &no_changes, false).expect("idle sync");
        assert!(!idle.full);
        assert_eq!(idle.netlink_messages, 0, "nothing changed: nothing sent");
    }
    let (changed, changes) = without_one_web_endpoint(&snap);
    let report = dp.sync(&changed, &changes, false).expect("one change");
    assert!(report.netlink_messages > 0, "{report:?}");
    let full = dp.sync(&changed, &no_changes, true).expect("full sync");
    assert!(full.full && full.netlink_messages > 0, "{full:?}");
    println!(
        "{RESULT}netlink messages: first sync {}, idle 0, one change {}, full resync {}",
        first.netlink_messages, report.netlink_messages, full.netlink_messages
    );
}

/// The start-up check: the kernel's scheduler passes and leaves nothing behind; one it lacks
/// is an error naming it.
fn scheduler_check() {
    let ns = NetNs::new("ipa-sched");
    let mut backend = KernelBackend::new(Some(&ns.name));
    check_scheduler(&mut backend, &ModeConfig::default()).expect("rr is there");
    assert_eq!(
        ns.output("ipvsadm", &["-Sn"]),
        "",
        "the probe is deleted again"
    );
    let cfg = ModeConfig {
        scheduler: Scheduler::new("nosuch"),
        ..ModeConfig::default()
    };
    let err = check_scheduler(&mut backend, &cfg).expect_err("no ip_vs_nosuch");
    let text = err.to_string();
    assert!(
        text.contains("\"nosuch\"") && text.contains("ip_vs_nosuch"),
        "{text}"
    );
    assert_eq!(ns.output("ipvsadm", &["-Sn"]), "");

    // The timeouts: the ones given are set, a 0 one is left as it was.
    let before = ns.output("ipvsadm", &["-L", "--timeout"]);
    let cfg = ModeConfig {
        timeouts: Timeouts {
            tcp: 1200,
            tcp_fin: 0,
            udp: 45,
        },
        ..ModeConfig::default()
    };
    set_timeouts(&mut backend, &cfg).expect("set timeouts");
    let after = ns.output("ipvsadm", &["-L", "--timeout"]);
    let fin = |s: &str| s.split_whitespace().nth(5).map(str::to_owned);
    assert!(
        after.starts_with("Timeout (tcp tcpfin udp): 1200 "),
        "{after}"
    );
    assert!(after.trim_end().ends_with(" 45"), "{after}");
    assert_eq!(
        fin(&after),
        fin(&before),
        "tcpfin 0 leaves the kernel's: {before} / {after}"
    );
}

/// A node's namespace: a node address (NodePorts listen there), and routes that make the pods'
/// addresses unicast: IPVS takes an IPv4 destination only then.
fn node(name: &str) -> NetNs {
    let ns = NetNs::new(name);
    ns.output("ip", &["link", "set", "lo", "up"]);
    ns.output("ip", &["link", "add", "ipa-eth", "type", "dummy"]);
    ns.output("ip", &["addr", "add", "192.0.2.99/24", "dev", "ipa-eth"]);
    ns.output("ip", &["link", "set", "ipa-eth", "up"]);
    ns.output("ip", &["route", "add", "10.244.0.0/16", "dev", "ipa-eth"]);
    ns.output("ip", &["-6", "route", "add", "fd00::/8", "dev", "lo"]);
    ns
}

fn sync() {
    let ns = node("ipa-sync");
    let cfg = ModeConfig::default();
    let snap = example();
    let no_changes = Changes::default();

    // First sync: the whole plan.
    let (mut dp, batches) = dataplane(&ns, cfg.clone());
    let report = dp.sync(&snap, &no_changes, true).expect("first sync");
    assert!(report.full);
    assert!(report.netlink_messages > 0, "{report:?}");
    assert_eq!(saved(&ns), planned(&snap, &cfg), "ipvsadm -Sn is the plan");
    let tables = dp.tables().expect("helper tables applied").to_vec();
    for want in &tables {
        assert_eq!(
            &helper_table(&ns, want.family),
            want,
            "the kernel holds the planned helper table"
        );
    }
    let bound = ns.output("ip", &["-o", "addr", "show", "dev", "kube-ipvs0"]);
    for svc in snap.ports.values() {
        for view in &svc.families {
            assert!(
                bound.contains(&format!(" {}/", view.cluster_ip)),
                "{} bound on kube-ipvs0:\n{bound}",
                view.cluster_ip
            );
        }
    }

    // Nothing changed: nothing reaches the kernel.
    let before = dp.backend_mut().calls;
    let batches_before = batches.load(Ordering::SeqCst);
    let report = dp.sync(&snap, &no_changes, false).expect("idle sync");
    assert!(!report.full);
    assert_eq!(report.netlink_messages, 0, "an idle sync counted messages");
    assert_eq!(
        dp.backend_mut().calls,
        before,
        "an idle sync sent a netlink message"
    );
    assert_eq!(
        batches.load(Ordering::SeqCst),
        batches_before,
        "an idle sync sent an nf_tables batch"
    );
    assert_eq!(
        report.families.iter().map(|f| f.operations).sum::<usize>(),
        0
    );

    // An endpoint leaves: weight 0 first (TCP), then deleted once idle.
    let (changed, changes) = without_one_web_endpoint(&snap);
    dp.sync(&changed, &changes, false)
        .expect("endpoint removed");
    let draining: Vec<_> = dp.draining().cloned().collect();
    assert!(!draining.is_empty(), "the removed endpoint drains");
    let (vs, gone) = draining[0];
    assert_eq!(
        weight(&ns, &vs.to_string(), &gone.to_string()),
        Some(0),
        "{gone} of {vs} drains at weight 0"
    );
    dp.sync(&changed, &no_changes, false).expect("drained");
    assert_eq!(dp.draining().count(), 0, "no connection: deleted");
    assert_eq!(saved(&ns), planned(&changed, &cfg));

    // A restart adopts the kernel and changes nothing.
    let (mut restarted, _) = dataplane(&ns, cfg.clone());
    let report = restarted
        .sync(&changed, &no_changes, true)
        .expect("restart");
    assert_eq!(
        report.families.iter().map(|f| f.operations).sum::<usize>(),
        0,
        "a restart rewrites nothing"
    );

    // Another program's virtual services: a stale one in our range goes, one in
    // excludeCIDRs stays.
    ns.output("ipvsadm", &["-A", "-t", "10.96.99.99:80", "-s", "rr"]);
    ns.output("ipvsadm", &["-A", "-t", "10.200.0.1:80", "-s", "rr"]);
    let cfg = ModeConfig {
        exclude_cidrs: vec!["10.200.0.0/16".parse().unwrap()],
        ..cfg
    };
    let (mut dp, _) = dataplane(&ns, cfg.clone());
    dp.sync(&changed, &no_changes, true).expect("full sync");
    let now = saved(&ns);
    assert!(
        !now.iter().any(|l| l.contains("10.96.99.99")),
        "stale deleted"
    );
    assert!(now.contains("-A -t 10.200.0.1:80 -s rr"), "excluded kept");

    // --cleanup: every virtual service (as upstream) and kube-ipvs0 go.
    let mut report = kube_proxy_rs::dataplane::cleanup::Report::default();
    kube_proxy_rs::dataplane::ipvs::cleanup::remove(Some(&ns.name), &mut report);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    use kube_proxy_rs::dataplane::ipvs::cleanup::{SERVICES, removed_link};
    assert!(
        report.count(SERVICES) > 1 && report.count(&removed_link()) == 1,
        "{report:?}"
    );
    assert_eq!(ns.output("ipvsadm", &["-Sn"]), "");
    let links = ns.output("ip", &["-o", "link", "show"]);
    assert!(!links.contains("kube-ipvs0"), "{links}");
    // Again: nothing left, nothing refused.
    let mut again = kube_proxy_rs::dataplane::cleanup::Report::default();
    kube_proxy_rs::dataplane::ipvs::cleanup::remove(Some(&ns.name), &mut again);
    assert!(
        again.errors.is_empty() && again.count(&removed_link()) == 0,
        "{again:?}"
    );
}

/// The `-a` lines (destinations) of `ipvsadm -Sn` output `lines` for the virtual service `vs`
/// ("-t 10.96.1.10:80").
fn destinations_of<'a>(lines: &'a BTreeSet<String>, vs: &str) -> Vec<&'a String> {
    let prefix = format!("-a {vs} ");
    lines.iter().filter(|l| l.starts_with(&prefix)).collect()
}

/// `ipvsadm -d`, by another process, for the destination of an `-a` line of `ipvsadm -Sn`.
fn delete_destination(ns: &NetNs, line: &str) {
    let words: Vec<&str> = line.split_whitespace().collect();
    ns.output("ipvsadm", &["-d", words[1], words[2], words[3], words[4]]);
}

/// Another program deletes IPVS objects of ours between syncs (`ipvsadm -d`, `-D`), which IPVS
/// announces to nobody. A destination the next sync drains: that sync reads it gone and
/// converges without an edit. A destination still wanted: the next sync of its Service puts it
/// back. A whole virtual service the next sync touches: reading it back is refused, the sync
/// fails and leaves every other virtual service as it was, and the retry (full, as the
/// runner's retry after a failure is) converges to the plan.
fn destination_removed() {
    let ns = node("ipa-gone");
    let cfg = ModeConfig::default();
    let snap = example();
    let no_changes = Changes::default();
    let (mut dp, _) = dataplane(&ns, cfg.clone());
    dp.sync(&snap, &no_changes, true).expect("first sync");
    assert_eq!(saved(&ns), planned(&snap, &cfg));

    // The endpoint the change removes, deleted first by another program.
    let (changed, changes) = without_one_web_endpoint(&snap);
    let want = planned(&changed, &cfg);
    let before = saved(&ns);
    let leaving: Vec<&String> = before.difference(&want).collect();
    assert!(!leaving.is_empty(), "the change removes destinations");
    for line in &leaving {
        delete_destination(&ns, line);
    }
    let report = dp
        .sync(&changed, &changes, false)
        .expect("the sync reads the destinations it drains gone");
    assert!(!report.full);
    assert_eq!(saved(&ns), want, "converged to the plan");

    // A destination still wanted, deleted by another program: the next sync of its Service
    // (here the endpoint coming back) puts it back with the new one.
    let web_vs = leaving[0].split_whitespace().take(3).collect::<Vec<_>>()[1..].join(" ");
    let kept = destinations_of(&want, &web_vs);
    assert!(!kept.is_empty(), "{web_vs} keeps destinations: {want:?}");
    delete_destination(&ns, kept[0]);
    let back = changes_between(&changed, &snap);
    dp.sync(&snap, &back, false)
        .expect("the endpoint comes back");
    assert_eq!(
        saved(&ns),
        planned(&snap, &cfg),
        "the destination deleted behind our back is back"
    );

    // The whole virtual service deleted by another program, then a change to its Service.
    let words: Vec<&str> = web_vs.split_whitespace().collect();
    ns.output("ipvsadm", &["-D", words[0], words[1]]);
    let behind_our_back = saved(&ns);
    let error = dp
        .sync(&changed, &changes, false)
        .expect_err("a virtual service that is gone cannot be read back");
    assert_eq!(
        saved(&ns),
        behind_our_back,
        "the failed sync leaves every other virtual service as it was"
    );
    let retry = dp.sync(&changed, &no_changes, true).expect("the retry");
    assert!(retry.full);
    assert_eq!(
        saved(&ns),
        want,
        "converged to the plan after: {}",
        kube_proxy_rs::causes::one_line(&error)
    );
}

/// The changes from `old` to `new`: the service ports that differ.
fn changes_between(
    old: &kube_proxy_rs::cluster::Snapshot,
    new: &kube_proxy_rs::cluster::Snapshot,
) -> Changes {
    example_cluster::changed(
        old.ports
            .keys()
            .chain(new.ports.keys())
            .filter(|n| old.ports.get(*n) != new.ports.get(*n))
            .cloned()
            .collect::<Vec<_>>(),
    )
}
