//! The UDP relay: per-client flows. A datagram from a client without a flow admits one,
//! picks an endpoint and opens a socket connected to it; the flow's task sends the endpoint's
//! replies back to the client from the listening socket, with the address the client sent to
//! as their source ([`reply_source`]), so conntrack undoes the redirect on the way back. A flow ends after its idle timeout with no datagram either way, when its
//! endpoint is removed, or when the endpoint answers with an ICMP error; the client's next
//! datagram then starts a new flow, to the endpoints current at that moment.
//!
//! Buffers exist only while datagrams are read: the listener and each flow wait for
//! readability without one.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{Interest, Ready};
use tokio::net::UdpSocket;
use tokio::time::Instant;

use super::counters::Event;
use super::reply_source;
use super::service::{Admission, Presence, Service};

/// Room for the largest UDP payload.
const DATAGRAM: usize = 65_536;

/// Binds `addr`; must be called within a tokio runtime. An IPv6 listener takes IPv6 only, as
/// a TCP one does (`tcp::bind`).
pub fn bind(addr: SocketAddr) -> io::Result<UdpSocket> {
    use nix::sys::socket::{self as so, sockopt};
    let family = match addr {
        SocketAddr::V4(_) => so::AddressFamily::Inet,
        SocketAddr::V6(_) => so::AddressFamily::Inet6,
    };
    let fd = so::socket(
        family,
        so::SockType::Datagram,
        so::SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    if addr.is_ipv6() {
        so::setsockopt(&fd, sockopt::Ipv6V6Only, &true)?;
    }
    so::bind(fd.as_raw_fd(), &so::SockaddrStorage::from(addr))?;
    let socket = std::net::UdpSocket::from(fd);
    reply_source::enable(&socket, addr)?;
    socket.set_nonblocking(true)?;
    UdpSocket::from_std(socket)
}

/// The flows of one listener, by client address.
type Flows = Arc<Mutex<HashMap<SocketAddr, Arc<Flow>>>>;

/// One client's flow: the socket connected to its endpoint, and when it last carried a
/// datagram either way.
#[derive(Debug)]
struct Flow {
    upstream: UdpSocket,
    endpoint: SocketAddr,
    /// The address the client sent its first datagram to: the replies' source.
    local: Option<IpAddr>,
    present: Presence,
    started: Instant,
    /// Milliseconds from `started` to the last datagram either way.
    last_active: AtomicU64,
}

impl Flow {
    fn touch(&self, now: Instant) {
        let ms = now.saturating_duration_since(self.started).as_millis();
        self.last_active
            .store(u64::try_from(ms).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    fn idle_deadline(&self, idle: Duration) -> Instant {
        self.started + Duration::from_millis(self.last_active.load(Ordering::Relaxed)) + idle
    }
}

/// Receives from clients forever, forwarding each datagram on its client's flow.
pub async fn serve(listener: UdpSocket, service: Arc<Service>, idle: Duration) {
    let listener = Arc::new(listener);
    let flows: Flows = Arc::default();
    // The replies go out with `try_send_to`: see `connect` on a new socket's readiness.
    if let Err(error) = listener.writable().await {
        tracing::warn!(service = %service.name, %error, "udp listener failed");
        return;
    }
    loop {
        if let Err(error) = listener.readable().await {
            tracing::warn!(service = %service.name, %error, "udp listener failed");
            return;
        }
        let mut buf = vec![0; DATAGRAM];
        loop {
            match reply_source::try_recv(&listener, &mut buf) {
                Ok((n, client, local)) => {
                    let flow = match existing(&flows, client) {
                        Some(flow) => flow,
                        None => {
                            match open(&listener, &service, &flows, client, local, idle).await {
                                Some(flow) => flow,
                                None => continue,
                            }
                        }
                    };
                    forward(&flow, &buf[..n], &service);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) => {
                    tracing::debug!(service = %service.name, %error, "udp receive failed");
                    break;
                }
            }
        }
    }
}

/// The client's flow, unless its endpoint has been removed: the flow's task may not have
/// noticed yet, but the datagram must already go to the endpoints current now.
fn existing(flows: &Flows, client: SocketAddr) -> Option<Arc<Flow>> {
    let mut flows = lock(flows);
    let flow = flows.get(&client)?;
    if flow.present.is_removed() {
        flows.remove(&client);
        return None;
    }
    Some(Arc::clone(flow))
}

/// Sends one client datagram to the flow's endpoint. A datagram the socket cannot take at
/// once is dropped, as a full network would drop it, so one slow flow never stalls the
/// listener's other clients.
fn forward(flow: &Flow, datagram: &[u8], service: &Service) {
    flow.touch(Instant::now());
    match flow.upstream.try_send(datagram) {
        Ok(n) => service.counters.add(Event::BytesToEndpoint, n as u64),
        Err(error) => {
            tracing::debug!(service = %service.name, endpoint = %flow.endpoint, %error, "udp send failed");
        }
    }
}

/// Starts a flow for `client`: admission, endpoint, connected socket, task. `None` (the
/// datagram is dropped, and counted) when over a limit, without endpoints, or when no socket
/// could be made.
async fn open(
    listener: &Arc<UdpSocket>,
    service: &Arc<Service>,
    flows: &Flows,
    client: SocketAddr,
    local: Option<IpAddr>,
    idle: Duration,
) -> Option<Arc<Flow>> {
    let admission = service.admit()?;
    let now = Instant::now();
    let Some(chosen) = service.pick(client.ip(), &[], now) else {
        service.counters.add(Event::NoEndpoint, 1);
        return None;
    };
    let endpoint = chosen.pick.endpoint;
    let upstream = match connect(endpoint).await {
        Ok(socket) => socket,
        Err(error) => {
            tracing::debug!(service = %service.name, %endpoint, %error, "udp flow socket failed");
            service.failed(client.ip(), endpoint);
            return None;
        }
    };
    let flow = Arc::new(Flow {
        upstream,
        endpoint,
        local,
        present: chosen.present.clone(),
        started: now,
        last_active: AtomicU64::new(0),
    });
    lock(flows).insert(client, Arc::clone(&flow));
    let task = FlowTask {
        flow: Arc::clone(&flow),
        client,
        listener: Arc::clone(listener),
        service: Arc::clone(service),
        flows: Arc::clone(flows),
        present: chosen.present,
        idle,
        _admission: admission,
    };
    tokio::spawn(task.run());
    Some(flow)
}

/// A socket of the endpoint's family on an ephemeral port, connected to the endpoint so the
/// kernel delivers only its replies (and its ICMP errors) there.
async fn connect(endpoint: SocketAddr) -> io::Result<UdpSocket> {
    let any: IpAddr = match endpoint {
        SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let socket = UdpSocket::bind(SocketAddr::new(any, 0)).await?;
    socket.connect(endpoint).await?;
    // tokio's `try_send` answers from the readiness its reactor has seen, and a new socket
    // has none until the reactor's first turn: wait for it once, so the flow's first
    // datagram is not dropped as though the socket were full.
    socket.writable().await?;
    Ok(socket)
}

/// What a flow's task owns; dropping it ends the flow (and releases its admission).
struct FlowTask {
    flow: Arc<Flow>,
    client: SocketAddr,
    listener: Arc<UdpSocket>,
    service: Arc<Service>,
    flows: Flows,
    present: Presence,
    idle: Duration,
    _admission: Admission,
}

impl FlowTask {
    async fn run(mut self) {
        loop {
            let deadline = self.flow.idle_deadline(self.idle);
            tokio::select! {
                ready = self.flow.upstream.ready(Interest::READABLE | Interest::ERROR) => {
                    if let Err(error) = ready.and_then(|ready| self.on_ready(ready)) {
                        tracing::debug!(service = %self.service.name, endpoint = %self.flow.endpoint, %error, "udp flow ended");
                        self.service.failed(self.client.ip(), self.flow.endpoint);
                        break;
                    }
                }
                () = tokio::time::sleep_until(deadline) => {
                    if self.flow.idle_deadline(self.idle) <= Instant::now() {
                        break;
                    }
                }
                () = self.present.removed() => break,
            }
        }
        let mut flows = lock(&self.flows);
        if flows
            .get(&self.client)
            .is_some_and(|f| Arc::ptr_eq(f, &self.flow))
        {
            flows.remove(&self.client);
        }
    }

    /// An ICMP error from the endpoint (port unreachable, say) is a socket error, which
    /// readiness reports apart from readable data and only `take_error` reads: it ends the
    /// flow. Otherwise the replies go back.
    fn on_ready(&self, ready: Ready) -> io::Result<()> {
        if ready.is_error() {
            let error = self.flow.upstream.take_error()?;
            return Err(error.unwrap_or_else(|| io::Error::other("socket error")));
        }
        self.replies()
    }

    /// Passes every reply waiting on the flow's socket back to the client; an error is the
    /// endpoint's ICMP answer (port unreachable, say) and ends the flow.
    fn replies(&self) -> io::Result<()> {
        let mut buf = Vec::with_capacity(DATAGRAM);
        loop {
            buf.clear();
            match self.flow.upstream.try_recv_buf(&mut buf) {
                Ok(n) => {
                    self.flow.touch(Instant::now());
                    let sent =
                        reply_source::try_send(&self.listener, &buf, self.client, self.flow.local);
                    match sent {
                        Ok(_) => self.service.counters.add(Event::BytesToClient, n as u64),
                        Err(error) => {
                            tracing::debug!(service = %self.service.name, client = %self.client, %error, "udp reply dropped");
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }
}

fn lock(flows: &Flows) -> MutexGuard<'_, HashMap<SocketAddr, Arc<Flow>>> {
    flows.lock().unwrap_or_else(|p| p.into_inner())
}
