//! Pods: a network namespace each, behind a point-to-point veth to its node (the node routes the
//! pod's /32 and /128 to the veth; the pod's default routes are the node's pod gateway, and for
//! IPv6 the node's link-local address on the veth), with an echo server on [`ECHO_PORTS`] for TCP
//! and UDP in both families.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use super::helper::{ENTRY_TEST, SPEC_VAR, Spec};
use super::topology::{NodeNet, POD_LINK_GATEWAY6, ip};
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
    pub ip6: Ipv6Addr,
    server: ChildGuard,
    pub ns: NetNs,
}

impl Pod {
    /// Creates pod `name` with addresses `ip_addr` and `ip6` on `node` and starts its echo server.
    pub fn start(
        prefix: &str,
        node: &NodeNet,
        name: &str,
        ip_addr: Ipv4Addr,
        ip6: Ipv6Addr,
    ) -> Pod {
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

        let link_gw = format!("{POD_LINK_GATEWAY6}/64");
        ip(
            &node.ns,
            &["addr", "add", &link_gw, "dev", &host_side, "nodad"],
        );
        let gw6 = node.pod_gateway6.to_string();
        let host_route6 = format!("{ip6}/128");
        ip(
            &node.ns,
            &["route", "add", &host_route6, "dev", &host_side, "src", &gw6],
        );
        ip(&ns, &["addr", "add", &host_route6, "dev", "eth0", "nodad"]);
        let link_gw = POD_LINK_GATEWAY6.to_string();
        ip(
            &ns,
            &[
                "-6", "route", "add", "default", "via", &link_gw, "dev", "eth0",
            ],
        );

        let spec = Spec::Echo {
            pod: name.to_owned(),
            ports: ECHO_PORTS.to_vec(),
            ip6,
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
            ip6,
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
