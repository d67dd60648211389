//! eBPF mode on the host kernel (root): loadBalancerSourceRanges hold for the node's own
//! processes and pods too, not only for traffic from outside. A socket that connects to a
//! LoadBalancer IP with ranges is translated to a backend as any other, and its packets are
//! dropped on their way out (the cgroup egress program) when their source is outside the
//! ranges, as kube-proxy drops them before its DNAT.
//!
//! Isolation as in `ebpf_mode.rs`: the programs attach to a cgroup v2 child this test
//! creates, pins go to a private bpffs, and pods and clients live in a fresh network namespace
//! whose `lo` carries the pod addresses (so a client's source towards a pod is the pod
//! network's own address, 10.244.1.x). Nothing is sent outside that namespace.
#![allow(
    clippy::disallowed_methods,
    reason = "a kernel test: it starts processes, writes manifests and cgroup files"
)]

use support::ebpf_host;
use support::relay_pods;

use ebpf_host::{BpfFs, Cgroup, HELPER, client, in_ns, serve};
use kube_proxy_rs::cli::load_manifests;
use kube_proxy_rs::cluster::{Changes, Features};
use kube_proxy_rs::config::NodePortAddresses;
use kube_proxy_rs::dataplane::Dataplane as _;
use kube_proxy_rs::dataplane::ebpf::EbpfDataplane;
use kube_proxy_rs::dataplane::ebpf::backend::Kernel;
use kube_proxy_rs::dataplane::ebpf::stats::Stats;
use relay_pods::host::NetNs;
use relay_pods::pod;

/// Two LoadBalancer Services over the pod at 10.244.1.2: `open` lets the pod network in,
/// `closed` only 203.0.113.0/24.
fn manifests() -> String {
    let lb = |name: &str, cluster_ip: &str, vip: &str, range: &str| {
        format!(
            "---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default}}\n\
             spec:\n  type: LoadBalancer\n  clusterIP: \"{cluster_ip}\"\n  \
             clusterIPs: [\"{cluster_ip}\"]\n  loadBalancerSourceRanges: [\"{range}\"]\n  \
             ports: [{{name: p, protocol: TCP, port: 80, targetPort: 8080, nodePort: 0}}]\n\
             status: {{loadBalancer: {{ingress: [{{ip: \"{vip}\"}}]}}}}\n\
             ---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  \
             name: {name}-1\n  namespace: default\n  labels: {{kubernetes.io/service-name: {name}}}\n\
             addressType: IPv4\nports: [{{name: p, protocol: TCP, port: 8080}}]\n\
             endpoints:\n  - addresses: [\"10.244.1.2\"]\n    conditions: {{ready: true}}\n"
        )
    };
    [
        "apiVersion: v1\nkind: Node\nmetadata: {name: node-a}\n\
         status: {addresses: [{type: InternalIP, address: 192.168.50.1}]}\n"
            .to_string(),
        lb("open", "10.96.0.20", "192.0.2.20", "10.244.1.0/24"),
        lb("closed", "10.96.0.21", "192.0.2.21", "203.0.113.0/24"),
    ]
    .concat()
}

#[test]
fn load_balancer_source_ranges_hold_for_the_nodes_own_sockets() {
    let cgroup = Cgroup::new();
    let fs = BpfFs::new();
    let settings = fs.settings(&cgroup);
    let dir = tempfile::tempdir().expect("manifest dir");
    let ns = NetNs::new("kprs-ebpf-src");
    ns.output("ip", &["addr", "add", "10.244.1.2/32", "dev", "lo"]);
    std::fs::write(dir.path().join("cluster.yaml"), manifests()).expect("write manifests");
    let loaded = load_manifests(dir.path(), "node-a", Features::default()).expect("manifests load");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);

    let kernel = Kernel::open(&settings).expect("load and attach");
    let stats = Stats::open(&settings.pin_root).expect("open the counters");
    let mut dp = EbpfDataplane::new(kernel, NodePortAddresses::default());
    dp.sync(&loaded.snapshot, &Changes::default(), false)
        .expect("sync");
    let name = ns.name.clone();
    let cg = &cgroup;
    in_ns(&ns, || async move {
        pod("10.244.1.2:8080", "a").await;
        // Inside the ranges: served, as any LoadBalancer IP.
        let open = client(&name, Some(cg), "tcp 192.0.2.20:80 3").await;
        assert!(
            open.iter()
                .all(|l| l == "tcp 192.0.2.20:80 -> a peer 192.0.2.20:80"),
            "{open:?}"
        );
        let before = dropped(&stats);
        // Outside them: the SYN never leaves, and the client times out.
        let closed = client(&name, Some(cg), "tcp 192.0.2.21:80 1").await;
        assert_eq!(closed.len(), 1);
        assert!(
            closed[0].starts_with("tcp 192.0.2.21:80 -> error") && closed[0].contains("timed out"),
            "{closed:?}"
        );
        assert!(dropped(&stats) > before, "the drops are counted");
        // The ClusterIP of the same Service has no ranges: served.
        let cluster_ip = client(&name, Some(cg), "tcp 10.96.0.21:80 1").await;
        assert_eq!(cluster_ip, ["tcp 10.96.0.21:80 -> a peer 10.96.0.21:80"]);
    });
}

fn dropped(stats: &Stats) -> u64 {
    let reading = stats.read();
    reading
        .reasons
        .iter()
        .find(|(n, _)| *n == "dropped")
        .expect("a dropped counter")
        .1
}

/// The client, re-run by the test inside the namespace and the cgroup.
#[test]
fn client_helper() {
    HELPER.when_requested(serve);
}
