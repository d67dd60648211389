//! A blocking IPVS client: one generic netlink socket (in the caller's network namespace or a
//! named one), the IPVS family resolved on it, and one method per request, each sent and
//! answered before it returns.
//!
//! The thin I/O: it encodes with [`super::encode`], follows each answer with the core's
//! [`Dump`] state machine and decodes with [`super::decode`]; the only decisions here are
//! which errno means what ([`refusal`], pure). Needs `CAP_NET_ADMIN` in the namespace: every
//! IPVS command, listing included, is an admin command. [`Client::send_all`] pipelines many
//! requests per datagram with the core's [`Batch`] state machine: one round trip per
//! [`PER_DATAGRAM`] requests instead of one each, which is what a cold start at scale pays.

use super::decode::{self, Undecodable};
use super::encode::Request;
use super::uapi;
use super::value::{Destination, ListedDestination, ListedService, Service, ServiceKey, Timeouts};
use crate::netlink::batch::{Batch, Until};
use crate::netlink::dump::Dump;
use crate::netlink::genetlink;
use crate::netlink::message::{self, FramingError};
use crate::netlink::socket::{self, Options, Protocol, Socket};

/// IPVS's socket, as errors name it.
pub const PROTOCOL: Protocol =
    genetlink::protocol("an IPVS generic netlink socket", "IPVS netlink");
/// Short acknowledgements, and the kernel's reason with an error.
const OPTIONS: Options = Options {
    cap_ack: true,
    ext_ack: true,
    receive_buffer: None,
};

/// Requests per datagram in [`Client::send_all`]. The kernel answers every message of a
/// datagram before `sendmsg` returns, so their acknowledgements (short: `NETLINK_CAP_ACK`)
/// must fit the receive buffer at once: 256 of at most a few hundred bytes each do.
pub const PER_DATAGRAM: usize = 256;

/// `ENOENT`: on adding or changing a service, no scheduler (or persistence engine) module of
/// that name.
const ENOENT: i32 = 2;
/// `ESRCH`: the service named is not there.
const ESRCH: i32 = 3;

/// Why an IPVS request failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Socket(#[from] socket::Error),
    #[error("cannot find the IPVS generic netlink family")]
    Family(#[source] genetlink::Error),
    #[error("IPVS netlink reply is malformed")]
    Framing(#[from] FramingError),
    /// The kernel refused the request.
    #[error("the kernel refused {request}: {}{}", std::io::Error::from_raw_os_error(*errno), message.as_ref().map(|m| format!(": {m}")).unwrap_or_default())]
    Refused {
        /// What was asked, naming the service or destination.
        request: String,
        /// Positive errno.
        errno: i32,
        /// The kernel's extended-ack text, when it gave one.
        message: Option<String>,
    },
    /// The kernel has no scheduler of that name: it found no module `ip_vs_<name>`.
    #[error(
        "the kernel has no IPVS scheduler {scheduler:?} (no module ip_vs_{scheduler}), {request}"
    )]
    UnknownScheduler { scheduler: String, request: String },
    #[error("{request}")]
    Undecodable {
        request: String,
        #[source]
        source: Undecodable,
    },
}

impl Error {
    /// The kernel's errno, when it refused the request.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Refused { errno, .. } => Some(*errno),
            Error::UnknownScheduler { .. } => Some(ENOENT),
            _ => None,
        }
    }
}

/// What the kernel's refusal of `request` means.
pub fn refusal(request: &Request, errno: i32, message: Option<String>) -> Error {
    match request {
        Request::NewService(s) | Request::SetService(s) if errno == ENOENT => {
            Error::UnknownScheduler {
                scheduler: s.scheduler.to_string(),
                request: request.to_string(),
            }
        }
        _ => Error::Refused {
            request: request.to_string(),
            errno,
            message,
        },
    }
}

/// An IPVS socket with the family resolved.
pub struct Client {
    socket: Socket,
    family: u16,
}

