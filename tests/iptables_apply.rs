//! The iptables dataplane against the real kernel (iptables-nft), each test in a fresh network
//! namespace (root): programming the example cluster, partial syncs that rewrite only changed
//! chains, stale chains deleted, a refused restore leaving the old rules, restart without
//! duplicated jumps or lost rules, a firewall reload repaired through the canaries and heard at
//! once by the nf_tables monitor (a large restore of ours going out with it paused), and
//! `--cleanup` removing everything of ours.

#![allow(
    clippy::disallowed_methods,
    reason = "kernel tests run ip and the iptables tools"
)]

use support::example_cluster;
use support::host;
use support::monitor_probe;
use support::synthetic;

use std::sync::Arc;
use std::time::Duration;

use example_cluster::{example, without_one_web_endpoint};
use host::{NetNs, scratch_dir};
use kube_proxy_rs::cluster::{Changes, IpFamily, Snapshot};
use kube_proxy_rs::dataplane::iptables::backend::{self, Backend};
use kube_proxy_rs::dataplane::iptables::ruleset::Table;
use kube_proxy_rs::dataplane::iptables::{
    Flavour, IptablesCommand, IptablesDataplane, ModeConfig, adopt,
};
use kube_proxy_rs::dataplane::monitor::{self, Drift};
use kube_proxy_rs::dataplane::tool::Launcher;
use kube_proxy_rs::dataplane::{Dataplane, SyncError};

fn dataplane(ns: &NetNs) -> IptablesDataplane {
    IptablesDataplane::new(
        ModeConfig::default(),
        IptablesCommand::in_netns(Flavour::Nft, &ns.name),
    )
}

/// `iptables-save` of a family in the namespace, parsed.
fn saved(ns: &NetNs, family: IpFamily) -> std::collections::BTreeMap<Table, adopt::Saved> {
    let mut b = IptablesCommand::in_netns(Flavour::Nft, &ns.name);
    adopt::parse(&b.save(family).expect("save"))
}

fn chains(ns: &NetNs, table: Table) -> Vec<String> {
    saved(ns, IpFamily::V4)
        .get(&table)
        .map(|s| s.chains.clone())
        .unwrap_or_default()
}

fn rule_lines(ns: &NetNs, table: Table) -> Vec<String> {
    saved(ns, IpFamily::V4)
        .get(&table)
        .map(|s| s.rules.iter().map(|(_, l)| l.clone()).collect())
        .unwrap_or_default()
}

#[test]
fn the_example_is_programmed_and_an_unchanged_resync_writes_nothing() {
    let ns = NetNs::new("kprs-ipt");
    let mut dp = dataplane(&ns);
    let snap = example();
    let first = dp
        .sync(&snap, &Changes::default(), false)
        .expect("first sync");
    assert!(first.full);
    let nat = rule_lines(&ns, Table::Nat);
    // Upstream's rule-count metrics: a full sync writes every rule of our chains, and the
    // counts are what the kernel shows in them.
    let rules = first.families[0].iptables_rules.expect("iptables counts");
    for (table, counts) in [(Table::Nat, rules.nat), (Table::Filter, rules.filter)] {
        let in_our_chains = rule_lines(&ns, table)
            .iter()
            .filter(|l| l.starts_with("-A KUBE-"))
            .count();
        assert_eq!(counts.total, in_our_chains, "{table:?}");
        assert_eq!(counts.last, counts.total, "{table:?}");
    }
    assert!(
        nat.iter()
            .any(|l| l.starts_with("-A KUBE-SERVICES -d 10.96.1.10/32"))
    );
    assert!(
        nat.iter()
            .any(|l| l.starts_with("-A KUBE-SEP-") && l.contains("DNAT"))
    );
    assert!(
        chains(&ns, Table::Mangle)
            .iter()
            .any(|c| c == "KUBE-PROXY-CANARY")
    );

    let again = dp
        .sync(&snap, &Changes::default(), false)
        .expect("second sync");
    assert!(!again.full);
    assert!(
        again.families.iter().all(|f| f.operations == 0),
        "{again:?}"
    );
    assert_eq!(rule_lines(&ns, Table::Nat), nat);
}

