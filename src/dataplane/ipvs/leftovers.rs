//! The IPVS mode's `kube-ipvs0` link a proxy leaves on a node (upstream's IPVS mode has the same
//! name): found over rtnetlink; removed with every virtual service as `--cleanup` removes them
//! ([`super::cleanup`]).

use super::backend::link;
use super::names::LINK as LINK_NAME;
use crate::dataplane::cleanup::Report;
use crate::dataplane::leftovers::{Kind, Leftover, State};
use crate::dataplane::tool::Launcher;

/// The `kube-ipvs0` link, with the virtual services' addresses on it; the IPVS mode owns it.
pub const LINK: State = State::new("IPVS mode's kube-ipvs0 link");

/// See the module doc.
pub struct Link;

impl Kind for Link {
    fn states(&self) -> &'static [State] {
        &[LINK]
    }

    fn read(&self, tools: &Launcher) -> Vec<Leftover> {
        match link::Client::open(tools.netns()).and_then(|mut c| c.find(LINK_NAME)) {
            Ok(found) => self::found(found.is_some()).into_iter().collect(),
            Err(e) => {
                tracing::debug!(error = %e, "leftovers: cannot look up {LINK_NAME}");
                Vec::new()
            }
        }
    }

    fn remove(&self, _: &[Leftover], tools: &Launcher, report: &mut Report) {
        super::cleanup::remove(tools.netns(), report);
    }
}

/// The link as a leftover, if `present`.
pub fn found(present: bool) -> Option<Leftover> {
    present.then(|| Leftover {
        state: LINK,
        key: LINK_NAME.to_owned(),
        name: format!("link {LINK_NAME} (IPVS mode)"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::leftovers::{OUR_TABLE, find};
    use crate::dataplane::mode::Mode;

    #[test]
    fn in_ipvs_mode_the_link_and_our_table_are_its_own() {
        let link = found(true).unwrap();
        assert_eq!(link.to_string(), "link kube-ipvs0 (IPVS mode)");
        let our_table = Leftover {
            state: OUR_TABLE,
            key: "ip kube-proxy-rs".into(),
            name: "nftables table ip kube-proxy-rs".into(),
        };
        assert_eq!(
            find(super::super::mode::Ipvs.owns(), &[link, our_table]),
            []
        );
        assert_eq!(found(false), None);
    }
}
