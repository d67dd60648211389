//! The UDP socket reconciler's I/O and task: a pass walks every network namespace, dumps its
//! connected UDP sockets over sock_diag, judges them ([`super::stale`]) against `kp_rev` and
//! the model, and destroys the stale ones; the task runs a pass after every sync that changed
//! a UDP or SCTP frontend and every sync period, like the conntrack reconciler.
//!
//! Blocking netlink work runs on a blocking thread. A namespace that cannot be entered or
//! walked (its process exited, no permission) is counted and skipped, and a family a
//! namespace refuses to dump (IPv6 disabled) is skipped; only failing in the proxy's own
//! namespace, or reading `kp_rev`, fails a pass.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use netlink_packet_core::NLMSG_ERROR;
use tokio::sync::watch;

use super::diag::{self, UdpSocket};
use super::namespaces::network_namespaces;
use crate::cluster::IpFamily;
use crate::conntrack::Frontends;
use crate::conntrack::reconcile::next_pass;
use crate::dataplane::ebpf::backend;
use crate::dataplane::ebpf::layout::{RevKey, addr_words, ip_of};
use crate::metrics::Metrics;
use crate::netlink::ack::Ack;
use crate::netlink::dump::Dump;
use crate::netlink::message::{self, FramingError};
use crate::netlink::socket::{self, Options, Protocol};

/// sock_diag's socket, as errors name it.
const PROTOCOL: Protocol = Protocol {
    number: netlink_sys::protocols::NETLINK_SOCK_DIAG,
    socket: "a sock_diag netlink socket",
    name: "sock_diag",
};
/// The proxy's own namespace, as [`network_namespaces`] names it: used without `setns`.
const OWN: &str = "/proc/self/ns/net";
/// `ENOENT`: the socket closed (or was destroyed) before the request reached it.
const ENOENT: i32 = 2;

