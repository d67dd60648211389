//! After this proxy's first successful sync: the rules another proxy left on the node, removed.
//!
//! A node moved from upstream kube-proxy (or from another mode of ours) keeps what the old
//! proxy programmed: upstream's nftables table `kube-proxy`, its `KUBE-*` iptables chains, IPVS
//! mode's `kube-ipvs0` and virtual servers, our own table from a mode that used it. Those rules
//! still see Service traffic and may answer it first, with endpoints nobody keeps current.
//! Upstream removes the other modes' rules at every start, before its first sync; this proxy
//! removes them once its own rules are in place (its first successful sync), so the node is
//! never without Service rules in between, and says what it removed in one line. Only what
//! this proxy's mode does not own ([`crate::dataplane::mode::Mode::owns`]) goes. (Two proxies
//! must not run on one node: the other would put its rules back at its next sync. The node
//! opt-in of `deploy/components/node-opt-in` keeps them apart.)
//!
//! Each mode knows the kinds of state it (and upstream's mode of the same name) leaves, in its
//! own folder: a [`Kind`] that reads them from the kernel and removes them, listed by
//! [`crate::dataplane::mode::Mode::leftovers`]. This module asks the registry for every mode's
//! kinds and names none itself. [`find`] decides over what [`read`] saw, and is pure; [`remove`]
//! and [`remove_after_first_sync`] act on the kernel.

use std::fmt;

use tokio::sync::watch;

use super::cleanup::Report;
use super::modes;
use super::tool::Launcher;
use crate::sync::Status;

/// A kind of node state a proxy programs: what a [`Leftover`] is, and what a mode declares it
/// owns. Declared once, beside the [`Kind`] that finds it; two states differ by their text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct State(&'static str);

impl State {
    /// The state `what` names (`"upstream's KUBE-* iptables chains"`).
    pub const fn new(what: &'static str) -> State {
        State(what)
    }

    /// What it is, in words.
    pub fn as_str(self) -> &'static str {
        self.0
    }
}

/// Our nftables table, `kube-proxy-rs` in both families (the nf_tables library's
/// [`crate::nft::TABLE`]): shared by the nftables, ipvs and userspace modes, which all declare
/// it their own. The nftables mode's kind finds it.
pub const OUR_TABLE: State = State::new("our nftables table");

/// One thing left on the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leftover {
    /// Which state it is.
    pub state: State,
    /// What its kind removes it by: a table (`ip kube-proxy`), an iptables flavour
    /// (`iptables-nft`), a link's name.
    pub key: String,
    /// As the log line names it: `nftables table ip kube-proxy`.
    pub name: String,
}

impl fmt::Display for Leftover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// A kind of state proxies leave on a node, as the mode that knows it finds and removes it.
pub trait Kind: Sync {
    /// The states this kind finds: each [`Leftover`] it reads is one of them.
    fn states(&self) -> &'static [State];

    /// What of this kind the network namespace `tools` runs in holds. What cannot be read (no
    /// tool, a kernel without the subsystem) counts as absent.
    fn read(&self, tools: &Launcher) -> Vec<Leftover>;

    /// Removes `left`, what it read less what the running mode owns, in the network namespace
    /// `tools` runs in, adding what it removed (or a tool's refusal) to `report`.
    fn remove(&self, left: &[Leftover], tools: &Launcher, report: &mut Report);
}

/// Every mode's kinds, in the registry's order.
fn kinds() -> impl Iterator<Item = &'static dyn Kind> {
    modes::ALL
        .into_iter()
        .flat_map(|mode| modes::of(mode).leftovers().iter().copied())
}

/// What another proxy left that this one, owning `owned`, does not use.
pub fn find(owned: &[State], seen: &[Leftover]) -> Vec<Leftover> {
    seen.iter()
        .filter(|l| !owned.contains(&l.state))
        .cloned()
        .collect()
}

/// The line that says what was removed, and what could not be (with the remedy); `None` when
/// nothing was left.
pub fn message(left: &[Leftover], report: &Report) -> Option<String> {
    if left.is_empty() {
        return None;
    }
    let named = left.iter().map(ToString::to_string).collect::<Vec<_>>();
    let mut line = format!(
        "removed what another proxy left on this node, now that this proxy's rules are in \
         place: {}",
        named.join(", ")
    );
    if !report.errors.is_empty() {
        line.push_str(&format!(
            "; could not remove all of it ({}): once no other proxy runs here, run \
             `kube-proxy-rs --cleanup` (it removes this proxy's rules too) and restart this proxy",
            report.errors.join("; ")
        ));
    }
    Some(line)
}

