//! The conntrack sysctls kube-proxy sets at start-up (`conntrack.*` in the configuration): what to
//! write, decided purely from the configuration, the CPU count and the kernel's current values,
//! apart from the reads and writes themselves.
//!
//! Rules (upstream's documented behaviour, in our words):
//! - `maxPerCore > 0`: `nf_conntrack_max` is raised to `max(maxPerCore × CPUs, min)` when it
//!   is smaller (never lowered: a larger table the node's owner or its kernel set stays), and
//!   the module's `hashsize` to a quarter of that value, likewise. `0` leaves both alone.
//! - TCP established and CLOSE_WAIT timeouts, and the UDP timeouts, are written when non-zero.
//! - `tcpBeLiberal: true` sets `nf_conntrack_tcp_be_liberal = 1`; false leaves it alone.
//! - A value already in place is not written again (inside a network namespace writing the
//!   current `nf_conntrack_max` is accepted but a new one is refused with `EINVAL`).
//!
//! A refused write is reported, not fatal: the caller warns once per sysctl and goes on.

use std::io;
use std::path::{Path, PathBuf};

use crate::config::Conntrack;

/// A sysctl (or module parameter) this module may write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    Max,
    HashSize,
    TcpEstablishedTimeout,
    TcpCloseWaitTimeout,
    TcpBeLiberal,
    UdpTimeout,
    UdpStreamTimeout,
}

impl Key {
    pub const ALL: [Key; 7] = [
        Key::Max,
        Key::HashSize,
        Key::TcpEstablishedTimeout,
        Key::TcpCloseWaitTimeout,
        Key::TcpBeLiberal,
        Key::UdpTimeout,
        Key::UdpStreamTimeout,
    ];

    /// The kernel's name: relative to `/proc/sys` for sysctls, to `/sys` for `hashsize`.
    pub fn path(self) -> &'static str {
        match self {
            Key::Max => "net/netfilter/nf_conntrack_max",
            Key::HashSize => "module/nf_conntrack/parameters/hashsize",
            Key::TcpEstablishedTimeout => "net/netfilter/nf_conntrack_tcp_timeout_established",
            Key::TcpCloseWaitTimeout => "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
            Key::TcpBeLiberal => "net/netfilter/nf_conntrack_tcp_be_liberal",
            Key::UdpTimeout => "net/netfilter/nf_conntrack_udp_timeout",
            Key::UdpStreamTimeout => "net/netfilter/nf_conntrack_udp_timeout_stream",
        }
    }
}

/// One value to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Write {
    pub key: Key,
    pub value: u64,
}

/// What to write, given the configuration, the number of CPUs and the kernel's current values
/// (`current(key)` is `None` when unreadable). Pure; in write order.
pub fn plan(config: &Conntrack, cpus: u32, current: impl Fn(Key) -> Option<u64>) -> Vec<Write> {
    let mut wanted = Vec::new();
    if config.max_per_core > 0 {
        let max = (u64::from(config.max_per_core) * u64::from(cpus)).max(u64::from(config.min));
        // Both raised only: a larger table someone configured stays. An unreadable value is
        // written.
        if current(Key::Max).is_none_or(|m| m < max) {
            wanted.push(Write {
                key: Key::Max,
                value: max,
            });
        }
        if current(Key::HashSize).is_some_and(|h| h < max / 4) {
            wanted.push(Write {
                key: Key::HashSize,
                value: max / 4,
            });
        }
    }
    let timeouts = [
        (Key::TcpEstablishedTimeout, config.tcp_established_timeout),
        (Key::TcpCloseWaitTimeout, config.tcp_close_wait_timeout),
        (Key::UdpTimeout, config.udp_timeout),
        (Key::UdpStreamTimeout, config.udp_stream_timeout),
    ];
    for (key, timeout) in timeouts {
        if !timeout.is_zero() {
            wanted.push(Write {
                key,
                value: timeout.as_secs(),
            });
        }
    }
    if config.tcp_be_liberal {
        wanted.push(Write {
            key: Key::TcpBeLiberal,
            value: 1,
        });
    }
    wanted.retain(|w| current(w.key) != Some(w.value));
    wanted
}

/// Counts the CPUs in a kernel CPU list such as `0-3,8-11` (`/sys/devices/system/cpu/online`).
pub fn count_cpu_list(list: &str) -> Option<u32> {
    let mut count = 0u32;
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
            None => {
                let n = part.parse::<u32>().ok()?;
                (n, n)
            }
        };
        count = count.checked_add(last.checked_sub(first)? + 1)?;
    }
    (count > 0).then_some(count)
}

/// Where the host keeps these values: `/proc/sys` and `/sys`, or a fake tree in tests.
#[derive(Clone, Debug)]
pub struct Host {
    pub proc_sys: PathBuf,
    pub sys: PathBuf,
}

/// What [`apply`] did.
#[derive(Debug, Default)]
pub struct Applied {
    pub written: Vec<Write>,
    /// Writes the kernel refused (read-only in this network namespace, no permission, ...).
    pub refused: Vec<(Write, io::Error)>,
}

impl Host {
    pub fn real() -> Host {
        Host {
            proc_sys: PathBuf::from("/proc/sys"),
            sys: PathBuf::from("/sys"),
        }
    }

    fn path(&self, key: Key) -> PathBuf {
        match key {
            Key::HashSize => self.sys.join(key.path()),
            _ => self.proc_sys.join(key.path()),
        }
    }

    pub fn read(&self, key: Key) -> Option<u64> {
        read_number(&self.path(key))
    }

    /// The online CPUs as the kernel lists them; the scheduler's view when that is unreadable.
    /// (The sysfs list is not narrowed by this process's CPU affinity, as upstream intends.)
    pub fn cpus(&self) -> u32 {
        std::fs::read_to_string(self.sys.join("devices/system/cpu/online"))
            .ok()
            .and_then(|l| count_cpu_list(&l))
            .or_else(|| {
                std::thread::available_parallelism()
                    .ok()
                    .and_then(|n| u32::try_from(n.get()).ok())
            })
            .unwrap_or(1)
    }

    #[allow(
        clippy::disallowed_methods,
        reason = "the seam that writes the conntrack sysctls at start-up"
    )]
    fn write(&self, w: Write) -> io::Result<()> {
        std::fs::write(self.path(w.key), format!("{}\n", w.value))
    }
}

fn read_number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Reads the current values, plans, and writes. Every write is attempted; refusals are
/// collected for the caller to log.
pub fn apply(host: &Host, config: &Conntrack) -> Applied {
    let writes = plan(config, host.cpus(), |k| host.read(k));
    let mut applied = Applied::default();
    for w in writes {
        match host.write(w) {
            Ok(()) => applied.written.push(w),
            Err(e) => applied.refused.push((w, e)),
        }
    }
    applied
}

#[cfg(test)]
#[path = "sysctls_tests.rs"]
mod tests;
