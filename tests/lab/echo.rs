//! The pod server: answers every TCP connection and every UDP datagram on its ports with one line
//! naming the pod and the addresses it saw, so a test can tell which endpoint served and whether
//! the client's address survived (no SNAT) or was replaced by a node's (SNAT).
//!
//! Runs inside a pod's network namespace as a lab process (see `helper.rs`); plain std threads,
//! one per socket and one per TCP connection. It never returns: the lab kills it by pid.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use super::helper::Proto;

/// The line a pod answers with (newline-terminated); [`super::helper::Reply::parse`] reads it.
pub fn reply_line(pod: &str, proto: Proto, src: SocketAddr, dst: SocketAddr) -> String {
    let proto = match proto {
        Proto::Tcp => "tcp",
        Proto::Udp => "udp",
    };
    format!("pod={pod} proto={proto} src={src} dst={dst}\n")
}

/// The TCP port where a pod keeps a connection open: one reply line at once and one more for
/// every line the client sends, until the client closes. For long-lived connections (graceful
/// termination); every pod serves it besides its echo ports.
pub const SESSION_PORT: u16 = 8090;

/// Serves TCP and UDP on every port in `ports`, and sessions on [`SESSION_PORT`], on all IPv4
/// addresses and on the pod's IPv6 address `ip6`; never returns.
///
/// IPv6 binds the pod's address rather than `::`: a wildcard IPv6 socket would also take IPv4
/// (dual-stack sockets are the default) and report IPv4 peers as `::ffff:a.b.c.d`.
pub fn serve(pod: &str, ports: &[u16], ip6: Ipv6Addr) -> ! {
    let any4 = IpAddr::from([0, 0, 0, 0]);
    for &port in ports {
        for local in [
            SocketAddr::new(any4, port),
            SocketAddr::new(ip6.into(), port),
        ] {
            let tcp = TcpListener::bind(local)
                .unwrap_or_else(|e| panic!("echo {pod}: bind tcp {local}: {e}"));
            let udp = UdpSocket::bind(local)
                .unwrap_or_else(|e| panic!("echo {pod}: bind udp {local}: {e}"));
            let name = pod.to_owned();
            std::thread::spawn(move || serve_tcp(&name, tcp));
            let name = pod.to_owned();
            std::thread::spawn(move || serve_udp(&name, udp));
        }
    }
    for local in [
        SocketAddr::new(any4, SESSION_PORT),
        SocketAddr::new(ip6.into(), SESSION_PORT),
    ] {
        let tcp = TcpListener::bind(local)
            .unwrap_or_else(|e| panic!("echo {pod}: bind session {local}: {e}"));
        let name = pod.to_owned();
        std::thread::spawn(move || {
            for stream in tcp.incoming().flatten() {
                let pod = name.clone();
                std::thread::spawn(move || hold_tcp(&pod, stream));
            }
        });
    }
    println!("echo {pod} ready on {ports:?} and sessions on {SESSION_PORT}");
    loop {
        std::thread::park();
    }
}

fn serve_tcp(pod: &str, listener: TcpListener) {
    for stream in listener.incoming().flatten() {
        let pod = pod.to_owned();
        std::thread::spawn(move || answer_tcp(&pod, stream));
    }
}

/// Writes the line, half-closes, then drains what the client sent so that closing does not turn
/// into a reset that could race the client's read.
fn answer_tcp(pod: &str, mut stream: TcpStream) {
    let (Ok(src), Ok(dst)) = (stream.peer_addr(), stream.local_addr()) else {
        return;
    };
    let _ = stream.write_all(reply_line(pod, Proto::Tcp, src, dst).as_bytes());
    let _ = stream.shutdown(Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut sink = [0u8; 512];
    while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
}

/// A session: the line at once, then one per line received, until the client closes.
fn hold_tcp(pod: &str, mut stream: TcpStream) {
    let (Ok(src), Ok(dst)) = (stream.peer_addr(), stream.local_addr()) else {
        return;
    };
    let line = reply_line(pod, Proto::Tcp, src, dst);
    if stream.write_all(line.as_bytes()).is_err() {
        return;
    }
    let mut buf = [0u8; 512];
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            return;
        }
        let lines = buf[..n].iter().filter(|b| **b == b'\n').count();
        for _ in 0..lines {
            if stream.write_all(line.as_bytes()).is_err() {
                return;
            }
        }
    }
}

fn serve_udp(pod: &str, socket: UdpSocket) {
    let dst = socket.local_addr().expect("bound udp socket");
    let mut buf = [0u8; 1500];
    loop {
        let Ok((_, src)) = socket.recv_from(&mut buf) else {
            continue;
        };
        // The local address of the IPv4 wildcard socket is 0.0.0.0; the port is what tells
        // endpoints' target ports apart, and the address is the pod's only IPv4 one.
        let _ = socket.send_to(reply_line(pod, Proto::Udp, src, dst).as_bytes(), src);
    }
}
