//! The map writes that turn what the maps hold into what a [`Plan`] wants, in an order that
//! never lets a socket program see a mix of a slot set's old and new backends.
//!
//! Pure: (current maps, plan) → [`Op`]s, no I/O, never fails. The order:
//! 1. every slot of a changed slot set is written under the set's *other* generation, which no
//!    frontend points at yet;
//! 2. each frontend entry is written once with the new generation and count: one map update,
//!    which the kernel makes atomic per element, moves every new connection at once;
//! 3. frontends no longer wanted are deleted;
//! 4. slots no frontend points at any more (the old generation, gone sets) are deleted.
//!
//! loadBalancerSourceRanges entries go in before everything else (a range before the marker
//! that restricts its frontend, so allowed clients are never dropped in between) and out
//! after the frontends.
//!
//! Slot set ids are kept across syncs and restarts: a set reuses the id its frontends already
//! point at, so an unchanged set costs no write. A new set takes the lowest id no entry uses.

use std::collections::{BTreeMap, BTreeSet};

use super::layout::{
    Backend, IPPROTO_TCP, IPPROTO_UDP, NpKey, SVC_F_AFFINITY, SVC_F_DROP, SVC_F_RESTRICTED,
    SVC_F_SNAT, SlotKey, SrcKey, SvcKey, SvcVal,
};
use super::plan::{Frontend, Plan, Scope, SetName, Transport};

/// What the two maps the proxy writes hold (or will hold).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Maps {
    pub svc: BTreeMap<SvcKey, SvcVal>,
    pub slots: BTreeMap<SlotKey, Backend>,
    /// `kp_nodeport`'s keys.
    pub node_ports: BTreeSet<NpKey>,
    /// `kp_src`'s keys (loadBalancerSourceRanges).
    pub src: BTreeSet<SrcKey>,
}

/// One map write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    PutSlot(SlotKey, Backend),
    PutSvc(SvcKey, SvcVal),
    DelSvc(SvcKey),
    DelSlot(SlotKey),
    PutNodePort(NpKey),
    DelNodePort(NpKey),
    /// A source range (value 1) or the marker restricting a frontend (value 0).
    PutSrc(SrcKey),
    DelSrc(SrcKey),
}

/// The value a `kp_src` entry holds: 1 lets the range in, 0 (the marker) restricts.
pub fn src_value(k: &SrcKey) -> u8 {
    u8::from(k.prefixlen > super::layout::SRC_FRONTEND_BITS)
}

/// The frontend's key in `kp_svc`.
pub fn svc_key(f: &Frontend) -> SvcKey {
    let proto = match f.transport {
        Transport::Tcp => IPPROTO_TCP,
        Transport::Udp => IPPROTO_UDP,
    };
    let key = SvcKey::new(f.ip, f.port, proto);
    match f.scope {
        Scope::Socket => key,
        Scope::External => key.external(),
    }
}

/// The `kp_src` entries of `plan`: per restricted frontend, its marker and its ranges.
fn src_keys(plan: &Plan) -> BTreeSet<SrcKey> {
    let mut out = BTreeSet::new();
    for (f, ranges) in &plan.source_ranges {
        let key = svc_key(f);
        out.insert(SrcKey::restricted(&key));
        out.extend(ranges.iter().map(|r| SrcKey::range(&key, r)));
    }
    out
}

/// A NodePort's key in `kp_nodeport`.
pub fn np_key(port: u16, transport: Transport) -> NpKey {
    let proto = match transport {
        Transport::Tcp => IPPROTO_TCP,
        Transport::Udp => IPPROTO_UDP,
    };
    NpKey {
        port,
        proto,
        pad: 0,
    }
}

/// The writes that make `current` into `plan`'s contents, in the order above.
pub fn diff(current: &Maps, plan: &Plan) -> Vec<Op> {
    let mut taken: BTreeSet<u32> = current.svc.values().map(|v| v.svc_id).collect();
    taken.extend(current.slots.keys().map(|k| k.svc_id));
    diff_with(current, plan, &|id| taken.contains(&id))
}