/// Removes `left` in the network namespace `tools` runs in: each kind its own, in the
/// registry's order.
pub fn remove(left: &[Leftover], tools: &Launcher) -> Report {
    let mut report = Report::default();
    for kind in kinds() {
        let its: Vec<Leftover> = left
            .iter()
            .filter(|l| kind.states().contains(&l.state))
            .cloned()
            .collect();
        if !its.is_empty() {
            kind.remove(&its, tools, &mut report);
        }
    }
    report
}

/// Once the runner behind `status` has synced successfully, removes what another proxy left
/// here (see the module doc) and logs it. Returns at once when the runner ends first.
pub async fn remove_after_first_sync(owned: &'static [State], mut status: watch::Receiver<Status>) {
    if status.wait_for(|s| s.syncs_ok > 0).await.is_err() {
        return;
    }
    let removed = tokio::task::spawn_blocking(move || {
        let tools = Launcher::here();
        let left = find(owned, &read(&tools));
        let report = remove(&left, &tools);
        (message(&left, &report), report.errors.is_empty())
    })
    .await;
    match removed {
        Ok((Some(line), true)) => tracing::info!("{line}"),
        Ok((Some(line), false)) => tracing::warn!("{line}"),
        Ok((None, _)) => {}
        Err(e) => tracing::debug!(error = %e, "leftovers: the removal did not finish"),
    }
}

/// Reads what [`find`] looks at, every mode's kinds, in the network namespace `tools` runs in.
pub fn read(tools: &Launcher) -> Vec<Leftover> {
    kinds().flat_map(|kind| kind.read(tools)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProxyMode;

    /// Our table in `family`, as the kind that finds it names it.
    fn our_table(family: &str) -> Leftover {
        Leftover {
            state: OUR_TABLE,
            key: format!("{family} {}", crate::nft::TABLE),
            name: format!("nftables table {family} {}", crate::nft::TABLE),
        }
    }

    fn owns(mode: ProxyMode) -> &'static [State] {
        modes::of(mode).owns()
    }

    #[test]
    fn our_table_is_left_only_in_a_mode_that_does_not_program_it() {
        let seen = [our_table("ip"), our_table("ip6")];
        for mode in [ProxyMode::Nftables, ProxyMode::Ipvs, ProxyMode::Userspace] {
            assert_eq!(find(owns(mode), &seen), [], "{mode:?}");
        }
        for mode in [ProxyMode::Iptables, ProxyMode::Ebpf] {
            assert_eq!(find(owns(mode), &seen), seen, "{mode:?}");
        }
    }

    #[test]
    fn every_state_is_found_by_one_kind_and_every_owned_one_by_some() {
        let found: Vec<State> = kinds().flat_map(|k| k.states().iter().copied()).collect();
        for (i, state) in found.iter().enumerate() {
            assert!(!found[i + 1..].contains(state), "{state:?} twice");
        }
        for mode in modes::ALL {
            for state in owns(mode) {
                assert!(
                    found.contains(state),
                    "{mode:?} owns {state:?}, which no kind finds"
                );
            }
        }
    }

    #[test]
    fn a_clean_node_gets_no_warning() {
        assert!(
            find(
                owns(ProxyMode::Nftables),
                &[our_table("ip"), our_table("ip6")]
            )
            .is_empty()
        );
        assert_eq!(message(&[], &Report::default()), None);
    }

    #[test]
    fn the_line_names_what_was_removed_and_gives_the_remedy_only_for_what_was_not() {
        let left = [
            our_table("ip"),
            Leftover {
                state: State::new("a test's link"),
                key: "kpl0".into(),
                name: "link kpl0".into(),
            },
        ];
        let line = message(&left, &Report::default()).unwrap();
        assert!(!line.contains('\n'), "{line}");
        assert!(
            line.ends_with(": nftables table ip kube-proxy-rs, link kpl0"),
            "{line}"
        );
        assert!(!line.contains("--cleanup"), "{line}");
        let failed = Report {
            errors: vec!["iptables-nft-restore: exit status 4".into()],
            ..Report::default()
        };
        let line = message(&left, &failed).unwrap();
        assert!(!line.contains('\n'), "{line}");
        assert!(line.contains("exit status 4"), "{line}");
        assert!(line.contains("`kube-proxy-rs --cleanup`"), "{line}");
    }
}
