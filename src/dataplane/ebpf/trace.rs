//! Walks a connection's first socket call through the eBPF mode's map contents and says what
//! the socket programs do with it: which hook runs, which `kp_svc` entry matches, and the
//! backends a connect() can be given, or why it fails.
//!
//! Pure: no I/O, never fails. It reads the maps in the kernel's own form ([`Maps`]): a plan
//! written into empty maps ([`planned_maps`]) or the pinned maps as the applier adopts them,
//! so the planned and the live answer come from one walk, and it follows `bpf/kp_sock.c` step
//! by step: no `kp_svc` entry leaves the address alone; a count of 0 refuses (ECONNREFUSED)
//! or, with the drop flag, times out (ETIMEDOUT); otherwise one slot of the entry's
//! generation is drawn, and a slot that is missing leaves that draw untranslated, as the
//! program does. Draws are enumerated, not made: each slot is one path of equal share.
//!
//! Socket load balancing acts once, when the socket connects (or, unconnected UDP, at each
//! sendmsg()): the socket is then the backend's, every packet carries the backend's address,
//! and there is no per-packet NAT and no conntrack entry to read. What the programs never see
//! (a packet from outside the node) is said in one place, [`OUTSIDE`].

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use super::diff::{self, Maps};
use super::layout::{
    AffVal, IPPROTO_TCP, IPPROTO_UDP, SVC_F_AFFINITY, SVC_F_DROP, SlotKey, SvcKey, SvcVal,
};
use super::plan::{Frontend, Plan, Scope, Transport};
use crate::cluster::Protocol;

/// What `explain` says of traffic that arrives from outside the node: the tc programs balance
/// it (their own `kp_svc` entries, scope external, source ranges in `kp_src`, flows in
/// `kp_flow`), and this tracer walks only the socket programs' path so far. The one place to
/// change when it walks theirs.
pub const OUTSIDE: &str = "traffic from outside the node is balanced by the tc programs on the \
     node's interfaces (DNAT, SNAT for Cluster policy, source ranges); explain does not trace \
     their path yet";

/// How many slots `kp_affine` searches for a remembered backend when the set's generation
/// changed (`KP_AFFINITY_SCAN` in `bpf/kp_maps.h`; a test reads it from there).
const AFFINITY_SCAN: u16 = 64;

/// The first socket call of a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    pub protocol: Protocol,
    pub to: SocketAddr,
    /// A socket of this node (a process or a pod, under the cgroup) or a packet from outside.
    pub from_outside: bool,
}

/// A cgroup program that sees the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Hook {
    Connect4,
    Connect6,
    Sendmsg4,
    Sendmsg6,
}

impl Hook {
    /// The attach type, as `bpftool cgroup show` names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Hook::Connect4 => "connect4",
            Hook::Connect6 => "connect6",
            Hook::Sendmsg4 => "sendmsg4",
            Hook::Sendmsg6 => "sendmsg6",
        }
    }

    /// When the program runs.
    pub fn when(self) -> &'static str {
        match self {
            Hook::Connect4 | Hook::Connect6 => "connect() (TCP, connected UDP)",
            Hook::Sendmsg4 | Hook::Sendmsg6 => "each sendmsg() of an unconnected UDP socket",
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
}

impl Entry {
    fn of(v: &SvcVal) -> Entry {
        Entry {
            svc_id: v.svc_id,
            generation: v.generation,
            count: v.count,
            affinity: (v.flags & SVC_F_AFFINITY != 0).then_some(v.affinity_timeout),
            drop: v.flags & SVC_F_DROP != 0,
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
    /// The programs never see it (from outside the node, or a protocol they do not balance).
    NotSeen(Unseen),
    /// No `kp_svc` entry: the socket keeps the address it asked for.
    Untouched,
    /// No endpoints: connect()/sendmsg() fail at once with ECONNREFUSED.
    Refused,
    /// Endpoints exist, none for this traffic (a `Local` policy): ETIMEDOUT at once.
    TimedOut,
    /// One slot of the set is drawn per connect() (per socket for unconnected UDP); each
    /// entry is one slot, `None` where the slot is missing (that draw is not translated).
    Translated {
        slots: Vec<Option<SocketAddr>>,
        /// The backend a live affinity entry gives this client, instead of a draw.
        remembered: Option<SocketAddr>,
    },
}

/// Why the programs do not see a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unseen {
    /// From outside the node: see [`OUTSIDE`].
    Outside,
    /// Neither TCP nor UDP.
    Protocol,
}

/// The walk of one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// The programs that run for it (a UDP socket meets connect4/6 when connected and
    /// sendmsg4/6 when not); empty when none does.
    pub hooks: Vec<Hook>,
    pub entry: Option<Entry>,
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
                fate: Fate::NotSeen(Unseen::Protocol),
            };
        }
    };
    if packet.from_outside {
        return Trace {
            hooks: Vec::new(),
            entry: None,
            fate: Fate::NotSeen(Unseen::Outside),
        };
    }
    let v6 = matches!(packet.to.ip(), IpAddr::V6(_));
    let connect = if v6 { Hook::Connect6 } else { Hook::Connect4 };
    let sendmsg = if v6 { Hook::Sendmsg6 } else { Hook::Sendmsg4 };
    let hooks = match transport {
        Transport::Tcp => vec![connect],
        Transport::Udp => vec![connect, sendmsg],
    };
    let key = diff::svc_key(&Frontend {
        ip: packet.to.ip(),
        port: packet.to.port(),
        transport,
        scope: Scope::Socket,
    });
    let Some(val) = maps.svc.get(&key) else {
        return Trace {
            hooks,
            entry: None,
            fate: Fate::Untouched,
        };
    };
    let entry = Entry::of(val);
    let fate = if entry.count == 0 {
        if entry.drop {
            Fate::TimedOut
        } else {
            Fate::Refused
        }
    } else {
        let slot = |i: u16| entry.slot(maps, i);
        let slots = entry.slots(maps);
        let remembered = remembered.and_then(|r| affine(&entry, r, &slot));
        Fate::Translated { slots, remembered }
    };
    Trace {
        hooks,
        entry: Some(entry),
        fate,
    }
}