/// The writes that make the service ports of `part` (a plan of some service ports only) what
/// it says, given `held`, all the maps hold, and `old`, the frontends those service ports had
/// in the previous plan. Costs what those ports hold, not what the maps hold. A frontend of
/// `part` that another service port owns in the maps stays that port's (a full sync decides
/// such a clash by the snapshot's order).
///
/// Returns the writes and `part` without such frontends: what the service ports now hold.
pub fn diff_ports(held: &Held, part: &Plan, old: &[SvcKey], old_np: &[NpKey]) -> (Vec<Op>, Plan) {
    let old_keys: BTreeSet<&SvcKey> = old.iter().collect();
    let mut current = Maps {
        node_ports: old_np
            .iter()
            .filter(|k| held.maps.node_ports.contains(k))
            .copied()
            .collect(),
        src: held
            .maps
            .src
            .iter()
            .filter(|k| old_keys.contains(&k.frontend()))
            .copied()
            .collect(),
        ..Maps::default()
    };
    for k in old {
        if let Some(v) = held.maps.svc.get(k) {
            current.svc.insert(*k, *v);
            for slot in 0..v.count {
                let key = SlotKey {
                    svc_id: v.svc_id,
                    slot,
                    generation: v.generation,
                    pad: 0,
                };
                if let Some(b) = held.maps.slots.get(&key) {
                    current.slots.insert(key, *b);
                }
            }
        }
    }
    let mut part = part.clone();
    part.frontends.retain(|f, _| {
        !held.maps.svc.contains_key(&svc_key(f)) || current.svc.contains_key(&svc_key(f))
    });
    let kept = &part.frontends;
    part.source_ranges.retain(|f, _| kept.contains_key(f));
    let ops = diff_with(&current, &part, &|id| held.refs.contains_key(&id));
    (ops, part)
}

/// What the maps hold, with how many frontends use each slot set id, kept up to date op by op
/// so an incremental sync need not scan the maps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Held {
    pub maps: Maps,
    pub refs: BTreeMap<u32, u32>,
}

impl Held {
    pub fn new(maps: Maps) -> Held {
        let mut refs = BTreeMap::new();
        for v in maps.svc.values() {
            *refs.entry(v.svc_id).or_insert(0) += 1;
        }
        // Slots no frontend points at (left by a failed sync) still hold their id.
        for k in maps.slots.keys() {
            refs.entry(k.svc_id).or_insert(0);
        }
        Held { maps, refs }
    }

    /// Takes `ops` as the kernel did.
    pub fn apply(&mut self, ops: &[Op]) {
        for op in ops {
            match *op {
                Op::PutSlot(k, v) => {
                    self.maps.slots.insert(k, v);
                }
                Op::PutSvc(k, v) => {
                    if let Some(old) = self.maps.svc.insert(k, v) {
                        self.release(old.svc_id);
                    }
                    *self.refs.entry(v.svc_id).or_insert(0) += 1;
                }
                Op::DelSvc(k) => {
                    if let Some(old) = self.maps.svc.remove(&k) {
                        self.release(old.svc_id);
                    }
                }
                Op::DelSlot(k) => {
                    self.maps.slots.remove(&k);
                }
                Op::PutNodePort(k) => {
                    self.maps.node_ports.insert(k);
                }
                Op::DelNodePort(k) => {
                    self.maps.node_ports.remove(&k);
                }
                Op::PutSrc(k) => {
                    self.maps.src.insert(k);
                }
                Op::DelSrc(k) => {
                    self.maps.src.remove(&k);
                }
            }
        }
    }

    fn release(&mut self, id: u32) {
        if let Some(n) = self.refs.get_mut(&id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.refs.remove(&id);
            }
        }
    }
}

