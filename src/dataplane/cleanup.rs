//! `--cleanup`: removes what our modes and upstream kube-proxy's leave on the node, then the
//! binary exits.
//!
//! Every mode says what is its own ([`super::mode::Mode::clean_up`]); this runs all of them
//! whatever mode is configured, as upstream's `--cleanup` does, because the node may have run
//! another mode (or upstream) before. A tool or table that is not there is not an error.

use super::modes;
use super::tool::Launcher;
use crate::config::Config;

/// What was removed, and what could not be. Each mode names what it removed in its own
/// words, so this type knows no mode.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// What went, in the order removed.
    pub removed: Vec<Removed>,
    /// Tools that ran and refused; empty on success.
    pub errors: Vec<String>,
}

/// One kind of state removed: `count` of `what` (`nftables table ip kube-proxy-rs`, 1;
/// `KUBE-* chains of iptables-nft`, 12; `IPVS virtual services`, 40).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removed {
    pub what: String,
    pub count: usize,
}

impl Report {
    /// Records that `count` of `what` went; nothing when `count` is 0.
    pub fn removed(&mut self, what: impl Into<String>, count: usize) {
        if count > 0 {
            self.removed.push(Removed {
                what: what.into(),
                count,
            });
        }
    }

    /// How many of `what` went (0 when none).
    pub fn count(&self, what: &str) -> usize {
        self.removed
            .iter()
            .filter(|r| r.what == what)
            .map(|r| r.count)
            .sum()
    }
}

/// Removes every mode's leftovers in the network namespace `tools` runs in. What belongs to
/// no namespace (the eBPF mode's pins) is left: [`cleanup_with`] removes it too.
pub fn cleanup(tools: &Launcher) -> Report {
    run(tools, None)
}

/// `--cleanup` with the binary's configuration: every mode's leftovers in the network
/// namespace `tools` runs in, and what `config` says lies outside it (the eBPF mode's pins
/// under its pin root).
pub fn cleanup_with(tools: &Launcher, config: &Config) -> Report {
    run(tools, Some(config))
}

fn run(tools: &Launcher, config: Option<&Config>) -> Report {
    let mut report = Report::default();
    for mode in modes::ALL {
        modes::of(mode).clean_up(tools, config, &mut report);
    }
    report
}
