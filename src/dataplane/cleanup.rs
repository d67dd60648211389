//! `--cleanup`: removes what our modes and upstream kube-proxy's leave on the node, then the
//! binary exits.
//!
//! Every mode says what is its own ([`super::mode::Mode::clean_up`]); this runs all of them
//! whatever mode is configured, as upstream's `--cleanup` does, because the node may have run
//! another mode (or upstream) before. A tool or table that is not there is not an error.

use super::modes;
use super::tool::Launcher;
use crate::config::Config;

/// What was removed, and what could not be.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// `ip kube-proxy-rs`, ...
    pub tables: Vec<String>,
    /// (tool, chains removed).
    pub iptables: Vec<(String, usize)>,
    /// IPVS virtual services flushed.
    pub ipvs_services: usize,
    /// Whether `kube-ipvs0` was there and is gone.
    pub ipvs_link: bool,
    /// eBPF mode: pins removed under its pin root (cgroup links, which detaches the programs,
    /// and maps).
    pub ebpf_pins: usize,
    /// Tools that ran and refused; empty on success.
    pub errors: Vec<String>,
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
