//! Where the proxy's memory goes at scale, part by part, measured by the allocator: the
//! decoded API objects of the initial lists, the tracker that keeps what the model needs of
//! them, a snapshot, the nftables planner's first (full) plan and what it keeps for the next
//! sync, the transaction it yields and the netlink batch encoded from it. Each line gives the
//! bytes the part holds after it is built and the allocator's peak while it was built, so a
//! change to one part's representation shows up here before a scale run. No kernel, no root:
//! the same pure code the sync runs, with a counting allocator over mimalloc (the binary's).
//! Resident memory (what the scale harness reports) adds the allocator's retention and
//! fragmentation on top of these live bytes. Not a test: numbers are reported, never asserted.
//!
//! The lists are decoded from JSON bodies as the API server sends them, both into
//! k8s-openapi's types and into the proxy's own lean ones, to show what the lean decoding saves.
//!
//! Run: `cargo run --release --example memory [SERVICES ENDPOINTS ...]` (default 5,000 × 50,
//! 44,000 × 1 and 10,000 × 10). Results go to docs/benchmarks.md.

use support::synthetic;

use std::alloc::{GlobalAlloc, Layout};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube_proxy_rs::cluster::source::{Event, Kind, Object, lean};
use kube_proxy_rs::cluster::{Features, Tracker};
use kube_proxy_rs::dataplane::nftables::{ModeConfig, Planner};
use kube_proxy_rs::nft::backend::netlink::batch::{self, Known};

