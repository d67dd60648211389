//! Test support shared by the crate's unit tests: API objects and events for the tracker
//! ([`objects`], re-exported here), snapshots built straight from the model for planners and
//! traces ([`snapshots`]), golden files ([`golden`]), random cluster changes for property tests ([`changes`]), hostile names for the modes' property tests
//! ([`hostile`]), what a log formatter writes ([`logged`]), network namespaces ([`netns`]), and the
//! synthetic cluster of any size ([`synthetic`]).
//!
//! Test-only: compiled under `#[cfg(test)]`, so nothing here is part of the library's API and no
//! module outside tests may import it.
//!
//! Two files here serve more than this crate's tests, and so are written to compile elsewhere
//! too: `netns.rs` (only `std`) is also the network-namespace guard of the integration tests and
//! the timing examples, and `synthetic.rs` (only the public API, as `kube_proxy_rs::…`) is also
//! the cluster of the benches, the examples and the kernel tests. The test-support crate
//! (`tests/support/lib.rs`) compiles both for those, so the code has one copy and the library
//! ships none of it; inside the crate, `extern crate self as kube_proxy_rs` (in `lib.rs`, test-only) makes the same paths
//! resolve.

pub mod changes;
pub mod golden;
pub mod hostile;
pub mod logged;
pub mod netns;
mod objects;
pub mod plans;
pub mod snapshots;
pub mod synthetic;

pub use golden::check_golden;
pub use objects::*;
