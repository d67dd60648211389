//! The netlink core every kernel conversation of ours stands on (nf_tables, ctnetlink,
//! rtnetlink, and generic netlink for IPVS): sockets, message framing, attributes, and the batch
//! and dump conversations as state machines, each written once and protocol-independent.
//!
//! What it guarantees: the readers ([`message`], [`attr`], [`ack`]) never panic on kernel
//! input and borrow from the datagram; the state machines ([`batch`], [`dump`]) are pure,
//! messages in and verdicts out, testable with bytes; all I/O is in [`socket`] and
//! [`subscription`], which send each batch as one datagram, receive whole datagrams (a cut
//! one is an error, never read as complete), and open a socket inside a named network
//! namespace without moving the calling thread ([`netns`]). It knows no protocol's messages:
//! each user encodes and decodes its own; [`nfnetlink`] and [`genetlink`] hold the family
//! layers that sit between plain netlink and a protocol.
//!
//! - [`writer`]: messages and attributes appended to one buffer, aligned;
//! - [`message`]: the messages of a received datagram, and where its framing broke;
//! - [`attr`]: attributes read back, by iteration or by type;
//! - [`ack`]: `NLMSG_ERROR` answers, with the kernel's extended-ack text;
//! - [`batch`]: many requests in one datagram, each answer traced to its operation;
//! - [`dump`]: a request answered by objects, then its end;
//! - [`socket`]: the blocking socket: options, buffers, sequence numbers, groups;
//! - [`subscription`]: the tokio socket a monitor reads notifications from;
//! - [`netns`]: opening a socket inside a named network namespace;
//! - [`nfnetlink`]: what nf_tables and ctnetlink share beyond plain netlink (nfgenmsg, the
//!   batch frame), kept here so neither owns it;
//! - [`genetlink`]: generic netlink's `genlmsghdr` and resolving a family by name through
//!   `nlctrl` (IPVS is a generic netlink family).
//!
//! Why by hand, beside the crates: `netlink-sys` gives the socket and `netlink-packet-core`
//! the header constants, and our users encode their typed messages with
//! `netlink-packet-netfilter` and `netlink-packet-route` where those cover them. What no crate
//! we use has is written here: an attribute writer that appends to one buffer with no
//! allocation per attribute (a cold nf_tables sync writes a quarter of a million elements;
//! the crates' `Emitable` values are built as a tree first), readers that hand out slices of
//! the datagram, the extended-ack text of an error (`netlink-packet-core` keeps an error's
//! payload opaque), and batch and dump conversations that need no socket to be tested.

pub mod ack;
pub mod attr;
pub mod batch;
pub mod dump;
pub mod genetlink;
pub mod message;
pub mod netns;
pub mod nfnetlink;
pub mod socket;
pub mod subscription;
pub mod writer;