/// [`diff`] over `current`, taking new ids only where `taken` says no entry uses them.
fn diff_with(current: &Maps, plan: &Plan, taken: &dyn Fn(u32) -> bool) -> Vec<Op> {
    // Each set's frontends, and the flags of the frontend's own: source NAT for its new flows
    // from outside, source ranges for the sockets it translates (those of its twin from
    // outside).
    let mut frontends_of: BTreeMap<&SetName, Vec<(SvcKey, u8)>> = BTreeMap::new();
    for (f, set) in &plan.frontends {
        let mut own = 0;
        if plan.snat.contains(f) {
            own |= SVC_F_SNAT;
        }
        let outside = Frontend {
            scope: Scope::External,
            ..*f
        };
        if f.scope == Scope::Socket && plan.source_ranges.contains_key(&outside) {
            own |= SVC_F_RESTRICTED;
        }
        frontends_of.entry(set).or_default().push((svc_key(f), own));
    }
    let mut claimed = BTreeSet::new();
    let mut next_free = 1u32;

    let (mut put_slots, mut put_svc) = (Vec::new(), Vec::new());
    let mut wanted_svc: BTreeMap<SvcKey, SvcVal> = BTreeMap::new();
    for (set, keys) in &frontends_of {
        let backends: Vec<Backend> = plan
            .sets
            .get(*set)
            .map(|b| b.iter().copied().map(Backend::new).collect())
            .unwrap_or_default();
        // The id (and generation) one of its frontends already uses, unless another set claimed it.
        let existing = keys
            .iter()
            .filter_map(|(k, _)| current.svc.get(k))
            .find(|v| !claimed.contains(&v.svc_id))
            .copied();
        let (mut flags, affinity_timeout) = match plan.affinity.get(*set) {
            Some(&t) => (SVC_F_AFFINITY, t),
            None => (0, 0),
        };
        if plan.drop.contains(*set) {
            flags |= SVC_F_DROP;
        }
        let val = match existing {
            Some(old) if slots_of(current, old) == backends => SvcVal {
                flags,
                affinity_timeout,
                ..old
            },
            Some(old) => {
                let generation = old.generation ^ 1;
                write_slots(&mut put_slots, old.svc_id, generation, &backends);
                SvcVal {
                    svc_id: old.svc_id,
                    count: count(&backends),
                    flags,
                    generation,
                    affinity_timeout,
                }
            }
            None => {
                while taken(next_free) || claimed.contains(&next_free) {
                    next_free += 1;
                }
                let id = next_free;
                write_slots(&mut put_slots, id, 0, &backends);
                SvcVal {
                    svc_id: id,
                    count: count(&backends),
                    flags,
                    generation: 0,
                    affinity_timeout,
                }
            }
        };
        claimed.insert(val.svc_id);
        for &(k, own) in keys {
            let val = SvcVal {
                flags: val.flags | own,
                ..val
            };
            if current.svc.get(&k) != Some(&val) {
                put_svc.push(Op::PutSvc(k, val));
            }
            wanted_svc.insert(k, val);
        }
    }

    let del_svc = current
        .svc
        .keys()
        .filter(|k| !wanted_svc.contains_key(k))
        .map(|k| Op::DelSvc(*k));
    let live: BTreeSet<(u32, u8)> = wanted_svc
        .values()
        .map(|v| (v.svc_id, v.generation))
        .collect();
    let counts: BTreeMap<u32, u16> = wanted_svc.values().map(|v| (v.svc_id, v.count)).collect();
    let del_slots = current
        .slots
        .keys()
        .filter(|k| !live.contains(&(k.svc_id, k.generation)) || k.slot >= counts[&k.svc_id])
        .map(|k| Op::DelSlot(*k));

    let wanted_np: BTreeSet<NpKey> = plan
        .node_port_numbers
        .keys()
        .map(|&(port, transport)| np_key(port, transport))
        .collect();
    let put_np = wanted_np
        .difference(&current.node_ports)
        .map(|k| Op::PutNodePort(*k));
    let del_np = current
        .node_ports
        .difference(&wanted_np)
        .map(|k| Op::DelNodePort(*k));

    let wanted_src = src_keys(plan);
    // Ranges before markers: a frontend is restricted only once its ranges are in.
    let (markers, ranges): (Vec<SrcKey>, Vec<SrcKey>) = wanted_src
        .difference(&current.src)
        .partition(|k| src_value(k) == 0);
    let put_src = ranges.into_iter().chain(markers).map(Op::PutSrc);
    let del_src = current.src.difference(&wanted_src).map(|k| Op::DelSrc(*k));

    let mut ops: Vec<Op> = put_src.collect();
    ops.extend(put_slots);
    ops.extend(put_svc);
    ops.extend(del_svc);
    ops.extend(del_slots);
    ops.extend(del_src);
    ops.extend(put_np);
    ops.extend(del_np);
    ops
}

/// `maps` after `ops`: what the kernel holds once they all succeeded.
pub fn applied(mut maps: Maps, ops: &[Op]) -> Maps {
    for op in ops {
        match *op {
            Op::PutSlot(k, v) => {
                maps.slots.insert(k, v);
            }
            Op::PutSvc(k, v) => {
                maps.svc.insert(k, v);
            }
            Op::DelSvc(k) => {
                maps.svc.remove(&k);
            }
            Op::DelSlot(k) => {
                maps.slots.remove(&k);
            }
            Op::PutNodePort(k) => {
                maps.node_ports.insert(k);
            }
            Op::DelNodePort(k) => {
                maps.node_ports.remove(&k);
            }
            Op::PutSrc(k) => {
                maps.src.insert(k);
            }
            Op::DelSrc(k) => {
                maps.src.remove(&k);
            }
        }
    }
    maps
}

/// The backends a frontend entry points at now, in slot order.
fn slots_of(maps: &Maps, v: SvcVal) -> Vec<Backend> {
    (0..v.count)
        .map_while(|slot| {
            let key = SlotKey {
                svc_id: v.svc_id,
                slot,
                generation: v.generation,
                pad: 0,
            };
            maps.slots.get(&key).copied()
        })
        .collect()
}

fn write_slots(ops: &mut Vec<Op>, svc_id: u32, generation: u8, backends: &[Backend]) {
    for (slot, b) in (0..=u16::MAX).zip(backends) {
        ops.push(Op::PutSlot(
            SlotKey {
                svc_id,
                slot,
                generation,
                pad: 0,
            },
            *b,
        ));
    }
}

/// Slot count; a set is capped at u16::MAX backends (far above any EndpointSlice total the
/// API server allows per Service port in practice).
fn count(backends: &[Backend]) -> u16 {
    u16::try_from(backends.len()).unwrap_or(u16::MAX)
}

#[cfg(test)]
mod tests;
