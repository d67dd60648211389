//! Walks a connection's first socket call, or the first packet of a flow from outside the
//! node, through the eBPF mode's map contents and says what the programs do with it: which
//! hook runs, which `kp_svc` entry matches, and the backends it can be given, or why it fails.
//!
//! Pure: no I/O, never fails. It reads the maps in the kernel's own form ([`Maps`]): a plan
//! written into empty maps ([`planned_maps`]) or the pinned maps as the applier adopts them,
//! so the planned and the live answer come from one walk, and it follows `bpf/kp_sock.c` step
//! by step: no `kp_svc` entry (at the port, nor at port 0, which stands for a ClusterIP's
//! undefined ports) leaves the address alone; a count of 0 refuses (ECONNREFUSED)
//! or, with the drop flag, times out (ETIMEDOUT); otherwise one slot of the entry's
//! generation is drawn, and a slot that is missing leaves that draw untranslated, as the
//! program does; a restricted frontend's socket then has its packets dropped on their way out
//! (`kp_restrict_egress`) when their source is outside the frontend's ranges. Draws are
//! enumerated, not made: each slot is one path of equal share.
//!
//! Socket load balancing acts once, when the socket connects (or, unconnected UDP, at each
//! sendmsg()): the socket is then the backend's, every packet carries the backend's address,
//! and there is no per-packet NAT and no conntrack entry to read. A packet from outside the
//! node meets the tc programs instead, walked (module `outside`) as `bpf/kp_tc.c` walks it;
//! how the maps differ from a plan is module `drift`'s.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use super::diff::{self, Maps};
use super::layout::{
    AffVal, SCOPE_EXTERNAL, SVC_F_AFFINITY, SVC_F_DROP, SVC_F_RESTRICTED, SVC_F_SNAT, SlotKey,
    SvcKey, SvcVal,
};
use super::plan::{Frontend, Plan, Scope, Transport, UNDEFINED_PORT};
use crate::cluster::Protocol;

/// How many slots `kp_affine` (socket programs) searches for a remembered backend when the
/// set's generation changed, and `kp_pick` (tc programs) always (`KP_AFFINITY_SCAN` in
/// `bpf/kp_maps.h`; a test reads it from there).
const AFFINITY_SCAN: u16 = 64;

mod drift;
mod outside;
pub use drift::drift;
pub use outside::client_key;

/// The first socket call of a connection, or the first packet of a flow from outside.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    pub protocol: Protocol,
    pub to: SocketAddr,
    /// Whether the packet comes from outside the node (the tc programs' path); otherwise it
    /// is a socket call of this node (a process or a pod, under the cgroup).
    pub outside: bool,
    /// The client's address: from outside, what source ranges and affinity go by; for a
    /// socket of this node, the address its packets leave with (a pod's, or the node's the
    /// kernel routes from), which `kp_restrict_egress` holds to a restricted frontend's ranges.
    pub source: IpAddr,
}

/// A program that sees the call or the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Hook {
    Connect4,
    Connect6,
    Sendmsg4,
    Sendmsg6,
    /// `kp_tc_ingress`, on the node's Ethernet-like interfaces.
    TcIngress,
}

impl Hook {
    /// The attach type, as `bpftool cgroup show` names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Hook::Connect4 => "connect4",
            Hook::Connect6 => "connect6",
            Hook::Sendmsg4 => "sendmsg4",
            Hook::Sendmsg6 => "sendmsg6",
            Hook::TcIngress => crate::dataplane::inspect::TC_INGRESS,
        }
    }

    /// When the program runs.
    pub fn when(self) -> &'static str {
        match self {
            Hook::Connect4 | Hook::Connect6 => "connect() (TCP, connected UDP)",
            Hook::Sendmsg4 | Hook::Sendmsg6 => "each sendmsg() of an unconnected UDP socket",
            Hook::TcIngress => "each packet arriving on the node's interfaces",
        }
    }
}

/// The `kp_svc` entry the destination matched, as the program reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub svc_id: u32,
    pub generation: u8,
    pub count: u16,
    /// ClientIP affinity timeout in seconds, when the entry has the flag.
    pub affinity: Option<u32>,
    /// No usable endpoint for this traffic, but endpoints elsewhere.
    pub drop: bool,
    /// New flows from outside leave with the node's address as source (Cluster policy).
    pub snat: bool,
    /// The entry is the ClusterIP's at port 0: the destination's port is one its Service does
    /// not define.
    pub undefined_port: bool,
}

