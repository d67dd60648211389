//! The TCP relay: accepts on a listener, admits the connection against the limits, dials an
//! endpoint (the next one on refusal or timeout, as the dial policy says), and relays until
//! both sides are done or the endpoint is removed.
//!
//! The client's connection is accepted before any endpoint is dialled, so a client can only
//! learn that every endpoint failed (or that none exists, or a limit is reached) from the
//! accepted connection being reset at once; it never sees bytes from a half-made relay.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::time::Instant;

use super::counters::Event;
use super::pump;
use super::service::{Presence, Service};

/// The backlog of each listener: accepted connections wait here while the relay's tasks are
/// busy, rather than being refused by the kernel during a burst.
const BACKLOG: u32 = 1024;

/// The pause after a failed accept (out of file descriptors, say), so the loop does not spin
/// while the condition lasts.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);

/// Binds and listens on `addr`; must be called within a tokio runtime. An IPv6 listener
/// accepts IPv6 only: the IPv4 rules, which guard the IPv4 listeners' ports alone, must see
/// every IPv4 connection to a listener.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => {
            let socket = TcpSocket::new_v6()?;
            nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::Ipv6V6Only, &true)?;
            socket
        }
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Accepts forever; each connection gets a task of its own.
pub async fn serve(listener: TcpListener, service: Arc<Service>) {
    loop {
        match listener.accept().await {
            Ok((client, peer)) => {
                tokio::spawn(connection(client, peer, Arc::clone(&service)));
            }
            Err(error) if stopped_listening(&error) => {
                tracing::debug!(service = %service.name, "listener closed");
                return;
            }
            Err(error) => {
                tracing::warn!(service = %service.name, %error, "accept failed");
                tokio::time::sleep(ACCEPT_PAUSE).await;
            }
        }
    }
}

/// Whether an accept failed because the socket no longer listens: `EINVAL`, which `accept(2)`
/// returns once the listener is shut down (a closed [`Listener`](super::Listener) does that
/// before its loop is aborted, and the loop may see it first). The loop ends then; any other
/// error is a condition that may pass (out of file descriptors, say).
fn stopped_listening(error: &io::Error) -> bool {
    error.raw_os_error() == Some(nix::libc::EINVAL)
}

async fn connection(mut client: TcpStream, peer: SocketAddr, service: Arc<Service>) {
    let Some(_admission) = service.admit() else {
        tracing::debug!(service = %service.name, client = %peer, "over the connection limit");
        return refuse(client);
    };
    let Some((mut upstream, endpoint, mut present)) = dial(&service, peer).await else {
        return refuse(client);
    };
    // Bytes are passed on as they come: Nagle's delay would add latency at each hop.
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    tokio::select! {
        outcome = pump::relay(&mut client, &mut upstream, &service.counters) => {
            if let Err(error) = outcome {
                tracing::debug!(service = %service.name, client = %peer, %endpoint, %error, "relay ended");
            }
        }
        () = present.removed() => {
            tracing::debug!(service = %service.name, client = %peer, %endpoint, "endpoint removed, closing");
            let _ = client.set_zero_linger();
            let _ = upstream.set_zero_linger();
        }
    }
}

/// Dials endpoints for `peer` until one answers or the policy's attempts are spent; `None`
/// when none answered or there was none to try (counted, and logged at debug).
async fn dial(service: &Service, peer: SocketAddr) -> Option<(TcpStream, SocketAddr, Presence)> {
    let policy = &service.dial;
    let mut tried: Vec<SocketAddr> = Vec::new();
    let mut revisits = 0;
    for attempt in 0..policy.attempts() {
        let Some(chosen) = service.pick(peer.ip(), &tried, Instant::now()) else {
            service.counters.add(Event::NoEndpoint, 1);
            tracing::debug!(service = %service.name, client = %peer, "no endpoint");
            return None;
        };
        let endpoint = chosen.pick.endpoint;
        if attempt > 0 {
            service.counters.add(Event::Retry, 1);
            let pause = policy.pause(chosen.pick.revisit, revisits);
            if chosen.pick.revisit {
                revisits += 1;
            }
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
        match tokio::time::timeout(policy.timeout(attempt), TcpStream::connect(endpoint)).await {
            Ok(Ok(stream)) => return Some((stream, endpoint, chosen.present)),
            Ok(Err(error)) => {
                tracing::debug!(service = %service.name, %endpoint, %error, attempt, "dial failed");
            }
            Err(_) => {
                tracing::debug!(service = %service.name, %endpoint, attempt, "dial timed out");
            }
        }
        service.failed(peer.ip(), endpoint);
        if !tried.contains(&endpoint) {
            tried.push(endpoint);
        }
    }
    service.counters.add(Event::NoEndpoint, 1);
    tracing::debug!(service = %service.name, client = %peer, "every dial failed");
    None
}

/// Resets an accepted connection the relay cannot serve: the client sees the refusal at once
/// rather than a connection that closes cleanly as though the server had answered.
fn refuse(client: TcpStream) {
    let _ = client.set_zero_linger();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_shut_down_ends_the_accept_loop_other_errors_do_not() {
        assert!(stopped_listening(&io::Error::from_raw_os_error(
            nix::libc::EINVAL
        )));
        for errno in [nix::libc::EMFILE, nix::libc::ENFILE, nix::libc::ENOBUFS] {
            assert!(!stopped_listening(&io::Error::from_raw_os_error(errno)));
        }
    }

    #[tokio::test]
    async fn accept_on_a_listener_shut_down_fails_with_what_ends_the_loop() {
        use std::os::fd::AsRawFd as _;
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        nix::sys::socket::shutdown(listener.as_raw_fd(), nix::sys::socket::Shutdown::Read).unwrap();
        let error = listener.accept().await.unwrap_err();
        assert!(stopped_listening(&error), "{error}");
    }
}
