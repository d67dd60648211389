//! The thin netlink I/O of the conntrack reconciler: one `NETLINK_NETFILTER` socket that drives
//! the [`super::exchange`] state machines.
//!
//! Blocking; callers run it on a blocking thread. It works in the network namespace the calling
//! thread was in when [`Socket::open`] ran. Needs `CAP_NET_ADMIN` there.

use netlink_sys::{Socket as Netlink, protocols::NETLINK_NETFILTER};

use super::codec;
use super::exchange::{Deleted, Deletion, Dump, DumpRefused, Dumped};
use super::flow::Flow;
use crate::cluster::IpFamily;

/// A conntrack socket could not be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot open a ctnetlink socket")]
    Open(#[source] std::io::Error),
    #[error("ctnetlink {what} failed")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("ctnetlink reply is malformed")]
    Framing(#[from] codec::FramingError),
    #[error("{family} conntrack dump")]
    Dump {
        family: IpFamily,
        #[source]
        source: DumpRefused,
    },
}

/// A ctnetlink socket with its own sequence numbers.
pub struct Socket {
    netlink: Netlink,
    seq: u32,
}

impl Socket {
    pub fn open() -> Result<Socket, Error> {
        let mut netlink = Netlink::new(NETLINK_NETFILTER).map_err(Error::Open)?;
        netlink.bind_auto().map_err(Error::Open)?;
        netlink
            .connect(&netlink_sys::SocketAddr::new(0, 0))
            .map_err(Error::Open)?;
        // Short acknowledgements: without this each one echoes its whole request.
        let _ = netlink.set_cap_ack(true);
        Ok(Socket { netlink, seq: 1 })
    }

    fn send(&self, bytes: &[u8], what: &'static str) -> Result<(), Error> {
        self.netlink
            .send(bytes, 0)
            .map(drop)
            .map_err(|source| Error::Io { what, source })
    }

    /// One datagram, whole.
    fn recv(&self, what: &'static str) -> Result<Vec<u8>, Error> {
        self.netlink
            .recv_from_full()
            .map(|(bytes, _)| bytes)
            .map_err(|source| Error::Io { what, source })
    }

    /// Every conntrack entry of `family`. `raw` receives each datagram as read (for fixtures).
    pub fn dump_raw(
        &mut self,
        family: IpFamily,
        raw: &mut dyn FnMut(&[u8]),
    ) -> Result<Dumped, Error> {
        let (mut dump, request) = Dump::start(family, self.seq);
        self.seq = self.seq.wrapping_add(1);
        self.send(&request, "dump request")?;
        while !dump.done() {
            let datagram = self.recv("dump")?;
            raw(&datagram);
            dump.receive(codec::parse(&datagram)?)
                .map_err(|source| Error::Dump { family, source })?;
        }
        Ok(dump.finish())
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
        let mut deletion = Deletion::new(flows, self.seq);
        while let Some(batch) = deletion.next_batch() {
            self.send(&batch, "delete request")?;
            while deletion.waiting() {
                let datagram = self.recv("delete acknowledgement")?;
                raw(&datagram);
                deletion.receive(codec::parse(&datagram)?);
            }
        }
        self.seq = deletion.next_seq();
        Ok(deletion.finish())
    }
}
