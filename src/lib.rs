//! kube-proxy-rs: a Kubernetes Service proxy, a drop-in replacement for upstream kube-proxy.
//!
//! Data takes one path (see `docs/architecture.md`): a [`cluster::source`] turns API objects into events, the
//! [`cluster::Tracker`] folds them into an immutable [`cluster::Snapshot`], a planner per dataplane
//! mode turns that into the desired kernel state, and an applier makes the kernel match. Everything
//! before the applier is pure.

#![deny(unsafe_code)] // one exception: the eBPF mode's map layout (aya::Pod for the BPF map structs)

pub mod causes;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod conntrack;
pub mod dataplane;
#[doc(hidden)]
pub mod fuzzing;
pub mod go_duration;
pub mod health;
pub mod metrics;
pub mod netlink;
pub mod nft;
pub mod sync;

#[cfg(test)]
pub(crate) mod testing;

/// The crate under its own name in its unit tests, so that test support written against the
/// public API (`testing/synthetic.rs`, also included by benches and examples) compiles here too.
#[cfg(test)]
extern crate self as kube_proxy_rs;
