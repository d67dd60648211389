//! eBPF mode on the host kernel (root): every map the applier writes, full. `kp_svc`
//! (frontends), `kp_nodeport` (NodePort numbers) and `kp_src` (loadBalancerSourceRanges) are
//! each filled to their bound through their pins, as another writer or a much larger cluster
//! would fill them; a sync that needs one more entry there fails with the map named, the
//! Service already programmed keeps serving real connections, and once room is made the retry
//! (a full sync, as the runner's retry after a failure is) programs the change. `kp_slot`'s
//! case is `ebpf_mode.rs`'s `a_sync_past_a_maps_bound_fails_and_the_old_backends_keep_serving`.
//!
//! Isolation as in `ebpf_mode.rs`: a cgroup v2 child, a private bpffs, and a fresh network
//! namespace whose `lo` carries the pod addresses.
#![allow(
    clippy::disallowed_methods,
    reason = "a kernel test: it starts processes, writes manifests and cgroup files"
)]

use support::ebpf_host;
use support::relay_pods;

use std::net::IpAddr;
use std::path::Path;

use aya::maps::lpm_trie::{Key as LpmKey, LpmTrie};
use aya::maps::{HashMap, Map, MapData};
use ebpf_host::{BpfFs, Cgroup, HELPER, changes, client, in_ns, proxy, serve, until};
use kube_proxy_rs::cli::load_manifests;
use kube_proxy_rs::cluster::{Changes, Features, Snapshot};
use kube_proxy_rs::config::NodePortAddresses;
use kube_proxy_rs::dataplane::Dataplane as _;
use kube_proxy_rs::dataplane::ebpf::backend::Kernel;
use kube_proxy_rs::dataplane::ebpf::layout::{IPPROTO_TCP, NpKey, SvcKey, SvcVal};
use kube_proxy_rs::dataplane::ebpf::{EbpfDataplane, names};
use relay_pods::host::NetNs;
use relay_pods::pod;

const NODE: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: node-a}\n\
                    status: {addresses: [{type: InternalIP, address: 192.168.50.1}]}\n";

/// A Service named `name` at `cluster_ip`:80 (with `spec` lines added) whose one endpoint is
/// `endpoint`:8080.
fn service(name: &str, cluster_ip: &str, spec: &str, endpoint: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default}}\n\
         spec:\n{spec}  clusterIP: \"{cluster_ip}\"\n  clusterIPs: [\"{cluster_ip}\"]\n  \
         ports: [{{name: p, protocol: TCP, port: 80, targetPort: 8080}}]\n\
         ---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  \
         name: {name}-1\n  namespace: default\n  labels: {{kubernetes.io/service-name: {name}}}\n\
         addressType: IPv4\nports: [{{name: p, protocol: TCP, port: 8080}}]\n\
         endpoints:\n  - addresses: [\"{endpoint}\"]\n    conditions: {{ready: true}}\n"
    )
}

fn snapshot(dir: &Path, manifests: &str) -> Snapshot {
    std::fs::write(dir.join("cluster.yaml"), manifests).expect("write manifests");
    let loaded = load_manifests(dir, "node-a", Features::default()).expect("manifests load");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    loaded.snapshot
}

fn hash_map<K: aya::Pod, V: aya::Pod>(pin_root: &Path, name: &str) -> HashMap<MapData, K, V> {
    let data = MapData::from_pin(names::pin_dir(pin_root).join(name)).expect("pinned map");
    HashMap::try_from(Map::HashMap(data)).expect("a hash map")
}

/// No map the applier writes holds this many entries: a fill that gets here is a broken test.
const FILL_LIMIT: u32 = 4 << 20;

/// Inserts `key(0)`, `key(1)`, ... (distinct keys) until the map refuses; how many went in.
fn fill<K: aya::Pod, V: aya::Pod>(
    map: &mut HashMap<MapData, K, V>,
    key: impl Fn(u32) -> K,
    value: V,
) -> u32 {
    let mut n = 0;
    while map.insert(key(n), value, 0).is_ok() {
        n += 1;
        assert!(n < FILL_LIMIT, "the map never refused");
    }
    n
}