#[test]
fn a_removed_endpoint_rewrites_its_service_and_deletes_its_chain() {
    let ns = NetNs::new("kprs-ipt");
    let mut dp = dataplane(&ns);
    let snap = example();
    dp.sync(&snap, &Changes::default(), true)
        .expect("first sync");
    let before = chains(&ns, Table::Nat);
    let (next, changes) = without_one_web_endpoint(&snap);
    let report = dp.sync(&next, &changes, false).expect("partial sync");
    assert!(!report.full);
    // The web ClusterIP chain and one endpoint chain; nothing else.
    let v4 = &report.families[0];
    assert!(v4.operations > 0 && v4.operations < 10, "{v4:?}");
    let rules = v4.iptables_rules.expect("iptables counts");
    assert!(
        rules.nat.last > 0 && rules.nat.last < rules.nat.total,
        "only the changed chains are written: {rules:?}"
    );
    assert_eq!(rules.filter.last, 0, "{rules:?}");
    let after = chains(&ns, Table::Nat);
    assert_eq!(before.len(), after.len() + 1, "one KUBE-SEP chain deleted");
    let full = dp
        .sync(&next, &Changes::default(), true)
        .expect("full sync");
    assert!(full.full);
    assert_eq!(
        chains(&ns, Table::Nat),
        after,
        "a full sync finds nothing to fix"
    );
}

#[test]
fn a_restart_adopts_the_rules_without_duplicating_jumps_and_deletes_stale_chains() {
    let ns = NetNs::new("kprs-ipt");
    let snap = example();
    dataplane(&ns)
        .sync(&snap, &Changes::default(), true)
        .expect("first run");
    // A chain a previous version left behind, referenced from a built-in chain.
    ns.output(
        "iptables-nft",
        &["-t", "nat", "-N", "KUBE-SVC-LEFTOVER0000000"],
    );
    ns.output(
        "iptables-nft",
        &[
            "-t",
            "nat",
            "-A",
            "OUTPUT",
            "-j",
            "KUBE-SVC-LEFTOVER0000000",
        ],
    );
    let filter_before = rule_lines(&ns, Table::Filter);
    let mut second = dataplane(&ns);
    second
        .sync(&snap, &Changes::default(), true)
        .expect("second run");
    assert!(
        !chains(&ns, Table::Nat)
            .iter()
            .any(|c| c.contains("LEFTOVER"))
    );
    assert_eq!(
        rule_lines(&ns, Table::Filter),
        filter_before,
        "no duplicated jump"
    );
    let jumps = rule_lines(&ns, Table::Nat)
        .into_iter()
        .filter(|l| l.starts_with("-A PREROUTING"))
        .count();
    assert_eq!(jumps, 1);
}

/// Makes the real tool refuse on demand by adding a rule into a chain that does not exist.
struct Refusing {
    inner: IptablesCommand,
    refuse: bool,
    /// `iptables-save` fails, as iptables-nft-save 1.8.9 does (SIGSEGV) at 110,000 chains.
    save_fails: bool,
}

impl Refusing {
    /// The mode over the real tool in `ns`, doing as told until a test says otherwise.
    fn dataplane(ns: &NetNs) -> IptablesDataplane<Refusing> {
        IptablesDataplane::new(
            ModeConfig::default(),
            Refusing {
                inner: IptablesCommand::in_netns(Flavour::Nft, &ns.name),
                refuse: false,
                save_fails: false,
            },
        )
    }
}

