//! Notices another program removing our virtual services (`ipvsadm -C`, a node agent's
//! cleanup, a second proxy), which IPVS announces to nobody: no netlink multicast group
//! carries IPVS changes, so the nf_tables monitor that watches our helper table cannot hear
//! it. Upstream's IPVS mode repairs such a flush only at its next `--ipvs-sync-period`.
//!
//! Once a [`INTERVAL`] the watch asks the kernel for a few of the virtual services we last
//! programmed ([`probes`]: the first and the last by key, one of each family when there are
//! both), each with a single `GET_SERVICE` answered by one message, so it costs the same at
//! 10 services and at 100,000. When one is gone and is still ours (the sync that deleted it
//! on purpose also republishes the [`Owners`]), it reports an outside change through
//! [`Drift`]: the runner starts a full sync, which re-reads the kernel and repairs. What it
//! cannot see: another program deleting a virtual service it does not probe; the periodic full
//! sync (`--ipvs-sync-period`) still repairs that.
//!
//! It also looks up [`LINK`]'s index each time (`if_nametoindex`, no netlink message): while we
//! own virtual services, the link gone, or replaced by another with no Service addresses,
//! leaves pods' and outside clients' packets to every ClusterIP unclaimed (they are no longer
//! local, so IPVS never sees them), and is reported the same way ([`LinkCheck`]). The steady
//! syncs trust what they last programmed, so without this only the next full sync would
//! notice; upstream re-creates the link at every sync.
//!
//! Runs on a thread of its own (the IPVS client is a blocking socket); the IPVS mode hands the
//! proxy a task that starts it with [`spawn`]. A socket that fails is reopened with a doubling
//! delay, and a probe that fails for another reason than `ESRCH` reports nothing.

use std::sync::Arc;
use std::time::Duration;

use super::backend::netlink::{Client, ServiceKey};
use super::names::LINK;
use super::traffic::{OwnerMap, Owners};
use crate::dataplane::monitor::Drift;

/// How often the watch probes.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// The longest wait before reopening a socket that keeps failing.
const REOPEN_MAX: Duration = Duration::from_secs(60);

/// The virtual services to probe: the first and the last of `owners` by key, and the same for
/// the other family when there is one. Pure.
pub fn probes(owners: &OwnerMap) -> Vec<ServiceKey> {
    let mut keys: Vec<ServiceKey> = Vec::with_capacity(4);
    let families = [crate::cluster::IpFamily::V4, crate::cluster::IpFamily::V6];
    for family in families {
        let mut of_family = owners.keys().filter(|k| k.family() == family);
        let first = of_family.next();
        let last = of_family.next_back();
        keys.extend(first.into_iter().chain(last).copied());
    }
    keys
}

/// Which of the `probed` virtual services the kernel no longer has but `owners` (read after the
/// probe) still holds: removed by someone else. `present` says what each probe found. Pure.
pub fn removed_by_others(
    probed: &[(ServiceKey, bool)],
    owners_after: &OwnerMap,
) -> Vec<ServiceKey> {
    probed
        .iter()
        .filter(|(key, present)| !present && owners_after.contains_key(key))
        .map(|(key, _)| *key)
        .collect()
}

/// Follows [`LINK`]'s interface index from one look to the next. Pure.
#[derive(Debug, Default)]
pub struct LinkCheck {
    seen: Option<u32>,
}

impl LinkCheck {
    /// Takes the index looked up now (`None`: no such link); true when it says the link was
    /// removed or replaced while `owning` virtual services. After a report the next index seen
    /// is taken as the link (the repair creates a new one).
    pub fn observe(&mut self, now: Option<u32>, owning: bool) -> bool {
        let before = std::mem::replace(&mut self.seen, now);
        owning
            && match (before, now) {
                (_, None) => true,
                (Some(a), Some(b)) => a != b,
                (None, Some(_)) => false,
            }
    }
}

/// Starts the watch on a thread named `ipvs-watch`, in the caller's network namespace.
pub fn spawn(owners: Owners, drift: Arc<Drift>) {
    let started = std::thread::Builder::new()
        .name("ipvs-watch".to_owned())
        .spawn(move || run(owners, &drift));
    if let Err(error) = started {
        tracing::warn!(%error, "cannot start the IPVS watch; a flushed IPVS table is repaired at the next full sync only");
    }
}

