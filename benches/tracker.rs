//! Tracker and endpoint selection at scale: 10,000 Services × 10 endpoints.
//!
//! - `full_rebuild`: a fresh tracker takes the three initial lists and produces the first
//!   snapshot (what a cold start or a relist costs). Goal: ≤ 50 ms.
//! - `one_endpoint_change`: one EndpointSlice of a loaded tracker changes, then a snapshot is
//!   taken and dropped (what one sync's model update costs). Goal: ≤ 50 µs.
//!
//! Run: `cargo bench --bench tracker`. Results go to docs/benchmarks.md.

use support::synthetic;

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_proxy_rs::cluster::source::{Event, Kind, Object};
use kube_proxy_rs::cluster::{Features, Tracker};

/// The same allocator as the binary, so the numbers are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SERVICES: usize = 10_000;
const ENDPOINTS: usize = 10;

fn service(i: usize) -> Service {
    Service {
        metadata: ObjectMeta {
            namespace: Some(format!("ns-{}", i % 100)),
            name: Some(format!("svc-{i}")),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ips: Some(vec![format!("10.96.{}.{}", i / 250, i % 250 + 1)]),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: 80,
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The slice of Service `i`; `generation` shifts one endpoint's address so versions differ.
fn slice(i: usize, generation: usize) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            namespace: Some(format!("ns-{}", i % 100)),
            name: Some(format!("svc-{i}-abcde")),
            labels: Some(BTreeMap::from([(
                "kubernetes.io/service-name".into(),
                format!("svc-{i}"),
            )])),
            ..ObjectMeta::default()
        },
        address_type: "IPv4".into(),
        ports: synthetic::slice_ports(),
        endpoints: synthetic::slice_endpoints(i, ENDPOINTS, generation),
    }
}

fn initial_lists() -> Vec<Event> {
    vec![
        Event::Listed(
            Kind::Service,
            (0..SERVICES).map(|i| Object::from(service(i))).collect(),
        ),
        Event::Listed(
            Kind::EndpointSlice,
            (0..SERVICES).map(|i| Object::from(slice(i, 0))).collect(),
        ),
        Event::Listed(
            Kind::Node,
            vec![Object::Node(Box::new(synthetic::node_object()))],
        ),
    ]
}

fn loaded_tracker() -> Tracker {
    let mut t = Tracker::new("node-0", Features::default());
    for e in &initial_lists() {
        t.apply(e);
    }
    drop(t.snapshot());
    t
}

fn benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("tracker_10k_services_x_10_endpoints");
    group.sample_size(20);
    let lists = initial_lists();
    group.bench_function("full_rebuild", |b| {
        b.iter_batched(
            || (),
            |()| {
                let mut t = Tracker::new("node-0", Features::default());
                for e in &lists {
                    t.apply(e);
                }
                let snapshot = t.snapshot();
                // Returned, so dropping the tracker is not timed: a cold start keeps it.
                black_box((t, snapshot))
            },
            BatchSize::LargeInput,
        )
    });

    let mut tracker = loaded_tracker();
    let versions = [
        Event::Applied(Object::from(slice(4242, 1))),
        Event::Applied(Object::from(slice(4242, 0))),
    ];
    let mut next = 1; // the first version applied must differ from the loaded one
    group.sample_size(100);
    group.bench_function("one_endpoint_change", |b| {
        b.iter_batched(
            || {
                next ^= 1;
                versions[next].clone()
            },
            |event| {
                tracker.apply(&event);
                let (snapshot, changes) = tracker.snapshot();
                assert_eq!(changes.ports.len(), 1);
                black_box(snapshot.ports.len())
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(tracker_benches, benches);
criterion_main!(tracker_benches);
