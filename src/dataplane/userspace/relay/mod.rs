//! The relay core: listeners that accept a Service's traffic and carry it to its endpoints.
//!
//! ```text
//!   client ──▶ Listener (one per service port and family, TCP or UDP)
//!                │ admit: the Service's and the relay-wide connection limits
//!                │ pick:  round-robin over the model's endpoints, after ClientIP affinity
//!                │        (balancer; affinity: one table per service port and family)
//!                │ dial:  timeout per attempt, next endpoint on failure, backoff     (dial_policy)
//!                ▼
//!              relay both ways, half-close, buffers only while data flows          (pump; udp)
//!                └─ closed when its endpoint leaves the listener's endpoint list   (service)
//! ```
//!
//! The choices (which endpoint, whether to retry, how long to wait) are pure values in
//! [`balancer`] and [`dial_policy`]; the tasks in `tcp` and `udp` only carry them out. A
//! [`Listener`] is the caller's handle: [`Listener::update`] applies an endpoint change live,
//! [`Listener::counters`] reads what it relayed, and dropping it closes the listener and
//! every connection it relays.

pub mod affinity;
pub mod balancer;
pub mod counters;
pub mod dial_policy;
mod driver;
mod pump;
mod reply_source;
mod service;
mod tcp;
mod udp;

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd as _, AsRawFd as _, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use futures::future::AbortHandle;
use tokio::sync::Semaphore;

pub use affinity::Affinity;
pub use dial_policy::DialPolicy;
pub use service::Limit;

use crate::dataplane::counters::RelayedCounts;
use driver::Driver;
use service::Service;

/// The relay's settings, the same for every listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub dial: DialPolicy,
    /// Connections (and UDP flows) one Service's listeners relay at once, together, through
    /// the [`Limit`] from [`Relay::service_limit`]; more are reset on accept (UDP: their
    /// first datagram is dropped).
    pub max_connections_per_service: usize,
    /// Connections and flows relayed at once over every listener.
    pub max_connections: usize,
    /// A UDP flow with no datagram either way for this long ends (`--udp-timeout`).
    pub udp_idle_timeout: Duration,
}

impl Default for Settings {
    /// Per Service, the 10,000 connections the memory goal is set for (under 100 MB idle,
    /// checked by `tests/userspace_relay_memory.rs`); overall, ten times that. UDP flows idle
    /// out after 250 ms, upstream's `--udp-timeout` default for its userspace mode.
    fn default() -> Settings {
        Settings {
            dial: DialPolicy::default(),
            max_connections_per_service: 10_000,
            max_connections: 100_000,
            udp_idle_timeout: Duration::from_millis(250),
        }
    }
}

impl Settings {
    /// The settings of the configuration (`userspace.*`), the dial policy its default.
    pub fn of(config: &crate::config::Config) -> Settings {
        Settings {
            max_connections_per_service: config.userspace.max_connections_per_service as usize,
            max_connections: config.userspace.max_connections as usize,
            udp_idle_timeout: config.userspace.udp_idle_timeout,
            ..Settings::default()
        }
    }
}

/// What a listener serves: a name for its logs, its endpoints, and the affinity table and the
/// limit it shares with its service port's and Service's other listeners.
#[derive(Clone, Debug)]
pub struct Target {
    /// The service port and family, as logs should name it (`default/web:http IPv4`).
    pub name: Arc<str>,
    /// The endpoints the model selected for this listener's traffic, in the order round-robin
    /// visits them.
    pub endpoints: Vec<SocketAddr>,
    /// The service port's ClientIP affinity table (in this family), shared with the port's
    /// other listeners; `None` without affinity.
    pub affinity: Option<Affinity>,
    pub limit: Limit,
}

/// Opens listeners; holds the relay-wide connection limit they share.
#[derive(Debug)]
pub struct Relay {
    settings: Settings,
    global: Arc<Semaphore>,
    /// The task that drives every listener's loop, started with the first listener.
    driver: std::sync::OnceLock<Driver>,
}

