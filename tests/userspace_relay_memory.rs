//! The relay's memory goal as a guard (root): 10,000 idle relayed connections must cost under
//! 100 MB, so one must cost under 10 KiB. In a fresh network namespace, 4,000 connections are
//! relayed to a local "pod" and left idle after one byte each way; the growth of this
//! process's resident memory, which also holds the clients' and the pod's side of every
//! connection, is divided among them. One test alone in its binary, so no other test's
//! allocations land in the measurement. 4,000 because each connection takes four file
//! descriptors here, under this host's limit of 20,000.

#![allow(
    clippy::disallowed_methods,
    reason = "reads /proc/self/status for the resident set size"
)]

use support::relay_pods;

use kube_proxy_rs::dataplane::userspace::relay::{Relay, Settings, Target};
use relay_pods::{addr, in_netns};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

const CONNECTIONS: usize = 4_000;

/// The memory goal per idle connection: 100 MB over 10,000.
const BUDGET: usize = 10 * 1024;

fn resident_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/self/status");
    kib * 1024
}

/// One relayed connection with a byte each way, so both directions have run and returned
/// their buffers; both ends are kept open.
async fn relayed(pod: &TcpListener, to: std::net::SocketAddr) -> (TcpStream, TcpStream) {
    let mut client = TcpStream::connect(to).await.expect("the relay accepts");
    let (mut server, _) = pod.accept().await.expect("the relay dials the pod");
    let mut byte = [0u8; 1];
    client.write_all(b"q").await.unwrap();
    server.read_exact(&mut byte).await.unwrap();
    server.write_all(b"a").await.unwrap();
    client.read_exact(&mut byte).await.unwrap();
    (client, server)
}

#[test]
fn an_idle_relayed_connection_costs_under_10_kib() {
    in_netns(
        |_| {},
        || async {
            let pod = TcpListener::bind(addr("127.0.0.2:8080")).await.unwrap();
            let relay = Relay::new(Settings::default());
            let target = Target {
                name: "test/idle:tcp IPv4".into(),
                endpoints: vec![pod.local_addr().unwrap()],
                affinity: None,
                limit: relay.service_limit(),
            };
            let listener = relay.listen_tcp(addr("127.0.0.1:0"), target).unwrap();
            let to = listener.local_addr();
            let mut held = Vec::with_capacity(CONNECTIONS + 10);
            // Warm up: the runtime's and the allocator's first structures are not per connection.
            for _ in 0..10 {
                held.push(relayed(&pod, to).await);
            }
            let before = resident_bytes();
            for _ in 0..CONNECTIONS {
                held.push(relayed(&pod, to).await);
            }
            let each = resident_bytes().saturating_sub(before) / CONNECTIONS;
            eprintln!("{each} bytes per idle relayed connection, both ends included");
            assert_eq!(listener.counters().active, (CONNECTIONS + 10) as u64);
            assert!(each < BUDGET, "{each} bytes per idle connection");
        },
    );
}
