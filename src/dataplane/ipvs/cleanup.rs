//! What `--cleanup` removes of the IPVS mode, as upstream's does: every IPVS virtual service of
//! the network namespace (upstream flushes them all) and the `kube-ipvs0` dummy link with the
//! addresses on it. A kernel without IPVS, or without the link, has nothing to remove.

use super::backend::link;
use super::backend::netlink as ipvs;
use super::names;
use crate::dataplane::cleanup::Report;

/// How a [`Report`] names the IPVS virtual services removed.
pub const SERVICES: &str = "IPVS virtual services";

/// How a [`Report`] names the dummy link once removed.
pub fn removed_link() -> String {
    format!("link {}", names::LINK)
}

/// Removes the IPVS leftovers in the named network namespace (or ours) and says so in `report`.
pub fn remove(netns: Option<&str>, report: &mut Report) {
    match ipvs::Client::open(netns) {
        Ok(mut client) => {
            let count = client.services().map(|s| s.len());
            match client.flush() {
                Ok(()) => report.removed(SERVICES, count.unwrap_or(0)),
                Err(e) => report.errors.push(format!("IPVS flush: {e}")),
            }
        }
        // No IPVS family: the module is not loaded and cannot be, so nothing is there.
        Err(ipvs::Error::Family(_)) => tracing::debug!("--cleanup: no IPVS here"),
        Err(e) => report.errors.push(format!("IPVS: {e}")),
    }
    match link::Client::open(netns).and_then(|mut c| c.delete_dummy(names::LINK)) {
        Ok(removed) => report.removed(removed_link(), usize::from(removed)),
        Err(e) => report.errors.push(format!("{}: {e}", names::LINK)),
    }
}
