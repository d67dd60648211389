//! Service health checks: one HTTP server per Service with a `healthCheckNodePort`, telling an
//! external load balancer whether this node has local ready endpoints for it.
//!
//! [`desired`] (pure) derives what to serve from a [`Snapshot`](crate::cluster::Snapshot);
//! [`Listen`] (pure) says on which addresses; [`Servers`] opens and closes the listeners.

mod desired;
mod listen;
mod servers;

pub use desired::{Check, LocalEndpoints, desired};
pub use listen::Listen;
pub use servers::{BindFailure, Report, Servers, Serving};
