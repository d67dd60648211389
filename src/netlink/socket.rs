//! The blocking netlink socket our kernel conversations go through: opened for one protocol,
//! in the caller's network namespace or a named one, with the options a protocol asks for;
//! it sends whole datagrams, receives whole datagrams, numbers requests, and counts the
//! netlink messages it sent (a datagram may carry many), so a caller can show that a sync with
//! nothing to change sent none.
//!
//! The only blocking netlink I/O; callers run it on a blocking thread and drive the pure
//! [`super::batch`] and [`super::dump`] state machines with what it receives. Needs
//! `CAP_NET_ADMIN` in the namespace for most requests.

use std::os::fd::AsFd as _;

use netlink_sys::{Socket as Netlink, SocketAddr};
use nix::sys::socket::{setsockopt, sockopt};

use super::message::messages;
use super::netns;

/// The buffer each datagram is read into. Its size also tells the kernel how large a dump
/// message may be (it caps that at 32 KiB): reading with a small buffer makes dumps of large
/// nf_tables sets quadratic, as the kernel re-walks a hash set from its start for every
/// message.
const DATAGRAM_BUFFER: usize = 256 << 10;

/// A netlink protocol, and how errors name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Protocol {
    /// `NETLINK_*` (`netlink_sys::protocols`).
    pub number: isize,
    /// A socket of it, in error messages: "an nf_tables netlink socket".
    pub socket: &'static str,
    /// Its exchanges, in error messages: "nf_tables netlink" (as in "... batch failed").
    pub name: &'static str,
}

/// Socket options beyond the defaults; each is what one protocol's use needs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// `NETLINK_CAP_ACK`: an acknowledgement echoes only the request's header, not all of it.
    pub cap_ack: bool,
    /// `NETLINK_EXT_ACK`: an error carries the kernel's reason as text.
    pub ext_ack: bool,
    /// A receive buffer of this size, forced past `rmem_max` where we may
    /// (`SO_RCVBUFFORCE`, else as large as `SO_RCVBUF` allows): room for the answers to a
    /// large batch or the notifications of a large transaction.
    pub receive_buffer: Option<usize>,
}