impl Client {
    /// Opens a socket in the named network namespace (`ip netns` names), or the caller's,
    /// and resolves the IPVS family; fails when the `ip_vs` module is not loaded.
    pub fn open(netns: Option<&str>) -> Result<Client, Error> {
        let mut socket = Socket::open(PROTOCOL, netns, OPTIONS)?;
        let family = genetlink::resolve(&mut socket, uapi::FAMILY_NAME).map_err(Error::Family)?;
        Ok(Client {
            socket,
            family: family.id,
        })
    }

    /// Netlink messages this client has sent (its family lookup included), for the sync's
    /// count of them.
    pub fn messages_sent(&self) -> u64 {
        self.socket.messages_sent()
    }

    /// Every service of the namespace, with its counters.
    pub fn services(&mut self) -> Result<Vec<ListedService>, Error> {
        self.services_raw(&mut |_| {})
    }

    /// [`Client::services`]; `raw` receives each datagram of the answer as read (fixtures).
    pub fn services_raw(
        &mut self,
        raw: &mut dyn FnMut(&[u8]),
    ) -> Result<Vec<ListedService>, Error> {
        let request = Request::GetServices;
        let bodies = self.exchange(&request, raw)?;
        bodies
            .iter()
            .map(|b| decode::service(b))
            .collect::<Result<_, _>>()
            .map_err(|source| Error::Undecodable {
                request: request.to_string(),
                source,
            })
    }

    /// One service by its key, with its counters; `None` when the kernel has none. One
    /// message each way, whatever the number of services (the outside-change watch asks it
    /// every second).
    pub fn service(&mut self, key: &ServiceKey) -> Result<Option<ListedService>, Error> {
        let request = Request::GetService(*key);
        let bodies = match self.exchange(&request, &mut |_| {}) {
            Ok(bodies) => bodies,
            Err(e) if e.errno() == Some(ESRCH) => return Ok(None),
            Err(e) => return Err(e),
        };
        bodies
            .first()
            .map(|b| decode::service(b))
            .transpose()
            .map_err(|source| Error::Undecodable {
                request: request.to_string(),
                source,
            })
    }

    /// Every destination of one service, with its connection counts and counters. A service
    /// that does not exist has none: the kernel (6.1) answers its dump empty, not with an
    /// error.
    pub fn destinations(&mut self, key: &ServiceKey) -> Result<Vec<ListedDestination>, Error> {
        self.destinations_raw(key, &mut |_| {})
    }

    /// [`Client::destinations`]; `raw` receives each datagram of the answer as read.
    pub fn destinations_raw(
        &mut self,
        key: &ServiceKey,
        raw: &mut dyn FnMut(&[u8]),
    ) -> Result<Vec<ListedDestination>, Error> {
        let request = Request::GetDests(*key);
        let bodies = self.exchange(&request, raw)?;
        bodies
            .iter()
            .map(|b| decode::destination(b, key.family()))
            .collect::<Result<_, _>>()
            .map_err(|source| Error::Undecodable {
                request: request.to_string(),
                source,
            })
    }

    pub fn add_service(&mut self, service: &Service) -> Result<(), Error> {
        self.exchange(&Request::NewService(service.clone()), &mut |_| {})
            .map(drop)
    }

    /// Changes the scheduler, flags, timeout and netmask of an existing service in place.
    pub fn update_service(&mut self, service: &Service) -> Result<(), Error> {
        self.exchange(&Request::SetService(service.clone()), &mut |_| {})
            .map(drop)
    }

    pub fn delete_service(&mut self, key: &ServiceKey) -> Result<(), Error> {
        self.exchange(&Request::DelService(*key), &mut |_| {})
            .map(drop)
    }

    pub fn add_destination(&mut self, key: &ServiceKey, d: &Destination) -> Result<(), Error> {
        self.exchange(&Request::NewDest(*key, *d), &mut |_| {})
            .map(drop)
    }

    /// Changes forwarding, weight and thresholds of an existing destination in place.
    pub fn update_destination(&mut self, key: &ServiceKey, d: &Destination) -> Result<(), Error> {
        self.exchange(&Request::SetDest(*key, *d), &mut |_| {})
            .map(drop)
    }