fn run(owners: Owners, drift: &Drift) {
    let mut client: Option<Client> = None;
    let mut reopen_delay = INTERVAL;
    let mut link = LinkCheck::default();
    loop {
        std::thread::sleep(INTERVAL);
        let index = nix::net::if_::if_nametoindex(LINK).ok();
        if link.observe(index, !owners.current().is_empty()) {
            tracing::info!(
                link = LINK,
                "{LINK} was removed or replaced by another program; syncing fully"
            );
            drift.notice();
            wait_for_republish(&owners);
            link = LinkCheck::default();
            continue;
        }
        let c = match client.as_mut() {
            Some(c) => c,
            None => match Client::open(None) {
                Ok(c) => {
                    reopen_delay = INTERVAL;
                    client.insert(c)
                }
                Err(error) => {
                    tracing::warn!(%error, retry_in = %crate::go_duration::GoDuration(reopen_delay), "IPVS watch: cannot open an IPVS socket");
                    std::thread::sleep(reopen_delay);
                    reopen_delay = (reopen_delay * 2).min(REOPEN_MAX);
                    continue;
                }
            },
        };
        let mut probed = Vec::new();
        let mut failed = false;
        for key in probes(&owners.current()) {
            match c.service(&key) {
                Ok(found) => probed.push((key, found.is_some())),
                Err(error) => {
                    tracing::debug!(%error, "IPVS watch: probe failed; reopening");
                    failed = true;
                    break;
                }
            }
        }
        if failed {
            client = None;
            continue;
        }
        let removed = removed_by_others(&probed, &owners.current());
        if let Some(first) = removed.first() {
            tracing::info!(service = %first, removed = removed.len(),
                "another program removed our IPVS virtual services; syncing fully");
            drift.notice();
            // One notice per removal: wait for the full sync to republish before probing
            // again, so a slow repair is not reported every second.
            wait_for_republish(&owners);
        }
    }
}

/// Waits (up to a minute) until the owners change from what they are now, i.e. a sync
/// published again after the repair.
fn wait_for_republish(owners: &Owners) {
    let before = owners.current();
    for _ in 0..60 {
        std::thread::sleep(INTERVAL);
        if !Arc::ptr_eq(&before, &owners.current()) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::ServicePortName;
    use crate::dataplane::ipvs::backend::netlink::Protocol;
    use crate::dataplane::ipvs::desired::Frontend;

    fn key(addr: &str) -> ServiceKey {
        ServiceKey::Address {
            protocol: Protocol::Tcp,
            address: addr.parse().expect("a socket address"),
        }
    }

    fn owners(keys: &[ServiceKey]) -> OwnerMap {
        keys.iter()
            .map(|k| {
                let port = ServicePortName {
                    service: crate::cluster::ServiceKey::new("ns", "svc"),
                    port: "p".into(),
                    protocol: crate::cluster::Protocol::Tcp,
                };
                (*k, (port, Frontend::ClusterIp))
            })
            .collect()
    }

    #[test]
    fn probes_the_first_and_last_of_each_family() {
        let keys = [
            key("10.0.0.3:80"),
            key("10.0.0.1:80"),
            key("10.0.0.2:80"),
            key("[fd00::1]:80"),
        ];
        let got = probes(&owners(&keys));
        assert_eq!(
            got,
            vec![key("10.0.0.1:80"), key("10.0.0.3:80"), key("[fd00::1]:80")]
        );
        assert!(probes(&OwnerMap::new()).is_empty());
    }

    #[test]
    fn the_link_gone_or_replaced_is_reported_while_we_own_services() {
        let mut check = LinkCheck::default();
        assert!(
            !check.observe(Some(4), true),
            "the first look only learns the link"
        );
        assert!(!check.observe(Some(4), true));
        assert!(check.observe(None, true), "deleted");
        let mut check = LinkCheck::default();
        check.observe(Some(4), true);
        assert!(
            check.observe(Some(9), true),
            "re-created, without our addresses"
        );
        assert!(
            !check.observe(Some(9), true),
            "the new link, once reported, is the link"
        );
        let mut idle = LinkCheck::default();
        assert!(
            !idle.observe(None, false),
            "nothing owned: nothing to repair"
        );
        assert!(!idle.observe(Some(3), false));
        assert!(!idle.observe(None, false));
    }

    #[test]
    fn a_missing_service_counts_only_while_it_is_still_ours() {
        let a = key("10.0.0.1:80");
        let b = key("10.0.0.2:80");
        let after = owners(&[a]);
        // `a` gone and still ours: someone else. `b` gone and no longer ours: our own sync
        // deleted it between the probe and the reading.
        assert_eq!(
            removed_by_others(&[(a, false), (b, false)], &after),
            vec![a]
        );
        assert!(removed_by_others(&[(a, true)], &after).is_empty());
    }
}
