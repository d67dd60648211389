//! The netlink encoder and dump reader against the real kernel, each case in fresh network
//! namespaces (root): a ruleset programmed through netlink must be, as nft and as our dump
//! reader see it, exactly what the `nft -f` text encoder makes of the same ruleset. Goldens,
//! incremental transactions between them, and random plans (property test).

#![allow(
    clippy::disallowed_methods,
    reason = "kernel tests run nft and ip in the namespaces they create"
)]

use support::host;

use std::path::{Path, PathBuf};

use host::NetNs;
use kube_proxy_rs::cli::load_manifests;
use kube_proxy_rs::cluster::Tracker;
use kube_proxy_rs::cluster::source::{Event, manifests};
use kube_proxy_rs::cluster::topology::Features;
use kube_proxy_rs::config;
use kube_proxy_rs::dataplane::nftables::{ModeConfig, plan_all};
use kube_proxy_rs::dataplane::node::{DetectLocal, IfName, NodePolicy};
use kube_proxy_rs::nft::Name;
use kube_proxy_rs::nft::adopt::parse;
use kube_proxy_rs::nft::backend::netlink::Netlink;
use kube_proxy_rs::nft::ruleset::{Data, Element, Tuple, Value};
use kube_proxy_rs::nft::{Family, Ruleset, Transaction, diff, render_all};
use proptest::prelude::*;

/// Where `host.rs` puts process logs.
fn scratch_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("nftables-netlink-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// The settings of the goldens in `src/dataplane/nftables/testdata`, from the
/// KubeProxyConfiguration files the golden tests read.
fn golden_settings() -> Vec<(&'static str, &'static str, ModeConfig)> {
    let settings = |name: &str| {
        let path = Path::new("src/dataplane/nftables/testdata").join(format!("{name}.config.yaml"));
        let text = std::fs::read_to_string(&path).expect("settings file");
        ModeConfig::new(&config::from_file(&path, &text).expect("settings")).expect("mode settings")
    };
    vec![
        ("defaults", "node-a", ModeConfig::default()),
        ("masquerade-all", "node-a", settings("masquerade-all")),
        ("bridge-all", "node-b", settings("bridge-all")),
        ("prefix-cidr", "node-a", settings("prefix-cidr")),
    ]
}

fn golden(node: &str, cfg: &ModeConfig) -> Vec<Ruleset> {
    let snap = load_manifests(Path::new("examples/cluster"), node, Features::default())
        .expect("example loads")
        .snapshot;
    plan_all(&snap, cfg).into()
}

fn from_scratch(rulesets: &[Ruleset]) -> Vec<Transaction> {
    rulesets
        .iter()
        .map(|r| diff(&Ruleset::empty(r.family), r))
        .collect()
}

fn between(from: &[Ruleset], to: &[Ruleset]) -> Vec<Transaction> {
    from.iter().zip(to).map(|(a, b)| diff(a, b)).collect()
}

/// Two namespaces: one programmed through netlink, one through `nft -f`.
struct Pair {
    netlink: NetNs,
    text: NetNs,
    encoder: Netlink,
}

impl Pair {
    fn new() -> Pair {
        let netlink = NetNs::new("nfnl-nl");
        let text = NetNs::new("nfnl-nft");
        let encoder = Netlink::in_netns(&netlink.name);
        Pair {
            netlink,
            text,
            encoder,
        }
    }

    /// Sends `transactions` both ways; both must be accepted.
    fn apply(&mut self, transactions: &[Transaction], what: &str) {
        self.encoder
            .apply(transactions)
            .unwrap_or_else(|e| panic!("{what}: netlink refused: {e}\n{}", context(&e)));
        let script = render_all(transactions);
        let path = scratch_dir().join(format!("{}.nft", self.text.name));
        std::fs::write(&path, &script).expect("script written");
        self.text
            .try_output("nft", &["-f", path.to_str().unwrap()])
            .unwrap_or_else(|e| panic!("{what}: nft refused: {e}"));
    }

    /// Both namespaces hold `want`, as nft and as the dump reader see them.
    fn check(&mut self, want: &[Ruleset], what: &str) {
        for r in want {
            let family = r.family;
            let word = family_word(family);
            let listed =
                |ns: &NetNs| ns.output("nft", &["-j", "list", "table", word, "kube-proxy-rs"]);
            let through_netlink = parse(&listed(&self.netlink), family).expect("parses");
            let through_text = parse(&listed(&self.text), family).expect("parses");
            assert!(
                through_netlink.unknown.is_empty() && through_netlink.foreign.is_empty(),
                "{what}: nft shows objects we do not make: {:?} {:?}",
                through_netlink.unknown,
                through_netlink.foreign
            );
            assert_eq!(through_netlink.ruleset, through_text.ruleset, "{what}");
            assert_eq!(&through_text.ruleset, r, "{what}: the text path as planned");
            // Declarations, chains and rules as nft prints them (-t: without elements, whose
            // order follows each set's hash seed).
            let terse =
                |ns: &NetNs| ns.output("nft", &["-t", "list", "table", word, "kube-proxy-rs"]);
            assert_eq!(terse(&self.netlink), terse(&self.text), "{what}: nft list");
            let dumped = self
                .encoder
                .dump(family)
                .expect("dump")
                .expect("our table exists");
            assert!(
                dumped.unknown.is_empty() && dumped.foreign.is_empty(),
                "{what}: the dump reader could not read {:?} {:?}",
                dumped.unknown,
                dumped.foreign
            );
            assert_eq!(&dumped.ruleset, r, "{what}: read back through netlink");
        }
    }
}

fn context(e: &kube_proxy_rs::nft::backend::netlink::Error) -> String {
    match e {
        kube_proxy_rs::nft::backend::netlink::Error::Refused { context, .. } => context.clone(),
        _ => String::new(),
    }
}

fn family_word(f: Family) -> &'static str {
    match f {
        Family::Ip => "ip",
        Family::Ip6 => "ip6",
    }
}