/// mimalloc, counting the bytes live and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is passed on unchanged to mimalloc, which upholds `GlobalAlloc`'s
// contract; the counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { mimalloc::MiMalloc.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator with `layout`.
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout`.
        let p = unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes live now.
fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Runs `build`, returning its value, the bytes it left live and the peak above the start.
fn measured<T>(build: impl FnOnce() -> T) -> (T, usize, usize) {
    let before = live();
    PEAK.store(before, Ordering::Relaxed);
    let value = build();
    let held = live().saturating_sub(before);
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(before);
    (value, held, peak)
}

fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// A Service as the API server lists it: the metadata every object carries, one TCP port.
fn service(i: usize) -> Service {
    Service {
        metadata: metadata(format!("svc-{i}"), i, BTreeMap::new(), None),
        spec: Some(ServiceSpec {
            cluster_ip: Some(cluster_ip(i)),
            cluster_ips: Some(vec![cluster_ip(i)]),
            ip_families: Some(vec!["IPv4".into()]),
            ip_family_policy: Some("SingleStack".into()),
            internal_traffic_policy: Some("Cluster".into()),
            session_affinity: Some("None".into()),
            type_: Some("ClusterIP".into()),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: 80,
                protocol: Some("TCP".into()),
                target_port: Some(
                    k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(8080),
                ),
                ..ServicePort::default()
            }]),
            selector: Some(BTreeMap::from([("app".into(), format!("svc-{i}"))])),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

fn cluster_ip(i: usize) -> String {
    format!("10.{}.{}.{}", 96 + i / 62_500, i / 250 % 250, i % 250 + 1)
}

fn metadata(
    name: String,
    i: usize,
    labels: BTreeMap<String, String>,
    owner: Option<OwnerReference>,
) -> ObjectMeta {
    ObjectMeta {
        namespace: Some(format!("ns-{}", i % 100)),
        uid: Some(format!("6f1c2a7e-0000-4000-8000-{i:012}")),
        resource_version: Some(format!("{}", 1000 + i)),
        creation_timestamp: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            Default::default(),
        )),
        labels: Some(labels),
        owner_references: owner.map(|o| vec![o]),
        name: Some(name),
        ..ObjectMeta::default()
    }
}

/// Service `i`'s one slice of `endpoints` ready endpoints spread over the nodes.
fn slice(i: usize, endpoints: usize) -> EndpointSlice {
    let labels = BTreeMap::from([
        ("kubernetes.io/service-name".into(), format!("svc-{i}")),
        (
            "endpointslice.kubernetes.io/managed-by".into(),
            "endpointslice-controller.k8s.io".into(),
        ),
    ]);
    let owner = OwnerReference {
        api_version: "v1".into(),
        kind: "Service".into(),
        name: format!("svc-{i}"),
        uid: format!("6f1c2a7e-0000-4000-8000-{i:012}"),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    EndpointSlice {
        metadata: metadata(format!("svc-{i}-abcde"), i, labels, Some(owner)),
        address_type: "IPv4".into(),
        ports: synthetic::slice_ports(),
        endpoints: synthetic::slice_endpoints(i, endpoints, 0),
    }
}

/// A list response's items, decoded as `T`.
fn decode<T: serde::de::DeserializeOwned>(json: &[u8]) -> Vec<T> {
    #[derive(serde::Deserialize)]
    struct List<T> {
        items: Vec<T>,
    }
    serde_json::from_slice::<List<T>>(json)
        .expect("decodes")
        .items
}

fn measure(services: usize, endpoints: usize) {
    println!("== {services} services x {endpoints} endpoints");
    let row = |part: &str, held: usize, peak: usize| {
        println!("{part:<44} holds {:>10}  peak {:>10}", mib(held), mib(peak));
    };

    // The lists as decoded objects, all at once: what a classic list holds before the
    // tracker sees the first of them, decoded from the JSON body the API server sends, as
    // k8s-openapi's types (before) and as the proxy's lean types (now).
    let body = |kind: &str, items: Vec<serde_json::Value>| {
        serde_json::to_vec(&serde_json::json!({
            "kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items,
        }))
        .expect("encodes")
    };
    let lists = [
        (
            "Service",
            body(
                "ServiceList",
                (0..services)
                    .map(|i| serde_json::to_value(service(i)).expect("encodes"))
                    .collect(),
            ),
        ),
        (
            "EndpointSlice",
            body(
                "EndpointSliceList",
                (0..services)
                    .map(|i| serde_json::to_value(slice(i, endpoints)).expect("encodes"))
                    .collect(),
            ),
        ),
    ];
    for (kind, json) in &lists {
        row(&format!("{kind} list, JSON body"), json.len(), json.len());
        if *kind == "Service" {
            let (full, held, peak) = measured(|| decode::<Service>(json));
            row("  decoded as k8s-openapi objects", held, peak);
            drop(full);
            let (lean, held, peak) = measured(|| decode::<lean::Service>(json));
            row("  decoded as the proxy's lean objects", held, peak);
            drop(lean);
        } else {
            let (full, held, peak) = measured(|| decode::<EndpointSlice>(json));
            row("  decoded as k8s-openapi objects", held, peak);
            drop(full);
            let (lean, held, peak) = measured(|| decode::<lean::EndpointSlice>(json));
            row("  decoded as the proxy's lean objects", held, peak);
            drop(lean);
        }
    }
    drop(lists);

    // The tracker, fed object by object (each dropped after), as both kinds of list do now.
    let (mut tracker, held, peak) = measured(|| {
        let mut t = Tracker::new("node-0", Features::default());
        t.apply(&Event::ListStarted(Kind::Service));
        for i in 0..services {
            t.apply(&Event::ListItem(Object::from(service(i))));
        }
        t.apply(&Event::ListEnded(Kind::Service));
        t.apply(&Event::ListStarted(Kind::EndpointSlice));
        for i in 0..services {
            t.apply(&Event::ListItem(Object::from(slice(i, endpoints))));
        }
        t.apply(&Event::ListEnded(Kind::EndpointSlice));
        t.apply(&Event::Listed(
            Kind::Node,
            vec![Object::Node(Box::new(synthetic::node_object()))],
        ));
        t
    });
    row("tracker after the lists", held, peak);

    let ((snapshot, changes), held, peak) = measured(|| tracker.snapshot());
    row("first snapshot (port states)", held, peak);

    let mut planner = Planner::new(ModeConfig::default());
    let (update, held, peak) = measured(|| planner.update(&snapshot, &changes));
    row("planner's first plan, with its transaction", held, peak);
    let mut known = Known::default();
    for t in &update.transactions {
        known.learn(t);
    }
    let (encoded, held, peak) = measured(|| batch::encode(&update.transactions, &known, 1));
    let encoded = encoded.expect("the first plan encodes");
    row("netlink batch", held, peak);
    println!(
        "  {} messages, {} bytes",
        encoded.len(),
        encoded.bytes.len()
    );
    drop(encoded);
    let before = live();
    drop(update);
    let transaction = before.saturating_sub(live());
    row("  the transaction, dropped after the apply", transaction, 0);
    println!(
        "{:<44} holds {:>10}",
        "steady state (tracker, snapshot, planner)",
        mib(live())
    );
    drop((snapshot, planner, tracker));
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("SERVICES ENDPOINTS pairs"))
        .collect();
    let sizes: Vec<(usize, usize)> = if args.is_empty() {
        vec![(5_000, 50), (44_000, 1), (10_000, 10)]
    } else {
        args.chunks(2).map(|c| (c[0], c[1])).collect()
    };
    for (services, endpoints) in sizes {
        measure(services, endpoints);
    }
}
