//! The IPVS generic netlink numbers we use, as the kernel's `include/uapi/linux/ip_vs.h`
//! defines them (checked against the 6.1 header, `linux-libc-dev` 6.1.187).
//!
//! Pure constants: the kernel's ABI. Byte order is part of it and is noted where it is not the
//! host's.

#![allow(
    dead_code,
    reason = "the complete groups read better than the used subset"
)]

/// `IPVS_GENL_NAME`: the generic netlink family to resolve.
pub const FAMILY_NAME: &str = "IPVS";
/// `IPVS_GENL_VERSION`: the `genlmsghdr` version of every request.
pub const VERSION: u8 = 1;

/// `IPVS_CMD_*`.
pub mod cmd {
    pub const NEW_SERVICE: u8 = 1;
    pub const SET_SERVICE: u8 = 2;
    pub const DEL_SERVICE: u8 = 3;
    pub const GET_SERVICE: u8 = 4;
    pub const NEW_DEST: u8 = 5;
    pub const SET_DEST: u8 = 6;
    pub const DEL_DEST: u8 = 7;
    pub const GET_DEST: u8 = 8;
    pub const SET_CONFIG: u8 = 12;
    pub const GET_CONFIG: u8 = 13;
    pub const SET_INFO: u8 = 14;
    pub const GET_INFO: u8 = 15;
    pub const ZERO: u8 = 16;
    pub const FLUSH: u8 = 17;
}

/// `IPVS_CMD_ATTR_*`: the attributes of a message.
pub mod attr {
    /// Nested `IPVS_SVC_ATTR_*`.
    pub const SERVICE: u16 = 1;
    /// Nested `IPVS_DEST_ATTR_*`.
    pub const DEST: u16 = 2;
    /// u32 seconds each; 0 in `SET_CONFIG` leaves the value as it is.
    pub const TIMEOUT_TCP: u16 = 4;
    pub const TIMEOUT_TCP_FIN: u16 = 5;
    pub const TIMEOUT_UDP: u16 = 6;
}

/// `IPVS_SVC_ATTR_*`: a virtual service.
pub mod svc {
    /// u16: `AF_INET` or `AF_INET6`.
    pub const AF: u16 = 1;
    /// u16: `IPPROTO_*`.
    pub const PROTOCOL: u16 = 2;
    /// `union nf_inet_addr`, 16 bytes; an IPv4 address in the first 4.
    pub const ADDR: u16 = 3;
    /// u16 in network byte order.
    pub const PORT: u16 = 4;
    /// u32; when present it alone identifies the service (no protocol, address or port).
    pub const FWMARK: u16 = 5;
    /// NUL-terminated, at most 15 characters.
    pub const SCHED_NAME: u16 = 6;
    /// `struct ip_vs_flags { u32 flags; u32 mask; }`.
    pub const FLAGS: u16 = 7;
    /// u32: persistence timeout in seconds.
    pub const TIMEOUT: u16 = 8;
    /// IPv4: the mask in network byte order; IPv6: the prefix length (1-128), host order.
    pub const NETMASK: u16 = 9;
    /// Nested `IPVS_STATS_ATTR_*`, 32-bit counters (bytes are u64).
    pub const STATS: u16 = 10;
    pub const PE_NAME: u16 = 11;
    /// Nested `IPVS_STATS_ATTR_*`, every counter u64.
    pub const STATS64: u16 = 12;
}

/// `IPVS_DEST_ATTR_*`: a real server of a service.
pub mod dest {
    /// 16 bytes, as [`super::svc::ADDR`].
    pub const ADDR: u16 = 1;
    /// u16 in network byte order.
    pub const PORT: u16 = 2;
    /// u32: `IP_VS_CONN_F_*` forwarding method.
    pub const FWD_METHOD: u16 = 3;
    /// u32 (an `int` in the kernel; negative is refused).
    pub const WEIGHT: u16 = 4;
    pub const U_THRESH: u16 = 5;
    pub const L_THRESH: u16 = 6;
    /// u32 each, replies only.
    pub const ACTIVE_CONNS: u16 = 7;
    pub const INACT_CONNS: u16 = 8;
    pub const PERSIST_CONNS: u16 = 9;
    pub const STATS: u16 = 10;
    /// u16; the destination's own family (mixed only for tunnels). Kernels before 3.18 omit it.
    pub const ADDR_FAMILY: u16 = 11;
    pub const STATS64: u16 = 12;
}

/// `IPVS_STATS_ATTR_*`, inside a `STATS` or `STATS64` nest.
pub mod stats {
    pub const CONNS: u16 = 1;
    pub const INPKTS: u16 = 2;
    pub const OUTPKTS: u16 = 3;
    pub const INBYTES: u16 = 4;
    pub const OUTBYTES: u16 = 5;
    pub const CPS: u16 = 6;
    pub const INPPS: u16 = 7;
    pub const OUTPPS: u16 = 8;
    pub const INBPS: u16 = 9;
    pub const OUTBPS: u16 = 10;
}

/// `IP_VS_SVC_F_*`.
pub mod flags {
    pub const PERSISTENT: u32 = 0x0001;
    /// Set by the kernel on every service it holds; not a setting.
    pub const HASHED: u32 = 0x0002;
    pub const ONEPACKET: u32 = 0x0004;
    pub const SCHED1: u32 = 0x0008;
    pub const SCHED2: u32 = 0x0010;
    pub const SCHED3: u32 = 0x0020;
}

/// `IP_VS_CONN_F_*` forwarding methods (`IP_VS_CONN_F_FWD_MASK` = 0x7).
pub mod fwd {
    pub const MASQ: u32 = 0;
    pub const LOCALNODE: u32 = 1;
    pub const TUNNEL: u32 = 2;
    pub const DROUTE: u32 = 3;
    pub const BYPASS: u32 = 4;
}

/// `AF_INET`, `AF_INET6` (`linux/socket.h`).
pub const AF_INET: u16 = 2;
pub const AF_INET6: u16 = 10;

/// `IPPROTO_*` (`linux/in.h`).
pub const IPPROTO_TCP: u16 = 6;
pub const IPPROTO_UDP: u16 = 17;
pub const IPPROTO_SCTP: u16 = 132;
