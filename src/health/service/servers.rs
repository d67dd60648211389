//! The Service health check listeners: opens one HTTP server per Service on its
//! `healthCheckNodePort`, closes it when the Service goes, and keeps each answering with the
//! latest local endpoint count.
//!
//! I/O: binds sockets and spawns one tokio task per listener; needs a tokio runtime. A port that
//! cannot be bound is logged once (at error) and retried on every later [`Servers::update`],
//! never fatal. Answers read the proxy's health at request time, so they follow a failing
//! dataplane without waiting for a sync.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::{ConnectInfo, State};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::desired::{Check, LocalEndpoints};
use super::listen::Listen;
use crate::cluster::{IpFamily, ServiceKey};
use crate::health::response::{self, Answer};
use crate::health::server::now;
use crate::health::shared::SharedHealth;

/// What one listener answers for: the Service and its current local endpoint counts.
struct Entry {
    key: ServiceKey,
    local: Mutex<LocalEndpoints>,
    health: SharedHealth,
}

/// A Service whose check is being served.
struct Open {
    port: u16,
    entry: Arc<Entry>,
    tasks: Vec<(SocketAddr, JoinHandle<()>)>,
}

/// A health check port that could not be bound. Reported once when it starts failing, so the
/// caller can raise upstream's `FailedToStartServiceHealthcheck` Warning event on the Service.
#[derive(Debug)]
pub struct BindFailure {
    pub service: ServiceKey,
    pub port: u16,
    pub address: SocketAddr,
    pub error: io::Error,
}

/// The outcome of one [`Servers::update`].
#[derive(Debug, Default)]
pub struct Report {
    /// Services whose check is being served.
    pub open: usize,
    /// Services whose check could not be bound (retried on the next update).
    pub failing: usize,
    /// Checks that started failing in this update.
    pub new_failures: Vec<BindFailure>,
}

/// How one Service's check is served now, for `status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Serving {
    /// Listening on these addresses.
    Listening(Vec<SocketAddr>),
    /// Its port could not be bound (retried on every update).
    BindFailing,
}

/// Every Service health check listener of this node.
#[doc(alias = "ServiceHealthServer")]
pub struct Servers {
    listen: Listen,
    health: SharedHealth,
    open: BTreeMap<ServiceKey, Open>,
    /// Services whose port failed to bind, with that port: logged once, retried every update.
    failing: BTreeMap<ServiceKey, u16>,
}

impl Servers {
    /// No listener is opened until the first [`update`](Self::update).
    pub fn new(listen: Listen, health: SharedHealth) -> Servers {
        Servers {
            listen,
            health,
            open: BTreeMap::new(),
            failing: BTreeMap::new(),
        }
    }

    /// Changes where checks listen (the node's addresses changed). Closes every listener when
    /// the addresses differ; the next [`update`](Self::update) opens them on the new ones.
    pub async fn set_listen(&mut self, listen: Listen) {
        if listen != self.listen {
            self.listen = listen;
            self.close_all().await;
        }
    }

    /// Makes the listeners match `desired` (from [`desired`](super::desired())): closes
    /// checks of Services that are gone or moved to another port, opens new ones, retries
    /// failed ones, and updates every count. Call it after each sync; cheap when nothing
    /// changed. When this returns, closed ports are released.
    pub async fn update(&mut self, desired: &BTreeMap<ServiceKey, Check>) -> Report {
        let stale: Vec<ServiceKey> = self
            .open
            .iter()
            .filter(|(key, open)| desired.get(*key).is_none_or(|c| c.port != open.port))
            .map(|(key, _)| key.clone())
            .collect();
        for key in stale {
            if let Some(open) = self.open.remove(&key) {
                tracing::debug!(service = %key, port = open.port, "closing health check");
                close(open).await;
            }
        }
        self.failing
            .retain(|key, port| desired.get(key).is_some_and(|c| c.port == *port));

        let mut new_failures = Vec::new();
        for (key, check) in desired {
            if let Some(open) = self.open.get(key) {
                *open
                    .entry
                    .local
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = check.local_endpoints.clone();
                continue;
            }
            let entry = Arc::new(Entry {
                key: key.clone(),
                local: Mutex::new(check.local_endpoints.clone()),
                health: self.health.clone(),
            });
            match self.open_one(&entry, check.port).await {
                Ok(open) => {
                    if self.failing.remove(key).is_some() {
                        tracing::info!(service = %key, port = check.port, "health check started after earlier failures");
                    } else {
                        tracing::debug!(service = %key, port = check.port, "opened health check");
                    }
                    self.open.insert(key.clone(), open);
                }
                Err((address, error)) => {
                    if self.failing.insert(key.clone(), check.port).is_none() {
                        tracing::error!(service = %key, port = check.port, %address, %error, "failed to start health check; will retry");
                        new_failures.push(BindFailure {
                            service: key.clone(),
                            port: check.port,
                            address,
                            error,
                        });
                    } else {
                        tracing::debug!(service = %key, port = check.port, %address, %error, "health check still cannot bind");
                    }
                }
            }
        }
        Report {
            open: self.open.len(),
            failing: self.failing.len(),
            new_failures,
        }
    }

