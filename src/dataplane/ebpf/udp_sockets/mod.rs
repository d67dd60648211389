//! Connected UDP sockets whose backend was removed, destroyed so their owners reconnect.
//!
//! The socket programs translate a UDP socket's `connect()` once: the kernel then sends every
//! datagram of that socket straight to the backend, with no conntrack entry for the proxy to
//! delete when the endpoint goes (what the rule-based modes do, [`crate::conntrack`]). A DNS
//! client that keeps one connected socket would talk to a deleted pod's address forever.
//! So after each sync that changed a UDP frontend's endpoints, and every sync period, this
//! destroys the connected UDP sockets that the programs translated to a backend that no
//! longer serves its frontend: the owner's next `recv`/`send` fails with `ECONNABORTED`, and
//! a new socket (or a new `connect()`) is balanced again. Cilium does the same
//! (`termination.go`); the kernel's way is sock_diag's `SOCK_DESTROY`
//! (`CONFIG_INET_DIAG_DESTROY`).
//!
//! ```text
//! every network namespace ─▶ sock_diag dump: connected UDP sockets ─┐
//!   (/proc/*/ns/net, /run/netns/*)                                   ├─▶ stale ─▶ SOCK_DESTROY
//! kp_rev {cookie, backend} ─▶ the frontend it asked for ─▶ judge ────┘   (pure)
//! ```
//!
//! Which sockets are ours is told by the programs' own record: `kp_rev` holds the Service
//! address each translated socket asked for, keyed by the socket's cookie and backend. A
//! socket that a pod connected to a pod address directly has no entry and is never touched.
//! The judgement is the conntrack reconciler's ([`crate::conntrack::Frontends`]): stale when
//! the backend is not a serving endpoint of a frontend that has serving endpoints.
//!
//! - [`diag`]: the sock_diag messages (pure bytes);
//! - [`namespaces`]: the network namespaces of the node's processes and pods;
//! - [`reconcile`]: the I/O and the task.

pub mod diag;
pub mod namespaces;
pub mod reconcile;

use std::net::SocketAddr;

use crate::cluster::Protocol;
use crate::conntrack::Frontends;
use diag::UdpSocket;

/// The sockets among `sockets` to destroy: translated by the programs (`frontend_of` finds
/// the frontend a socket cookie and backend were recorded with) to a backend that no longer
/// serves that frontend.
pub fn stale(
    sockets: &[UdpSocket],
    frontends: &Frontends,
    frontend_of: impl Fn(u64, SocketAddr) -> Option<SocketAddr>,
) -> Vec<UdpSocket> {
    sockets
        .iter()
        .filter(|s| {
            frontend_of(s.cookie, s.peer).is_some_and(|frontend| {
                frontends
                    .judge_translated(Protocol::Udp, frontend, s.peer)
                    .stale()
            })
        })
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{Features, IpFamily, Tracker};
    use crate::testing::*;

    fn frontends() -> Frontends {
        let mut tracker = Tracker::new("node-a", Features::default());
        let events = [
            applied_service(service("ns", "dns", "10.96.0.10", &[("u", 53, "UDP")])),
            applied_slice(slice(
                "ns",
                "dns",
                "dns-1",
                &[("u", 5353, "UDP")],
                &[ep("10.244.1.2", "node-a")],
            )),
        ];
        for event in &events {
            tracker.apply(event);
        }
        Frontends::from_snapshot(&tracker.snapshot().0)
    }

    fn socket(peer: &str, cookie: u64) -> UdpSocket {
        UdpSocket {
            family: IpFamily::V4,
            local: "10.244.1.9:40000".parse().unwrap(),
            peer: peer.parse().unwrap(),
            interface: 0,
            cookie,
        }
    }

    #[test]
    fn only_translated_sockets_to_a_removed_backend_are_stale() {
        let gone = socket("10.244.1.1:5353", 1);
        let live = socket("10.244.1.2:5353", 2);
        let direct = socket("10.244.1.1:5353", 3);
        let elsewhere = socket("10.244.1.1:5353", 4);
        let rev = |cookie: u64, _backend: SocketAddr| match cookie {
            1 | 2 => Some("10.96.0.10:53".parse().unwrap()),
            4 => Some("10.96.0.99:53".parse().unwrap()),
            _ => None,
        };
        let sockets = [gone, live, direct, elsewhere];
        assert_eq!(stale(&sockets, &frontends(), rev), vec![gone]);
    }
}
