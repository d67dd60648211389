//! Health servers, as upstream kube-proxy exposes them: the proxy's own `/healthz` and `/livez`,
//! and one health check per Service with a `healthCheckNodePort`.
//!
//! The sync runner feeds [`SharedHealth`] (queued changes, successful syncs, the Node); the
//! servers only read it, at request time, with the current wall time. Nothing here plans or
//! touches the dataplane.
//!
//! - [`proxy`]: the pure health rule (2 × `syncPeriod` staleness, start-up, Node draining).
//! - [`shared`]: the handle the runner and the servers share.
//! - [`response`]: status codes, headers and JSON bodies (the interface load balancers read).
//! - [`server`]: the `/healthz` and `/livez` server.
//! - [`service`]: the per-Service health checks.

pub mod proxy;
pub mod response;
pub mod server;
pub mod service;
pub mod shared;

pub use proxy::{FamilyStatus, ProxyHealth, Status};
pub use shared::SharedHealth;