    pub fn delete_destination(
        &mut self,
        key: &ServiceKey,
        address: std::net::SocketAddr,
    ) -> Result<(), Error> {
        self.exchange(&Request::DelDest(*key, address), &mut |_| {})
            .map(drop)
    }

    /// Sets the timeouts that are not 0.
    pub fn set_timeouts(&mut self, timeouts: &Timeouts) -> Result<(), Error> {
        self.exchange(&Request::SetConfig(*timeouts), &mut |_| {})
            .map(drop)
    }

    pub fn timeouts(&mut self) -> Result<Timeouts, Error> {
        let bodies = self.exchange(&Request::GetConfig, &mut |_| {})?;
        Ok(bodies
            .first()
            .map(|b| decode::timeouts(b))
            .unwrap_or_default())
    }

    /// Sends one request that answers with an acknowledgement (not a dump).
    pub fn send(&mut self, request: &Request) -> Result<(), Error> {
        self.exchange(request, &mut |_| {}).map(drop)
    }

    /// Sends `requests` in order, [`PER_DATAGRAM`] to a datagram, and calls `accepted` with
    /// the index of each one the kernel acknowledged. IPVS has no transactions and handles
    /// every message of a datagram even after one fails, so a refusal is returned once its
    /// datagram's answers are all read (later ones of that datagram may have been accepted,
    /// and were reported), and nothing after that datagram is sent.
    pub fn send_all(
        &mut self,
        requests: &[Request],
        accepted: &mut dyn FnMut(usize),
    ) -> Result<(), Error> {
        for (n, chunk) in requests.chunks(PER_DATAGRAM).enumerate() {
            let base = n * PER_DATAGRAM;
            let first = self.socket.take_seq();
            let mut bytes = Vec::with_capacity(chunk.len() * 128);
            for (i, r) in chunk.iter().enumerate() {
                bytes.extend(r.encode(self.family, first.wrapping_add(i as u32)));
            }
            self.socket
                .set_next_seq(first.wrapping_add(chunk.len() as u32));
            let batch = Batch::new(bytes, first, (0..chunk.len()).collect());
            let (bytes, mut acks) = batch.send(Until::EveryMessage);
            self.socket.send(&bytes, "requests")?;
            let mut refused: Option<(usize, i32, Option<String>)> = None;
            while !acks.done() {
                let datagram = self.socket.recv("acknowledgements")?;
                let mut answers = Vec::new();
                message::each(datagram, |m| answers.extend(acks.receive(&m)))?;
                for a in answers {
                    let Some(i) = a.origin else { continue };
                    if a.errno == 0 {
                        accepted(base + i);
                    } else if refused.as_ref().is_none_or(|(j, _, _)| i < *j) {
                        refused = Some((i, a.errno, a.message));
                    }
                }
            }
            if let Some((i, errno, message)) = refused {
                return Err(refusal(&chunk[i], errno, message));
            }
        }
        Ok(())
    }

    /// Removes every service of the namespace, ours or not.
    pub fn flush(&mut self) -> Result<(), Error> {
        self.exchange(&Request::Flush, &mut |_| {}).map(drop)
    }

    /// Sends `request` and reads its whole answer: the bodies of the objects it carried.
    /// `raw` sees each datagram as it arrives.
    fn exchange(
        &mut self,
        request: &Request,
        raw: &mut dyn FnMut(&[u8]),
    ) -> Result<Vec<Vec<u8>>, Error> {
        let seq = self.socket.take_seq();
        self.socket
            .send(&request.encode(self.family, seq), "request")?;
        let mut answer = Dump::new(seq);
        let mut bodies = Vec::new();
        while !answer.done() {
            let datagram = self.socket.recv("answer")?;
            raw(datagram);
            message::each(datagram, |m| {
                if answer.receive(&m) {
                    bodies.push(m.body.to_vec());
                }
            })?;
        }
        match answer.errno() {
            Some(errno) => Err(refusal(request, errno, answer.message())),
            None => Ok(bodies),
        }
    }
}