    /// Closes every listener and forgets failures, e.g. on shutdown.
    pub async fn close_all(&mut self) {
        for (_, open) in std::mem::take(&mut self.open) {
            close(open).await;
        }
        self.failing.clear();
    }

    /// The addresses each open check listens on (with the port the kernel gave, for port 0).
    pub fn listening(&self) -> BTreeMap<ServiceKey, Vec<SocketAddr>> {
        self.open
            .iter()
            .map(|(key, open)| (key.clone(), open.tasks.iter().map(|(a, _)| *a).collect()))
            .collect()
    }

    /// Every check opened or failing, and how.
    pub fn serving(&self) -> BTreeMap<ServiceKey, Serving> {
        let failing = self
            .failing
            .keys()
            .map(|k| (k.clone(), Serving::BindFailing));
        self.listening()
            .into_iter()
            .map(|(k, addresses)| (k, Serving::Listening(addresses)))
            .chain(failing)
            .collect()
    }

    /// Binds every address of one check, or none: on the first failure the ones already bound
    /// are closed again, so a retry starts clean.
    async fn open_one(
        &self,
        entry: &Arc<Entry>,
        port: u16,
    ) -> Result<Open, (SocketAddr, io::Error)> {
        let families: BTreeSet<IpFamily> = entry
            .local
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .families()
            .keys()
            .copied()
            .collect();
        let sockets = self.listen.sockets(port, &families);
        let mut listeners = Vec::new();
        match &self.listen {
            Listen::Any => listeners.push(bind_any(&sockets, Listen::v6_only(&families))?),
            Listen::Addresses(_) => {
                for address in sockets {
                    let listener = TcpListener::bind(address).await.map_err(|e| (address, e))?;
                    listeners.push(listener);
                }
            }
        }
        let mut tasks = Vec::new();
        for listener in listeners {
            let address = listener
                .local_addr()
                .map_err(|e| (SocketAddr::from(([0; 4], port)), e))?;
            let app = Router::new()
                .fallback(get(answer))
                .with_state(Arc::clone(entry))
                .into_make_service_with_connect_info::<SocketAddr>();
            let key = entry.key.clone();
            let task = tokio::spawn(async move {
                if let Err(error) = axum::serve(listener, app).await {
                    tracing::error!(service = %key, %address, %error, "health check stopped serving");
                }
            });
            tasks.push((address, task));
        }
        Ok(Open {
            port,
            entry: Arc::clone(entry),
            tasks,
        })
    }
}

/// Binds the first wildcard of `sockets` that the host has, falling back to the next when
/// the host lacks that family (no IPv6). The IPv6 wildcard is dual-stack unless `v6_only`,
/// whatever `net.ipv6.bindv6only` says. A port in use is not retried on the fallback: it is
/// a real conflict.
fn bind_any(sockets: &[SocketAddr], v6_only: bool) -> Result<TcpListener, (SocketAddr, io::Error)> {
    let mut last = None;
    for address in sockets {
        match bind_wildcard(*address, v6_only) {
            Ok(listener) => return Ok(listener),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => return Err((*address, e)),
            Err(e) => last = Some((*address, e)),
        }
    }
    Err(last.unwrap_or_else(|| {
        let address = SocketAddr::from(([0; 4], 0));
        (address, io::Error::other("no address to listen on"))
    }))
}

/// A listening socket on `address`, as `TcpListener::bind` makes it (address reuse on), with
/// `IPV6_V6ONLY` set to `v6_only` for an IPv6 address.
fn bind_wildcard(address: SocketAddr, v6_only: bool) -> io::Result<TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(address),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    if address.is_ipv6() {
        socket.set_only_v6(v6_only)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    socket.listen(1024)?;
    TcpListener::from_std(socket.into())
}

/// Stops accepting and waits until the listener is dropped, so the port is free on return.
/// Connections already accepted finish their request and close.
async fn close(open: Open) {
    for (_, task) in open.tasks {
        task.abort();
        // A cancelled task reports an error; that is the expected outcome.
        let _ = task.await;
    }
}

/// Any path, as upstream, but GET and HEAD only (any other method gets 405): the answer for the
/// family the request arrived over.
async fn answer(
    State(entry): State<Arc<Entry>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
) -> Answer {
    let family = IpFamily::of(&peer.ip().to_canonical());
    let local = entry
        .local
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .for_family(family);
    let healthy = entry.health.status(now()).healthy;
    response::service(&entry.key, local, healthy)
}