#[test]
fn every_golden_programs_through_netlink_as_through_nft() {
    for (name, node, cfg) in golden_settings() {
        let mut pair = Pair::new();
        let want = golden(node, &cfg);
        pair.apply(&from_scratch(&want), name);
        pair.check(&want, name);
    }
}

/// On a node, iptables-nft's tables (kubelet's `KUBE-FIREWALL`, CNI plugins' chains) sit in
/// the same families as ours, with rules and sets; the kernel dumps every chain of a family
/// whatever table is asked for. Reading our table back must see only ours.
#[test]
fn other_tables_beside_ours_are_not_read_as_ours() {
    let (name, node, cfg) = golden_settings().remove(0);
    let mut pair = Pair::new();
    let want = golden(node, &cfg);
    pair.apply(&from_scratch(&want), name);
    for family in ["ip", "ip6"] {
        for line in [
            format!("add table {family} filter"),
            format!("add chain {family} filter INPUT {{ type filter hook input priority 0 ; }}"),
            format!("add chain {family} filter KUBE-FIREWALL"),
            format!("add set {family} filter blocked {{ type inet_service ; }}"),
            format!("add rule {family} filter INPUT tcp dport @blocked jump KUBE-FIREWALL"),
        ] {
            let words: Vec<&str> = line.split(' ').collect();
            pair.netlink.output("nft", &words);
        }
    }
    pair.check(&want, "beside another table");
}

#[test]
fn transactions_between_goldens_apply_as_through_nft() {
    let settings = golden_settings();
    let plans: Vec<Vec<Ruleset>> = settings
        .iter()
        .map(|(_, node, cfg)| golden(node, cfg))
        .collect();
    let mut pair = Pair::new();
    pair.apply(&from_scratch(&plans[0]), "first");
    let mut last = plans[0].clone();
    for (i, next) in plans.iter().enumerate().skip(1).chain([(0, &plans[0])]) {
        let what = format!("to {}", settings[i].0);
        pair.apply(&between(&last, next), &what);
        pair.check(next, &what);
        last = next.clone();
    }
    let empty: Vec<Ruleset> = last.iter().map(|r| Ruleset::empty(r.family)).collect();
    pair.apply(&between(&last, &empty), "to empty");
    pair.check(&empty, "to empty");
}

