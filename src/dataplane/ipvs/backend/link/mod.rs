//! `kube-ipvs0`: the dummy link that makes every IPVS service address local to the node, and
//! the addresses bound to it, over rtnetlink on our netlink core.
//!
//! Why a link at all: IPVS intercepts packets in the `LOCAL_IN` hook, so it sees only packets
//! addressed to the node itself. Each ClusterIP (and each externalIP and LoadBalancer IP not
//! already on another interface, [`addresses`]) is therefore added to a link as a /32 or
//! /128 address, and the kernel adds a `local` route for it in the `local` table; a packet to
//! it, from a pod or from the node, is then delivered locally and IPVS takes it. A dummy link
//! is used because it carries nothing: no queue, no neighbours, no traffic of its own.
//!
//! Why it stays down: upstream creates it and never sets it up (`DOWN,NOARP`, kubernetes
//! #107662), and we match that. The kernel adds the local route of an address when the
//! address is added, whatever the link's state (IPv4's `fib_add_ifaddr`; IPv6 on a `NOARP`
//! link skips duplicate address detection, so its address is usable at once), and delivery
//! to a local address needs no particular input interface. A down link has no subnet routes
//! and sends nothing, so nothing is announced or answered on its behalf. The UML test
//! (`tests/ipvs_link.rs`) shows the local routes and a connection to a bound address.
//!
//! Layers, pure parts apart from the socket:
//! - [`addresses`]: the bind rule and the changes from bound to wanted (pure);
//! - [`message`]: the requests as rtnetlink bytes (`netlink-packet-route` types) and the
//!   answers read back (pure);
//! - [`exchange`]: many address changes as batches, each answer traced to its address (pure);
//! - [`client`]: the socket and the errno meanings: ensure the link, list, bind, unbind,
//!   delete; in the caller's network namespace or a named one.

pub mod addresses;
pub mod client;
pub mod exchange;
pub mod message;

pub use addresses::{AddressChanges, LinkAddresses, ServiceAddresses, address_changes};
pub use client::{Client, Error};
pub use exchange::{AddressOp, Refusal, Updated};
pub use message::Link;
