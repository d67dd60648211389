//! The thin netlink I/O of the nf_tables encoder: one `NETLINK_NETFILTER` socket, opened in a
//! chosen network namespace, that sends batches and dump requests and feeds the answers to the
//! [`super::exchange`] state machines.
//!
//! Blocking. A namespace is entered on a short-lived thread (`setns` changes only the calling
//! thread), which opens the socket and ends; the socket stays bound to that namespace. Needs
//! `CAP_NET_ADMIN` there (and `CAP_SYS_ADMIN` to enter another namespace).

use std::os::fd::AsFd as _;

use netlink_sys::{AsyncSocket as _, Socket as Netlink, TokioSocket, protocols::NETLINK_NETFILTER};
use nix::sys::socket::{setsockopt, sockopt};

use super::attr::Writer;
use super::batch::Batch;
use super::exchange::{Acks, Dump, Failure};
use super::uapi::{self, msg, nlm};

/// Room for the acknowledgements of a large batch (one per message, 36 bytes each capped).
const RECEIVE_BUFFER: usize = 8 << 20;
/// The buffer each datagram is read into. Its size also tells the kernel how large a dump
/// message may be (it caps that at 32 KiB): reading with a small buffer makes dumps of large
/// sets quadratic, as the kernel re-walks a hash set from its start for every message.
const DATAGRAM_BUFFER: usize = 256 << 10;
/// Room for the notifications of a large transaction (one per element) before the kernel
/// drops some (`ENOBUFS`; the monitor then asks for a full sync).
const NOTIFY_BUFFER: usize = 32 << 20;
/// `NFNLGRP_NFTABLES`: the multicast group of nf_tables changes.
const NFNLGRP_NFTABLES: u32 = 7;

/// Joins or leaves the nf_tables change notifications on a socket from [`subscribe`]. While no
/// socket listens, the kernel builds no notification at all for a transaction.
pub fn set_subscribed(socket: &TokioSocket, on: bool) -> std::io::Result<()> {
    let netlink = socket.socket_ref();
    if on {
        netlink.add_membership(NFNLGRP_NFTABLES)
    } else {
        netlink.drop_membership(NFNLGRP_NFTABLES)
    }
}

/// A socket could not be opened or used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot open an nf_tables netlink socket{}", netns_suffix(netns))]
    Open {
        netns: Option<String>,
        #[source]
        source: std::io::Error,
    },
    #[error("nf_tables netlink {what} failed")]
    Io {
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

/// An nf_tables socket with its own sequence numbers.
pub struct Socket {
    netlink: Netlink,
    seq: u32,
    send_buffer: usize,
    datagram: Vec<u8>,
}

/// Runs `open` in the named network namespace (`/run/netns/NAME`), or in the caller's.
fn in_netns<T: Send>(
    netns: Option<&str>,
    open: impl FnOnce() -> std::io::Result<T> + Send,
) -> Result<T, Error> {
    let open_error = |source| Error::Open {
        netns: netns.map(str::to_owned),
        source,
    };
    let Some(name) = netns else {
        return open().map_err(open_error);
    };
    let path = format!("/run/netns/{name}");
    std::thread::scope(|s| {
        s.spawn(|| {
            let ns = std::fs::File::open(&path)?;
            nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(std::io::Error::from)?;
            open()
        })
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("namespace thread panicked")))
    })
    .map_err(open_error)
}

/// A socket subscribed to nf_tables change notifications in the named network namespace (or
/// the caller's), registered with the calling tokio runtime, for the monitor.
pub fn subscribe(netns: Option<&str>) -> Result<TokioSocket, Error> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|e| Error::Open {
        netns: netns.map(str::to_owned),
        source: std::io::Error::other(e),
    })?;
    in_netns(netns, move || {
        let _entered = runtime.enter();
        let mut socket = TokioSocket::new(NETLINK_NETFILTER)?;
        let netlink = socket.socket_mut();
        netlink.bind_auto()?;
        if setsockopt(&netlink.as_fd(), sockopt::RcvBufForce, &NOTIFY_BUFFER).is_err() {
            let _ = netlink.set_rx_buf_sz(NOTIFY_BUFFER);
        }
        netlink.add_membership(NFNLGRP_NFTABLES)?;
        Ok(socket)
    })
}

