//! What to send so the kernel holds the plan: IPVS requests from the kernel's services (as
//! listed, or as last programmed) and the [`Desired`] state, with graceful termination.
//!
//! Pure. The rules, in upstream's terms where they are the same:
//! - A planned service the kernel lacks is added with its destinations; one whose scheduler,
//!   flags or persistence differ is updated in place (`SET_SERVICE`: its connections stay).
//! - A kernel service of the family that no plan has is deleted, unless it is in
//!   `excludeCIDRs` (someone else's) or is a firewall-mark service (the planner makes none, so
//!   it is someone else's too).
//! - A destination that left the plan is drained: a TCP one first goes to weight 0, so it takes
//!   no new connections and keeps its own, and is deleted once it has none (active + inactive)
//!   or has drained for [`ModeConfig::drain_limit`]; UDP and SCTP ones are deleted at once, as
//!   upstream does (their flows move on their next packet with `expire_nodest_conn`, and
//!   conntrack's stale entries are cleared by the reconciler). A destination back in the plan
//!   gets its weight again. After a restart the kernel's weight-0 destinations that the plan
//!   still has are set back to weight 1 (upstream #92019) and the others keep draining.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use super::backend::netlink::{
    Destination, ListedDestination, Protocol, Request, Service, ServiceKey,
};
use super::desired::{Desired, VirtualService};
use super::mode_config::ModeConfig;

/// The kernel's IPVS state of one family, as read back or as last programmed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Kernel {
    pub services: BTreeMap<ServiceKey, KernelService>,
}

/// One kernel service with its destinations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelService {
    pub service: Service,
    pub destinations: BTreeMap<SocketAddr, ListedDestination>,
}

impl Kernel {
    /// What the kernel holds once it accepted `request`: how the applier keeps "last
    /// programmed" without reading it back. A new destination starts with no connections.
    pub fn apply(&mut self, request: &Request) {
        let listed = |d: &Destination| ListedDestination {
            destination: *d,
            active_connections: 0,
            inactive_connections: 0,
            persistent_connections: 0,
            stats: Default::default(),
        };
        match request {
            Request::NewService(s) | Request::SetService(s) => {
                let entry = self.services.entry(s.key).or_insert_with(|| KernelService {
                    service: s.clone(),
                    destinations: BTreeMap::new(),
                });
                entry.service = s.clone();
            }
            Request::DelService(key) => {
                self.services.remove(key);
            }
            Request::NewDest(key, d) => {
                if let Some(s) = self.services.get_mut(key) {
                    s.destinations.insert(d.address, listed(d));
                }
            }
            Request::SetDest(key, d) => {
                if let Some(l) = self
                    .services
                    .get_mut(key)
                    .and_then(|s| s.destinations.get_mut(&d.address))
                {
                    l.destination = *d;
                }
            }
            Request::DelDest(key, addr) => {
                if let Some(s) = self.services.get_mut(key) {
                    s.destinations.remove(addr);
                }
            }
            Request::GetServices
            | Request::GetService(_)
            | Request::GetDests(_)
            | Request::SetConfig(_)
            | Request::GetConfig
            | Request::Flush => {}
        }
    }
}

/// A destination at weight 0 waiting for its connections to end.
pub type Drain = (ServiceKey, SocketAddr);

/// The requests of one sync, and the destinations still draining after it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diff {
    /// In order: a service before its destinations.
    pub requests: Vec<Request>,
    /// Every destination at weight 0 that is not ours any more, as it stands after
    /// `requests` (including those set to 0 by them).
    pub draining: Vec<Drain>,
}

/// The requests that take `kernel` to `want`. `drained_for`: how long each draining
/// destination has been at weight 0, as the applier measured it (missing: it just started).
pub fn diff(
    kernel: &Kernel,
    want: &Desired,
    cfg: &ModeConfig,
    drained_for: &BTreeMap<Drain, Duration>,
) -> Diff {
    let mut out = Diff::default();
    for (key, vs) in &want.services {
        service(
            &mut out,
            *key,
            kernel.services.get(key),
            vs,
            cfg,
            drained_for,
        );
    }
    for key in kernel.services.keys() {
        if !want.services.contains_key(key) && ours(key, want, cfg) {
            out.requests.push(Request::DelService(*key));
        }
    }
    out
}

