//! The cluster lab: a small Kubernetes cluster made of network namespaces on this machine, with a
//! proxy on every node and echo servers in every pod, for sending real TCP and UDP through the
//! rules a proxy programs.
//!
//! - `topology`: node namespaces on an underlay bridge, host-gateway routes, an external client;
//!   dual-stack (IPv4 and IPv6 addresses everywhere); nothing is linked to the host's namespace.
//! - `pods`: a namespace per pod behind a veth to its node, each running an echo server.
//! - `cluster`: Nodes, Services and EndpointSlices in the real API server from `testenv/`,
//!   mirrored into a manifest directory.
//! - `proxy`: which proxy runs on the nodes ([`Proxy`]), and what it is known not to do yet.
//! - `client`, `probe`, `echo`, `helper`: traffic from any lab namespace and what pods answer.
//! - `scenarios`: the end-to-end suite every dataplane must pass, and its report.
//! - `socket_lb`: the eBPF mode's cgroup and pin root per node, which its clients join.
//! - `kill_churn`: a proxy SIGKILLed again and again under churn, and what it must not lose.
//!
//! Cleanup: [`Lab`] owns guards only; dropping it (also while a test panics) kills every process
//! by pid, removes the eBPF mode's pins and cgroups, deletes every namespace, and deletes the
//! API objects.

pub use crate::capabilities;
pub mod client;
pub mod cluster;
pub mod echo;
pub mod helper;
pub mod kill_churn;
pub mod pods;
pub mod probe;
pub mod proxy;
pub mod scenarios;
pub mod socket_lb;
pub mod topology;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

pub use helper::Proto;
pub use proxy::{Mode, Proxy};

use crate::testenv::{ChildGuard, TestEnv, require_root, scratch_dir};
use cluster::{Cluster, Endpoint};
use pods::Pod;
use topology::Topology;

/// Nodes in a default lab.
pub const NODES: usize = 3;
/// Pods per node in a default lab (`n1-a`, `n1-b`, …).
pub const PODS_PER_NODE: usize = 2;

/// A proxy process on one node and the API bridge it reads through. Field order is drop order.
struct NodeProxy {
    process: ChildGuard,
    /// Held, never read: the bridge lives as long as the proxy and is stopped after it.
    _bridge: Option<ChildGuard>,
}

/// A running lab. Field order is drop order: proxies, then the eBPF mode's pins and cgroups,
/// then pods (their servers and namespaces), then the node, client and underlay namespaces,
/// then the API objects.
pub struct Lab {
    proxies: std::cell::RefCell<Vec<Option<NodeProxy>>>,
    /// In eBPF mode: each node's cgroup and pin root.
    pub socket_lb: Option<socket_lb::SocketLb>,
    pub pods: Vec<Pod>,
    pub topo: Topology,
    pub cluster: Cluster,
    pub proxy: Proxy,
    env: &'static TestEnv,
    /// How long a check waits for a change to take effect; scenarios use [`Lab::settle`].
    settle: std::cell::Cell<Duration>,
}

impl Lab {
    /// Builds a default lab ([`NODES`] nodes, [`PODS_PER_NODE`] pods each) running `proxy`.
    pub async fn start(env: &'static TestEnv, proxy: Proxy) -> Lab {
        let lab = Lab::start_idle(env, proxy).await;
        lab.start_proxies();
        lab
    }

    /// Builds a default lab for `proxy` (in eBPF mode with its cgroups and pin roots) without
    /// starting any proxy yet: for a test that writes its objects first, so a proxy's first
    /// sync holds them all ([`Lab::start_proxies`]).
    pub async fn start_idle(env: &'static TestEnv, proxy: Proxy) -> Lab {
        require_root();
        static LABS: AtomicU32 = AtomicU32::new(0);
        let prefix = format!("kl{}", LABS.fetch_add(1, Ordering::Relaxed));
        let topo = Topology::build(&prefix, NODES);
        let mut pods = Vec::new();
        for node in &topo.nodes {
            for k in 0..PODS_PER_NODE {
                let name = format!("n{}-{}", node.index + 1, char::from(b'a' + k as u8));
                let [a, b, c, _] = node.pod_gateway.octets();
                let ip = Ipv4Addr::new(a, b, c, 10 + k as u8);
                let ip6 = node.pod_ip6(0x10 + k as u16);
                pods.push(Pod::start(&prefix, node, &name, ip, ip6));
            }
        }
        let manifests = scratch_dir().join(format!("{prefix}-manifests"));
        let cluster = Cluster::create(env, "lab", &topo.nodes, &manifests).await;
        let socket_lb =
            (proxy.mode() == Mode::Ebpf).then(|| socket_lb::SocketLb::create(&prefix, NODES));
        let proxies = topo.nodes.iter().map(|_| None).collect::<Vec<_>>().into();
        Lab {
            proxies,
            socket_lb,
            pods,
            topo,
            cluster,
            proxy,
            env,
            settle: std::cell::Cell::new(Duration::from_secs(20)),
        }
    }

    /// Starts [`Lab::proxy`] on every node (with the lab's flags).
    pub fn start_proxies(&self) {
        for index in 0..self.topo.nodes.len() {
            self.start_proxy(index);
        }
    }

    /// Stops the proxy of every node (SIGKILL by pid), leaving what it programmed in place.
    pub fn stop_proxies(&self) {
        for index in 0..self.topo.nodes.len() {
            self.stop_proxy(index);
        }
    }

