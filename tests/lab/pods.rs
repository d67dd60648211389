//! Pods: a network namespace each, behind a point-to-point veth to its node (the node routes the
//! pod's /32 to the veth; the pod's default route is the node's pod gateway), with an echo server
//! on [`ECHO_PORTS`] for TCP and UDP.

use std::net::Ipv4Addr;
use std::time::Duration;

use super::helper::{ENTRY_TEST, SPEC_VAR, Spec};
use super::topology::{NodeNet, ip};
use crate::testenv::{ChildGuard, NetNs};

/// Every pod serves TCP and UDP on these ports; scenarios pick target ports among them.
pub const ECHO_PORTS: [u16; 3] = [8080, 8081, 8082];

/// One pod. Field order is drop order: the server goes before the namespace.
pub struct Pod {
    /// Short name, unique in the lab (`n1-a`): also what its echo server answers with.
    pub name: String,
    /// Index of the node it runs on.
    pub node: usize,
    pub ip: Ipv4Addr,
    server: ChildGuard,
    pub ns: NetNs,
}

impl Pod {
    /// Creates pod `name` with address `ip` on `node` and starts its echo server.
    pub fn start(prefix: &str, node: &NodeNet, name: &str, ip_addr: Ipv4Addr) -> Pod {
        let ns = NetNs::new(&format!("{prefix}-{name}"));
        let host_side = format!("vp-{name}");
        ip(
            &node.ns,
            &[
                "link", "add", &host_side, "type", "veth", "peer", "name", "eth0", "netns",
                &ns.name,
            ],
        );
        ip(&node.ns, &["link", "set", &host_side, "up"]);
        let gw = node.pod_gateway.to_string();
        let host_route = format!("{ip_addr}/32");
        ip(
            &node.ns,
            &["route", "add", &host_route, "dev", &host_side, "src", &gw],
        );
        ip(&ns, &["addr", "add", &host_route, "dev", "eth0"]);
        ip(&ns, &["link", "set", "eth0", "up"]);
        ip(&ns, &["route", "add", &gw, "dev", "eth0", "scope", "link"]);
        ip(&ns, &["route", "add", "default", "via", &gw, "dev", "eth0"]);

        let spec = Spec::Echo {
            pod: name.to_owned(),
            ports: ECHO_PORTS.to_vec(),
        };
        let exe = std::env::current_exe().expect("test binary path");
        let server = ChildGuard::spawn(
            &format!("echo-{}", ns.name),
            ns.command(exe)
                .args([ENTRY_TEST, "--exact", "--nocapture", "--test-threads=1"])
                .env(SPEC_VAR, serde_json::to_string(&spec).expect("spec JSON")),
        );
        let pod = Pod {
            name: name.to_owned(),
            node: node.index,
            ip: ip_addr,
            server,
            ns,
        };
        pod.wait_ready();
        pod
    }

    fn wait_ready(&self) {
        for _ in 0..200 {
            let log = std::fs::read_to_string(&self.server.log).unwrap_or_default();
            if log.contains(&format!("echo {} ready", self.name)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!(
            "echo server of pod {} did not start:\n{}",
            self.name,
            self.server.log_tail(20)
        );
    }
}
