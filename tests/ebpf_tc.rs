//! eBPF mode, traffic from outside the node (root): the tc programs on the node's interfaces
//! balance NodePorts and LoadBalancer IPs for a client in another network namespace, with
//! real TCP and UDP.
//!
//! Topology, three namespaces this test creates (removed on drop, also when it fails):
//!
//! ```text
//!  client            node (tc programs on ext0 and pods0)            pods
//!  eth0 ─────────── ext0 192.168.60.1/24      pods0 (no address) ──── eth0
//!  192.168.60.2/24       lo 10.244.1.1/32, fd00:244::1/128             10.244.1.2 (a)
//!  192.168.60.3/24 (outside the source range)                         10.244.1.3 (b)
//! ```
//!
//! The pods' interface carries no node address, as a routed pod network's veths do (the
//! gateway address lives on the node's `lo`): replies of source-NATed flows from the pods come
//! back over an interface that is no way in for clients.
//!
//! The pods answer each connection or datagram with their name and the source address they
//! saw, so the test tells source NAT (a node address) from the client's own address. Pins go
//! to a private bpffs (unmounted on drop: links detach, maps go); the cgroup programs attach
//! to an empty cgroup child of this test. Nothing leaves the three namespaces.
#![allow(
    clippy::disallowed_methods,
    reason = "a kernel test: it runs `ip`, writes manifests and starts threads in namespaces"
)]

use support::ebpf_host;
use support::ebpf_tc_world as world;
use support::relay_pods;

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::UdpSocket;
use std::time::Duration;

use ebpf_host::{BpfFs, Cgroup, explain, explain_config};
use kube_proxy_rs::cli::explain::Verdict;
use kube_proxy_rs::config::NodePortAddresses;
use kube_proxy_rs::dataplane::ebpf::backend::{self};
use kube_proxy_rs::dataplane::ebpf::layout::{AffKey, AffVal, FlowKey, FlowVal, addr_words};
use kube_proxy_rs::dataplane::ebpf::stats::Stats;
use kube_proxy_rs::dataplane::ebpf::{EbpfDataplane, names};
use kube_proxy_rs::netlink::netns::run_in;
use relay_pods::host::NetNs;
use world::*;