/// Large sets are adopted by asking for the planned keys (and comparing the kernel's element
/// count), not by dump: the result must be what a dump gives, also when the kernel holds an
/// element the plan does not have, or lacks one it has.
#[test]
fn large_sets_read_by_key_read_as_a_dump_does() {
    let mut want = golden("node-a", &ModeConfig::default());
    let ips = want[0]
        .sets
        .get_mut(&Name::fixed("cluster-ips"))
        .expect("the plan has cluster-ips");
    for i in 0..5000u32 {
        let addr = std::net::Ipv4Addr::from(0x0a60_0000 + 0x1_0000 + i);
        ips.elements_mut().insert(
            Tuple::new(&[Value::Addr(addr.into())]),
            Element {
                data: Data::None,
                comment: None,
            },
        );
    }
    let mut pair = Pair::new();
    pair.apply(&from_scratch(&want), "large");
    pair.check(&want, "large");
    let expecting = |pair: &mut Pair| {
        pair.encoder
            .dump_expecting(Family::Ip, Some(&want[0]))
            .expect("read")
            .expect("our table exists")
    };
    let found = expecting(&mut pair);
    assert_eq!(found.ruleset, want[0], "as planned");
    assert_eq!(pair.encoder.read_by_key(), 1, "cluster-ips was read by key");
    let ips = Name::fixed("cluster-ips");
    assert!(
        std::sync::Arc::ptr_eq(
            &found.ruleset.sets[&ips].elements,
            &want[0].sets[&ips].elements
        ),
        "a set read by key as planned shares the planned elements"
    );

    // The same keys, one element different (a comment the plan does not give it).
    pair.netlink.output(
        "nft",
        &[
            "delete element ip kube-proxy-rs cluster-ips { 10.96.1.10 }; \
           add element ip kube-proxy-rs cluster-ips { 10.96.1.10 comment \"moved\" }",
        ],
    );
    let found = expecting(&mut pair);
    assert_eq!(pair.encoder.read_by_key(), 1, "same keys: read by key");
    let dumped = pair.encoder.dump(Family::Ip).unwrap().unwrap();
    assert_eq!(found, dumped, "an element with other data");
    assert_ne!(found.ruleset, want[0]);
    pair.netlink.output(
        "nft",
        &[
            "delete element ip kube-proxy-rs cluster-ips { 10.96.1.10 }; \
           add element ip kube-proxy-rs cluster-ips { 10.96.1.10 }",
        ],
    );
    assert_eq!(expecting(&mut pair).ruleset, want[0], "as planned again");

    let (net, text) = (
        &pair.netlink,
        "add element ip kube-proxy-rs cluster-ips { 10.255.0.1 }",
    );
    net.output("nft", &[text]);
    let found = expecting(&mut pair);
    assert_eq!(pair.encoder.read_by_key(), 0, "the count differs: dumped");
    let dumped = pair.encoder.dump(Family::Ip).unwrap().unwrap();
    assert_eq!(found, dumped, "an unplanned element");
    assert_ne!(found.ruleset, want[0]);

    // As many elements as planned, but one planned key missing (the unplanned one stays).
    pair.netlink.output(
        "nft",
        &["delete element ip kube-proxy-rs cluster-ips { 10.97.0.7 }"],
    );
    let found = expecting(&mut pair);
    assert_eq!(pair.encoder.read_by_key(), 0, "a key is missing: dumped");
    let dumped = pair.encoder.dump(Family::Ip).unwrap().unwrap();
    assert_eq!(found, dumped, "a planned element missing");
    let ips = &found.ruleset.sets[&Name::fixed("cluster-ips")].elements;
    let has = |a: &str| ips.contains_key(&Tuple::new(&[Value::Addr(a.parse().unwrap())]));
    assert!(!has("10.97.0.7") && has("10.255.0.1"));
}

