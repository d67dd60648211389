//! Which service ports add each element key, so the [`Planner`](super::Planner) can tell whose
//! data a key carries after one of them changes.
//!
//! Pure. The full plan keeps, of several ports adding the same key to a set (ports of one
//! Service sharing a ClusterIP in `cluster-ips`, a pod behind several Services in
//! `hairpin-connections`, or two Services claiming one external IP and port), the data of the
//! first in snapshot order. Claims record every claimant in that order, so removing or adding
//! one port's keys yields the same winner the full plan would choose.
//!
//! Keys of the backends maps (frontend . index → endpoint), one per endpoint and so most of a
//! large table, are not claimed: only ports adding their frontend to its treatment set can add
//! them, so the claimants of the frontend there are theirs too (see [`frontend_of`]). Claiming
//! them as well cost about 130 bytes per endpoint (a 48-byte key, its claim and the hash map's
//! slack), a quarter of the steady memory at 250,000 endpoints.

use std::collections::HashMap;
use std::sync::Arc;

use crate::cluster::ServicePortState;
use crate::dataplane::nftables::names as n;
use crate::nft::Name;
use crate::nft::ruleset::{Tuple, Value};

/// Hash maps keyed by our own values; foldhash is fast on them and seeded per process.
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// The ports adding one key, first in snapshot order first. Almost every key has one.
#[derive(Debug)]
enum Claim {
    One(Arc<ServicePortState>),
    Many(Vec<Arc<ServicePortState>>),
}

/// Claimants per set and key.
#[derive(Debug, Default)]
pub(super) struct Claims {
    sets: Map<Name, Map<Tuple, Claim>>,
}

/// Who holds a key after a claim was dropped.
pub(super) enum Holder {
    /// Nobody: the key leaves the set.
    None,
    /// The same port as before.
    Same,
    /// Another port now comes first; its data is the key's data.
    Next(Arc<ServicePortState>),
}

impl Claims {
    /// Records that `port` adds `key` to `set`; true when it now comes first (its data wins).
    pub fn add(&mut self, set: &Name, key: Tuple, port: &Arc<ServicePortState>) -> bool {
        let claims = match self.sets.get_mut(set) {
            Some(c) => c,
            None => self.sets.entry(set.clone()).or_default(),
        };
        let Some(claim) = claims.get_mut(&key) else {
            claims.insert(key, Claim::One(port.clone()));
            return true;
        };
        let mut all = match std::mem::replace(claim, Claim::Many(Vec::new())) {
            Claim::One(first) => vec![first],
            Claim::Many(all) => all,
        };
        let at = all.partition_point(|p| p.port.name < port.port.name);
        debug_assert!(all.get(at).is_none_or(|p| p.port.name != port.port.name));
        all.insert(at, port.clone());
        *claim = Claim::Many(all);
        at == 0
    }

    /// The ports adding `key` to `set`, first in snapshot order first; empty when none does.
    pub fn claimants(&self, set: &Name, key: &Tuple) -> &[Arc<ServicePortState>] {
        match self.sets.get(set).and_then(|claims| claims.get(key)) {
            None => &[],
            Some(Claim::One(port)) => std::slice::from_ref(port),
            Some(Claim::Many(all)) => all,
        }
    }

    /// Drops the claim of the port called like `port` on `key` in `set`.
    pub fn remove(&mut self, set: &Name, key: &Tuple, port: &ServicePortState) -> Holder {
        let Some(claims) = self.sets.get_mut(set) else {
            debug_assert!(false, "no claims in {set}");
            return Holder::None;
        };
        match claims.get_mut(key) {
            None => {
                debug_assert!(false, "no claim on {key:?} in {set}");
                Holder::None
            }
            Some(Claim::One(_)) => {
                claims.remove(key);
                Holder::None
            }
            Some(Claim::Many(all)) => {
                let Some(at) = all.iter().position(|p| p.port.name == port.port.name) else {
                    debug_assert!(false, "{} holds no claim on {key:?}", port.port.name);
                    return Holder::Same;
                };
                all.remove(at);
                let first = all[0].clone();
                if all.len() == 1 {
                    claims.insert(*key, Claim::One(first.clone()));
                }
                if at == 0 {
                    Holder::Next(first)
                } else {
                    Holder::Same
                }
            }
        }
    }
}

/// The treatment set and frontend key a backends map's key (frontend . index) belongs to: the
/// ports that can add that key are among those adding the frontend to that set, in the same
/// order.
pub(super) fn frontend_of(backends_key: &Tuple) -> (Name, Tuple) {
    let values = backends_key.values();
    let (index, frontend) = values
        .split_last()
        .expect("a backends key ends with an index");
    debug_assert!(matches!(index, Value::Index(_)), "{backends_key:?}");
    let treatments = match frontend.first() {
        Some(Value::Addr(_)) => n::SERVICE_IPS,
        _ => n::SERVICE_NODEPORTS,
    };
    (Name::fixed(treatments), Tuple::new(frontend))
}
