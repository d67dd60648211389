//! Prometheus metrics, as upstream kube-proxy exposes them: upstream's `kubeproxy_*` names,
//! types, labels and buckets, the standard `process_*` metrics, and a few of our own
//! (`kubeproxy_rs_*`).
//!
//! - [`names`]: every metric's name, type, labels, help and buckets (the interface).
//! - [`labels`]: label sets and values.
//! - [`registry`]: [`Metrics`], the handle everything records through.
//! - [`process`]: `process_*` from `/proc`.
//! - [`traffic`]: the dataplane's per-Service traffic counters, read at scrape time.
//! - [`rest_client`]: the API client's requests by result (client-go's metric).
//! - [`configz`]: the `/configz` body.
//! - [`server`]: `/metrics`, `/configz`, `/proxyMode`, `/healthz`.

pub mod configz;
pub mod datapath;
pub mod labels;
pub mod names;
pub mod process;
pub mod registry;
pub mod relay;
pub mod rest_client;
pub mod server;
pub mod traffic;

pub use labels::Table;
pub use registry::{CONTENT_TYPE, Metrics, Probe, RepairSeries, SyncSeries};