impl Socket {
    /// Opens a socket in the named network namespace (`/run/netns/NAME`, as `ip netns`
    /// makes them), or in the caller's.
    pub fn open(netns: Option<&str>) -> Result<Socket, Error> {
        let netlink = in_netns(netns, Self::open_here)?;
        Ok(Socket {
            netlink,
            seq: 1,
            send_buffer: 0,
            datagram: Vec::with_capacity(DATAGRAM_BUFFER),
        })
    }

    fn open_here() -> std::io::Result<Netlink> {
        let mut netlink = Netlink::new(NETLINK_NETFILTER)?;
        netlink.bind_auto()?;
        netlink.connect(&netlink_sys::SocketAddr::new(0, 0))?;
        // Short acknowledgements, and the kernel's reason with an error.
        let _ = netlink.set_cap_ack(true);
        let _ = netlink.set_ext_ack(true);
        if setsockopt(&netlink.as_fd(), sockopt::RcvBufForce, &RECEIVE_BUFFER).is_err() {
            let _ = netlink.set_rx_buf_sz(RECEIVE_BUFFER);
        }
        Ok(netlink)
    }

    /// The first sequence number of the next batch.
    pub fn next_seq(&self) -> u32 {
        self.seq
    }

    fn send(&mut self, bytes: &[u8], what: &'static str) -> Result<(), Error> {
        // A batch is one datagram: the kernel must see it whole.
        if bytes.len() + 4096 > self.send_buffer {
            let size = bytes.len() + 64 * 1024;
            if setsockopt(&self.netlink.as_fd(), sockopt::SndBufForce, &size).is_ok() {
                self.send_buffer = size;
            }
        }
        self.netlink
            .send(bytes, 0)
            .map(drop)
            .map_err(|source| Error::Io { what, source })
    }

    /// One datagram, whole; valid until the next call.
    fn recv(&mut self, what: &'static str) -> Result<&[u8], Error> {
        self.datagram.clear();
        let len = self
            .netlink
            .recv(&mut self.datagram, nix::libc::MSG_TRUNC)
            .map_err(|source| Error::Io { what, source })?;
        if len > self.datagram.len() {
            return Err(Error::Io {
                what,
                source: std::io::Error::other(format!("a datagram of {len} bytes was cut")),
            });
        }
        Ok(&self.datagram)
    }

    /// Sends `batch` and a barrier after it; returns what the kernel refused (empty: the
    /// batch was committed).
    pub fn apply(&mut self, batch: &Batch) -> Result<Vec<Failure>, Error> {
        self.send(&batch.bytes, "batch")?;
        // After BATCH_END, which takes the number after the last message's.
        let barrier = batch.acknowledged().end.wrapping_add(1);
        self.seq = barrier.wrapping_add(1);
        let mut w = Writer::default();
        let m = w.begin(
            (uapi::SUBSYS << 8) | msg::GETGEN,
            nlm::REQUEST | nlm::ACK,
            barrier,
            uapi::NFPROTO_UNSPEC,
            0,
        );
        w.end(m);
        self.send(&w.buf, "barrier")?;
        let mut acks = Acks::new(batch, barrier);
        while !acks.done() {
            acks.receive(self.recv("acknowledgements")?);
        }
        Ok(acks.finish())
    }

    /// One request of `kind` (a dump with `dump`), with the attributes `attrs` writes; every
    /// answer message of it.
    pub fn request(
        &mut self,
        kind: u16,
        family: u8,
        dump: bool,
        attrs: &dyn Fn(&mut Writer),
    ) -> Result<Dump, Error> {
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        let mut w = Writer::default();
        let flags = nlm::REQUEST | if dump { nlm::DUMP } else { nlm::ACK };
        let m = w.begin((uapi::SUBSYS << 8) | kind, flags, seq, family, 0);
        attrs(&mut w);
        w.end(m);
        self.send(&w.buf, "request")?;
        let mut answer = Dump::new(seq);
        while !answer.done() {
            answer.receive(self.recv("dump")?);
        }
        Ok(answer)
    }
}
