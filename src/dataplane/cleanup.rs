//! `--cleanup`: removes what our modes and upstream kube-proxy's leave on the node, then the
//! binary exits.
//!
//! Every mode says what is its own in its `cleanup` module (`nftables::cleanup`,
//! `iptables::cleanup`, `ipvs::cleanup`); this runs all of them whatever mode is configured, as upstream's
//! `--cleanup` does, because the node may have run another mode (or upstream) before. A tool or
//! table that is not there is not an error.

use super::tool::Launcher;
use super::{ebpf, iptables, ipvs, nftables};

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

/// Removes every mode's leftovers in the network namespace `tools` runs in. The eBPF mode's
/// pins are not a namespace's: [`cleanup_ebpf`] removes them.
pub fn cleanup(tools: &Launcher) -> Report {
    let mut report = Report::default();
    nftables::cleanup::remove(tools, &mut report);
    iptables::cleanup::remove(tools, &mut report);
    ipvs::cleanup::remove(tools.netns(), &mut report);
    report
}

/// Removes the eBPF mode's pins under `pin_root` (its cgroup links, which detaches the
/// programs, and its maps) into `report`.
pub fn cleanup_ebpf(pin_root: &std::path::Path, report: &mut Report) {
    match ebpf::backend::remove(pin_root) {
        Ok(n) => report.ebpf_pins = n,
        Err(e) => report.errors.push(crate::causes::one_line(&e)),
    }
}
