//! Comments made from API object names: the only place such names reach a rule file, so the
//! one place that decides which of their characters may.
//!
//! Pure. Every mode keeps letters, digits and `[ ./:_-]` (what a `namespace/name:port` label
//! needs), plus what its own quoting allows, replaces anything else with `_`, and cuts the
//! result at its tool's limit. No quote, backslash, newline or control character survives, so a
//! hostile name cannot close the comment and add a rule.

use std::sync::Arc;

/// `text` with every character outside `[A-Za-z0-9 ./:_-]` and `extra` replaced by `_`, cut at
/// `max` characters (which are then bytes: all are ASCII).
pub fn sanitise(text: &str, max: usize, extra: &[char]) -> Arc<str> {
    let clean: String = text
        .chars()
        .take(max)
        .map(|c| {
            if c.is_ascii_alphanumeric()
                || matches!(c, ' ' | '.' | '/' | ':' | '_' | '-')
                || extra.contains(&c)
            {
                c
            } else {
                '_'
            }
        })
        .collect();
    clean.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_harmless_characters_survive_and_the_length_is_capped() {
        assert_eq!(
            &*sanitise("ns/web:http \"-j ACCEPT\n\\x>", 100, &[]),
            "ns/web:http _-j ACCEPT__x_"
        );
        assert_eq!(&*sanitise("a>b", 100, &['>']), "a>b");
        assert_eq!(sanitise(&"é".repeat(500), 200, &[]).len(), 200);
    }
}
