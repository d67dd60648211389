//! Deciding when the dataplane syncs: the only part of the proxy with timers.
//!
//! [`Runner`] folds source events into the tracker and drives a [`Dataplane`] on the rules of
//! [`Schedule`] (pure): first sync once the initial lists are in, `minSyncPeriod` between syncs,
//! a sync every `syncPeriod`, a full one hourly, retries with backoff after a failure. It
//! publishes a [`Status`] for `/healthz` and a [`Report`] per sync for the metrics.
//!
//! [`Dataplane`]: crate::dataplane::Dataplane

mod carry;
pub mod latency;
pub mod peek;
pub mod port_changes;
pub mod report;
pub mod runner;
pub mod schedule;
pub mod status;

pub use peek::Peek;
pub use report::Report;
pub use runner::Runner;
pub use schedule::{Periods, Reason, Schedule};
pub use status::{EventCounts, Status};