/// A frontend no Service has: 198.18.0.0/15 (benchmarking addresses), port 9.
fn svc_filler(i: u32) -> SvcKey {
    let addr = IpAddr::V4((0xc612_0000 + i).into());
    SvcKey::new(addr, 9, IPPROTO_TCP)
}

/// A NodePort of protocols no Service uses (136 up: IPPROTO_UDPLITE and unassigned ones).
fn np_filler(i: u32) -> NpKey {
    NpKey {
        port: (i & 0xffff) as u16,
        proto: 136 + (i >> 16) as u8,
        pad: 0,
    }
}

/// A full-length `kp_src` key (frontend and source) for a frontend no Service has.
fn src_filler(i: u32) -> LpmKey<[u32; 9]> {
    LpmKey::new(288, [0xc612_0000u32.to_be(), 0, 0, 0, 9, i, 0, 0, 0])
}

#[test]
fn every_map_the_applier_writes_refuses_when_full_and_the_old_services_keep_serving() {
    let cgroup = Cgroup::new();
    let fs = BpfFs::new();
    let settings = fs.settings(&cgroup);
    let dir = tempfile::tempdir().expect("manifest dir");
    let ns = NetNs::new("kprs-ebpf-maps");
    for a in ["10.244.1.2/32", "10.244.1.3/32"] {
        ns.output("ip", &["addr", "add", a, "dev", "lo"]);
    }
    let web = NODE.to_string() + &service("web", "10.96.0.10", "", "10.244.1.2");
    let with_extra = web.clone() + &service("extra", "10.96.0.20", "", "10.244.1.3");
    let with_np = [
        with_extra.clone(),
        service("np", "10.96.0.21", "  type: NodePort\n", "10.244.1.3")
            .replace("targetPort: 8080}", "targetPort: 8080, nodePort: 30081}"),
    ]
    .concat();
    let with_lb = [
        with_np.clone(),
        service(
            "lb",
            "10.96.0.22",
            "  type: LoadBalancer\n  loadBalancerSourceRanges: [\"10.244.1.0/24\"]\n",
            "10.244.1.3",
        )
        .replace("targetPort: 8080}", "targetPort: 8080, nodePort: 30082}")
        .replace(
            "---\napiVersion: discovery",
            "status: {loadBalancer: {ingress: [{ip: \"192.0.2.22\"}]}}\n---\napiVersion: discovery",
        ),
    ]
    .concat();
    let snaps: Vec<Snapshot> = [web, with_extra, with_np, with_lb]
        .iter()
        .map(|m| snapshot(dir.path(), m))
        .collect();

    let kernel = Kernel::open(&settings).expect("load and attach");
    let mut dp = EbpfDataplane::new(kernel, NodePortAddresses::default());
    dp.sync(&snaps[0], &Changes::default(), true)
        .expect("first sync");
    let pins = settings.pin_root.clone();
    let name = ns.name.clone();
    let cg = &cgroup;
    in_ns(&ns, || async move {
        pod("10.244.1.2:8080", "a").await;
        pod("10.244.1.3:8080", "b").await;
        let web_serves = || async {
            let got = client(&name, Some(cg), "tcp 10.96.0.10:80 4").await;
            assert!(
                got.iter()
                    .all(|l| l == "tcp 10.96.0.10:80 -> a peer 10.96.0.10:80"),
                "the Service programmed before keeps serving: {got:?}"
            );
        };
        web_serves().await;

        // kp_svc full: the new Service's frontend cannot go in.
        let mut svc = hash_map::<SvcKey, SvcVal>(&pins, names::MAP_SVC);
        let filler = SvcVal {
            svc_id: 0x4000_0000,
            count: 0,
            flags: 0,
            generation: 0,
            affinity_timeout: 0,
        };
        let filled = fill(&mut svc, svc_filler, filler);
        let error = dp
            .sync(&snaps[1], &changes(&snaps[0], &snaps[1]), false)
            .expect_err("no room in kp_svc");
        let text = kube_proxy_rs::causes::one_line(&error);
        assert!(text.contains(names::MAP_SVC), "{text}");
        web_serves().await;
        let new = client(&name, Some(cg), "tcp 10.96.0.20:80 1").await;
        assert_eq!(new, ["tcp 10.96.0.20:80 -> unreachable"], "not programmed");
        for i in 0..filled {
            svc.remove(&svc_filler(i)).expect("make room");
        }
        dp.sync(&snaps[1], &Changes::default(), true)
            .expect("the retry programs the new Service");
        let new = client(&name, Some(cg), "tcp 10.96.0.20:80 4").await;
        assert!(
            new.iter()
                .all(|l| l == "tcp 10.96.0.20:80 -> b peer 10.96.0.20:80"),
            "{new:?}"
        );
        web_serves().await;
        eprintln!("kp_svc: {filled} entries filled it");

        // kp_nodeport full: the new NodePort cannot go in.
        let mut np = hash_map::<NpKey, u8>(&pins, names::MAP_NODEPORT);
        let filled = fill(&mut np, np_filler, 1);
        let error = dp
            .sync(&snaps[2], &changes(&snaps[1], &snaps[2]), false)
            .expect_err("no room in kp_nodeport");
        assert!(
            kube_proxy_rs::causes::one_line(&error).contains(names::MAP_NODEPORT),
            "{}",
            kube_proxy_rs::causes::one_line(&error)
        );
        web_serves().await;
        let wanted = NpKey {
            port: 30081,
            proto: IPPROTO_TCP,
            pad: 0,
        };
        assert!(np.get(&wanted, 0).is_err(), "not programmed");
        for i in 0..filled {
            np.remove(&np_filler(i)).expect("make room");
        }
        dp.sync(&snaps[2], &Changes::default(), true)
            .expect("the retry programs the NodePort");
        assert_eq!(np.get(&wanted, 0).ok(), Some(1), "programmed");
        web_serves().await;
        eprintln!("kp_nodeport: {filled} entries filled it");

        // kp_src full: the new Service's source ranges cannot go in, and so neither does its
        // LoadBalancer IP (a frontend is never written before its ranges).
        let data = MapData::from_pin(names::pin_dir(&pins).join(names::MAP_SRC)).expect("kp_src");
        let mut src: LpmTrie<MapData, [u32; 9], u8> =
            LpmTrie::try_from(Map::LpmTrie(data)).expect("an LPM trie");
        let mut filled = 0;
        while src.insert(&src_filler(filled), 1, 0).is_ok() {
            filled += 1;
            assert!(filled < FILL_LIMIT, "kp_src never refused");
        }
        let error = dp
            .sync(&snaps[3], &changes(&snaps[2], &snaps[3]), false)
            .expect_err("no room in kp_src");
        let text = kube_proxy_rs::causes::one_line(&error);
        assert!(text.contains(names::MAP_SRC), "{text}");
        web_serves().await;
        let lb = client(&name, Some(cg), "tcp 192.0.2.22:80 1").await;
        assert_eq!(lb, ["tcp 192.0.2.22:80 -> unreachable"], "not programmed");
        for i in 0..filled {
            src.remove(&src_filler(i)).expect("make room");
        }
        dp.sync(&snaps[3], &Changes::default(), true)
            .expect("the retry programs the ranges");
        let lb = client(&name, Some(cg), "tcp 192.0.2.22:80 4").await;
        assert!(
            lb.iter()
                .all(|l| l == "tcp 192.0.2.22:80 -> b peer 192.0.2.22:80"),
            "inside the ranges: served {lb:?}"
        );
        web_serves().await;
        eprintln!("kp_src: {filled} entries filled it");
    });
}

