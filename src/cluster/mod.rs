//! The cluster model and the tracker: what every Service port means on this node (pure).
//!
//! `source` produces object events; [`Tracker`] folds them into an immutable [`Snapshot`];
//! planners read only the snapshot. Nothing here but `source` does I/O.

pub mod endpoints;
pub mod interner;
pub mod limits;
pub mod model;
pub mod node;
pub mod port_state;
pub mod scheduler_annotation;
pub mod service;
pub mod service_cidrs;
mod slice_set;
pub mod source;
pub mod topology;
pub mod tracker;
#[cfg(test)]
mod tracker_props;
pub mod warning;

pub use model::{
    Endpoint, FamilyView, IpFamily, NoLocalEndpoints, NodeContext, Protocol, ServiceKey,
    ServicePort, ServicePortName, ServicePortState, Snapshot, TrafficPolicy,
};
pub use topology::{Features, Selection, TopologyMode};
pub use tracker::{ChangeCounts, Changes, Tracker};
pub use warning::Warning;