impl Entry {
    fn of(v: &SvcVal) -> Entry {
        Entry {
            svc_id: v.svc_id,
            generation: v.generation,
            count: v.count,
            affinity: (v.flags & SVC_F_AFFINITY != 0).then_some(v.affinity_timeout),
            drop: v.flags & SVC_F_DROP != 0,
            snat: v.flags & SVC_F_SNAT != 0,
            undefined_port: false,
        }
    }

    /// The entry found under `key`.
    fn at(key: &SvcKey, v: &SvcVal) -> Entry {
        Entry {
            undefined_port: key.port() == UNDEFINED_PORT,
            ..Entry::of(v)
        }
    }

    /// The backend in slot `i` of this entry's set and generation; `None`: no such slot.
    fn slot(&self, maps: &Maps, i: u16) -> Option<SocketAddr> {
        let key = SlotKey {
            svc_id: self.svc_id,
            slot: i,
            generation: self.generation,
            pad: 0,
        };
        maps.slots.get(&key).map(|b| b.socket_addr())
    }

    /// Every slot's backend, in slot order.
    fn slots(&self, maps: &Maps) -> Vec<Option<SocketAddr>> {
        (0..self.count).map(|i| self.slot(maps, i)).collect()
    }
}

/// What the programs do with the call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fate {
    /// The programs never see it (a protocol they do not balance).
    NotSeen(Unseen),
    /// No `kp_svc` entry: the socket keeps the address it asked for; a packet from outside
    /// goes on to the node's own stack unchanged.
    Untouched,
    /// No endpoints: connect()/sendmsg() fail at once with ECONNREFUSED; a packet from outside
    /// is answered with an ICMP port unreachable (the client's connect() is refused).
    Refused,
    /// Endpoints exist, none for this traffic (a `Local` policy): ETIMEDOUT at once.
    TimedOut,
    /// A packet from outside is dropped by the tc program.
    Dropped(Dropped),
    /// One slot of the set is drawn per connect() (per socket for unconnected UDP; per new
    /// flow from outside); each entry is one slot, `None` where the slot is missing (that draw
    /// is not translated).
    Translated {
        slots: Vec<Option<SocketAddr>>,
        /// The backend a live affinity entry gives this client, instead of a draw.
        remembered: Option<SocketAddr>,
    },
}

/// Why the programs do not see a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unseen {
    /// Neither TCP nor UDP.
    Protocol,
}

/// Why the tc program drops a packet from outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// The frontend's `kp_src` entries hold no range with the client's address.
    SourceRange,
    /// The entry's drop flag: a `Local` policy without an endpoint on this node.
    NoLocalEndpoint,
}

/// The walk of one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// The programs that run for it (a UDP socket meets connect4/6 when connected and
    /// sendmsg4/6 when not); empty when none does.
    pub hooks: Vec<Hook>,
    pub entry: Option<Entry>,
    /// The loadBalancerSourceRanges `kp_src` holds for the matched entry (`None`: it is not
    /// restricted); for a socket call, those of its twin of scope external.
    pub source_ranges: Option<Vec<ipnet::IpNet>>,
    pub fate: Fate,
}

impl Trace {
    /// The backends a new connection may be given, each with its share of new connections
    /// (slots drawn at random, so a backend in two slots has twice the share); a missing slot
    /// is left out, its share untranslated.
    pub fn backends(&self) -> Vec<(SocketAddr, f64)> {
        match &self.fate {
            Fate::Translated {
                remembered: Some(b),
                ..
            } => vec![(*b, 1.0)],
            Fate::Translated { slots, .. } => {
                let n = slots.len() as f64;
                let mut shares: BTreeMap<SocketAddr, f64> = BTreeMap::new();
                for b in slots.iter().flatten() {
                    *shares.entry(*b).or_default() += 1.0 / n;
                }
                shares.into_iter().collect()
            }
            _ => Vec::new(),
        }
    }

    /// Whether some draws find no slot (the maps are inconsistent: a write lost).
    pub fn has_missing_slots(&self) -> bool {
        match &self.fate {
            Fate::Translated {
                slots,
                remembered: None,
            } => slots.iter().any(Option::is_none),
            _ => false,
        }
    }
}

/// A client's ClientIP affinity entry (`kp_aff`) for the matched slot set, and the kernel's
/// monotonic clock when it was read (both in nanoseconds, as `bpf_ktime_get_ns`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remembered {
    pub entry: AffVal,
    pub now_ns: u64,
}

