//! What kube-proxy-rs's integration tests (`tests/*.rs`), benches and examples share: hosts
//! made of network namespaces and the processes in them, the control plane from `testenv/`,
//! guests with the kernels this host lacks (qemu, User-mode Linux), the clusters tests give the
//! proxy, the synthetic cluster of any size, the cluster lab (`tests/lab/`) and the scale
//! harness (`tests/scale/`).
//!
//! A crate of its own (a dev-dependency of the package, `support` to its tests), so it is
//! compiled once for every test binary, and each test imports the modules it uses. Two of its
//! modules are files of the library's own test support, which its unit tests use too and the
//! library ships none of: the network-namespace guard (`src/testing/netns.rs`) and the synthetic
//! cluster (`src/testing/synthetic.rs`).

#![allow(
    clippy::disallowed_methods,
    reason = "test support is a seam: it starts processes, runs `ip` and `nft`, and reads the wall clock"
)]

pub mod api_objects;
pub mod api_relay;
pub mod capabilities;
pub mod cluster_objects;
pub mod ebpf_host;
pub mod ebpf_tc_world;
pub mod example_cluster;
pub mod guest;
pub mod helper_process;
pub mod host;
pub mod in_guest;
#[path = "../lab/mod.rs"]
pub mod lab;
pub mod layout;
#[path = "../live/mod.rs"]
pub mod live;
pub mod manifest_yaml;
pub mod monitor_probe;
#[path = "../../src/testing/netns.rs"]
pub mod netns;
pub mod planner_bench;
pub mod relay_clients;
pub mod relay_pods;
pub mod run_binary;
#[path = "../scale/mod.rs"]
pub mod scale;
#[path = "../../src/testing/synthetic.rs"]
pub mod synthetic;
pub mod testenv;
pub mod uml;
pub mod userspace_dataplane;
pub mod veth_pod;
pub mod web_cluster;
