//! The process's log subscriber: klog's text lines ([`super::klog`]) or upstream's JSON lines
//! ([`super::json_log`]), at the level the
//! verbosity asks for (0–3 info, 4–5 debug, 6 and up trace).
//!
//! kube-rs's HTTP layer logs an error line of its own for every failed request (`failed with
//! error client error (Connect)`: no URL, no cause, once per retry). The API source's
//! reachability layer says the same once per change of state with the URL and cause, so that
//! layer's lines are shown only at trace verbosity, where every request is wanted.

use tracing::level_filters::LevelFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::config::{Config, LogFormat};

/// The target of kube-rs's per-request HTTP log lines.
const KUBE_HTTP_TARGET: &str = "kube_client::client::builder";

/// The level a klog verbosity shows.
pub fn level(verbosity: u32) -> LevelFilter {
    match verbosity {
        0..=3 => LevelFilter::INFO,
        4..=5 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    }
}

/// What is shown at `level`: everything up to it, but kube-rs's per-request lines only at trace.
pub fn filter(level: LevelFilter) -> Targets {
    let kube_http = if level == LevelFilter::TRACE {
        level
    } else {
        LevelFilter::OFF
    };
    Targets::new()
        .with_default(level)
        .with_target(KUBE_HTTP_TARGET, kube_http)
}

/// Installs the subscriber for `config`, writing to stderr.
pub fn init(config: &Config) {
    let filter = filter(level(config.verbosity()));
    // Colour only for a person at a terminal: a container runtime or `2> file` keeps the bytes
    // for `kubectl logs` and log pipelines, where escape sequences are noise.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry();
    match config.logging.format {
        LogFormat::Json => registry
            .with(
                layer
                    .event_format(super::json_log::JsonLog {
                        now: k8s_openapi::jiff::Timestamp::now,
                    })
                    .with_filter(filter),
            )
            .init(),
        LogFormat::Text => registry
            .with(
                layer
                    .event_format(super::klog::Klog {
                        now: k8s_openapi::jiff::Timestamp::now,
                        pid: std::process::id(),
                    })
                    .with_filter(filter),
            )
            .init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    fn shown(filter: &Targets, target: &str, level: Level) -> bool {
        filter.would_enable(target, &level)
    }

    #[test]
    fn kube_rs_request_lines_are_shown_only_at_trace() {
        let info = filter(level(2));
        assert!(!shown(&info, KUBE_HTTP_TARGET, Level::ERROR));
        assert!(shown(&info, "kube_proxy_rs::sync::runner", Level::INFO));
        assert!(!shown(&info, "kube_proxy_rs::sync::runner", Level::DEBUG));
        // Other kube-rs modules' errors stay.
        assert!(shown(&info, "kube_runtime::watcher", Level::ERROR));
        let trace = filter(level(6));
        assert!(shown(&trace, KUBE_HTTP_TARGET, Level::ERROR));
    }
}