/// A socket could not be opened or used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot open {}{}", protocol.socket, netns_suffix(netns))]
    Open {
        protocol: Protocol,
        netns: Option<String>,
        #[source]
        source: std::io::Error,
    },
    #[error("{} {what} failed", protocol.name)]
    Io {
        protocol: Protocol,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

fn netns_suffix(netns: &Option<String>) -> String {
    netns
        .as_ref()
        .map(|n| format!(" in network namespace {n}"))
        .unwrap_or_default()
}

impl Error {
    /// The operating system's error underneath, for callers that report plain I/O errors.
    pub fn into_io(self) -> std::io::Error {
        match self {
            Error::Open { source, .. } | Error::Io { source, .. } => source,
        }
    }
}

/// Binds a new socket and applies `options`; then connects it to the kernel (`groups`:
/// `None`, for requests) or joins it to `groups` (for notifications).
pub(super) fn prepare(
    netlink: &mut Netlink,
    options: Options,
    groups: Option<&[u32]>,
) -> std::io::Result<()> {
    netlink.bind_auto()?;
    match groups {
        None => netlink.connect(&SocketAddr::new(0, 0))?,
        Some(groups) => {
            for group in groups {
                netlink.add_membership(*group)?;
            }
        }
    }
    configure(netlink, options);
    Ok(())
}

fn configure(netlink: &Netlink, options: Options) {
    // Each is an optimisation or a better message; a kernel without one still works.
    if options.cap_ack {
        let _ = netlink.set_cap_ack(true);
    }
    if options.ext_ack {
        let _ = netlink.set_ext_ack(true);
    }
    if let Some(size) = options.receive_buffer
        && setsockopt(&netlink.as_fd(), sockopt::RcvBufForce, &size).is_err()
    {
        let _ = netlink.set_rx_buf_sz(size);
    }
}

/// Runs `open` in `netns`, naming `protocol` if it fails.
pub(super) fn open_in<T: Send>(
    protocol: Protocol,
    netns: Option<&str>,
    open: impl FnOnce() -> std::io::Result<T> + Send,
) -> Result<T, Error> {
    netns::run_in(netns, open).map_err(|source| Error::Open {
        protocol,
        netns: netns.map(str::to_owned),
        source,
    })
}

/// A socket with its own sequence numbers.
pub struct Socket {
    netlink: Netlink,
    protocol: Protocol,
    seq: u32,
    send_buffer: usize,
    datagram: Vec<u8>,
    /// Netlink messages in the datagrams sent so far.
    messages_sent: u64,
}

impl Socket {
    /// A socket for requests: bound, and connected to the kernel so only its answers arrive.
    pub fn open(
        protocol: Protocol,
        netns: Option<&str>,
        options: Options,
    ) -> Result<Socket, Error> {
        Socket::make(protocol, netns, options, None)
    }

    /// A socket for notifications: bound, not connected, and joined to `groups` (more with
    /// [`Socket::join`]).
    pub fn listen(
        protocol: Protocol,
        netns: Option<&str>,
        options: Options,
        groups: &[u32],
    ) -> Result<Socket, Error> {
        Socket::make(protocol, netns, options, Some(groups))
    }

    /// `groups`: `None` for requests.
    fn make(
        protocol: Protocol,
        netns: Option<&str>,
        options: Options,
        groups: Option<&[u32]>,
    ) -> Result<Socket, Error> {
        let netlink = open_in(protocol, netns, || {
            let mut netlink = Netlink::new(protocol.number)?;
            prepare(&mut netlink, options, groups)?;
            Ok(netlink)
        })?;
        Ok(Socket {
            netlink,
            protocol,
            seq: 1,
            send_buffer: 0,
            datagram: Vec::with_capacity(DATAGRAM_BUFFER),
            messages_sent: 0,
        })
    }

    fn io(&self, what: &'static str) -> impl FnOnce(std::io::Error) -> Error {
        let protocol = self.protocol;
        move |source| Error::Io {
            protocol,
            what,
            source,
        }
    }

    /// Joins a multicast group: its notifications arrive from now on.
    pub fn join(&self, group: u32) -> Result<(), Error> {
        self.netlink
            .add_membership(group)
            .map_err(self.io("multicast membership"))
    }

    /// The sequence number the next request takes.
    pub fn next_seq(&self) -> u32 {
        self.seq
    }

    /// Takes the next sequence number for one request.
    pub fn take_seq(&mut self) -> u32 {
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        seq
    }

    /// Notes that a batch used the numbers up to `next`, which the next request takes.
    pub fn set_next_seq(&mut self, next: u32) {
        self.seq = next;
    }

    /// Sends `bytes` as one datagram (a batch must reach the kernel whole), growing the send
    /// buffer first when it is too small for them.
    pub fn send(&mut self, bytes: &[u8], what: &'static str) -> Result<(), Error> {
        if bytes.len() + 4096 > self.send_buffer {
            let size = bytes.len() + 64 * 1024;
            if setsockopt(&self.netlink.as_fd(), sockopt::SndBufForce, &size).is_ok() {
                self.send_buffer = size;
            }
        }
        self.netlink.send(bytes, 0).map_err(self.io(what))?;
        self.messages_sent += messages(bytes).count() as u64;
        Ok(())
    }

    /// Netlink messages (headers, not datagrams) this socket has sent: requests, dump requests
    /// and the frame messages of a batch alike.
    /// The port id the kernel bound this socket to (it names the socket in notifications its
    /// requests cause).
    pub fn port_id(&self) -> Result<u32, Error> {
        let mut address = SocketAddr::new(0, 0);
        self.netlink
            .get_address(&mut address)
            .map_err(self.io("getsockname"))?;
        Ok(address.port_number())
    }

    pub fn messages_sent(&self) -> u64 {
        self.messages_sent
    }

    /// One datagram, whole (a cut one is an error, never read as if complete); valid until
    /// the next call.
    pub fn recv(&mut self, what: &'static str) -> Result<&[u8], Error> {
        self.datagram.clear();
        let len = self
            .netlink
            .recv(&mut self.datagram, nix::libc::MSG_TRUNC)
            .map_err(self.io(what))?;
        if len > self.datagram.len() {
            let cut = std::io::Error::other(format!("a datagram of {len} bytes was cut"));
            return Err(self.io(what)(cut));
        }
        Ok(&self.datagram)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::writer::Writer;

    /// rtnetlink, which any process may ask (no capability needed for a dump).
    const ROUTE: Protocol = Protocol {
        number: netlink_sys::protocols::NETLINK_ROUTE,
        socket: "an rtnetlink socket",
        name: "rtnetlink",
    };
    /// `RTM_GETLINK`, and the request and dump flags.
    const GETLINK: u16 = 18;
    const DUMP_REQUEST: u16 = 0x1 | 0x300;

    /// `n` link dump requests in one datagram (each with an empty `ifinfomsg`).
    fn requests(socket: &mut Socket, n: usize) -> Vec<u8> {
        let mut w = Writer::default();
        for _ in 0..n {
            let m = w.begin(GETLINK, DUMP_REQUEST, socket.take_seq());
            w.raw(&[0; 16]);
            w.end(m);
        }
        w.buf
    }

    #[test]
    fn messages_are_counted_per_header_not_per_datagram() {
        let mut socket = Socket::open(ROUTE, None, Options::default()).expect("rtnetlink");
        assert_eq!(socket.messages_sent(), 0);
        let one = requests(&mut socket, 1);
        socket.send(&one, "link dump").expect("send");
        assert_eq!(socket.messages_sent(), 1);
        let three = requests(&mut socket, 3);
        socket.send(&three, "link dumps").expect("send");
        assert_eq!(socket.messages_sent(), 4, "one datagram, three messages");
    }
}