/// The backend `r` gives under `entry`, as `kp_affine` decides: not past the timeout, at its
/// slot when the generation is the same, else found among the first slots.
fn affine(
    entry: &Entry,
    r: &Remembered,
    slot: &dyn Fn(u16) -> Option<SocketAddr>,
) -> Option<SocketAddr> {
    let timeout = entry.affinity?;
    if r.now_ns.saturating_sub(r.entry.last_used_ns) > u64::from(timeout) * 1_000_000_000 {
        return None;
    }
    let backend = super::layout::Backend {
        addr: r.entry.addr,
        port: r.entry.port,
        pad: 0,
    }
    .socket_addr();
    let at = r.entry.slot;
    if r.entry.generation == entry.generation && at < entry.count && slot(at) == Some(backend) {
        return Some(backend);
    }
    (0..entry.count.min(AFFINITY_SCAN)).find_map(|i| (slot(i) == Some(backend)).then_some(backend))
}

/// The maps `plan` fills when written into empty maps: the planned side of a trace.
pub fn planned_maps(plan: &Plan) -> Maps {
    let empty = Maps::default();
    diff::applied(empty.clone(), &diff::diff(&empty, plan))
}

/// One frontend as a program resolves it: flags and the backends of its slots in order
/// (`None`: a slot missing), without the ids the maps happen to use.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Resolved {
    affinity: Option<u32>,
    drop: bool,
    slots: Vec<Option<SocketAddr>>,
}

fn resolve(maps: &Maps) -> BTreeMap<SvcKey, Resolved> {
    maps.svc
        .iter()
        .map(|(k, v)| {
            let e = Entry::of(v);
            let r = Resolved {
                affinity: e.affinity,
                drop: e.drop,
                slots: e.slots(maps),
            };
            (*k, r)
        })
        .collect()
}

/// How `kernel` differs from what `plan` fills, told per frontend as a program would meet
/// it (missing, extra, other backends, a slot missing, other flags) and per NodePort; empty
/// when a program would meet the plan everywhere. Slot set ids and generations are the
/// kernel's business and are not compared.
pub fn drift(kernel: &Maps, plan: &Plan) -> Vec<String> {
    let planned = planned_maps(plan);
    let owner: BTreeMap<SvcKey, String> = plan
        .frontends
        .iter()
        .map(|(f, set)| (diff::svc_key(f), set.port.to_string()))
        .collect();
    let (have, want) = (resolve(kernel), resolve(&planned));
    let name = |k: &SvcKey| {
        let proto = proto_name(k.proto);
        let at = SocketAddr::new(k.ip(), k.port());
        match owner.get(k) {
            Some(o) => format!("{proto} {at} ({o})"),
            None => format!("{proto} {at}"),
        }
    };
    let mut out = Vec::new();
    for (k, w) in &want {
        let Some(h) = have.get(k) else {
            out.push(format!(
                "kp_svc has no entry for {}: connect() to it is not balanced",
                name(k)
            ));
            continue;
        };
        let backends =
            |r: &Resolved| -> BTreeSet<SocketAddr> { r.slots.iter().flatten().copied().collect() };
        let (hb, wb) = (backends(h), backends(w));
        for b in wb.difference(&hb) {
            out.push(format!("{}: backend {b} is not in the kernel", name(k)));
        }
        for b in hb.difference(&wb) {
            out.push(format!("{}: backend {b} is not in the plan", name(k)));
        }
        let missing = h.slots.iter().filter(|s| s.is_none()).count();
        // A missing slot's backend is named above when no other slot holds it.
        if missing > 0 && wb.difference(&hb).next().is_none() {
            out.push(format!(
                "{}: {missing} of its {} slots are missing from kp_slot",
                name(k),
                h.slots.len()
            ));
        }
        if h.affinity != w.affinity {
            let t = |a: Option<u32>| a.map_or_else(|| "none".to_string(), |t| format!("{t} s"));
            out.push(format!(
                "{}: ClientIP affinity {} in the kernel, {} in the plan",
                name(k),
                t(h.affinity),
                t(w.affinity)
            ));
        }
        if h.drop != w.drop && h.slots.is_empty() && w.slots.is_empty() {
            let verdict = |drop: bool| if drop { "ETIMEDOUT" } else { "ECONNREFUSED" };
            out.push(format!(
                "{}: the kernel answers {}, the plan {}",
                name(k),
                verdict(h.drop),
                verdict(w.drop)
            ));
        }
    }
    for k in have.keys().filter(|k| !want.contains_key(k)) {
        out.push(format!("kp_svc entry {} is not in the plan", name(k)));
    }
    for k in planned.node_ports.difference(&kernel.node_ports) {
        out.push(format!(
            "kp_nodeport has no entry for NodePort {}/{}: a bind() to it is not refused",
            k.port,
            proto_name(k.proto)
        ));
    }
    for k in kernel.node_ports.difference(&planned.node_ports) {
        out.push(format!(
            "kp_nodeport entry {}/{} is not in the plan",
            k.port,
            proto_name(k.proto)
        ));
    }
    out
}

fn proto_name(proto: u8) -> String {
    match proto {
        IPPROTO_TCP => "TCP".to_string(),
        IPPROTO_UDP => "UDP".to_string(),
        p => format!("protocol {p}"),
    }
}

#[cfg(test)]
#[path = "trace_tests.rs"]
mod tests;
