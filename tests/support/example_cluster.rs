//! The example cluster (`examples/cluster`) as node `node-a` sees it, and the edit the dataplane
//! kernel tests make most: `default/web` losing one endpoint (as if its pod was deleted), with
//! the changes that name it, as the tracker would report them. For the `explain` kernel tests,
//! the example synced into a dataplane and the check that the kernel's rules explain a packet
//! as the plan does.
//!
//! Needs the crate root to include `src/testing/synthetic.rs` as `synthetic`, for the tracker's
//! endpoint selection.

use std::path::Path;
use std::sync::Arc;

use kube_proxy_rs::cli::explain::{Explanation, Request, Rules, RulesFrom, explain, render};
use kube_proxy_rs::cli::load_manifests;
use kube_proxy_rs::cluster::topology::Features;
use kube_proxy_rs::cluster::{Changes, ServicePortName, Snapshot};
use kube_proxy_rs::dataplane::Dataplane;
use kube_proxy_rs::dataplane::node::NodePolicy;

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

/// The example synced whole into `dp`, as a first sync does; returns the example.
pub fn synced_example(dp: &mut impl Dataplane) -> Snapshot {
    let snap = example();
    dp.sync(&snap, &changed(snap.ports.keys().cloned()), true)
        .expect("first sync");
    snap
}

/// Asserts that `kernel`, rules read back from the kernel, explain `request` in `snap` as
/// `planned`, the plan's rules, do: the same outcome for the same reasons. `what` names the
/// packet and the reading in a failure.
pub fn assert_explained_alike(
    snap: &Snapshot,
    node: &NodePolicy,
    request: &Request,
    planned: &dyn Rules,
    kernel: &dyn Rules,
    what: &str,
) {
    let ask = |rules: &dyn Rules, from| explain(snap, node, rules, from, request).unwrap();
    let a = ask(planned, RulesFrom::Planned);
    let b = ask(kernel, RulesFrom::Kernel);
    assert_eq!(a.outcome, b.outcome, "{what}:\n{}", render::text(&b));
    assert_eq!(a.reasons, b.reasons, "{what}");
}

/// The endpoints `explained` reaches, as `address:port`.
pub fn reached(explained: &Explanation) -> Vec<String> {
    explained
        .outcome
        .endpoints
        .iter()
        .map(|s| s.endpoint.to_string())
        .collect()
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
