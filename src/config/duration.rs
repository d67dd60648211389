//! Go duration strings (`metav1.Duration`, `time.ParseDuration`, `Duration.String`) to and from
//! [`std::time::Duration`].
//!
//! KubeProxyConfiguration and upstream's flags write periods as Go durations (`30s`, `15m0s`,
//! `1h0m0s`, `500ms`, `1.5s`), so operators' files and command lines must mean the same here.
//! Pure: no I/O. Negative durations are refused: no kube-proxy period may be negative, and
//! `std::time::Duration` cannot hold one.

use std::fmt;
use std::time::Duration;

/// Why a string is not a Go duration; the text is one lower-case line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseError {}

const NANOS_PER_SECOND: u128 = 1_000_000_000;

/// Nanoseconds in one unit, for every unit Go accepts (both micro signs included).
fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => NANOS_PER_SECOND,
        "m" => 60 * NANOS_PER_SECOND,
        "h" => 3_600 * NANOS_PER_SECOND,
        _ => return None,
    })
}

/// Parses a Go duration such as `1h2m3.5s`, `250ms`, `0` or `+5s`.
///
/// Accepts exactly what Go's `time.ParseDuration` accepts, except a leading `-` (with a non-zero
/// value), which is refused as negative.
pub fn parse(text: &str) -> Result<Duration, ParseError> {
    let bad = |why: &str| ParseError(format!("invalid duration {text:?}: {why}"));
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(bad("expected a number with a unit, e.g. 30s, 1m or 1h30m"));
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after) = rest.split_at(int_len);
        let (frac_part, after) = match after.strip_prefix('.') {
            Some(tail) => {
                let frac_len = tail.bytes().take_while(u8::is_ascii_digit).count();
                tail.split_at(frac_len)
            }
            None => ("", after),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(bad("expected a number with a unit, e.g. 30s, 1m or 1h30m"));
        }
        let unit_len = after
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(after.len(), |(i, _)| i);
        let (unit, tail) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(bad("missing unit; use ns, us, ms, s, m or h"));
        }
        let per_unit = unit_nanos(unit)
            .ok_or_else(|| bad(&format!("unknown unit {unit:?}; use ns, us, ms, s, m or h")))?;
        let overflow = || bad("out of range");
        let whole: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| overflow())?
        };
        let mut value = whole.checked_mul(per_unit).ok_or_else(overflow)?;
        // Go keeps only as many fraction digits as can matter; 30 digits is far beyond that.
        let frac_digits = &frac_part[..frac_part.len().min(30)];
        if !frac_digits.is_empty() {
            let frac: u128 = frac_digits.parse().map_err(|_| overflow())?;
            let scale = 10u128.pow(u32::try_from(frac_digits.len()).map_err(|_| overflow())?);
            value = value
                .checked_add(frac * per_unit / scale)
                .ok_or_else(overflow)?;
        }
        total = total.checked_add(value).ok_or_else(overflow)?;
        // Go's Duration is an int64 of nanoseconds.
        if total > i64::MAX as u128 {
            return Err(overflow());
        }
        rest = tail;
    }
    if negative && total > 0 {
        return Err(bad("must not be negative"));
    }
    let secs = u64::try_from(total / NANOS_PER_SECOND).map_err(|_| bad("out of range"))?;
    let nanos = u32::try_from(total % NANOS_PER_SECOND).map_err(|_| bad("out of range"))?;
    Ok(Duration::new(secs, nanos))
}

