//! Flag values in the syntax upstream's flags take (Go's `strconv` numbers, component-base's
//! `--vmodule`, resource quantities), so a command line written for upstream means the same
//! here, and a value that is not one says which syntax the flag takes.
//!
//! Each parser returns the value or one lower-case line saying what is accepted, without the
//! flag's name; clap adds the flag. Pure: no I/O.

pub use super::validate::{Invalid, Result};

/// A whole number as pflag's integer flags read it (`strconv.ParseInt` with base 0): decimal,
/// `0x` hexadecimal, `0o` or leading-`0` octal, `0b` binary, an optional sign, and `_` between
/// digits after a base prefix.
pub fn int(text: &str) -> Result<i64> {
    let wrong = || {
        Invalid(format!(
            "must be a whole number such as 10 or -999, got {text:?}"
        ))
    };
    let (negative, unsigned) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = unsigned.to_ascii_lowercase();
    let (radix, digits, prefixed) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d, true)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d, true)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d, true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..], true)
    } else {
        (10, lower.as_str(), false)
    };
    let digits = if prefixed && !digits.contains("__") && !digits.ends_with('_') {
        digits.trim_start_matches('_').replace('_', "")
    } else {
        digits.to_owned()
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(wrong());
    }
    let magnitude = i128::from_str_radix(&digits, radix).map_err(|_| wrong())?;
    let value = if negative { -magnitude } else { magnitude };
    i64::try_from(value).map_err(|_| Invalid(format!("is out of range, got {text:?}")))
}

/// A number as pflag's float flags read it (`strconv.ParseFloat`): `5`, `0.5`, `1e3`.
pub fn float(text: &str) -> Result<f64> {
    text.parse::<f64>()
        .map_err(|_| Invalid(format!("must be a number such as 5 or 0.5, got {text:?}")))
}

/// One `--vmodule` entry: a file pattern and its verbosity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VModuleItem {
    /// The file pattern (`proxier`, `*.go`), without `=` or `,`.
    pub file_pattern: String,
    /// The verbosity for files matching it.
    pub verbosity: u32,
}

/// `--vmodule`: comma-separated `pattern=N` entries, as component-base reads it (empty entries,
/// as from a trailing comma, are skipped; N is at most 2^31 - 1).
pub fn vmodule(text: &str) -> Result<Vec<VModuleItem>> {
    text.split(',')
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let wrong = || {
                Invalid(format!(
                    "must be pattern=N entries separated by commas, got {entry:?}"
                ))
            };
            let (pattern, level) = entry.split_once('=').ok_or_else(wrong)?;
            if pattern.is_empty() || level.is_empty() || level.contains('=') {
                return Err(wrong());
            }
            let verbosity = level
                .parse::<u32>()
                .ok()
                .filter(|v| i32::try_from(*v).is_ok())
                .ok_or_else(|| {
                    Invalid(format!(
                        "the verbosity in {entry:?} must be 0 to 2147483647"
                    ))
                })?;
            Ok(VModuleItem {
                file_pattern: pattern.to_owned(),
                verbosity,
            })
        })
        .collect()
}

/// A Kubernetes resource quantity (`512`, `1k`, `2Ki`, `1.5M`, `3e6`), as the
/// `--log-*-info-buffer-size` flags take; returned as written.
pub fn quantity(text: &str) -> Result<String> {
    let wrong = || {
        Invalid(format!(
            "must be a quantity such as 512, 1k, 2Ki, 5Mi or 3e6 (bytes), got {text:?}"
        ))
    };
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    let number_end = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_end);
    let digits = number.replace('.', "");
    if digits.is_empty() || number.matches('.').count() > 1 {
        return Err(wrong());
    }
    let binary = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let decimal = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E"];
    let exponent = suffix
        .strip_prefix(['e', 'E'])
        .map(|e| e.strip_prefix(['+', '-']).unwrap_or(e))
        .is_some_and(|e| !e.is_empty() && e.chars().all(|c| c.is_ascii_digit()));
    if binary.contains(&suffix) || decimal.contains(&suffix) || exponent {
        Ok(text.to_owned())
    } else {
        Err(wrong())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_read_as_go_reads_them_with_base_zero() {
        for (text, want) in [
            ("10", 10),
            ("-999", -999),
            ("+7", 7),
            ("0", 0),
            ("0x1f", 31),
            ("0X1F", 31),
            ("017", 15),
            ("0o17", 15),
            ("0b101", 5),
            ("0x_ff", 255),
            ("1_0", -1),
        ] {
            match want {
                -1 => assert!(int(text).is_err(), "{text}: underscores need a base prefix"),
                want => assert_eq!(int(text), Ok(want), "{text}"),
            }
        }
        assert_eq!(
            int("fast"),
            Err(Invalid(
                "must be a whole number such as 10 or -999, got \"fast\"".to_owned()
            ))
        );
        for bad in ["", "-", "1.5", "08", "0x", "1e3", " 1"] {
            assert!(int(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            int("99999999999999999999"),
            Err(Invalid(
                "is out of range, got \"99999999999999999999\"".to_owned()
            ))
        );
    }

    #[test]
    fn floats_take_decimals_and_exponents() {
        assert_eq!(float("5"), Ok(5.0));
        assert_eq!(float("0.5"), Ok(0.5));
        assert_eq!(float("1e3"), Ok(1000.0));
        assert_eq!(
            float("fast"),
            Err(Invalid(
                "must be a number such as 5 or 0.5, got \"fast\"".to_owned()
            ))
        );
    }

    #[test]
    fn vmodule_takes_pattern_equals_level_entries() {
        assert_eq!(
            vmodule("proxier=4,*.go=2,"),
            Ok(vec![
                VModuleItem {
                    file_pattern: "proxier".into(),
                    verbosity: 4
                },
                VModuleItem {
                    file_pattern: "*.go".into(),
                    verbosity: 2
                },
            ])
        );
        assert_eq!(vmodule(""), Ok(vec![]));
        for bad in [
            "proxier",
            "=4",
            "proxier=",
            "a=b=1",
            "proxier=x",
            "p=-1",
            "p=2147483648",
        ] {
            assert!(vmodule(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn quantities_take_si_binary_and_exponent_suffixes() {
        for good in ["0", "512", "1k", "2Ki", "1.5M", "5Mi", "3e6", "3E+6", "+1G"] {
            assert_eq!(quantity(good), Ok(good.to_owned()), "{good}");
        }
        for bad in ["", "k", "1KB", "1.2.3", "1e", "lots", "1 Ki"] {
            assert!(quantity(bad).is_err(), "{bad:?}");
        }
    }
}
