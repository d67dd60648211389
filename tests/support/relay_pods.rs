//! Support for the userspace relay's tests: a fresh network namespace with a tokio runtime
//! inside it, and small TCP and UDP servers standing in for pods. Used by the
//! userspace and eBPF modes' tests.
//!
//! The runtime runs on a thread that entered the namespace, so every socket the relay and the
//! servers open is the namespace's; the namespace, and all it holds, is removed when the test
//! ends, also when it fails.

pub use crate::host;

use std::future::Future;
use std::net::SocketAddr;

use host::NetNs;
use kube_proxy_rs::netlink::netns;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, UdpSocket};

/// Runs `test` on a current-thread runtime inside a fresh network namespace; `setup` runs
/// first, from outside, with the namespace (for its nftables rules).
pub fn in_netns<F, Fut>(setup: impl FnOnce(&NetNs), test: F)
where
    F: FnOnce() -> Fut + Send,
    Fut: Future<Output = ()>,
{
    let ns = NetNs::new("kprs-relay");
    setup(&ns);
    netns::run_in(Some(&ns.name), || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(test());
        Ok(())
    })
    .expect("the test inside the namespace failed (its panic is printed above)");
}

pub fn addr(s: &str) -> SocketAddr {
    s.parse().expect("socket address")
}

/// A TCP "pod": greets each connection with `name` and a newline, echoes what it receives,
/// and on the client's EOF writes `bye` and closes.
pub async fn pod(at: &str, name: &'static str) -> SocketAddr {
    let listener = TcpListener::bind(addr(at)).await.expect("bind pod");
    let local = listener.local_addr().expect("pod address");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                stream.write_all(format!("{name}\n").as_bytes()).await?;
                let mut buf = [0u8; 1024];
                loop {
                    let n = stream.read(&mut buf).await?;
                    if n == 0 {
                        stream.write_all(b"bye\n").await?;
                        return stream.shutdown().await;
                    }
                    stream.write_all(&buf[..n]).await?;
                }
            });
        }
    });
    local
}

/// A UDP "pod": answers each datagram with `name:` and the datagram.
pub async fn udp_pod(at: &str, name: &'static str) -> SocketAddr {
    let socket = UdpSocket::bind(addr(at)).await.expect("bind udp pod");
    let local = socket.local_addr().expect("pod address");
    tokio::spawn(async move {
        let mut buf = [0u8; 1024];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            let reply = [format!("{name}:").as_bytes(), &buf[..n]].concat();
            let _ = socket.send_to(&reply, from).await;
        }
    });
    local
}
