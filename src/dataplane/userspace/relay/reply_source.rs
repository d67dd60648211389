//! UDP replies from the address the client sent to. A listener bound to the unspecified address
//! (`--bind-address` 0.0.0.0, the default) would otherwise answer from whichever address the
//! route back to the client picks: on a node, the pod gateway's for a pod, while the redirect
//! rule sent the datagram to the node's first address. Conntrack then sees a reply that does not
//! match the DNATed flow, does not undo the DNAT, and the client drops a datagram from an
//! address it never sent to.
//!
//! So the listener asks the kernel for each datagram's destination (`IP_PKTINFO`,
//! `IPV6_RECVPKTINFO`) and the flow sends its replies with that address as their source
//! (the same control message on `sendmsg`). tokio's `UdpSocket` has no control messages;
//! nix's `recvmsg`/`sendmsg` run inside its readiness (`try_io`), so the reactor still drives
//! the socket.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;

use nix::libc;
use nix::sys::socket::{
    ControlMessage, ControlMessageOwned, MsgFlags, SockaddrStorage, recvmsg, sendmsg, setsockopt,
    sockopt,
};
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// Asks the kernel to tell each datagram's destination address on `socket` (of `addr`'s
/// family).
pub fn enable(socket: &std::net::UdpSocket, addr: SocketAddr) -> io::Result<()> {
    match addr {
        SocketAddr::V4(_) => setsockopt(socket, sockopt::Ipv4PacketInfo, &true),
        SocketAddr::V6(_) => setsockopt(socket, sockopt::Ipv6RecvPacketInfo, &true),
    }
    .map_err(io::Error::from)
}

/// One datagram received into `buf`: its length, its sender, and the local address it was
/// sent to (when the kernel said).
pub fn try_recv(
    socket: &UdpSocket,
    buf: &mut [u8],
) -> io::Result<(usize, SocketAddr, Option<IpAddr>)> {
    socket.try_io(Interest::READABLE, || {
        let mut iov = [IoSliceMut::new(buf)];
        let mut space = nix::cmsg_space!(libc::in6_pktinfo);
        let msg = recvmsg::<SockaddrStorage>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::empty(),
        )
        .map_err(io::Error::from)?;
        let from = msg
            .address
            .as_ref()
            .and_then(socket_addr)
            .ok_or_else(|| io::Error::other("a datagram without a sender address"))?;
        let local = msg.cmsgs().ok().and_then(|mut cmsgs| {
            cmsgs.find_map(|c| match c {
                ControlMessageOwned::Ipv4PacketInfo(info) => {
                    Some(IpAddr::V4(u32::from_be(info.ipi_addr.s_addr).into()))
                }
                ControlMessageOwned::Ipv6PacketInfo(info) => {
                    Some(IpAddr::V6(info.ipi6_addr.s6_addr.into()))
                }
                _ => None,
            })
        });
        Ok((msg.bytes, from, local))
    })
}

/// Sends `datagram` to `client` from `local` (when known; else as the route chooses).
pub fn try_send(
    socket: &UdpSocket,
    datagram: &[u8],
    client: SocketAddr,
    local: Option<IpAddr>,
) -> io::Result<usize> {
    let to = SockaddrStorage::from(client);
    socket.try_io(Interest::WRITABLE, || {
        let iov = [IoSlice::new(datagram)];
        let v4;
        let v6;
        let cmsg = match local {
            Some(IpAddr::V4(ip)) if client.is_ipv4() => {
                v4 = libc::in_pktinfo {
                    ipi_ifindex: 0,
                    ipi_spec_dst: libc::in_addr {
                        s_addr: u32::from(ip).to_be(),
                    },
                    ipi_addr: libc::in_addr { s_addr: 0 },
                };
                Some(ControlMessage::Ipv4PacketInfo(&v4))
            }
            Some(IpAddr::V6(ip)) if client.is_ipv6() => {
                v6 = libc::in6_pktinfo {
                    ipi6_addr: libc::in6_addr {
                        s6_addr: ip.octets(),
                    },
                    ipi6_ifindex: 0,
                };
                Some(ControlMessage::Ipv6PacketInfo(&v6))
            }
            _ => None,
        };
        let cmsgs = cmsg.as_slice();
        sendmsg(
            socket.as_raw_fd(),
            &iov,
            cmsgs,
            MsgFlags::empty(),
            Some(&to),
        )
        .map_err(io::Error::from)
    })
}

fn socket_addr(s: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = s.as_sockaddr_in() {
        return Some(SocketAddr::from((v4.ip(), v4.port())));
    }
    s.as_sockaddr_in6()
        .map(|v6| SocketAddr::from((v6.ip(), v6.port())))
}
