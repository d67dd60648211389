//! Times the API source's initial lists against a running API server: the client and the
//! watches of Services, EndpointSlices and a Node, until each kind's list has ended, on a
//! single-threaded runtime (as the proxy runs its source, `api::thread`) or on a multi-threaded
//! one (as it did before). Read-only: it lists and watches, nothing else. Not a test: timings
//! are printed, never asserted.
//!
//! Lists are asked for as protobuf (the default content type) or, with `json`, as JSON.
//!
//! Run: `cargo run --release --example source_lists -- KUBECONFIG [current|multi] [protobuf|json]`, e.g.
//! against a testenv control plane loaded with `testenv load` (docs/benchmarks.md), under
//! `/usr/bin/time` for the CPU.

#![allow(
    clippy::disallowed_methods,
    reason = "a timing harness: it reads the clock"
)]

use futures::StreamExt as _;
use kube_proxy_rs::cluster::source::Event;
use kube_proxy_rs::cluster::source::api::{Encoding, Lists, client, watch};
use kube_proxy_rs::config::ClientConnection;

fn main() {
    let mut args = std::env::args().skip(1);
    let kubeconfig = args
        .next()
        .expect("usage: source_lists KUBECONFIG [current|multi] [protobuf|json]");
    let runtime = match args.next().as_deref() {
        None | Some("current") => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Some("multi") => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
        Some(other) => panic!("{other:?}: one of current, multi"),
    }
    .expect("runtime");
    let content_type = match args.next().as_deref() {
        None | Some("protobuf") => "application/vnd.kubernetes.protobuf",
        Some("json") => "application/json",
        Some(other) => panic!("{other:?}: one of protobuf, json"),
    };
    runtime.block_on(async {
        let connection = ClientConnection {
            kubeconfig: Some(kubeconfig.into()),
            qps: 200.0,
            burst: 400,
            content_type: content_type.to_owned(),
            ..ClientConnection::default()
        };
        let (client, _) = client(&connection).await.expect("client");
        let start = std::time::Instant::now();
        let mut events = watch(client, "node-0", Lists::Classic, Encoding::of(&connection));
        let (mut ended, mut objects) = (0, 0);
        while let Some(event) = events.next().await {
            match event {
                Event::ListItem(_) => objects += 1,
                Event::ListEnded(kind) => {
                    ended += 1;
                    println!(
                        "{kind:?} list ended after {:?} ({objects} objects so far)",
                        start.elapsed()
                    );
                    if ended == 3 {
                        break;
                    }
                }
                _ => {}
            }
        }
    });
}
