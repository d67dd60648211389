//! Log lines as upstream's `--logging-format=json` writes them (component-base's zap encoder),
//! one JSON object per line:
//!
//! ```text
//! {"ts":1796186163547.81,"caller":"sync/runner.rs:120","msg":"full sync","v":0,"elapsed":"1.2ms"}
//! ```
//!
//! `ts` the wall time in milliseconds since the epoch (a float), `caller` the source file's last
//! directory, file and line, `msg`, then `v` (the klog verbosity the line needs: 0 for info and
//! warnings, 4 for debug, 6 for trace; error lines have none, as upstream's), then each field in
//! order: numbers and booleans as JSON numbers and booleans, everything else as strings. A field
//! named `error` is written `err`, upstream's key for the error of a line.

use std::fmt::{self, Write as _};

use k8s_openapi::jiff::Timestamp;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The JSON line formatter; `now` is the clock (the real one in `main`, a fixed one in tests).
pub struct JsonLog {
    pub now: fn() -> Timestamp,
}

impl<S, N> FormatEvent<S, N> for JsonLog
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
        let mut fields = Fields::default();
        event.record(&mut fields);
        let millis = (self.now)().as_nanosecond() as f64 / 1e6;
        let mut line = format!(
            "{{\"ts\":{millis},\"caller\":{},\"msg\":{}",
            string(&caller(
                meta.file().unwrap_or("?"),
                meta.line().unwrap_or(0)
            )),
            string(&fields.message)
        );
        if let Some(v) = verbosity(*meta.level()) {
            let _ = write!(line, ",\"v\":{v}");
        }
        line.push_str(&fields.pairs);
        writeln!(writer, "{line}}}")
    }
}

/// upstream's `v` of a line at `level`; `None` for errors, which carry none.
fn verbosity(level: Level) -> Option<u8> {
    match level {
        Level::ERROR => None,
        Level::WARN | Level::INFO => Some(0),
        Level::DEBUG => Some(4),
        Level::TRACE => Some(6),
    }
}

/// zap's short caller: the file's last directory and name, and the line.
fn caller(file: &str, line: u32) -> String {
    let mut parts = file.rsplit('/');
    let name = parts.next().unwrap_or(file);
    match parts.next() {
        Some(dir) if !dir.is_empty() => format!("{dir}/{name}:{line}"),
        _ => format!("{name}:{line}"),
    }
}

/// `text` as a JSON string.
fn string(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

/// An event's message and fields, the fields already as `,"key":value`.
#[derive(Default)]
struct Fields {
    message: String,
    pairs: String,
}

impl Fields {
    fn push(&mut self, field: &Field, value: &str) {
        let key = match field.name() {
            "error" => "err",
            other => other,
        };
        let _ = write!(self.pairs, ",{}:{value}", string(key));
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_owned();
        } else {
            self.push(field, &string(value));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, &value.to_string());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field, &value.to_string());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        match serde_json::Number::from_f64(value) {
            Some(n) => self.push(field, &n.to_string()),
            None => self.push(field, &string(&value.to_string())),
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field, if value { "true" } else { "false" });
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.message = text;
        } else {
            // A string recorded with `?` arrives quoted by Debug; its text is what is meant.
            let inner = text
                .strip_prefix('"')
                .and_then(|t| t.strip_suffix('"'))
                .unwrap_or(&text);
            self.push(field, &string(inner));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed() -> Timestamp {
        "2026-12-02T04:36:03.547810123Z".parse().unwrap()
    }

    /// What the subscriber writes, through a real tracing pipeline.
    fn logged(emit: impl FnOnce()) -> String {
        crate::testing::logged::logged(JsonLog { now: fixed }, emit)
    }

    #[test]
    fn lines_have_upstreams_keys_in_its_order() {
        let mode = crate::config::ProxyMode::Nftables;
        let line = logged(|| {
            tracing::info!(
                mode = mode.as_str(),
                ops = 12,
                full = true,
                elapsed = %crate::go_duration::GoDuration(std::time::Duration::from_micros(1200)),
                "full sync"
            )
        });
        assert_eq!(line.lines().count(), 1, "{line}");
        let caller_at = line.find("\"caller\":\"cli/json_log.rs:").unwrap();
        let tail = "\"msg\":\"full sync\",\"v\":0,\"mode\":\"nftables\",\"ops\":12,\"full\":true,\"elapsed\":\"1.2ms\"}\n";
        assert!(line.starts_with("{\"ts\":1796186163547.81"), "{line}");
        assert!(line.ends_with(tail), "{line}");
        assert!(caller_at < line.find("\"msg\"").unwrap());
        let parsed: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert!(parsed["ts"].is_f64());
    }

    #[test]
    fn error_lines_have_no_v_and_name_the_error_err() {
        let line = logged(|| tracing::error!(error = "refused", "sync failed"));
        assert!(
            line.ends_with("\"msg\":\"sync failed\",\"err\":\"refused\"}\n"),
            "{line}"
        );
        let debug = logged(|| tracing::debug!("x"));
        assert!(debug.ends_with("\"msg\":\"x\",\"v\":4}\n"), "{debug}");
    }

    #[test]
    fn a_hostile_value_stays_inside_its_string() {
        let line = logged(|| tracing::warn!(service = "a\"}\n{\"msg\":\"forged", "skipped"));
        assert_eq!(line.lines().count(), 1, "{line}");
        let parsed: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(parsed["service"], "a\"}\n{\"msg\":\"forged");
    }
}
