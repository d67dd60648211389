//! An async netlink socket subscribed to multicast groups, registered with the calling tokio
//! runtime: how a monitor reads the kernel's notifications without a thread of its own.
//!
//! I/O only; the notifications are the caller's to read. Opened like [`super::socket`]'s
//! sockets (in a named network namespace on a short-lived thread), bound and not connected.

use netlink_sys::{AsyncSocket as _, AsyncSocketExt as _, TokioSocket};

use super::socket::{self, Error, Options, Protocol};

/// A socket that receives the notifications of the groups it joined.
pub struct Subscription {
    socket: TokioSocket,
}

impl Subscription {
    /// Opens a socket in the named network namespace (or the caller's), joined to `groups`.
    /// Call it inside a tokio runtime.
    pub fn open(
        protocol: Protocol,
        netns: Option<&str>,
        options: Options,
        groups: &[u32],
    ) -> Result<Subscription, Error> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| Error::Open {
            protocol,
            netns: netns.map(str::to_owned),
            source: std::io::Error::other(e),
        })?;
        let socket = socket::open_in(protocol, netns, move || {
            let _entered = runtime.enter();
            let mut socket = TokioSocket::new(protocol.number)?;
            socket::prepare(socket.socket_mut(), options, Some(groups))?;
            Ok(socket)
        })?;
        Ok(Subscription { socket })
    }

    /// Joins (`true`) or leaves `group`. While no socket is in a group, the kernel builds no
    /// notification for it at all.
    pub fn set_joined(&self, group: u32, joined: bool) -> std::io::Result<()> {
        let netlink = self.socket.socket_ref();
        if joined {
            netlink.add_membership(group)
        } else {
            netlink.drop_membership(group)
        }
    }

    /// The next datagram of notifications, whole. `ENOBUFS` says the kernel dropped some.
    pub async fn recv(&self) -> std::io::Result<Vec<u8>> {
        self.socket.recv_from_full().await.map(|(bytes, _)| bytes)
    }
}
