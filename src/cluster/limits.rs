//! What the tracker accepts in names and sizes, so that nothing hostile reaches a planner.
//!
//! The API server validates these already; the proxy checks again because a compromised or buggy
//! writer, or a hand-written manifest, can send anything, and these strings end up in rule
//! comments, chain and set names. Pure; never fails, only answers.

/// Longest DNS label (namespace, Service name, port name).
pub const MAX_LABEL: usize = 63;
/// Longest DNS subdomain (EndpointSlice and Node names, hints).
pub const MAX_SUBDOMAIN: usize = 253;
/// The API's limits for one EndpointSlice; anything larger is refused.
pub const MAX_SLICE_ENDPOINTS: usize = 1000;
pub const MAX_SLICE_PORTS: usize = 100;
/// Generous bounds on lists inside one Service, against absurd objects.
pub const MAX_SERVICE_PORTS: usize = 1000;
pub const MAX_SERVICE_ADDRESSES: usize = 1000;
/// Longest label value (zone names).
pub const MAX_LABEL_VALUE: usize = 63;

/// An RFC 1123 label: lower-case alphanumerics and `-`, starting and ending alphanumeric.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_LABEL
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// An RFC 1123 subdomain: dot-separated labels, at most 253 characters.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_SUBDOMAIN
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// A label value (zone names): alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
pub fn is_label_value(s: &str) -> bool {
    s.len() <= MAX_LABEL_VALUE
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.bytes().next().is_none_or(|b| b.is_ascii_alphanumeric())
        && s.bytes().last().is_none_or(|b| b.is_ascii_alphanumeric())
}

/// A port name as Services and EndpointSlices carry it: empty (single unnamed port) or a DNS label.
/// An object UID as the API server makes them (a UUID: hex digits and dashes).
pub fn is_uid(s: &str) -> bool {
    (1..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

pub fn is_port_name(s: &str) -> bool {
    s.is_empty() || is_dns_label(s)
}

/// Quotes a value for a warning message without letting control characters or huge strings
/// through to the log.
pub fn shown(s: &str) -> String {
    let mut out: String = s.chars().take(80).flat_map(char::escape_debug).collect();
    if s.chars().count() > 80 {
        out.push('…');
    }
    format!("\"{out}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_as_the_api_defines_them() {
        let cases: &[(&str, bool, bool)] = &[
            // (value, dns label, dns subdomain)
            ("web", true, true),
            ("web-1", true, true),
            ("a.b", false, true),
            ("-web", false, false),
            ("web-", false, false),
            ("Web", false, false),
            ("", false, false),
            ("we b", false, false),
            ("a\"; drop", false, false),
            ("a..b", false, false),
        ];
        for (value, label, subdomain) in cases {
            assert_eq!(is_dns_label(value), *label, "label {value:?}");
            assert_eq!(is_dns_subdomain(value), *subdomain, "subdomain {value:?}");
        }
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(is_dns_label(&"a".repeat(63)));
        assert!(!is_dns_subdomain(&"a".repeat(254)));
    }

    #[test]
    fn zone_values_follow_label_value_syntax() {
        assert!(is_label_value("us-east-1a"));
        assert!(is_label_value("Zone_A.1"));
        assert!(!is_label_value("zone a"));
        assert!(!is_label_value("-zone"));
        assert!(!is_label_value(&"z".repeat(64)));
    }

    #[test]
    fn shown_escapes_and_truncates() {
        assert_eq!(shown("a\nb"), "\"a\\nb\"");
        assert!(shown(&"x".repeat(500)).ends_with("…\""));
    }
}