impl Backend for Refusing {
    fn restore(&mut self, family: IpFamily, input: &str) -> Result<(), backend::Error> {
        if self.refuse {
            let broken = input.replacen("COMMIT\n", "-A KUBE-NO-SUCH-CHAIN -j ACCEPT\nCOMMIT\n", 2);
            return self.inner.restore(family, &broken);
        }
        self.inner.restore(family, input)
    }
    fn save(&mut self, family: IpFamily) -> Result<String, backend::Error> {
        if self.save_fails {
            return Err(backend::Error::Refused {
                program: "iptables-nft-save".into(),
                status: "signal: 11 (SIGSEGV)".into(),
                message: String::new(),
            });
        }
        self.inner.save(family)
    }
    fn list_chain(
        &mut self,
        family: IpFamily,
        table: Table,
        chain: &str,
    ) -> Result<String, backend::Error> {
        self.inner.list_chain(family, table, chain)
    }
    fn has_chain(
        &mut self,
        family: IpFamily,
        table: Table,
        chain: &str,
    ) -> Result<bool, backend::Error> {
        self.inner.has_chain(family, table, chain)
    }
    fn watched_by(&mut self, drift: Arc<Drift>) {
        self.inner.watched_by(drift)
    }
}

#[test]
fn a_refused_restore_keeps_the_old_rules_names_the_line_and_the_next_sync_is_full() {
    let ns = NetNs::new("kprs-ipt");
    let mut dp = Refusing::dataplane(&ns);
    let snap = example();
    dp.sync(&snap, &Changes::default(), true)
        .expect("first sync");
    let before = rule_lines(&ns, Table::Nat);
    let (next, changes) = without_one_web_endpoint(&snap);
    dp.backend_mut().refuse = true;
    let err = dp.sync(&next, &changes, false).expect_err("refused");
    let SyncError::Refused { source, .. } = &err else {
        panic!("refused expected: {err}");
    };
    let message = source.to_string();
    // The tool's own words and the numbered lines around the one it named (of the input the
    // dataplane made; the wrapper's extra line is not in it).
    assert!(message.contains("No chain/target/match"), "{message}");
    assert!(
        message.contains("(input line ") && message.contains("> "),
        "{message}"
    );
    assert_eq!(rule_lines(&ns, Table::Nat), before, "old rules kept");
    dp.backend_mut().refuse = false;
    let report = dp.sync(&next, &Changes::default(), false).expect("retry");
    assert!(report.full, "the sync after a failure is full");
}

#[test]
fn a_full_sync_works_when_the_rules_cannot_be_read_back() {
    let ns = NetNs::new("kprs-ipt");
    let mut dp = Refusing::dataplane(&ns);
    let snap = example();
    dp.sync(&snap, &Changes::default(), true)
        .expect("first sync");
    let filter = rule_lines(&ns, Table::Filter);
    let before = chains(&ns, Table::Nat);
    let mut ports = (*snap.ports).clone();
    let gone = ports
        .keys()
        .find(|n| n.to_string().starts_with("default/web-sticky"))
        .cloned()
        .expect("in the example");
    ports.remove(&gone);
    let next = Snapshot::new(snap.node.clone(), Arc::new(ports));
    dp.backend_mut().save_fails = true;
    let report = dp
        .sync(&next, &Changes::default(), true)
        .expect("full sync");
    assert!(report.full);
    let after = chains(&ns, Table::Nat);
    assert!(
        after.len() < before.len(),
        "the removed port's chains are deleted"
    );
    assert_eq!(rule_lines(&ns, Table::Filter), filter, "no duplicated jump");
}

#[test]
fn a_firewall_reload_is_noticed_through_the_canary_and_repaired() {
    let ns = NetNs::new("kprs-ipt");
    let mut dp = dataplane(&ns);
    let snap = example();
    dp.sync(&snap, &Changes::default(), true)
        .expect("first sync");
    let nat = rule_lines(&ns, Table::Nat);
    for table in ["mangle", "nat", "filter"] {
        for op in ["-F", "-X"] {
            ns.output("iptables-nft", &["-t", table, op]);
        }
    }
    assert!(rule_lines(&ns, Table::Nat).is_empty());
    let report = dp.sync(&snap, &Changes::default(), false).expect("repair");
    assert!(report.full);
    assert_eq!(rule_lines(&ns, Table::Nat), nat);
}