/// Formats like Go's `Duration.String`: `0s`, `500ms`, `1.5µs`, `30s`, `15m0s`, `1h0m0s`.
pub fn format(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    if nanos < NANOS_PER_SECOND {
        // Below one second Go picks the largest unit that keeps a non-zero integer part.
        let (scale, unit) = if nanos < 1_000 {
            (1, "ns")
        } else if nanos < 1_000_000 {
            (1_000, "\u{b5}s")
        } else {
            (1_000_000, "ms")
        };
        return format!("{}{unit}", decimal(nanos, scale));
    }
    let total_secs = nanos / NANOS_PER_SECOND;
    let seconds = decimal(
        (total_secs % 60) * NANOS_PER_SECOND + nanos % NANOS_PER_SECOND,
        NANOS_PER_SECOND,
    );
    let minutes = (total_secs / 60) % 60;
    let hours = total_secs / 3_600;
    if hours > 0 {
        format!("{hours}h{minutes}m{seconds}s")
    } else if minutes > 0 {
        format!("{minutes}m{seconds}s")
    } else {
        format!("{seconds}s")
    }
}

/// `value / scale` as a decimal without trailing zeros (`1500, 1000` → `1.5`).
fn decimal(value: u128, scale: u128) -> String {
    let whole = value / scale;
    let frac = value % scale;
    if frac == 0 {
        return whole.to_string();
    }
    let width = scale.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn parses_go_durations() {
        let cases: &[(&str, Duration)] = &[
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("-0", Duration::ZERO),
            ("+5s", Duration::from_secs(5)),
            ("30s", Duration::from_secs(30)),
            ("1.5s", ms(1_500)),
            (".5s", ms(500)),
            ("5.s", Duration::from_secs(5)),
            ("500ms", ms(500)),
            ("250ms", ms(250)),
            ("15m0s", Duration::from_secs(900)),
            ("15m", Duration::from_secs(900)),
            ("1h0m0s", Duration::from_secs(3_600)),
            ("24h0m0s", Duration::from_secs(86_400)),
            ("2h22m", Duration::from_secs(2 * 3_600 + 22 * 60)),
            ("1h2m3.25s", Duration::from_millis(3_723_250)),
            ("3ns", Duration::from_nanos(3)),
            ("3us", Duration::from_micros(3)),
            ("3\u{b5}s", Duration::from_micros(3)),
            ("3\u{3bc}s", Duration::from_micros(3)),
            ("1.000000001s", Duration::new(1, 1)),
            ("100ms100ms", ms(200)),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text), Ok(*want), "{text}");
        }
    }

    #[test]
    fn refuses_what_go_refuses_and_negatives() {
        let cases: &[(&str, &str)] = &[
            ("", "expected a number with a unit"),
            ("s", "expected a number with a unit"),
            (".s", "expected a number with a unit"),
            ("30", "missing unit"),
            ("1h30", "missing unit"),
            ("5x", "unknown unit \"x\""),
            ("5 s", "unknown unit \" s\""),
            ("-5s", "must not be negative"),
            ("9999999999h", "out of range"),
            ("15m0s ", "unknown unit"),
        ];
        for (text, want) in cases {
            let err = parse(text).expect_err(text).to_string();
            assert!(err.contains(want), "{text}: {err}");
            assert!(err.starts_with("invalid duration"), "{err}");
        }
    }

    #[test]
    fn formats_like_go() {
        let cases: &[(Duration, &str)] = &[
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(1), "1ns"),
            (Duration::from_nanos(1_500), "1.5\u{b5}s"),
            (ms(1), "1ms"),
            (ms(250), "250ms"),
            (Duration::from_micros(1_500), "1.5ms"),
            (ms(1_500), "1.5s"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_secs(30), "30s"),
            (Duration::from_secs(60), "1m0s"),
            (Duration::from_secs(900), "15m0s"),
            (Duration::from_secs(3_600), "1h0m0s"),
            (Duration::from_secs(86_400), "24h0m0s"),
            (Duration::from_millis(3_723_250), "1h2m3.25s"),
            (Duration::new(1, 1), "1.000000001s"),
        ];
        for (d, want) in cases {
            assert_eq!(format(*d), *want, "{d:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn format_then_parse_is_identity(nanos in 0u64..=i64::MAX as u64) {
            let d = Duration::from_nanos(nanos);
            proptest::prop_assert_eq!(parse(&format(d)), Ok(d));
        }
    }
}