/// A pass could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Socket(#[from] socket::Error),
    #[error("sock_diag reply is malformed")]
    Framing(#[from] FramingError),
    #[error("the kernel refused the {family} UDP socket dump: errno {errno}")]
    Dump { family: IpFamily, errno: i32 },
    #[error("reading kp_rev")]
    Map(#[from] backend::Error),
}

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pass {
    /// Network namespaces walked, and those that could not be entered.
    pub namespaces: usize,
    pub unreachable: usize,
    /// Connected UDP sockets seen, and of those judged stale.
    pub sockets: usize,
    pub stale: usize,
    /// Destroyed, per family of the socket (IPv4, IPv6).
    pub destroyed: [u64; 2],
    /// Closed before the destroy reached them.
    pub gone: u64,
    /// Refused by the kernel, with the errno.
    pub failed: Vec<(UdpSocket, i32)>,
}

/// A sock_diag socket in one network namespace.
struct Diag {
    netlink: socket::Socket,
}

impl Diag {
    fn open(netns: Option<&str>) -> Result<Diag, socket::Error> {
        let netlink = socket::Socket::open(PROTOCOL, netns, Options::default())?;
        Ok(Diag { netlink })
    }

    /// Every connected UDP socket of `family` in the namespace.
    fn dump(&mut self, family: IpFamily) -> Result<Vec<UdpSocket>, Error> {
        let seq = self.netlink.take_seq();
        self.netlink
            .send(&diag::dump_request(family, seq), "dump request")?;
        let mut answer = Dump::new(seq);
        let mut sockets = Vec::new();
        while !answer.done() {
            let datagram = self.netlink.recv("dump")?;
            message::each(datagram, |m| {
                if answer.receive(&m)
                    && m.kind == diag::BY_FAMILY
                    && let Some(s) = diag::decode(m.body)
                {
                    sockets.push(s);
                }
            })?;
        }
        match answer.errno() {
            None => Ok(sockets),
            Some(errno) => Err(Error::Dump { family, errno }),
        }
    }

    /// Destroys `s`; the errno when the kernel refused (`ENOENT`: it is gone already).
    fn destroy(&mut self, s: &UdpSocket) -> Result<Option<i32>, Error> {
        let seq = self.netlink.take_seq();
        self.netlink
            .send(&diag::destroy_request(s, seq), "destroy request")?;
        loop {
            let datagram = self.netlink.recv("destroy acknowledgement")?;
            let mut answer = None;
            message::each(datagram, |m| {
                if m.kind == NLMSG_ERROR
                    && let Some(ack) = Ack::of(&m).filter(|a| a.seq == seq)
                {
                    answer = Some(ack.errno);
                }
            })?;
            if let Some(errno) = answer {
                return Ok((errno != 0).then_some(errno));
            }
        }
    }
}

/// One pass over every network namespace of the node. Blocking.
pub fn pass(frontends: &Frontends, pin_root: &Path) -> Result<Pass, Error> {
    let reverse = backend::open_reverse(pin_root)?;
    let frontend_of = |cookie: u64, backend: SocketAddr| {
        let key = RevKey {
            cookie,
            addr: addr_words(backend.ip()),
            port: backend.port().to_be(),
            ..RevKey::default()
        };
        let found = reverse.get(&key, 0).ok()?;
        Some(SocketAddr::new(ip_of(found.addr), u16::from_be(found.port)))
    };
    let mut done = Pass::default();
    for path in network_namespaces() {
        done.namespaces += 1;
        let own = path == OWN;
        let walked = Diag::open((!own).then_some(path.as_str()))
            .map_err(Error::from)
            .and_then(|mut diag| {
                one_namespace(&mut diag, &path, frontends, &frontend_of, &mut done)
            });
        match walked {
            Ok(()) => {}
            Err(error) if own => return Err(error),
            Err(error) => {
                // A process that exited, a namespace without IPv6: the others still count.
                tracing::trace!(netns = %path, error = %error, "not walked; skipped");
                done.unreachable += 1;
            }
        }
    }
    Ok(done)
}

/// Dumps, judges and destroys in the namespace `diag` was opened in. A family the namespace
/// refuses to dump (IPv6 disabled) is skipped.
fn one_namespace(
    diag: &mut Diag,
    path: &str,
    frontends: &Frontends,
    frontend_of: &dyn Fn(u64, SocketAddr) -> Option<SocketAddr>,
    done: &mut Pass,
) -> Result<(), Error> {
    for family in IpFamily::ALL {
        let sockets = match diag.dump(family) {
            Ok(sockets) => sockets,
            Err(Error::Dump { errno, .. }) => {
                tracing::trace!(netns = %path, %family, errno, "no socket dump of this family");
                continue;
            }
            Err(error) => return Err(error),
        };
        done.sockets += sockets.len();
        let stale = super::stale(&sockets, frontends, frontend_of);
        done.stale += stale.len();
        for s in stale {
            match diag.destroy(&s)? {
                None => {
                    tracing::debug!(netns = %path, local = %s.local, backend = %s.peer,
                        cookie = s.cookie, "destroyed a UDP socket to a removed backend");
                    done.destroyed[s.family.index()] += 1;
                }
                Some(ENOENT) => done.gone += 1,
                Some(errno) => done.failed.push((s, errno)),
            }
        }
    }
    Ok(())
}

/// Runs forever: a pass whenever `frontends` changes, and every `period` since the last one.
/// Nothing happens before the first successful sync publishes frontends.
pub async fn run(
    mut frontends: watch::Receiver<Option<Arc<Frontends>>>,
    period: Duration,
    metrics: Metrics,
    pin_root: PathBuf,
) {
    let mut failing = false;
    while let Some(current) = next_pass(&mut frontends, period).await {
        let root = pin_root.clone();
        let result = tokio::task::spawn_blocking(move || pass(&current, &root)).await;
        match result {
            Ok(Ok(done)) => {
                failing = false;
                metrics.count_udp_sockets_destroyed(done.destroyed.iter().sum());
                report(&done);
            }
            Ok(Err(error)) if !failing => {
                failing = true;
                tracing::warn!(error = %crate::causes::one_line(&error),
                    "UDP socket reconcile failed; retrying every sync period");
            }
            Ok(Err(error)) => {
                tracing::debug!(error = %crate::causes::one_line(&error), "UDP socket reconcile failed again");
            }
            Err(join) => tracing::error!(error = %join, "UDP socket reconcile panicked"),
        }
    }
}

fn report(done: &Pass) {
    let destroyed = done.destroyed.iter().sum::<u64>();
    for (s, errno) in &done.failed {
        tracing::warn!(local = %s.local, backend = %s.peer, errno,
            "the kernel refused to destroy a UDP socket to a removed backend");
    }
    if destroyed > 0 {
        tracing::info!(
            destroyed,
            namespaces = done.namespaces,
            sockets = done.sockets,
            "destroyed connected UDP sockets to removed backends"
        );
    } else {
        tracing::debug!(
            namespaces = done.namespaces,
            unreachable = done.unreachable,
            sockets = done.sockets,
            stale = done.stale,
            gone = done.gone,
            "UDP socket reconcile"
        );
    }
}
