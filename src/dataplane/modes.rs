//! The one list of the proxy modes: each [`ProxyMode`] to its [`Mode`], whose parts live in
//! the mode's own folder. Dispatch, and the one composition of two modes ([`start`]: the
//! userspace mode's relay serving loopback NodePorts beside a mode that asks for it); what a
//! mode does is its own declaration.

use super::mode::{Mode, StartError, Started};
use super::{ebpf, iptables, ipvs, nftables, userspace};
use crate::config::{Config, ProxyMode};

/// Every mode, in the order `--cleanup` cleans up after them.
pub const ALL: [ProxyMode; 5] = [
    ProxyMode::Nftables,
    ProxyMode::Iptables,
    ProxyMode::Ipvs,
    ProxyMode::Userspace,
    ProxyMode::Ebpf,
];

/// Starts `mode` for `config`: its own parts, and with `--nodeport-localhost`, where the mode
/// [relays loopback NodePorts](Mode::relays_loopback_node_ports), the relay's loopback
/// listeners beside its dataplane.
pub fn start(mode: &dyn Mode, config: &Config) -> Result<Started, StartError> {
    let started = mode.start(config)?;
    Ok(if mode.relays_loopback_node_ports() {
        userspace::loopback::beside(config, started, None)
    } else {
        started
    })
}

/// The parts of `mode`.
pub fn of(mode: ProxyMode) -> &'static dyn Mode {
    match mode {
        ProxyMode::Nftables => &nftables::mode::Nftables,
        ProxyMode::Iptables => &iptables::mode::Iptables,
        ProxyMode::Ipvs => &ipvs::mode::Ipvs,
        ProxyMode::Userspace => &userspace::mode::Userspace,
        ProxyMode::Ebpf => &ebpf::mode::Ebpf,
    }
}