    /// Whether the proxy relays connections itself (userspace mode): an endpoint then sees the
    /// node's address, never the client's, whatever the traffic policy, and the scenarios
    /// that check for the client's address check for a node's instead.
    pub fn relays(&self) -> bool {
        self.proxy.mode() == Mode::Userspace
    }

    /// How long checks wait for a change to show.
    pub fn settle(&self) -> Duration {
        self.settle.get()
    }

    pub fn set_settle(&self, d: Duration) {
        self.settle.set(d);
    }

    /// The pod named `name` (`n1-a`); panics if there is none.
    pub fn pod(&self, name: &str) -> &Pod {
        self.pods
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no pod {name} in the lab"))
    }

    /// The pods on node `index`.
    pub fn pods_on(&self, index: usize) -> Vec<&Pod> {
        self.pods.iter().filter(|p| p.node == index).collect()
    }

    /// A ready endpoint for `pod`, on its node and in its node's zone.
    pub fn endpoint(&self, pod: &Pod) -> Endpoint {
        Endpoint {
            ip: pod.ip.to_string(),
            node: self.cluster.node_names[pod.node].clone(),
            zone: cluster::zone(pod.node).to_owned(),
            ready: true,
            serving: true,
            terminating: false,
            hint_zones: Vec::new(),
        }
    }

    /// Ready endpoints for the pods named.
    pub fn endpoints(&self, names: &[&str]) -> Vec<Endpoint> {
        names.iter().map(|n| self.endpoint(self.pod(n))).collect()
    }

    /// Ready IPv6 endpoints (the pods' IPv6 addresses) for the pods named, for an IPv6 slice.
    pub fn endpoints6(&self, names: &[&str]) -> Vec<Endpoint> {
        names
            .iter()
            .map(|n| {
                let pod = self.pod(n);
                Endpoint {
                    ip: pod.ip6.to_string(),
                    ..self.endpoint(pod)
                }
            })
            .collect()
    }

    /// Every node's underlay address.
    pub fn node_ips(&self) -> Vec<Ipv4Addr> {
        self.topo.nodes.iter().map(|n| n.ip).collect()
    }

    /// Every node's IPv6 underlay address.
    pub fn node_ip6s(&self) -> Vec<Ipv6Addr> {
        self.topo.nodes.iter().map(|n| n.ip6).collect()
    }

    /// Proxies that have exited, with the end of their logs.
    pub fn exited_proxies(&mut self) -> Vec<String> {
        self.proxies
            .get_mut()
            .iter_mut()
            .flatten()
            .filter_map(|p| {
                let status = p.process.exited()?;
                Some(format!(
                    "{} exited ({status}):\n{}",
                    p.process.name,
                    p.process.log_tail(15)
                ))
            })
            .collect()
    }

    /// The last `n` log lines of each running proxy, headed by its name, for failure messages.
    pub fn proxy_log_tails(&self, n: usize) -> Vec<String> {
        self.proxies
            .borrow()
            .iter()
            .flatten()
            .map(|p| format!("--- {}:\n{}", p.process.name, p.process.log_tail(n)))
            .collect()
    }

    /// Log files of the proxies, for failure messages.
    pub fn proxy_logs(&self) -> Vec<String> {
        self.proxies
            .borrow()
            .iter()
            .flatten()
            .map(|p| p.process.log.display().to_string())
            .collect()
    }

    /// Stops the proxy on node `index` (SIGKILL by pid, as a crash would) and its bridge.
    pub fn stop_proxy(&self, index: usize) {
        self.proxies.borrow_mut()[index] = None;
    }

    /// Starts the proxy on node `index` again (after [`Lab::stop_proxy`]).
    pub fn start_proxy(&self, index: usize) {
        self.start_proxy_with(index, &[]);
    }

    /// Starts the proxy on node `index` with the lab's flags plus `extra_flags`.
    pub fn start_proxy_with(&self, index: usize, extra_flags: &[String]) {
        self.start_proxy_via(index, None, extra_flags);
    }

    /// [`Lab::start_proxy_with`], the proxy reading the API server at `127.0.0.1:<api_port>`
    /// of the host when `api_port` is given (see [`Proxy::start_via`]).
    pub fn start_proxy_via(&self, index: usize, api_port: Option<u16>, extra_flags: &[String]) {
        let node = &self.topo.nodes[index];
        // The cgroup and pin root are for a proxy in eBPF mode (an eBPF lab can run upstream
        // too, beside it: see `Lab::start_idle`).
        let socket_lb = self
            .socket_lb
            .as_ref()
            .filter(|_| self.proxy.mode() == Mode::Ebpf);
        let flags = node_flags(socket_lb, index, extra_flags);
        let (process, bridge) = self.proxy.start_via(
            self.env,
            node,
            &self.cluster.node_names[index],
            &self.cluster.manifests,
            api_port,
            &flags,
        );
        self.proxies.borrow_mut()[index] = Some(NodeProxy {
            process,
            _bridge: bridge,
        });
    }
}

/// Node `index`'s own flags (in eBPF mode its cgroup and pin root), then `extra`.
fn node_flags(
    socket_lb: Option<&socket_lb::SocketLb>,
    index: usize,
    extra: &[String],
) -> Vec<String> {
    let mut flags = socket_lb.map_or_else(Vec::new, |s| s.proxy_flags(index));
    flags.extend_from_slice(extra);
    flags
}