/// Waits until the monitor hears an outside deletion of ours (a scratch `KUBE-*` chain, made
/// and deleted by `iptables-nft`), then forgets every report so far.
async fn wait_until_listening(ns: &NetNs, drift: &Drift) {
    monitor_probe::wait_until_listening(drift, |i| {
        let chain = format!("KUBE-PROBE-{i}");
        ns.output("iptables-nft", &["-t", "nat", "-N", &chain]);
        ns.output("iptables-nft", &["-t", "nat", "-X", &chain]);
    })
    .await;
}

/// Our dataplane watched by a running nf_tables monitor in `ns`, and the monitor's task.
fn watched(ns: &NetNs) -> (IptablesDataplane, Arc<Drift>, tokio::task::JoinHandle<()>) {
    let drift = Drift::new();
    let mut dp = dataplane(ns);
    dp.watched_by(drift.clone());
    let watcher = tokio::spawn(monitor::run(
        Some(ns.name.clone()),
        drift.clone(),
        &kube_proxy_rs::dataplane::iptables::notifications::IptablesNft,
    ));
    (dp, drift, watcher)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firewall_reload_is_heard_by_the_nf_tables_monitor_and_repaired_by_the_next_sync() {
    let ns = NetNs::new("kprs-iptm");
    let (mut dp, drift, watcher) = watched(&ns);
    wait_until_listening(&ns, &drift).await;
    let noticed = drift.noticed();

    // Our own restores, full and partial, are not outside changes.
    let snap = example();
    tokio::task::block_in_place(|| dp.sync(&snap, &Changes::default(), true)).expect("first");
    let (changed, changes) = without_one_web_endpoint(&snap);
    tokio::task::block_in_place(|| dp.sync(&changed, &changes, false)).expect("partial");
    let nat = rule_lines(&ns, Table::Nat);
    // Nor are another program's own rules, added and deleted beside ours.
    for args in [
        &["-t", "nat", "-N", "OTHER"][..],
        &["-t", "nat", "-A", "OTHER", "-j", "RETURN"],
        &["-t", "nat", "-I", "PREROUTING", "1", "-j", "OTHER"],
        &["-t", "nat", "-D", "PREROUTING", "-j", "OTHER"],
        &["-t", "nat", "-F", "OTHER"],
        &["-t", "nat", "-X", "OTHER"],
    ] {
        ns.output("iptables-nft", args);
    }
    let quiet = tokio::time::timeout(Duration::from_millis(500), drift.changed()).await;
    assert!(
        quiet.is_err(),
        "our own or another program's own rules were taken for a change of ours"
    );
    assert_eq!(drift.noticed(), noticed);

    // A firewall reload flushes nat: heard at once, not at the next canary check.
    ns.output("iptables-nft", &["-t", "nat", "-F"]);
    tokio::time::timeout(Duration::from_secs(2), drift.changed())
        .await
        .expect("the flush is heard within about a second");
    let report = tokio::task::block_in_place(|| dp.sync(&changed, &Changes::default(), false))
        .expect("repair");
    assert!(report.full, "a pending outside change makes the sync full");
    assert_eq!(drift.repairs(), 1);
    assert_eq!(rule_lines(&ns, Table::Nat), nat);

    watcher.abort();
    let _ = watcher.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_restore_of_ours_goes_out_unwatched_and_is_not_taken_for_an_outside_change() {
    let ns = NetNs::new("kprs-iptl");
    let (mut dp, drift, watcher) = watched(&ns);
    wait_until_listening(&ns, &drift).await;
    let noticed = drift.noticed();

    // About 15,000 restore lines: above the size sent with the monitor paused.
    let snap = synthetic::Synthetic {
        services: 700,
        endpoints: 5,
    }
    .snapshot();
    tokio::task::block_in_place(|| dp.sync(&snap, &Changes::default(), true)).expect("large");
    assert!(
        drift.pauses() >= 1,
        "the large restore went out with the monitor paused"
    );
    let quiet = tokio::time::timeout(Duration::from_millis(500), drift.changed()).await;
    assert!(
        quiet.is_err(),
        "our own large restore was taken for an outside change"
    );
    assert_eq!(drift.noticed(), noticed);

    // Listening again afterwards.
    ns.output("iptables-nft", &["-t", "nat", "-F", "KUBE-SERVICES"]);
    tokio::time::timeout(Duration::from_secs(2), drift.changed())
        .await
        .expect("the flush after the large restore is heard");

    watcher.abort();
    let _ = watcher.await;
}

#[test]
fn cleanup_removes_every_chain_and_jump_of_ours() {
    let ns = NetNs::new("kprs-ipt");
    let mut dp = dataplane(&ns);
    dp.sync(&example(), &Changes::default(), true)
        .expect("sync");
    let report = kube_proxy_rs::dataplane::cleanup::cleanup(&Launcher::in_netns(&ns.name));
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    for table in Table::ALL {
        // KUBE-FIREWALL (with its jumps) is kubelet's chain too: the shared cleanup leaves it.
        let left: Vec<String> = rule_lines(&ns, table)
            .into_iter()
            .filter(|l| !l.contains("KUBE-FIREWALL"))
            .collect();
        assert!(left.is_empty(), "{table:?}: {left:?}");
        let ours: Vec<String> = chains(&ns, table)
            .into_iter()
            .filter(|c| c.starts_with("KUBE-") && c != "KUBE-FIREWALL")
            .collect();
        assert!(ours.is_empty(), "{table:?}: {ours:?}");
    }
}

/// A `PATH` directory holding only the IPv4 iptables-nft tools, removed on drop.
struct Ipv4ToolsOnly(std::path::PathBuf);

impl Ipv4ToolsOnly {
    fn new() -> Ipv4ToolsOnly {
        let dir = scratch_dir().join("ipv4-tools-only");
        std::fs::create_dir_all(&dir).expect("tools dir");
        for tool in ["iptables-nft", "iptables-nft-save", "iptables-nft-restore"] {
            let link = dir.join(tool);
            if !link.exists() {
                std::os::unix::fs::symlink("/usr/sbin/xtables-nft-multi", &link).expect("link");
            }
        }
        Ipv4ToolsOnly(dir)
    }

    /// The backend for `ns` that finds its tools only here.
    fn backend(&self, ns: &NetNs) -> IptablesCommand {
        let path = format!("PATH={}", self.0.display());
        IptablesCommand::with_prefix(
            Flavour::Nft,
            ["ip", "netns", "exec", &ns.name, "env", &path]
                .map(String::from)
                .to_vec(),
        )
    }
}

impl Drop for Ipv4ToolsOnly {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_family_without_tools_is_left_out_and_the_other_is_still_programmed() {
    let ns = NetNs::new("kprs-ipt");
    let tools = Ipv4ToolsOnly::new();
    let mut dp = IptablesDataplane::new(ModeConfig::default(), tools.backend(&ns));
    dp.keep_usable_families().expect("IPv4 is usable");
    assert_eq!(dp.families(), [IpFamily::V4]);
    let report = dp
        .sync(&example(), &Changes::default(), true)
        .expect("the IPv4 sync is not held back by IPv6");
    assert_eq!(report.families.len(), 1);
    assert_eq!(report.families[0].family, Some(IpFamily::V4));
    assert!(
        rule_lines(&ns, Table::Nat)
            .iter()
            .any(|l| l.starts_with("-A KUBE-SERVICES -d 10.96.1.10/32"))
    );
    // A partial sync checks only the family it programs.
    dp.sync(&example(), &Changes::default(), false)
        .expect("partial sync");

    // With no tools at all, the mode cannot start, and the error says why per family.
    let none = IptablesCommand::with_prefix(
        Flavour::Nft,
        ["ip", "netns", "exec", &ns.name, "env", "PATH=/nonexistent"]
            .map(String::from)
            .to_vec(),
    );
    let mut dp = IptablesDataplane::new(ModeConfig::default(), none);
    let error = dp.keep_usable_families().expect_err("nothing is usable");
    let message = error.to_string();
    assert!(
        message.starts_with("iptables is not usable on this host: IPv4: ")
            && message.contains("; IPv6: "),
        "{message}"
    );
}
