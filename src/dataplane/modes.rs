//! The one list of the proxy modes: each [`ProxyMode`] to its [`Mode`], whose parts live in
//! the mode's own folder. Dispatch only; nothing here decides what a mode does.

use super::mode::Mode;
use super::{ebpf, iptables, ipvs, nftables, userspace};
use crate::config::ProxyMode;

/// Every mode, in the order `--cleanup` cleans up after them.
pub const ALL: [ProxyMode; 5] = [
    ProxyMode::Nftables,
    ProxyMode::Iptables,
    ProxyMode::Ipvs,
    ProxyMode::Userspace,
    ProxyMode::Ebpf,
];

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
