//! Log lines in klog's text shape, upstream kube-proxy's default, so the log pipelines and
//! `grep '^E'` habits operators have for it work on ours:
//!
//! ```text
//! I1202 04:36:03.547810   12375 sync.rs:120] "synced" mode="nftables" operations=12
//! ```
//!
//! Severity letter (`E`, `W`, `I`; debug and trace are klog's verbose info lines, `I`), month and
//! day, wall time in UTC to the microsecond, the process id right-aligned in 7 columns, the
//! source file and line, `] `, the message quoted, then each field as `key=value` with numbers
//! and booleans bare and everything else quoted (klog's structured form, `klog.InfoS`); a field
//! named `error` is written `err`, as upstream's `klog.ErrorS` writes it. Quoting escapes `"`, `\` and control
//! characters, so a field that came from an API object cannot forge a second line.

use std::fmt::{self, Write as _};

use k8s_openapi::jiff::Timestamp;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The klog line formatter; `now` is the clock (the real one in `main`, a fixed one in tests).
pub struct Klog {
    pub now: fn() -> Timestamp,
    pub pid: u32,
}

impl<S, N> FormatEvent<S, N> for Klog
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let file = meta
            .file()
            .map_or("?", |f| f.rsplit('/').next().unwrap_or(f));
        let mut fields = Fields::default();
        event.record(&mut fields);
        let line = render(
            *meta.level(),
            (self.now)(),
            self.pid,
            file,
            meta.line().unwrap_or(0),
            &fields,
        );
        writeln!(writer, "{line}")
    }
}

/// An event's message and fields, in the order given.
#[derive(Default)]
struct Fields {
    message: String,
    pairs: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_owned();
        } else {
            let _ = write!(self.pairs, " {}={}", key(field), quoted(value));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.message = text;
        } else if is_number(&text)
            || (text.len() >= 2
                && text.starts_with('"')
                && text.ends_with('"')
                && !text.chars().any(char::is_control))
        {
            // Numbers and booleans bare, as klog prints them; strings recorded with `?` as
            // Debug quoted and escaped them.
            let _ = write!(self.pairs, " {}={text}", key(field));
        } else {
            let _ = write!(self.pairs, " {}={}", key(field), quoted(&text));
        }
    }
}

/// A field's key: `error` is written `err`, upstream's key for the error of a line.
fn key(field: &Field) -> &'static str {
    match field.name() {
        "error" => "err",
        other => other,
    }
}

/// Whether `text` is a number or a boolean, which klog prints without quotes; everything else
/// it prints as a quoted string (a `Stringer`'s text too).
fn is_number(text: &str) -> bool {
    matches!(text, "true" | "false") || text.parse::<f64>().is_ok_and(f64::is_finite)
}

/// One line, without its newline.
fn render(level: Level, at: Timestamp, pid: u32, file: &str, line: u32, fields: &Fields) -> String {
    let letter = match level {
        Level::ERROR => 'E',
        Level::WARN => 'W',
        _ => 'I',
    };
    let utc = at.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC);
    format!(
        "{letter}{:02}{:02} {:02}:{:02}:{:02}.{:06} {pid:>7} {file}:{line}] {}{}",
        utc.month(),
        utc.day(),
        utc.hour(),
        utc.minute(),
        utc.second(),
        utc.subsec_nanosecond() / 1000,
        quoted(&fields.message),
        fields.pairs,
    )
}

/// `text` in double quotes, with `"`, `\` and control characters escaped.
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed() -> Timestamp {
        "2026-12-02T04:36:03.547810123Z".parse().unwrap()
    }

    /// What the subscriber writes, through a real tracing pipeline.
    fn logged(emit: impl FnOnce()) -> String {
        crate::testing::logged::logged(
            Klog {
                now: fixed,
                pid: 12375,
            },
            emit,
        )
    }

    #[test]
    fn lines_have_klogs_header_quoted_message_and_fields() {
        let line =
            logged(|| tracing::warn!(mode = "nftables", ops = 12, error = "EPERM", "sync failed"));
        let want_head = "W1202 04:36:03.547810   12375 klog.rs:";
        assert!(line.starts_with(want_head), "{line}");
        assert!(
            line.ends_with("] \"sync failed\" mode=\"nftables\" ops=12 err=\"EPERM\"\n"),
            "{line}"
        );
        assert_eq!(line.lines().count(), 1);
    }

    #[test]
    fn values_are_quoted_as_klog_quotes_them() {
        let url = "https://10.0.0.1:6443/api";
        let line = logged(|| {
            tracing::info!(
                %url,
                family = %crate::cluster::IpFamily::V4,
                n = 3,
                ratio = 0.5,
                full = true,
                debug = ?"x",
                "m"
            )
        });
        assert!(
            line.ends_with(
                "] \"m\" url=\"https://10.0.0.1:6443/api\" family=\"IPv4\" n=3 ratio=0.5 full=true debug=\"x\"\n"
            ),
            "{line}"
        );
    }

    #[test]
    fn severities_map_to_klogs_letters() {
        assert!(logged(|| tracing::error!("x")).starts_with('E'));
        assert!(logged(|| tracing::info!("x")).starts_with('I'));
        assert!(logged(|| tracing::debug!("x")).starts_with('I'));
    }

    #[test]
    fn a_hostile_value_cannot_start_a_second_line() {
        let name = "web\"\nE1202 00:00:00.000000 1 fake.go:1] \"forged\"";
        let line = logged(|| tracing::warn!(service = name, "skipped"));
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(line.contains(r#"service="web\"\nE1202"#), "{line}");
        let display = logged(|| tracing::warn!(service = %name, "skipped"));
        assert_eq!(display.lines().count(), 1, "{display}");
    }
}
