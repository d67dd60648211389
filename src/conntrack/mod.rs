//! Conntrack: stale UDP and SCTP flow cleanup after endpoint changes, and the conntrack sysctls
//! set at start-up.
//!
//! The reconciler talks ctnetlink itself (no `conntrack` binary). Its parts follow the data:
//!
//! ```text
//! Snapshot ─▶ plan::Frontends (pure) ─┐
//!                                     ├─▶ judge each flow ─▶ stale flows ─▶ delete by tuple + id
//! kernel ─▶ socket ─▶ codec ─▶ flows ─┘        (pure)
//!              (I/O)   (bytes)   exchange: dump / delete state machines (pure)
//! ```
//!
//! - [`flow`]: a conntrack entry as plain values.
//! - [`plan`]: which flows are stale, given the model (the rules are in its module doc).
//! - [`codec`]: ctnetlink requests as bytes, and dumped entries read back.
//! - [`exchange`]: the dump and delete conversations, without a socket.
//! - [`socket`]: the netlink socket (the core's, [`crate::netlink`]) that drives them.
//! - [`reconcile`]: the task: a pass per family after relevant syncs and every sync period.
//! - [`sysctls`]: start-up sysctls (`nf_conntrack_max`, timeouts, `tcp_be_liberal`).

pub mod codec;
pub mod exchange;
pub mod flow;
pub mod plan;
pub mod reconcile;
pub mod socket;
pub mod sysctls;

pub use flow::{Flow, Tuple};
pub use plan::{Frontends, Judgement, Translation};
pub use reconcile::Pass;
pub use socket::Socket;
