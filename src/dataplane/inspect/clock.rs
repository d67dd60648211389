//! The kernel's clocks, read where a remembered entry's age is asked for: the tick count
//! (the unit of iptables' `recent` lists) and the monotonic clock (what BPF programs stamp
//! their entries with).

/// Where the kernel shows its tick count (`jiffies: …`) beside its clock (`now at … nsecs`).
pub const TIMER_LIST: &str = "/proc/timer_list";

/// Tick rates a kernel is built with (CONFIG_HZ).
const RATES: [u64; 4] = [100, 250, 300, 1000];

/// The kernel's tick count now, and ticks per second: the unit of a list's `last_seen`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clock {
    pub jiffies: u64,
    pub hz: u64,
}

/// The clock in `/proc/timer_list` text: `now at N nsecs` and the first `jiffies: J`. The rate
/// is not printed; it is the one whose boot value of the count (the kernel starts it 300 s
/// before wrapping 32 bits, so that wrap bugs show early) puts J at N, within a second.
pub fn clock(timer_list: &str) -> Option<Clock> {
    let now_ns = field(timer_list, "now at ")?;
    let jiffies = field(timer_list, "jiffies: ")?;
    RATES.into_iter().find_map(|hz| {
        let start = (1u64 << 32) - 300 * hz;
        let elapsed = jiffies.wrapping_sub(start);
        let expected = u64::try_from(u128::from(now_ns) * u128::from(hz) / 1_000_000_000).ok()?;
        (elapsed.abs_diff(expected) <= hz).then_some(Clock { jiffies, hz })
    })
}

fn field(timer_list: &str, prefix: &str) -> Option<u64> {
    timer_list
        .lines()
        .find_map(|l| l.trim().strip_prefix(prefix))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
}

/// The kernel's monotonic clock in nanoseconds (`now at`, what BPF programs read with
/// `bpf_ktime_get_ns`), from [`TIMER_LIST`]; `None` when it cannot be read.
#[allow(
    clippy::disallowed_methods,
    reason = "the kernel's clock is read where an entry's age is asked for"
)]
pub fn read_monotonic_ns() -> Option<u64> {
    field(&std::fs::read_to_string(TIMER_LIST).ok()?, "now at ")
}

/// The kernel's clock now, from [`TIMER_LIST`]; `None` when it cannot be read.
#[allow(
    clippy::disallowed_methods,
    reason = "the kernel's tick count is read where an entry's age is asked for"
)]
pub fn read_clock() -> Option<Clock> {
    clock(&std::fs::read_to_string(TIMER_LIST).ok()?)
}
