//! The BPF maps' key and value structs as Rust values: field-for-field mirrors of
//! `bpf/kp_maps.h`, and the conversions between them and addresses and ports.
//!
//! Pure. The layouts are checked against the numbers clang checks on the C side (build.rs turns
//! the header's `KP_ASSERT_*` lines into `layouts_match_the_c_header`), so the two cannot
//! drift. Addresses are 16 bytes in network order, IPv4 stored IPv4-mapped; ports are held in
//! network order. Build values with the constructors, not field by field.
#![allow(unsafe_code)] // aya::Pod: the structs are repr(C), padded explicitly, with no invalid bit patterns

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// The layout version: the name of the pin directory the maps live in
/// (`KP_LAYOUT_VERSION` in the header).
pub const VERSION: u32 = 1;

include!(concat!(env!("OUT_DIR"), "/bounds.rs"));

/// IP protocol numbers the programs balance.
pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;

/// `struct kp_svc_key`: a frontend.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SvcKey {
    pub addr: [u32; 4],
    pub port: u16,
    pub proto: u8,
    /// [`SCOPE_SOCKET`] or [`SCOPE_EXTERNAL`]: which programs look the frontend up.
    pub scope: u8,
}

/// `KP_SCOPE_SOCKET`: a frontend the socket programs translate (this node's processes, pods).
pub const SCOPE_SOCKET: u8 = 0;
/// `KP_SCOPE_EXTERNAL`: a frontend the tc programs translate (packets from outside the node).
pub const SCOPE_EXTERNAL: u8 = 1;

/// `struct kp_svc_val`: which slot set a frontend uses, and how many slots it has.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SvcVal {
    pub svc_id: u32,
    pub count: u16,
    pub flags: u8,
    pub generation: u8,
    /// Seconds; read only with [`SVC_F_AFFINITY`].
    pub affinity_timeout: u32,
}

/// `KP_SVC_F_AFFINITY`: ClientIP affinity, per network namespace.
pub const SVC_F_AFFINITY: u8 = 1;
/// `KP_SVC_F_DROP`: no usable endpoint for this traffic, but endpoints elsewhere: ETIMEDOUT.
pub const SVC_F_DROP: u8 = 2;
/// `KP_SVC_F_SNAT`: scope external, the node's address becomes a new flow's source.
pub const SVC_F_SNAT: u8 = 4;
/// `KP_SVC_F_RESTRICTED`: scope socket, its twin of scope external has source ranges; the
/// sockets it translates have their packets' sources checked on the way out.
pub const SVC_F_RESTRICTED: u8 = 8;

/// `struct kp_slot_key`: one slot of one generation of a slot set.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlotKey {
    pub svc_id: u32,
    pub slot: u16,
    pub generation: u8,
    pub pad: u8,
}

/// `struct kp_backend`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Backend {
    pub addr: [u32; 4],
    pub port: u16,
    pub pad: u16,
}

/// `struct kp_rev_key`: filled by the programs; the proxy only clears it on `--cleanup`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RevKey {
    pub cookie: u64,
    pub addr: [u32; 4],
    pub port: u16,
    pub pad: u16,
    pub pad2: u32,
}

/// `struct kp_rev_val`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RevVal {
    pub addr: [u32; 4],
    pub port: u16,
    pub pad: u16,
}

/// `struct kp_np_key`: a NodePort's port (host order) and protocol.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NpKey {
    pub port: u16,
    pub proto: u8,
    pub pad: u8,
}

/// `struct kp_aff_key`: filled by the programs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AffKey {
    pub netns_cookie: u64,
    pub svc_id: u32,
    pub pad: u32,
}

/// `struct kp_aff_val`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AffVal {
    pub last_used_ns: u64,
    pub addr: [u32; 4],
    pub port: u16,
    pub slot: u16,
    pub generation: u8,
    pub pad: [u8; 3],
}

/// `struct kp_flow_key`: a packet's addresses and ports; written by the tc programs only.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowKey {
    pub saddr: [u32; 4],
    pub daddr: [u32; 4],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub pad: [u8; 3],
}

/// `struct kp_flow_val`: what a packet of [`FlowKey`] is rewritten to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowVal {
    pub saddr: [u32; 4],
    pub daddr: [u32; 4],
    pub sport: u16,
    pub dport: u16,
    pub flags: u8,
    pub generation: u8,
    pub pad: [u8; 2],
}

/// `KP_FLOW_F_REPLY`: the entry of a flow's reply direction.
pub const FLOW_F_REPLY: u8 = 1;
/// `KP_FLOW_F_SNAT`: the flow's source was rewritten to the node's address.
pub const FLOW_F_SNAT: u8 = 2;

/// `struct kp_src_key`: a loadBalancerSourceRanges entry (LPM trie key, prefix length first).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SrcKey {
    pub prefixlen: u32,
    pub fe_addr: [u32; 4],
    pub fe_port: u16,
    pub fe_proto: u8,
    pub pad: u8,
    pub src: [u32; 4],
}

/// `KP_SRC_FRONTEND_BITS`: the bits of a [`SrcKey`] that name the frontend.
pub const SRC_FRONTEND_BITS: u32 = 160;

// SAFETY: each is repr(C) of integers and integer arrays with explicit padding fields, so
// every byte is initialised and every bit pattern is a valid value.
unsafe impl aya::Pod for SvcKey {}
unsafe impl aya::Pod for SvcVal {}
unsafe impl aya::Pod for SlotKey {}
unsafe impl aya::Pod for Backend {}
unsafe impl aya::Pod for RevKey {}
unsafe impl aya::Pod for RevVal {}
unsafe impl aya::Pod for AffKey {}
unsafe impl aya::Pod for NpKey {}
unsafe impl aya::Pod for AffVal {}
unsafe impl aya::Pod for FlowKey {}
unsafe impl aya::Pod for FlowVal {}
unsafe impl aya::Pod for SrcKey {}

