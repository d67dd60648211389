//! `explain` on a node where the proxy runs: asked of the running proxy (`/debug/explain` on
//! its metrics address, as `status` asks `/debug/status`), which knows its model and reads its
//! own kernel; no kubeconfig needed. Where nothing listens there, the caller falls back to the
//! API server (or, with `--manifests`, never asks).

use std::net::SocketAddr;
use std::time::Duration;

use super::super::OutputFormat;
use super::super::debug::EXPLAIN_PATH;
use super::super::run::RuntimeError;
use super::super::status::ask::{self, AskError};

/// How long the running proxy may take: one packet's explanation reads a few chains.
const TIMEOUT: Duration = Duration::from_secs(30);

/// The `/debug/explain` path and query for `explain`'s arguments.
pub fn path(
    to: &str,
    from: Option<&str>,
    in_interface: Option<&str>,
    format: OutputFormat,
) -> String {
    let mut path = format!("{EXPLAIN_PATH}?to={}", encoded(to));
    for (key, value) in [("from", from), ("in_interface", in_interface)] {
        if let Some(v) = value {
            path.push_str(&format!("&{key}={}", encoded(v)));
        }
    }
    if format == OutputFormat::Json {
        path.push_str("&output=json");
    }
    path
}

/// `text` percent-encoded for a query value: every byte but the unreserved ones.
fn encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Asks the proxy whose metrics address is `metrics` (a wildcard asked over loopback): its
/// answer, `None` when no proxy listens there, or why the question failed (an answer other
/// than 200 says why in its first line).
pub fn ask(metrics: SocketAddr, path: &str) -> Result<Option<String>, ask::Error> {
    let address = ask::target(metrics);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RuntimeError)?;
    match runtime.block_on(ask::get(address, path, TIMEOUT)) {
        Ok((200, body)) => Ok(Some(body)),
        Ok((code, body)) => Err(ask::Error::answered(address, code, &body)),
        Err(AskError::NotListening { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_become_an_encoded_query() {
        assert_eq!(
            path("10.96.1.10:80/udp", Some("node"), None, OutputFormat::Table),
            "/debug/explain?to=10.96.1.10%3A80%2Fudp&from=node"
        );
        assert_eq!(
            path("[fd00::a]:80", None, Some("eth0"), OutputFormat::Json),
            "/debug/explain?to=%5Bfd00%3A%3Aa%5D%3A80&in_interface=eth0&output=json"
        );
        assert_eq!(
            path("x", Some("a&b=c d"), None, OutputFormat::Table),
            "/debug/explain?to=x&from=a%26b%3Dc%20d"
        );
    }

    #[test]
    fn no_proxy_listening_is_no_answer_rather_than_an_error() {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = free.local_addr().unwrap();
        drop(free);
        assert!(matches!(ask(address, "/debug/explain?to=x"), Ok(None)));
    }
}
