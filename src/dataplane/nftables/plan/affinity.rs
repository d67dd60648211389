//! The chain of an endpoint list with ClientIP affinity (`sessionAffinity: ClientIP`).
//!
//! Pure. The one place the layout has a chain per Service, because nftables cannot choose which
//! dynamic set a rule updates from the packet (nft 1.0.6 also refuses a map lookup as the data of
//! an `update`, which rules out a single shared client → endpoint map). Affinity Services are
//! few, so their chains do not threaten scale.
//!
//! Behaviour (upstream's, in our words): a client that reached an endpoint within the timeout
//! reaches it again, and every new connection refreshes the timeout; affinity is per service
//! port and client address, whichever frontend of the list was used. Per endpoint, a dynamic
//! set remembers the clients sent to it, named by the endpoint, so the sets of endpoints that
//! stay survive changes to the others. Choosing is one rule per endpoint with probability
//! 1/(remaining), which is uniform, instead of one chain per endpoint.

use super::Builder;
use crate::cluster::model::{FamilyView, ServicePort};
use crate::dataplane::nftables::names::{self as n, ListKind};
use crate::nft::Name;
use crate::nft::ruleset::{Chain, DataKind, Field, Kind, Match, Rule, Set, SetDecl, Statement};

/// The affinity chain of one list, created on first use and shared by every frontend of it.
pub(super) fn chain(
    b: &mut Builder,
    port: &ServicePort,
    view: &FamilyView,
    list: ListKind,
    indices: &[u32],
    timeout: u32,
) -> Name {
    let seed = format!(
        "{}/{}/{}/{}",
        port.name,
        port.name.protocol,
        view.family,
        list.as_str()
    );
    let name = unique(b, &seed);
    if b.rules.chains.contains_key(&name) {
        return name;
    }
    let proto = port.name.protocol;
    let mut remembered = Vec::new();
    let mut choose = Vec::new();
    let count = indices.len() as u32;
    let mut used: Vec<Name> = Vec::new();
    for (i, &ix) in indices.iter().enumerate() {
        let ep = &view.endpoints[ix as usize];
        let mut set = n::affinity_set(&name, &ep.to_string());
        let mut salt = 0;
        while used.contains(&set) {
            salt += 1;
            set = n::affinity_set(&name, &format!("{ep}#{salt}"));
        }
        used.push(set.clone());
        b.rules.sets.insert(
            set.clone(),
            Set::new(SetDecl {
                key: vec![Kind::Addr],
                data: DataKind::None,
                interval: false,
                dynamic_timeout: Some(timeout),
                comment: None,
            }),
        );
        let dnat = Statement::DnatTo {
            protocol: proto,
            addr: ep.ip,
            port: ep.port,
        };
        let act = vec![Statement::RememberSource(set.clone()), dnat];
        remembered.push(Rule::new(
            vec![Match::InSet {
                key: vec![Field::Saddr],
                set,
                negate: false,
            }],
            act.clone(),
        ));
        let left = count - i as u32;
        let chance = if left > 1 {
            vec![Match::OneIn(left)]
        } else {
            vec![]
        };
        choose.push(Rule::new(chance, act));
    }
    remembered.extend(choose);
    b.rules.chains.insert(
        name.clone(),
        Chain {
            base: None,
            rules: remembered,
        },
    );
    name
}

/// The chain name for `seed`; a hash already taken by another seed gets a salted hash, so two
/// lists never share a chain (the first in snapshot order keeps the plain one).
fn unique(b: &mut Builder, seed: &str) -> Name {
    let mut salt = 0u32;
    loop {
        let salted = if salt == 0 {
            seed.to_string()
        } else {
            format!("{seed}#{salt}")
        };
        let name = n::affinity_chain(&salted);
        match b.affinity_seeds.get(&name) {
            Some(owner) if *owner != seed => salt += 1,
            Some(_) => return name,
            None => {
                b.affinity_seeds.insert(name.clone(), seed.to_string());
                return name;
            }
        }
    }
}
