//! A node with a pod behind a veth, each a network namespace of its own, as the process-level
//! kernel tests build one: the pod (10.244.1.10 on its `eth0`, the `web` endpoint of
//! `web_cluster.rs`) serves TCP 8080 with a python server, and the node (10.244.1.1 on
//! `veth-pod`) routes the Service range, 10.96.0.0/12, to it, as a node's default route would.
//! With the python client a test connects from the node. Removed on drop, also when a test
//! fails.
//!
//! Needs the crate root to name `support/host.rs` as `host` (a module, or an import of one).

use std::process::Command;

use crate::host::{self, ChildGuard, NetNs};

/// Answers every connection to 8080 with one line: argv[1], `{peer}` in it replaced by the
/// client's address.
const SERVER: &str = r#"
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080))
s.listen(16)
while True:
    c, a = s.accept()
    c.sendall((sys.argv[1].replace("{peer}", a[0]) + "\n").encode())
    c.close()
"#;

/// Connects to argv[1]:argv[2] (connect timeout argv[3] seconds) and prints the answer,
/// `refused`, or what else went wrong; with argv[4] `retry`, tries again while the connection
/// is refused (the server starting), and prints `no answer` when it stays refused.
pub const CLIENT: &str = r#"
import socket, sys, time
for _ in range(50):
    try:
        c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))
        print(c.recv(100).decode().strip())
        break
    except ConnectionRefusedError:
        if sys.argv[4] != "retry":
            print("refused")
            break
        time.sleep(0.1)
    except Exception as e:
        print("failed: %s" % e)
        break
else:
    print("no answer")
"#;

/// The node and its pod, the pod's server running. Dropped in order: the server, the pod, the
/// node.
pub struct VethPod {
    pub server: ChildGuard,
    pub pod: NetNs,
    pub node: NetNs,
}

impl VethPod {
    /// The namespaces (named from `node` and `pod`), linked and addressed, and the pod's
    /// server answering each connection with `answer` (`{peer}` in it: the client's address).
    pub fn new(node: &str, pod: &str, answer: &str) -> VethPod {
        let node = NetNs::new(node);
        let pod = NetNs::new(pod);
        host::stdout_of(
            Command::new("ip")
                .args([
                    "link", "add", "veth-pod", "netns", &node.name, "type", "veth",
                ])
                .args(["peer", "name", "eth0", "netns", &pod.name]),
        );
        ip(&node, "addr add 10.244.1.1/24 dev veth-pod");
        ip(&node, "link set veth-pod up");
        ip(&node, "route add 10.96.0.0/12 dev veth-pod");
        ip(&pod, "addr add 10.244.1.10/24 dev eth0");
        ip(&pod, "link set eth0 up");
        ip(&pod, "route add default via 10.244.1.1");
        let server = ChildGuard::spawn(
            &format!("{}-echo", pod.name),
            pod.command("python3").args(["-c", SERVER, answer]),
        );
        VethPod { server, pod, node }
    }
}

fn ip(ns: &NetNs, args: &str) {
    let words: Vec<&str> = args.split(' ').collect();
    ns.output("ip", &words);
}
