//! Test support for the relay core's tests (`userspace_relay.rs`, `userspace_relay_udp.rs`):
//! the relay's settings and listeners as the tests make them, and clients that read a pod's
//! greeting.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use crate::relay_pods::addr;
use kube_proxy_rs::dataplane::counters::RelayedCounts;
use kube_proxy_rs::dataplane::userspace::relay::{
    Affinity, DialPolicy, Listener, Relay, Settings, Target,
};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::{Instant, sleep, timeout};

/// How long any single network step may take before the test fails rather than hangs.
pub const STEP: Duration = Duration::from_secs(5);

pub fn settings() -> Settings {
    Settings {
        dial: DialPolicy::new(
            vec![Duration::from_millis(300); 3],
            Duration::from_millis(10),
        ),
        ..Settings::default()
    }
}

pub fn target(relay: &Relay, endpoints: &[SocketAddr], affinity: Option<Affinity>) -> Target {
    Target {
        name: "test/web:http IPv4".into(),
        endpoints: endpoints.to_vec(),
        affinity,
        limit: relay.service_limit(),
    }
}

pub fn tcp_listener(
    relay: &Relay,
    endpoints: &[SocketAddr],
    affinity: Option<Affinity>,
) -> Listener {
    relay
        .listen_tcp(addr("127.0.0.1:0"), target(relay, endpoints, affinity))
        .expect("relay listens")
}

pub fn udp_listener(relay: &Relay, endpoints: &[SocketAddr]) -> Listener {
    relay
        .listen_udp(addr("127.0.0.1:0"), target(relay, endpoints, None))
        .expect("relay listens")
}

/// A client connection through the relay, with the pod's greeting read.
pub struct Client {
    pub stream: BufReader<TcpStream>,
    pub pod: String,
}

pub async fn connect(listener: &Listener) -> Client {
    greeted(TcpStream::connect(listener.local_addr())).await
}

/// [`connect`] from the client address `source` (a 127.0.0.0/8 address).
pub async fn connect_from(listener: &Listener, source: &str) -> Client {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(addr(&format!("{source}:0"))).unwrap();
    greeted(socket.connect(listener.local_addr())).await
}

/// The connection `connecting` makes, with the pod's greeting read.
pub async fn greeted(connecting: impl Future<Output = io::Result<TcpStream>>) -> Client {
    let stream = timeout(STEP, connecting)
        .await
        .expect("connect in time")
        .expect("the relay accepts");
    let mut stream = BufReader::new(stream);
    let pod = line(&mut stream).await.expect("a greeting from a pod");
    Client { stream, pod }
}

pub async fn line(stream: &mut BufReader<TcpStream>) -> io::Result<String> {
    let mut line = String::new();
    let n = timeout(STEP, stream.read_line(&mut line))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no line in time"))??;
    if n == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(line.trim_end().to_owned())
}

/// Asserts the relay closed (reset or EOF) the connection without passing any byte.
pub async fn assert_closed(stream: &mut BufReader<TcpStream>) {
    let mut buf = [0u8; 64];
    match timeout(STEP, stream.read(&mut buf)).await {
        Ok(Ok(0)) => {}
        Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionReset => {}
        Ok(other) => panic!("expected the relay to close the connection, got {other:?}"),
        Err(_) => panic!("the relay left the connection open"),
    }
}

/// Waits until the counters satisfy `done`, for up to [`STEP`].
pub async fn counters_until(listener: &Listener, done: impl Fn(&RelayedCounts) -> bool) {
    let deadline = Instant::now() + STEP;
    while !done(&listener.counters()) {
        assert!(
            Instant::now() < deadline,
            "counters never got there: {:?}",
            listener.counters()
        );
        sleep(Duration::from_millis(10)).await;
    }
}

/// Sends `text` to `to` and returns the reply and where it came from.
pub async fn exchange(socket: &UdpSocket, to: SocketAddr, text: &str) -> (String, SocketAddr) {
    socket.send_to(text.as_bytes(), to).await.unwrap();
    let mut buf = [0u8; 1024];
    let (n, from) = timeout(STEP, socket.recv_from(&mut buf))
        .await
        .expect("a reply in time")
        .unwrap();
    (String::from_utf8_lossy(&buf[..n]).into_owned(), from)
}
