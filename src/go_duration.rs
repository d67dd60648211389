//! A duration as upstream's logs print it: Go's `time.Duration` text (`44.547µs`, `1.2ms`,
//! `2.5s`, `1m30s`, `1h0m0s`), exact to the nanosecond, trailing zeros dropped. Log fields
//! take it with `%GoDuration(d)`, so a duration reads the same in both proxies' logs rather
//! than as a float of milliseconds.

use std::fmt::{self, Write as _};
use std::time::Duration;

/// See the module doc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoDuration(pub Duration);

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.as_nanos();
        const US: u128 = 1_000;
        const MS: u128 = 1_000_000;
        const S: u128 = 1_000_000_000;
        match n {
            0 => f.write_str("0s"),
            1..US => write!(f, "{n}ns"),
            US..MS => {
                fraction(f, n, US)?;
                f.write_str("µs")
            }
            MS..S => {
                fraction(f, n, MS)?;
                f.write_str("ms")
            }
            _ => {
                let secs = n / S;
                let (h, m) = (secs / 3600, secs / 60 % 60);
                if h > 0 {
                    write!(f, "{h}h")?;
                }
                if h > 0 || m > 0 {
                    write!(f, "{m}m")?;
                }
                fraction(f, secs % 60 * S + n % S, S)?;
                f.write_str("s")
            }
        }
    }
}

/// `n / unit` with its remainder as decimals, trailing zeros dropped.
fn fraction(f: &mut fmt::Formatter<'_>, n: u128, unit: u128) -> fmt::Result {
    write!(f, "{}", n / unit)?;
    let rest = n % unit;
    if rest == 0 {
        return Ok(());
    }
    let width = unit.ilog10() as usize;
    let mut digits = String::with_capacity(width);
    let _ = write!(digits, "{rest:0width$}");
    write!(f, ".{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(nanos: u64) -> String {
        GoDuration(Duration::from_nanos(nanos)).to_string()
    }

    #[test]
    fn durations_read_as_gos_time_duration_prints_them() {
        // Each pair as Go's `time.Duration(n).String()` gives it.
        let cases: &[(u64, &str)] = &[
            (0, "0s"),
            (1, "1ns"),
            (999, "999ns"),
            (1_000, "1µs"),
            (44_547, "44.547µs"),
            (1_200_000, "1.2ms"),
            (12_345_678, "12.345678ms"),
            (1_000_000_000, "1s"),
            (2_500_000_000, "2.5s"),
            (60_000_000_000, "1m0s"),
            (90_000_000_001, "1m30.000000001s"),
            (3_600_000_000_000, "1h0m0s"),
            (3_723_000_000_000, "1h2m3s"),
        ];
        for (nanos, want) in cases {
            assert_eq!(text(*nanos), *want, "{nanos} ns");
        }
    }
}
