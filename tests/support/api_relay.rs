//! A fault injector between a proxy and its API server: a TCP relay on `127.0.0.1` that passes
//! bytes through, delays each chunk the server sends, or holds them, as the test says. It is
//! for the faults a real API server cannot be made to show on demand (answers that take seconds
//! per chunk; a response stopped halfway until the test has done something; every connection
//! broken at once, mid-body, whatever the kernel still buffers). TLS passes
//! through untouched: the proxy still talks to the real API server.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the relay does with the bytes the API server sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Passes them on at once.
    Pass,
    /// Holds each chunk this long before passing it on.
    Delay(Duration),
    /// Holds them until the flow changes.
    Held,
}

/// The relay; stops (and closes every connection) on drop.
pub struct ApiRelay {
    pub port: u16,
    flow: watch::Sender<Flow>,
    /// Counts [`ApiRelay::cut`]s; each connection ends when it changes.
    cuts: watch::Sender<u64>,
    /// Bytes passed from the API server to the client.
    down: Arc<AtomicU64>,
    /// Connections accepted.
    accepted: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl ApiRelay {
    /// A relay to `127.0.0.1:<upstream>`, passing bytes through.
    pub async fn start(upstream: u16) -> ApiRelay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("relay bind");
        let port = listener.local_addr().expect("relay address").port();
        let (flow, seen) = watch::channel(Flow::Pass);
        let (cuts, cut) = watch::channel(0);
        let down = Arc::new(AtomicU64::new(0));
        let accepted = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(serve(
            listener,
            upstream,
            seen,
            cut,
            down.clone(),
            accepted.clone(),
        ));
        ApiRelay {
            port,
            flow,
            cuts,
            down,
            accepted,
            task,
        }
    }

    pub fn set(&self, flow: Flow) {
        self.flow.send_replace(flow);
    }

    /// Breaks every open connection now: what the server sent and the client has not been
    /// given is dropped, so a response in flight ends short.
    pub fn cut(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }

    /// Bytes passed from the API server to its clients so far.
    pub fn bytes_down(&self) -> u64 {
        self.down.load(Ordering::Relaxed)
    }

    pub fn connections(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for ApiRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    listener: TcpListener,
    upstream: u16,
    flow: watch::Receiver<Flow>,
    cut: watch::Receiver<u64>,
    down: Arc<AtomicU64>,
    accepted: Arc<AtomicU64>,
) {
    // Each connection's tasks end with the relay: aborting this task drops the set.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        accepted.fetch_add(1, Ordering::Relaxed);
        let flow = flow.clone();
        let mut cut = cut.clone();
        cut.mark_unchanged();
        let down = down.clone();
        connections.spawn(async move {
            // An API server that is down: the client's connection is closed at once, as the
            // server's port would refuse it.
            let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                return;
            };
            let (client_read, mut client_write) = client.into_split();
            let (mut server_read, server_write) = server.into_split();
            let up = tokio::spawn(copy_up(client_read, server_write));
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = tokio::select! {
                    read = server_read.read(&mut buf) => match read {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    },
                    _ = cut.changed() => break,
                };
                if !pass(&flow, &mut cut).await {
                    break;
                }
                if client_write.write_all(&buf[..n]).await.is_err() {
                    break;
                }
                down.fetch_add(n as u64, Ordering::Relaxed);
            }
            up.abort();
        });
    }
}

async fn copy_up(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
) {
    let _ = tokio::io::copy(&mut from, &mut to).await;
    let _ = to.shutdown().await;
}

/// Waits as the flow says before a chunk is passed on; false when the connection is cut or
/// the relay is gone.
async fn pass(flow: &watch::Receiver<Flow>, cut: &mut watch::Receiver<u64>) -> bool {
    let mut flow = flow.clone();
    loop {
        let now = *flow.borrow_and_update();
        let waited = match now {
            Flow::Pass => return true,
            Flow::Delay(d) => {
                tokio::select! {
                    () = tokio::time::sleep(d) => return true,
                    _ = cut.changed() => return false,
                }
            }
            Flow::Held => tokio::select! {
                changed = flow.changed() => changed.is_ok(),
                _ = cut.changed() => false,
            },
        };
        if !waited {
            return false;
        }
    }
}