/// A batch too large to acknowledge message by message still commits, and a refusal in it
/// still names the operation (the kernel reports errors unasked).
#[test]
fn a_batch_without_acknowledgements_commits_and_reports_its_errors() {
    let chains = 5000;
    let mut want = Ruleset::empty(Family::Ip);
    for i in 0..chains {
        want.chains
            .insert(Name::parse(&format!("c{i}")).unwrap(), Default::default());
    }
    let mut pair = Pair::new();
    pair.apply(&from_scratch(std::slice::from_ref(&want)), "many chains");
    pair.check(std::slice::from_ref(&want), "many chains");

    let mut broken = Ruleset::empty(Family::Ip);
    broken.chains = want.chains.clone();
    for i in 0..chains {
        broken
            .chains
            .insert(Name::parse(&format!("d{i}")).unwrap(), Default::default());
    }
    let mut t = diff(&want, &broken);
    let last = t.ops.len();
    t.ops.push(kube_proxy_rs::nft::Op::AddRule {
        chain: Name::parse("no-such-chain").unwrap(),
        rule: kube_proxy_rs::nft::ruleset::Rule::new(
            vec![],
            vec![kube_proxy_rs::nft::ruleset::Statement::Verdict(
                kube_proxy_rs::nft::ruleset::Verdict::Accept,
            )],
        ),
    });
    let error = pair.encoder.apply(&[t]).expect_err("the kernel refuses");
    let text = error.to_string();
    assert!(
        text.contains(&format!("operation {}", last + 1)),
        "the error names the failing operation: {text}"
    );
    assert!(
        context(&error).contains("no-such-chain"),
        "{}",
        context(&error)
    );
    pair.check(std::slice::from_ref(&want), "nothing changed");
}

/// One random Service: its shape and endpoints, as the property test draws them.
#[derive(Clone, Debug)]
struct Svc {
    protocol: &'static str,
    /// 0 ClusterIP, 1 NodePort, 2 LoadBalancer with source ranges, 3 also an externalIP.
    shape: u8,
    v6: bool,
    external_local: bool,
    internal_local: bool,
    affinity: Option<u32>,
    /// (host, node index, ready)
    endpoints: Vec<(u8, u8, bool)>,
}

fn arb_svc() -> impl Strategy<Value = Svc> {
    (
        prop::sample::select(vec!["TCP", "UDP", "SCTP"]),
        0u8..4,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        prop::option::of(1u32..100_000),
        prop::collection::vec((0u8..6, 0u8..3, any::<bool>()), 0..5),
    )
        .prop_map(
            |(protocol, shape, v6, external_local, internal_local, affinity, endpoints)| Svc {
                protocol,
                shape,
                v6,
                external_local,
                internal_local,
                affinity,
                endpoints,
            },
        )
}

fn ep_v4(node: u8, host: u8) -> String {
    format!("10.244.{}.{}", node + 1, host + 2)
}

fn ep_v6(node: u8, host: u8) -> String {
    format!("fd00:10:244:{}::{:x}", node + 1, host + 2)
}