/// [`diff`] of the virtual services `keys` alone, in the same order. It equals the whole
/// diff when every other service in `kernel` is as `want` has it and drains nothing: what
/// the applier knows of the services a sync did not touch, so a one-endpoint change costs
/// one service's work, not the cluster's.
pub fn diff_only(
    kernel: &Kernel,
    want: &Desired,
    keys: &BTreeSet<ServiceKey>,
    cfg: &ModeConfig,
    drained_for: &BTreeMap<Drain, Duration>,
) -> Diff {
    let mut out = Diff::default();
    let mut deleted = Vec::new();
    for key in keys {
        match want.services.get(key) {
            Some(vs) => service(
                &mut out,
                *key,
                kernel.services.get(key),
                vs,
                cfg,
                drained_for,
            ),
            None if kernel.services.contains_key(key) && ours(key, want, cfg) => {
                deleted.push(Request::DelService(*key));
            }
            None => {}
        }
    }
    out.requests.extend(deleted);
    out
}

/// The requests for one planned virtual service: added with its destinations when the
/// kernel lacks it, else updated in place and its destinations brought to the plan.
fn service(
    out: &mut Diff,
    key: ServiceKey,
    have: Option<&KernelService>,
    vs: &VirtualService,
    cfg: &ModeConfig,
    drained_for: &BTreeMap<Drain, Duration>,
) {
    let Some(have) = have else {
        out.requests.push(Request::NewService(vs.service.clone()));
        for d in &vs.destinations {
            out.requests.push(Request::NewDest(key, *d));
        }
        return;
    };
    if have.service != vs.service {
        out.requests.push(Request::SetService(vs.service.clone()));
    }
    let mut wanted: BTreeMap<SocketAddr, &Destination> = BTreeMap::new();
    for d in &vs.destinations {
        wanted.insert(d.address, d);
        match have.destinations.get(&d.address) {
            None => out.requests.push(Request::NewDest(key, *d)),
            Some(l) if l.destination != *d => out.requests.push(Request::SetDest(key, *d)),
            Some(_) => {}
        }
    }
    for (addr, l) in &have.destinations {
        if !wanted.contains_key(addr) {
            drain(out, key, l, cfg, drained_for.get(&(key, *addr)));
        }
    }
}

/// Whether a kernel service no plan has is ours to delete.
fn ours(key: &ServiceKey, want: &Desired, cfg: &ModeConfig) -> bool {
    match key {
        ServiceKey::Address { address, .. } => {
            key.family() == want.family && !cfg.excluded(&address.ip())
        }
        ServiceKey::Fwmark { .. } => false,
    }
}

/// One destination that left the plan (see the module doc).
fn drain(
    out: &mut Diff,
    key: ServiceKey,
    l: &ListedDestination,
    cfg: &ModeConfig,
    drained_for: Option<&Duration>,
) {
    let addr = l.destination.address;
    let graceful = matches!(
        key,
        ServiceKey::Address {
            protocol: Protocol::Tcp,
            ..
        } | ServiceKey::Fwmark { .. }
    );
    if !graceful {
        out.requests.push(Request::DelDest(key, addr));
        return;
    }
    if l.destination.weight != 0 {
        out.requests.push(Request::SetDest(
            key,
            Destination {
                weight: 0,
                ..l.destination
            },
        ));
        out.draining.push((key, addr));
        return;
    }
    let idle = l.active_connections == 0 && l.inactive_connections == 0;
    let too_long = drained_for.is_some_and(|d| *d >= cfg.drain_limit);
    if idle || too_long {
        out.requests.push(Request::DelDest(key, addr));
    } else {
        out.draining.push((key, addr));
    }
}

#[cfg(test)]
mod tests;
