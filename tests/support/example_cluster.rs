//! The example cluster (`examples/cluster`) as node `node-a` sees it, and the edit the dataplane
//! kernel tests make most: `default/web` losing one endpoint (as if its pod was deleted), with
//! the changes that name it, as the tracker would report them.
//!
//! Needs the crate root to include `src/testing/synthetic.rs` as `synthetic`, for the tracker's
//! endpoint selection.

#![allow(dead_code, reason = "each test binary uses a different part")]

use std::path::Path;
use std::sync::Arc;

use kube_proxy_rs::cli::load_manifests;
use kube_proxy_rs::cluster::topology::Features;
use kube_proxy_rs::cluster::{Changes, ServicePortName, Snapshot};

/// Packets of the example cluster as node-a sees them, from each kind of client.
pub const PACKETS: &[(&str, Option<&str>)] = &[
    ("10.96.1.10:80", None),
    ("10.96.1.10:80", Some("outside")),
    ("10.96.1.10:81", None),
    ("10.0.0.11:30080", Some("outside")),
    ("10.0.0.11:30443", Some("node")),
    ("10.96.2.10:80", None),
    ("10.96.9.9:80", None),
];

/// The example, loaded the way `kube-proxy-rs plan` loads a manifest directory.
pub fn example() -> Snapshot {
    load_manifests(Path::new("examples/cluster"), "node-a", Features::default())
        .expect("example loads")
        .snapshot
}

/// `snap` (the example) with `default/web`'s last endpoint gone, and the changes naming it.
pub fn without_one_web_endpoint(snap: &Snapshot) -> (Snapshot, Changes) {
    let mut ports = (*snap.ports).clone();
    let (name, state) = ports
        .iter()
        .find(|(n, _)| n.to_string().starts_with("default/web:"))
        .map(|(n, s)| (n.clone(), s.clone()))
        .expect("default/web is in the example");
    let mut state = (*state).clone();
    let view = &mut state.families[0];
    view.endpoints.pop();
    crate::synthetic::select(view, &state.port, &snap.node);
    ports.insert(name.clone(), Arc::new(state));
    let snapshot = Snapshot::new(snap.node.clone(), Arc::new(ports));
    (snapshot, changed([name]))
}

/// Changes naming `ports`.
pub fn changed(ports: impl IntoIterator<Item = ServicePortName>) -> Changes {
    Changes {
        ports: ports.into_iter().collect(),
        ..Changes::default()
    }
}