/// `GET /metrics` of the proxy on 127.0.0.1:10249 of the calling thread's namespace; the value
/// of the IPv4 eBPF sync failure counter, once it is exposed.
fn ebpf_sync_failures() -> Option<f64> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect("127.0.0.1:10249").ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let series = "kubeproxy_rs_ebpf_sync_failures_total{ip_family=\"IPv4\"} ";
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.parse().ok())
}

/// The running proxy (the built binary) with `kp_svc` full: the syncs that need room fail,
/// each counted in `kubeproxy_rs_ebpf_sync_failures_total`, and are retried on the doubling
/// backoff without another change; the Service programmed before keeps serving; once room is
/// made the next retry programs the new Service.
#[test]
fn the_running_proxy_counts_and_retries_syncs_a_full_map_refuses_and_converges() {
    let cgroup = Cgroup::new();
    let fs = BpfFs::new();
    let settings = fs.settings(&cgroup);
    let dir = tempfile::tempdir().expect("manifest dir");
    let ns = NetNs::new("kprs-ebpf-full-run");
    for a in ["10.244.1.2/32", "10.244.1.3/32"] {
        ns.output("ip", &["addr", "add", a, "dev", "lo"]);
    }
    let web = NODE.to_string() + &service("web", "10.96.0.10", "", "10.244.1.2");
    let with_extra = web.clone() + &service("extra", "10.96.0.20", "", "10.244.1.3");
    let cluster = dir.path().join("cluster.yaml");
    std::fs::write(&cluster, &web).expect("write manifests");
    let mut running = proxy(&ns, dir.path(), &settings);
    let pins = settings.pin_root.clone();
    let name = ns.name.clone();
    let cg = &cgroup;
    in_ns(&ns, || async move {
        pod("10.244.1.2:8080", "a").await;
        pod("10.244.1.3:8080", "b").await;
        let web_line = "tcp 10.96.0.10:80 -> a peer 10.96.0.10:80";
        until(&name, cg, "tcp 10.96.0.10:80 1", web_line, &running).await;
        assert_eq!(ebpf_sync_failures(), Some(0.0), "primed at 0");

        let mut svc = hash_map::<SvcKey, SvcVal>(&pins, names::MAP_SVC);
        let filler = SvcVal {
            svc_id: 0x4000_0000,
            count: 0,
            flags: 0,
            generation: 0,
            affinity_timeout: 0,
        };
        let filled = fill(&mut svc, svc_filler, filler);
        std::fs::write(&cluster, &with_extra).expect("write manifests");
        let held_at = std::time::Instant::now();
        // Retries 1 s, 2 s and 4 s after each failure: three failures within about 10 s of
        // backoff (the rest is the machine's load). Retries that waited for syncPeriod (30 s)
        // would need 60 s for three, and one that waited for another change would not come.
        let mut failures = 0.0;
        while failures < 3.0 {
            assert!(
                held_at.elapsed() < std::time::Duration::from_secs(50),
                "{failures} failures counted:\n{}",
                running.log_tail(20)
            );
            assert!(running.exited().is_none(), "{}", running.log_tail(20));
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            failures = ebpf_sync_failures().unwrap_or(0.0);
        }
        let counted_in = held_at.elapsed();
        let kept = client(&name, Some(cg), "tcp 10.96.0.10:80 4").await;
        assert!(kept.iter().all(|l| l == web_line), "{kept:?}");
        let new = client(&name, Some(cg), "tcp 10.96.0.20:80 1").await;
        assert_eq!(new, ["tcp 10.96.0.20:80 -> unreachable"], "not programmed");

        for i in 0..filled {
            svc.remove(&svc_filler(i)).expect("make room");
        }
        let freed_at = std::time::Instant::now();
        let extra_line = "tcp 10.96.0.20:80 -> b peer 10.96.0.20:80";
        until(&name, cg, "tcp 10.96.0.20:80 1", extra_line, &running).await;
        let converged_in = freed_at.elapsed();
        let kept = client(&name, Some(cg), "tcp 10.96.0.10:80 4").await;
        assert!(kept.iter().all(|l| l == web_line), "{kept:?}");
        let log = std::fs::read_to_string(&running.log).expect("proxy log");
        assert!(
            log.contains("kp_svc") && log.contains("sync succeeded again after failures"),
            "{}",
            running.log_tail(20)
        );
        let total = ebpf_sync_failures().expect("scraped");
        eprintln!(
            "kp_svc full ({filled} fillers): {failures} failures counted in {counted_in:?}, \
             {total} in all; converged {converged_in:?} after room was made"
        );
    });
}

/// The client, re-run by the test inside the namespace and the cgroup.
#[test]
fn client_helper() {
    HELPER.when_requested(serve);
}