impl Relay {
    pub fn new(settings: Settings) -> Relay {
        let permits = settings.max_connections.min(Semaphore::MAX_PERMITS);
        Relay {
            settings,
            global: Arc::new(Semaphore::new(permits)),
            driver: std::sync::OnceLock::new(),
        }
    }

    fn driver(&self) -> &Driver {
        self.driver.get_or_init(Driver::start)
    }

    /// Listens for TCP on `addr` (port 0: any free port) and starts relaying to `target`.
    /// Must be called within a tokio runtime; the accept loop is driven by the relay's one
    /// listener task (`driver`), each connection gets a task of its own.
    pub fn listen_tcp(&self, addr: SocketAddr, target: Target) -> io::Result<Listener> {
        let listener = tcp::bind(addr)?;
        let local = listener.local_addr()?;
        let stop = listener.as_fd().try_clone_to_owned()?;
        let service = self.service(target);
        let task = self
            .driver()
            .drive(tcp::serve(listener, Arc::clone(&service)));
        Ok(Listener {
            service,
            task,
            local,
            stop_listening: Some(stop),
        })
    }

    /// Listens for UDP on `addr` (port 0: any free port) and starts relaying to `target`.
    /// Must be called within a tokio runtime; the receive loop is driven by the relay's one
    /// listener task (`driver`), each flow gets a task of its own.
    pub fn listen_udp(&self, addr: SocketAddr, target: Target) -> io::Result<Listener> {
        let socket = udp::bind(addr)?;
        let local = socket.local_addr()?;
        let service = self.service(target);
        let idle = self.settings.udp_idle_timeout;
        let task = self
            .driver()
            .drive(udp::serve(socket, Arc::clone(&service), idle));
        Ok(Listener {
            service,
            task,
            local,
            stop_listening: None,
        })
    }

    /// A new Service's connection limit (`max_connections_per_service`), for all of that
    /// Service's listeners to share.
    pub fn service_limit(&self) -> Limit {
        Limit::new(self.settings.max_connections_per_service)
    }

    fn service(&self, target: Target) -> Arc<Service> {
        Arc::new(Service::new(
            target.name,
            target.endpoints,
            target.affinity,
            self.settings.dial.clone(),
            target.limit,
            Arc::clone(&self.global),
        ))
    }
}

/// One open listener. Dropping it stops accepting and closes every connection and flow it
/// relays.
#[derive(Debug)]
pub struct Listener {
    service: Arc<Service>,
    task: AbortHandle,
    local: SocketAddr,
    /// A TCP listener's socket (a second descriptor of it), to stop listening the moment the
    /// listener is dropped: its loop, and the descriptor it owns, end only on the driving
    /// task's next turn, and a connect in between would be accepted, then reset.
    stop_listening: Option<OwnedFd>,
}

impl Listener {
    /// The address it listens on (with the port the kernel chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Applies a new endpoint list and affinity table: new connections use them at once,
    /// connections to endpoints still listed go on, those to removed endpoints are closed.
    pub fn update(&self, endpoints: Vec<SocketAddr>, affinity: Option<Affinity>) {
        self.service.update(endpoints, &[], affinity);
    }

    /// [`Listener::update`], where connections to the endpoints of `listed` go on too: ones
    /// no longer picked for new connections but still in the slices (a terminating endpoint
    /// drains).
    pub fn update_keeping(
        &self,
        endpoints: Vec<SocketAddr>,
        listed: &[SocketAddr],
        affinity: Option<Affinity>,
    ) {
        self.service.update(endpoints, listed, affinity);
    }

    pub fn counters(&self) -> RelayedCounts {
        self.service.counters.read()
    }

    /// The live counters, for a reader that outlives this call (the metrics' scrapes).
    pub fn shared_counters(&self) -> Arc<counters::Counters> {
        Arc::clone(&self.service.counters)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(socket) = &self.stop_listening {
            // On a listening socket, shutdown(2) of the receive side leaves the listen state
            // (the kernel resets its queued connections); later connects are refused.
            let _ =
                nix::sys::socket::shutdown(socket.as_raw_fd(), nix::sys::socket::Shutdown::Read);
        }
        self.task.abort();
        self.service.close_all();
    }
}