/// An address as the maps hold it: 16 bytes in network order, IPv4 mapped.
pub fn addr_words(ip: IpAddr) -> [u32; 4] {
    let octets = match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    };
    let word =
        |i: usize| u32::from_ne_bytes([octets[i], octets[i + 1], octets[i + 2], octets[i + 3]]);
    [word(0), word(4), word(8), word(12)]
}

/// The address `words` hold; an IPv4-mapped one comes back as IPv4.
pub fn ip_of(words: [u32; 4]) -> IpAddr {
    let mut octets = [0u8; 16];
    for (i, w) in words.iter().enumerate() {
        octets[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
    }
    Ipv6Addr::from(octets).to_canonical()
}

impl SvcKey {
    pub fn new(ip: IpAddr, port: u16, proto: u8) -> SvcKey {
        SvcKey {
            addr: addr_words(ip),
            port: port.to_be(),
            proto,
            scope: SCOPE_SOCKET,
        }
    }

    /// The same frontend for the tc programs.
    pub fn external(self) -> SvcKey {
        SvcKey {
            scope: SCOPE_EXTERNAL,
            ..self
        }
    }

    pub fn ip(&self) -> IpAddr {
        ip_of(self.addr)
    }

    pub fn port(&self) -> u16 {
        u16::from_be(self.port)
    }
}

impl SrcKey {
    /// The entry that marks `frontend` (scope external) as restricted to its source ranges.
    pub fn restricted(frontend: &SvcKey) -> SrcKey {
        SrcKey {
            prefixlen: SRC_FRONTEND_BITS,
            fe_addr: frontend.addr,
            fe_port: frontend.port,
            fe_proto: frontend.proto,
            pad: 0,
            src: [0; 4],
        }
    }

    /// The entry that lets sources in `range` use `frontend`.
    pub fn range(frontend: &SvcKey, range: &ipnet::IpNet) -> SrcKey {
        let bits = match range {
            ipnet::IpNet::V4(n) => 96 + u32::from(n.prefix_len()),
            ipnet::IpNet::V6(n) => u32::from(n.prefix_len()),
        };
        SrcKey {
            prefixlen: SRC_FRONTEND_BITS + bits,
            src: addr_words(range.trunc().network()),
            ..SrcKey::restricted(frontend)
        }
    }

    /// The frontend this entry belongs to (scope external).
    pub fn frontend(&self) -> SvcKey {
        SvcKey {
            addr: self.fe_addr,
            port: self.fe_port,
            proto: self.fe_proto,
            scope: SCOPE_EXTERNAL,
        }
    }

    /// The source range it allows; `None` for the marker entry.
    pub fn source(&self) -> Option<ipnet::IpNet> {
        let bits = self.prefixlen.checked_sub(SRC_FRONTEND_BITS)?;
        let ip = ip_of(self.src);
        let len = match ip {
            IpAddr::V4(_) => bits.checked_sub(96)?,
            IpAddr::V6(_) => bits,
        };
        ipnet::IpNet::new(ip, u8::try_from(len).ok()?)
            .ok()
            .filter(|_| self.prefixlen > SRC_FRONTEND_BITS)
    }
}

impl Backend {
    pub fn new(to: SocketAddr) -> Backend {
        Backend {
            addr: addr_words(to.ip()),
            port: to.port().to_be(),
            pad: 0,
        }
    }

    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(ip_of(self.addr), u16::from_be(self.port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    include!(concat!(env!("OUT_DIR"), "/layout_tests.rs"));

    #[test]
    fn addresses_are_stored_in_network_order_and_ipv4_mapped() {
        let key = SvcKey::new("10.96.0.10".parse().unwrap(), 80, IPPROTO_TCP);
        let bytes: Vec<u8> = key.addr.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(
            bytes,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 96, 0, 10]
        );
        assert_eq!(key.port.to_ne_bytes(), [0, 80]);
        assert_eq!(key.ip(), "10.96.0.10".parse::<IpAddr>().unwrap());
        assert_eq!(key.port(), 80);
    }

    #[test]
    fn source_range_keys_put_the_frontend_before_the_prefix() {
        let fe = SvcKey::new("198.51.100.7".parse().unwrap(), 443, IPPROTO_TCP).external();
        let marker = SrcKey::restricted(&fe);
        assert_eq!(marker.prefixlen, SRC_FRONTEND_BITS);
        assert_eq!(marker.source(), None);
        assert_eq!(marker.frontend(), fe);
        for (net, bits) in [("203.0.113.0/24", 160 + 96 + 24), ("fd00:1::/48", 160 + 48)] {
            let net: ipnet::IpNet = net.parse().unwrap();
            let key = SrcKey::range(&fe, &net);
            assert_eq!(key.prefixlen, bits);
            assert_eq!(key.source(), Some(net));
            assert_eq!(key.frontend(), fe);
        }
        // Host bits are cleared: the trie matches on the network.
        let loose: ipnet::IpNet = "203.0.113.9/24".parse().unwrap();
        assert_eq!(SrcKey::range(&fe, &loose).source(), Some(loose.trunc()));
    }

    #[test]
    fn backends_round_trip_both_families() {
        for s in ["10.244.1.5:8080", "[fd00:244::5]:53"] {
            let addr: SocketAddr = s.parse().unwrap();
            assert_eq!(Backend::new(addr).socket_addr(), addr);
        }
    }
}
