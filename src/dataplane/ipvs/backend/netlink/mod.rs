//! The IPVS client over generic netlink: virtual services and their destinations as typed
//! values, the requests that program them as bytes, the kernel's dumps read back, and a thin
//! blocking [`Client`] that sends one request at a time.
//!
//! Layers, typed values kept apart from bytes and bytes apart from the socket:
//! - [`uapi`]: the kernel's numbers (`include/uapi/linux/ip_vs.h`);
//! - [`value`]: services (address or fwmark, scheduler, flags, persistence), destinations,
//!   timeouts and counters (pure data);
//! - [`encode`]: [`Request`]s as generic netlink messages (pure, cannot fail);
//! - [`decode`]: service and destination dump messages, with `STATS64` counters and
//!   connection counts, and the timeouts (pure, never panics on kernel input);
//! - [`client`]: the socket, from our netlink core ([`crate::netlink`]: socket in a chosen
//!   network namespace, framing, the dump state machine, [`crate::netlink::genetlink`] for
//!   the family), which maps the kernel's refusals to errors naming the request.
//!
//! Why our own and not a crate:
//! - `netlink-packet-ipvs` 0.0.1 (MIT) is one release from 2024 on `netlink-packet-core` 0.7,
//!   two majors behind ours, barely documented, and has no destination counters;
//! - `nlrs` (MIT) brings its own second netlink stack, and its snapshot we read had TCP/UDP
//!   only (no SCTP) and left flags and counters unparsed;
//! - the `ipvs` crate is an LGPL name-reserving stub; moby/ipvs (Go) is what upstream uses and
//!   reads only 32-bit counters.
//!
//! None is a well-kept Apache/MIT crate that covers what the mode needs, and the protocol is
//! small: on our core it is these few files, with byte-level tests beside them.

pub mod client;
pub mod decode;
pub mod encode;
pub mod uapi;
pub mod value;

#[cfg(test)]
mod tests;

pub use client::{Client, Error, PER_DATAGRAM};
pub use encode::Request;
pub use value::{
    Destination, Flags, Forwarding, ListedDestination, ListedService, Protocol, Scheduler, Service,
    ServiceKey, Stats, Timeouts,
};
