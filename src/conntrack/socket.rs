//! The thin netlink I/O of the conntrack reconciler: one ctnetlink socket of the netlink core
//! that drives the [`super::exchange`] state machines.
//!
//! Blocking; callers run it on a blocking thread. It works in the network namespace the calling
//! thread was in when [`Socket::open`] ran. Needs `CAP_NET_ADMIN` there.

use super::exchange::{Deleted, Deletion, Dump, DumpRefused, Dumped};
use super::flow::Flow;
use crate::cluster::IpFamily;
use crate::netlink::message::FramingError;
use crate::netlink::nfnetlink;
use crate::netlink::socket::{self, Options, Protocol};

/// ctnetlink's socket, as errors name it.
const PROTOCOL: Protocol = nfnetlink::protocol("a ctnetlink socket", "ctnetlink");
/// Short acknowledgements: without this each one echoes its whole request.
const OPTIONS: Options = Options {
    cap_ack: true,
    ext_ack: false,
    receive_buffer: None,
};

/// A conntrack socket could not be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Socket(#[from] socket::Error),
    #[error("ctnetlink reply is malformed")]
    Framing(#[from] FramingError),
    #[error("{family} conntrack dump")]
    Dump {
        family: IpFamily,
        #[source]
        source: DumpRefused,
    },
}

/// A ctnetlink socket with its own sequence numbers.
pub struct Socket {
    netlink: socket::Socket,
}

impl Socket {
    pub fn open() -> Result<Socket, Error> {
        let netlink = socket::Socket::open(PROTOCOL, None, OPTIONS)?;
        Ok(Socket { netlink })
    }

    /// Every conntrack entry of `family`. `raw` receives each datagram as read (for fixtures).
    pub fn dump_raw(
        &mut self,
        family: IpFamily,
        raw: &mut dyn FnMut(&[u8]),
    ) -> Result<Dumped, Error> {
        let (mut dump, request) = Dump::start(family, self.netlink.take_seq());
        self.netlink.send(&request, "dump request")?;
        while !dump.done() {
            let datagram = self.netlink.recv("dump")?;
            raw(datagram);
            dump.receive(datagram)?;
        }
        dump.finish()
            .map_err(|source| Error::Dump { family, source })
    }

    /// Every conntrack entry of `family`.
    pub fn dump(&mut self, family: IpFamily) -> Result<Dumped, Error> {
        self.dump_raw(family, &mut |_| {})
    }

    /// Deletes exactly these entries. An error means the socket failed part-way; what the
    /// kernel refused entry by entry is in [`Deleted::failed`].
    pub fn delete(&mut self, flows: Vec<Flow>) -> Result<Deleted, Error> {
        self.delete_raw(flows, &mut |_| {})
    }

    /// [`Socket::delete`]; `raw` receives each answer datagram as read (for fixtures).
    pub fn delete_raw(
        &mut self,
        flows: Vec<Flow>,
        raw: &mut dyn FnMut(&[u8]),
    ) -> Result<Deleted, Error> {
        let mut deletion = Deletion::new(flows, self.netlink.next_seq());
        while let Some(batch) = deletion.next_batch() {
            self.netlink.send(&batch, "delete request")?;
            while deletion.waiting() {
                let datagram = self.netlink.recv("delete acknowledgement")?;
                raw(datagram);
                deletion.receive(datagram)?;
            }
        }
        self.netlink.set_next_seq(deletion.next_seq());
        Ok(deletion.finish())
    }
}