/// The YAML of Service `i` and its EndpointSlice.
fn yaml(i: usize, s: &Svc) -> String {
    let (family, cluster_ip, lb, ext, range, ep) = if s.v6 {
        (
            "IPv6",
            format!("fd00:96::{:x}", i + 1),
            format!("2001:db8::{:x}", i + 1),
            format!("2001:db8::1:{:x}", i + 1),
            "2001:db8:1::/48",
            ep_v6 as fn(u8, u8) -> String,
        )
    } else {
        (
            "IPv4",
            format!("10.96.0.{}", i + 1),
            format!("192.0.2.{}", i + 1),
            format!("192.0.2.{}", i + 101),
            "198.51.100.0/24",
            ep_v4 as fn(u8, u8) -> String,
        )
    };
    let kind = ["ClusterIP", "NodePort", "LoadBalancer", "LoadBalancer"][s.shape as usize];
    let mut spec = format!(
        "  type: {kind}\n  clusterIP: \"{cluster_ip}\"\n  clusterIPs: [\"{cluster_ip}\"]\n  ipFamilies: [{family}]\n  ipFamilyPolicy: SingleStack\n"
    );
    let node_port = if s.shape >= 1 {
        format!(", nodePort: {}", 30000 + i)
    } else {
        String::new()
    };
    spec.push_str(&format!(
        "  ports:\n    - {{name: p, protocol: {}, port: 80, targetPort: 8080{node_port}}}\n",
        s.protocol
    ));
    if s.shape >= 2 {
        spec.push_str(&format!("  loadBalancerSourceRanges: [\"{range}\"]\n"));
        if s.external_local {
            spec.push_str(&format!("  healthCheckNodePort: {}\n", 31000 + i));
        }
    }
    if s.shape == 3 {
        spec.push_str(&format!("  externalIPs: [\"{ext}\"]\n"));
    }
    if s.shape >= 1 && s.external_local {
        spec.push_str("  externalTrafficPolicy: Local\n");
    }
    if s.internal_local {
        spec.push_str("  internalTrafficPolicy: Local\n");
    }
    if let Some(t) = s.affinity {
        spec.push_str(&format!(
            "  sessionAffinity: ClientIP\n  sessionAffinityConfig:\n    clientIP: {{timeoutSeconds: {t}}}\n"
        ));
    }
    let status = if s.shape >= 2 {
        format!("status:\n  loadBalancer:\n    ingress:\n      - ip: \"{lb}\"\n")
    } else {
        String::new()
    };
    let mut endpoints = String::new();
    let mut seen = std::collections::BTreeSet::new();
    for (host, node, ready) in &s.endpoints {
        if !seen.insert((*host, *node)) {
            continue;
        }
        endpoints.push_str(&format!(
            "  - addresses: [\"{}\"]\n    conditions: {{ready: {ready}, serving: true, terminating: {}}}\n    nodeName: node-{}\n",
            ep(*node, *host),
            !ready,
            ["a", "b", "c"][*node as usize]
        ));
    }
    if endpoints.is_empty() {
        endpoints = " []\n".into();
    } else {
        endpoints.insert(0, '\n');
    }
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: s{i}, namespace: ns}}\nspec:\n{spec}{status}---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: s{i}-1\n  namespace: ns\n  labels: {{kubernetes.io/service-name: s{i}}}\naddressType: {family}\nports:\n  - {{name: p, protocol: {}, port: 8080}}\nendpoints:{endpoints}---\n",
        s.protocol
    )
}

/// The plan of node-a for these Services.
fn random_plan(services: &[Svc], cfg: &ModeConfig) -> Vec<Ruleset> {
    let nodes = std::fs::read_to_string("examples/cluster/nodes.yaml").expect("nodes");
    let text: String = services
        .iter()
        .enumerate()
        .map(|(i, s)| yaml(i, s))
        .collect();
    let parsed = manifests::parse(&format!("{nodes}\n---\n{text}"), "random");
    assert!(parsed.warnings.is_empty(), "{:?}\n{text}", parsed.warnings);
    let mut tracker = Tracker::new("node-a", Features::default());
    for o in parsed.objects {
        tracker.apply(&Event::Applied(o));
    }
    plan_all(&tracker.snapshot().0, cfg).into()
}

fn arb_config() -> impl Strategy<Value = ModeConfig> {
    (any::<bool>(), 0u8..3, any::<bool>()).prop_map(|(all, detect, invalid)| ModeConfig {
        node: NodePolicy {
            masquerade_all: all,
            detect_local: match detect {
                0 => DetectLocal::None,
                1 => DetectLocal::ClusterCidrs(vec![
                    "10.244.0.0/16".parse().unwrap(),
                    "fd00:10:244::/48".parse().unwrap(),
                ]),
                _ => DetectLocal::Interface(IfName::new("veth", true).unwrap()),
            },
            drop_invalid: invalid,
            ..ModeConfig::default().node
        },
    })
}

proptest! {
    // Each case builds two namespaces and runs nft several times.
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn random_plans_and_their_diffs_program_as_through_nft(
        a in prop::collection::vec(arb_svc(), 0..6),
        b in prop::collection::vec(arb_svc(), 0..6),
        ca in arb_config(),
        cb in arb_config(),
    ) {
        let first = random_plan(&a, &ca);
        let second = random_plan(&b, &cb);
        let mut pair = Pair::new();
        pair.apply(&from_scratch(&first), "first");
        pair.check(&first, "first");
        pair.apply(&between(&first, &second), "second");
        pair.check(&second, "second");
    }
}