/// Walks `packet` through `maps`. `remembered`, the client's affinity entry for the matched
/// set if one was read, is used as the program uses it: within the timeout, and only while
/// its backend is still in the set.
pub fn trace(maps: &Maps, packet: &Packet, remembered: Option<&Remembered>) -> Trace {
    let transport = match packet.protocol {
        Protocol::Tcp => Transport::Tcp,
        Protocol::Udp => Transport::Udp,
        Protocol::Sctp => {
            return Trace {
                hooks: Vec::new(),
                entry: None,
                source_ranges: None,
                fate: Fate::NotSeen(Unseen::Protocol),
            };
        }
    };
    if packet.outside {
        return outside::trace(maps, transport, packet.to, packet.source, remembered);
    }
    let v6 = matches!(packet.to.ip(), IpAddr::V6(_));
    let connect = if v6 { Hook::Connect6 } else { Hook::Connect4 };
    let sendmsg = if v6 { Hook::Sendmsg6 } else { Hook::Sendmsg4 };
    let hooks = match transport {
        Transport::Tcp => vec![connect],
        Transport::Udp => vec![connect, sendmsg],
    };
    let Some((key, val)) = lookup(maps, packet.to, transport, Scope::Socket) else {
        return Trace {
            hooks,
            entry: None,
            source_ranges: None,
            fate: Fate::Untouched,
        };
    };
    let entry = Entry::at(&key, val);
    // A restricted frontend: `connect()` marks the socket with the frontend's twin of scope
    // external, whose `kp_src` entries `kp_restrict_egress` then holds each packet's source to.
    let restricted = (val.flags & SVC_F_RESTRICTED != 0).then_some(SvcKey {
        scope: SCOPE_EXTERNAL,
        ..key
    });
    let fate = if entry.count == 0 {
        if entry.drop {
            Fate::TimedOut
        } else {
            Fate::Refused
        }
    } else if restricted.is_some_and(|twin| !outside::allowed(maps, &twin, packet.source)) {
        Fate::Dropped(Dropped::SourceRange)
    } else {
        let slot = |i: u16| entry.slot(maps, i);
        let slots = entry.slots(maps);
        let remembered = remembered.and_then(|r| affine(&entry, r, &slot));
        Fate::Translated { slots, remembered }
    };
    Trace {
        hooks,
        entry: Some(entry),
        source_ranges: restricted.and_then(|twin| outside::ranges(maps, &twin)),
        fate,
    }
}

/// The `kp_svc` entry of `to` in `scope`, as the programs find it: the address and port, else
/// the address at [`UNDEFINED_PORT`] (a ClusterIP at a port its Service does not define).
fn lookup(
    maps: &Maps,
    to: SocketAddr,
    transport: Transport,
    scope: Scope,
) -> Option<(SvcKey, &SvcVal)> {
    [to.port(), UNDEFINED_PORT].into_iter().find_map(|port| {
        let key = diff::svc_key(&Frontend {
            ip: to.ip(),
            port,
            transport,
            scope,
        });
        maps.svc.get(&key).map(|v| (key, v))
    })
}

/// The backend `r` gives under `entry`, as `kp_affine` decides: not past the timeout, at its
/// slot when the generation is the same, else found among the first slots.
fn affine(
    entry: &Entry,
    r: &Remembered,
    slot: &dyn Fn(u16) -> Option<SocketAddr>,
) -> Option<SocketAddr> {
    let backend = fresh(entry, r)?;
    let at = r.entry.slot;
    if r.entry.generation == entry.generation && at < entry.count && slot(at) == Some(backend) {
        return Some(backend);
    }
    (0..entry.count.min(AFFINITY_SCAN)).find_map(|i| (slot(i) == Some(backend)).then_some(backend))
}

/// The backend `r` names, when `entry` has ClientIP affinity and `r` is within its timeout
/// (both programs' first test). The clock is read after the entry, so an entry a little newer
/// than the reading counts as fresh.
fn fresh(entry: &Entry, r: &Remembered) -> Option<SocketAddr> {
    let timeout = entry.affinity?;
    if r.now_ns.saturating_sub(r.entry.last_used_ns) > u64::from(timeout) * 1_000_000_000 {
        return None;
    }
    let backend = super::layout::Backend {
        addr: r.entry.addr,
        port: r.entry.port,
        pad: 0,
    };
    Some(backend.socket_addr())
}

/// The maps `plan` fills when written into empty maps: the planned side of a trace.
pub fn planned_maps(plan: &Plan) -> Maps {
    let empty = Maps::default();
    diff::applied(empty.clone(), &diff::diff(&empty, plan))
}

#[cfg(test)]
#[path = "trace_tests.rs"]
mod tests;