#[test]
fn node_ports_and_load_balancer_ips_reach_pods_from_outside() {
    let cgroup = Cgroup::new();
    let fs = BpfFs::new();
    let settings = fs.settings(&cgroup);
    let node = NetNs::new("kprs-tc-node");
    let client = NetNs::new("kprs-tc-client");
    let pods_ns = NetNs::new("kprs-tc-pods");
    wire(&node, &client, &pods_ns);
    let _pods = Pods::start(&pods_ns);
    let dir = tempfile::tempdir().expect("manifest dir");
    let snap = snapshot(dir.path(), "10.244.1.2");

    let (kernel, pins) = open_on_node(&node, &settings);
    let stats = Stats::open(&settings.pin_root).expect("counters");
    let mut dp = EbpfDataplane::new(kernel, NodePortAddresses::default());
    sync_on_node(&node, &mut dp, &snap);

    // externalTrafficPolicy Cluster: both pods, each seeing the node's address towards the
    // pods (source NAT, as a masquerade rule picks it), replies reach the client.
    let cluster: Vec<String> = from_client(&client, || {
        (0..16).map(|_| tcp(None, "192.168.60.1:30080")).collect()
    });
    let mut seen = cluster.clone();
    seen.sort();
    seen.dedup();
    assert_eq!(
        seen,
        ["a from 10.244.1.1", "b from 10.244.1.1"],
        "{cluster:?}"
    );

    // ClientIP affinity: every connection of the client to one pod.
    let mut sticky: Vec<String> = from_client(&client, || {
        (0..12).map(|_| tcp(None, "192.168.60.1:30088")).collect()
    });
    sticky.dedup();
    assert_eq!(sticky.len(), 1, "{sticky:?}");
    assert!(sticky[0].ends_with(" from 10.244.1.1"), "{sticky:?}");
    // explain, over the live maps, finds the client's kp_aff entry by its address and names
    // the pod its connections reached.
    let cfg = explain_config(&settings.pin_root);
    let remembered = if sticky[0].starts_with("a ") {
        "10.244.1.2:8080"
    } else {
        "10.244.1.3:8080"
    };
    let e = explain(&cfg, &snap, "192.168.60.1:30088", "192.168.60.2");
    assert_eq!(e.hooks, ["tc ingress"]);
    assert_eq!(reached(&e), [remembered]);
    assert_eq!(e.affinity.as_ref().and_then(|a| a.entry), Some(true));
    let e = explain(&cfg, &snap, "192.168.60.1:30088", "192.168.60.3");
    assert_eq!(reached(&e).len(), 2, "another client has no entry");
    assert_eq!(e.affinity.as_ref().and_then(|a| a.entry), Some(false));
    // An entry the program would not follow is told as such, not as "no entry": its backend
    // gone from the set, or past the timeout (the client's entry rewritten through its pin).
    let aff = names::pin_dir(&settings.pin_root).join(names::MAP_AFF);
    let aff = aya::maps::MapData::from_pin(aff).expect("pinned kp_aff");
    let mut aff: aya::maps::HashMap<_, AffKey, AffVal> =
        aya::maps::HashMap::try_from(aya::maps::Map::LruHashMap(aff)).expect("a hash map");
    let cookie = kube_proxy_rs::dataplane::ebpf::trace::client_key("192.168.60.2".parse().unwrap());
    let (key, kept) = aff
        .iter()
        .map(|e| e.expect("an entry"))
        .find(|(k, _)| k.netns_cookie == cookie)
        .expect("the client's entry");
    let gone = AffVal {
        addr: addr_words("10.244.1.9".parse().unwrap()),
        ..kept
    };
    aff.insert(key, gone, 0).expect("rewrite the entry");
    let e = explain(&cfg, &snap, "192.168.60.1:30088", "192.168.60.2");
    assert_eq!(reached(&e).len(), 2, "drawn again");
    assert!(
        e.reasons
            .iter()
            .any(|r| r.contains("10.244.1.9:8080") && r.contains("no longer a backend")),
        "{:?}",
        e.reasons
    );
    let old = AffVal {
        last_used_ns: 1,
        ..kept
    };
    aff.insert(key, old, 0).expect("rewrite the entry");
    let e = explain(&cfg, &snap, "192.168.60.1:30088", "192.168.60.2");
    assert_eq!(reached(&e).len(), 2, "drawn again");
    assert!(
        e.reasons
            .iter()
            .any(|r| r.contains(remembered) && r.contains("past the 60 s timeout")),
        "{:?}",
        e.reasons
    );
    aff.insert(key, kept, 0).expect("put the entry back");

    // Local: the local pod, seeing the client's own address.
    let local: Vec<String> = from_client(&client, || {
        (0..4).map(|_| tcp(None, "192.168.60.1:30081")).collect()
    });
    assert!(
        local.iter().all(|l| l == "a from 192.168.60.2"),
        "{local:?}"
    );

    // UDP, Cluster: a new flow per socket, each answered through the node.
    let dns: Vec<String> = from_client(&client, || {
        (0..3).map(|_| udp("192.168.60.1:30053")).collect()
    });
    assert!(dns.iter().all(|l| l == "dns-a from 10.244.1.1"), "{dns:?}");

    // A ClusterIP reached from outside (the Service range routed to the node, as a router
    // does on bare metal): the internal policy's endpoints, the source rewritten to the
    // node's address; a port the Service does not define is refused at once.
    let cluster_ip: Vec<String> = from_client(&client, || {
        (0..16).map(|_| tcp(None, "10.96.0.10:8080")).collect()
    });
    let mut seen = cluster_ip.clone();
    seen.sort();
    seen.dedup();
    assert_eq!(
        seen,
        ["a from 10.244.1.1", "b from 10.244.1.1"],
        "{cluster_ip:?}"
    );
    let undefined = from_client(&client, || tcp(None, "10.96.0.10:9999"));
    assert_eq!(undefined, "refused");

    // IPv6: the NodePort on the node's IPv6 address reaches the pod, which sees the node's
    // address towards it; no endpoints is refused (ICMPv6 port unreachable).
    let v6 = from_client(&client, || {
        [
            tcp(None, "[fd00:60::1]:30086"),
            tcp(None, "[fd00:60::1]:30086"),
            tcp(None, "[fd00:60::1]:30087"),
        ]
    });
    assert_eq!(
        v6,
        ["a6 from fd00:244::1", "a6 from fd00:244::1", "refused"]
    );

    // A UDP flow whose backend is removed moves to the new one with its next datagram (as
    // kube-proxy's conntrack flush makes it); the client keeps its socket and port.
    let socket = from_client(&client, || {
        let s = UdpSocket::bind("0.0.0.0:0").expect("bind");
        s.set_read_timeout(Some(WAIT)).unwrap();
        s.connect(addr("192.168.60.1:30053")).expect("connect");
        s
    });
    let ask = |s: &UdpSocket| {
        s.send(b"ping").expect("send");
        let mut buf = [0u8; 512];
        match s.recv(&mut buf) {
            Ok(n) => String::from_utf8_lossy(&buf[..n]).into_owned(),
            Err(e) => outcome(&e),
        }
    };
    assert_eq!(ask(&socket), "dns-a from 10.244.1.1");
    let moved = snapshot(dir.path(), "10.244.1.3");
    sync_on_node(&node, &mut dp, &moved);
    assert_eq!(ask(&socket), "dns-b from 10.244.1.1");
    sync_on_node(&node, &mut dp, &snap);
    drop(socket);

    // Local with the only endpoint on another node: dropped. No endpoints at all: refused
    // (ICMP port unreachable), TCP and UDP.
    let refusals = from_client(&client, || {
        [
            tcp(None, "192.168.60.1:30082"),
            tcp(None, "192.168.60.1:30083"),
            udp("192.168.60.1:30084"),
        ]
    });
    assert_eq!(refusals, ["timed out", "refused", "refused"]);

    // The LoadBalancer IP: from the allowed source both pods (source NAT); from the other
    // address of the same client, dropped.
    let lb = from_client(&client, || {
        let allowed: Vec<String> = (0..8)
            .map(|_| tcp(Some("192.168.60.2"), "203.0.113.10:80"))
            .collect();
        (allowed, tcp(Some("192.168.60.3"), "203.0.113.10:80"))
    });
    assert!(
        lb.0.iter().all(|l| l.ends_with(" from 10.244.1.1")),
        "{:?}",
        lb.0
    );
    assert_eq!(lb.1, "timed out");

    // What explain says of the same packets, over the live maps: what they met.
    let outcome = |to: &str, from: &str| {
        let e = explain(&cfg, &snap, to, from);
        assert!(e.drift.is_empty(), "{:?}", e.drift);
        (e.outcome.verdict, e.outcome.masquerade, reached(&e))
    };
    let both = vec!["10.244.1.2:8080".to_string(), "10.244.1.3:8080".to_string()];
    let client_ip = "192.168.60.2";
    assert_eq!(
        outcome("192.168.60.1:30080", client_ip),
        (Verdict::Forwarded, Some(true), both.clone())
    );
    assert_eq!(
        outcome("192.168.60.1:30081", client_ip),
        (
            Verdict::Forwarded,
            Some(false),
            vec!["10.244.1.2:8080".to_string()]
        )
    );
    assert_eq!(outcome("192.168.60.1:30082", client_ip).0, Verdict::Dropped);
    assert_eq!(
        outcome("192.168.60.1:30083", client_ip).0,
        Verdict::Rejected
    );
    assert_eq!(
        outcome("[fd00:60::1]:30087", "fd00:60::2").0,
        Verdict::Rejected
    );
    assert_eq!(
        outcome("203.0.113.10:80", client_ip),
        (Verdict::Forwarded, Some(true), both)
    );
    assert_eq!(
        outcome("203.0.113.10:80", "192.168.60.3").0,
        Verdict::Dropped
    );

    // An established connection keeps its backend across a restart: the flow entries are
    // pinned, and the programs are loaded and attached again over the old links.
    let kept = run_in(Some(&client.name), || {
        let s = connect(None, addr("192.168.60.1:30080"))?;
        let mut line = String::new();
        let mut reader = BufReader::new(s.try_clone()?);
        reader.read_line(&mut line)?;
        Ok((s.try_clone()?, reader, line))
    })
    .expect("a connection");
    let (mut stream, mut reader, greeting) = kept;
    drop(dp);
    let (kernel, again) = open_on_node(&node, &settings);
    assert_eq!(again, pins, "the same links, replaced");
    let mut dp = EbpfDataplane::new(kernel, NodePortAddresses::default());
    sync_on_node(&node, &mut dp, &snap);
    stream.write_all(b"still there\n").expect("write");
    let mut echo = String::new();
    reader.read_line(&mut echo).expect("the same pod echoes");
    assert_eq!(echo, "still there\n", "after {greeting:?}");
    drop((stream, reader));

    // An interface that gains an address later (a pod bridge made with the first pod) gets
    // the tc programs at the next sync.
    node.output(
        "ip",
        &[
            "link", "add", "late0", "type", "veth", "peer", "name", "late1",
        ],
    );
    node.output("ip", &["addr", "add", "10.99.0.1/24", "dev", "late0"]);
    node.output("ip", &["link", "set", "late0", "up"]);
    sync_on_node(&node, &mut dp, &snap);
    let tc_pins = || {
        std::fs::read_dir(names::links_dir(&settings.pin_root))
            .expect("links")
            .filter(|e| {
                let name = e.as_ref().unwrap().file_name();
                name.to_string_lossy().starts_with("tc_")
            })
            .count()
    };
    assert_eq!(tc_pins(), 6, "ext0, pods0 and late0, ingress and egress");

    // NAT port exhaustion, injected through the real map: every source port the SNAT of a new
    // UDP flow to dns-a could take (the client's own, then random ones in 32768..61000) is
    // held by a reply entry, so the new flow is dropped and counted as such.
    let flows = names::pin_dir(&settings.pin_root).join(names::MAP_FLOW);
    let flows = aya::maps::MapData::from_pin(flows).expect("pinned kp_flow");
    let mut flows: aya::maps::HashMap<_, FlowKey, FlowVal> =
        aya::maps::HashMap::try_from(aya::maps::Map::LruHashMap(flows)).expect("a hash map");
    let held = |port: u16| FlowKey {
        saddr: addr_words("10.244.1.2".parse().unwrap()),
        daddr: addr_words("10.244.1.1".parse().unwrap()),
        sport: 5353u16.to_be(),
        dport: port.to_be(),
        proto: 17,
        pad: [0; 3],
    };
    for port in 32768..61000u16 {
        flows
            .insert(held(port), FlowVal::default(), 0)
            .expect("hold a port");
    }
    let exhausted = from_client(&client, || {
        let s = UdpSocket::bind("192.168.60.2:40000").expect("bind");
        s.set_read_timeout(Some(WAIT)).unwrap();
        s.send_to(b"ping", addr("192.168.60.1:30053"))
            .expect("send");
        let mut buf = [0u8; 512];
        s.recv(&mut buf).map_err(|e| crate::outcome(&e))
    });
    assert_eq!(exhausted, Err("timed out".to_owned()));
    for port in 32768..61000u16 {
        flows.remove(&held(port)).expect("free the port");
    }
    let freed: Vec<String> = from_client(&client, || vec![udp("192.168.60.1:30053")]);
    assert_eq!(freed, ["dns-a from 10.244.1.1"]);

    // The datapath counted new flows, refusals and drops.
    let reading = stats.read();
    let count = |r: &str| reading.reasons.iter().find(|(n, _)| *n == r).unwrap().1;
    // Cluster, Local, UDP, the LoadBalancer IP, the connection kept across the restart.
    let flows = [16, 12, 4, 3, 2, 8, 1].iter().sum::<u64>();
    assert!(count("translated") >= flows, "{reading:?}");
    assert!(count("refused") >= 3, "{reading:?}");
    assert!(count("affine") >= 11, "{reading:?}");
    assert!(count("dropped") >= 2, "{reading:?}");
    assert_eq!(count("nat-port-exhausted"), 1, "{reading:?}");

    // --cleanup's removal detaches the tc programs: the node itself answers the NodePort
    // (nothing listens there: refused). bpffs releases an unlinked pin after an RCU grace
    // period, so the detach is awaited.
    drop(dp);
    assert!(backend::remove(&settings.pin_root).unwrap() >= names::PROGRAMS.len() + 6);
    let after = from_client(&client, || {
        let mut last = String::new();
        for _ in 0..50 {
            last = tcp(None, "192.168.60.1:30080");
            if last == "refused" {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        last
    });
    assert_eq!(after, "refused");
}
