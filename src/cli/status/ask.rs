//! `kube-proxy-rs status` asks the running proxy: one HTTP/1.1 GET of `/debug/status` on its
//! metrics address, so the answer carries what only the proxy knows (its last sync, its
//! health-check listeners) and no second process reads the kernel. hyper's client connection
//! is the one kube's client uses; one request needs no pool.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// The answer larger than this is refused (a status of 50,000 ports is a few MiB).
const MAX_BODY: usize = 256 << 20;

/// Where to ask: the metrics address, with a wildcard bind (`0.0.0.0`, `::`) asked over the
/// loopback of its family.
pub fn target(metrics: SocketAddr) -> SocketAddr {
    let ip = match metrics.ip() {
        IpAddr::V4(a) if a.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(a) if a.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, metrics.port())
}

/// Why the proxy gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    /// Nothing listens at the address: no proxy runs there.
    #[error(
        "cannot reach the proxy's metrics address {address} (is it running there? \
         --metrics-bind-address or --config tell where)"
    )]
    NotListening {
        address: SocketAddr,
        #[source]
        cause: std::io::Error,
    },
    /// Something listens, but the HTTP exchange with it failed.
    #[error(
        "cannot reach the proxy's metrics address {address} (is it running there? \
         --metrics-bind-address or --config tell where)"
    )]
    Exchange {
        address: SocketAddr,
        #[source]
        cause: hyper::Error,
    },
    /// Something listens but gave no answer in time.
    #[error(
        "no answer from the proxy at {address} within {}",
        crate::go_duration::GoDuration(*timeout)
    )]
    Timeout {
        address: SocketAddr,
        timeout: Duration,
    },
    /// The path makes no HTTP request.
    #[error("the request {path:?}")]
    Request {
        path: String,
        #[source]
        cause: http::Error,
    },
    /// The answer could not be read whole (cut off, or larger than it may be).
    #[error("reading the proxy's answer")]
    Body(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Why the running proxy gave `status` (or `explain`) no answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Runtime(#[from] crate::cli::run::RuntimeError),
    #[error(transparent)]
    Ask(#[from] AskError),
    /// The proxy answered with another code than 200; its answer's first line says why.
    #[error("the proxy at {address} answered {code}: {line}")]
    Answered {
        address: SocketAddr,
        code: u16,
        line: String,
    },
}

impl Error {
    /// The answer `code` with `body` from the proxy at `address`, which is not 200.
    pub fn answered(address: SocketAddr, code: u16, body: &str) -> Error {
        Error::Answered {
            address,
            code,
            line: body.lines().next().unwrap_or_default().to_owned(),
        }
    }
}

/// `status`: the running proxy's `/debug/status` for `service` (all when `None`) in `format`,
/// asked at `config`'s metrics address.
pub fn answer(
    config: &crate::config::Config,
    service: Option<&str>,
    format: crate::cli::OutputFormat,
) -> Result<String, Error> {
    let mut path = format!("{}?", crate::cli::debug::STATUS_PATH);
    if let Some(s) = service {
        // Checked by bad_service: only characters that need no escaping in a query.
        path.push_str(&format!("service={s}&"));
    }
    if format == crate::cli::OutputFormat::Json {
        path.push_str("output=json");
    }
    let address = target(config.metrics_bind_address);
    let runtime = crate::cli::run::runtime()?;
    match runtime.block_on(get(address, &path, Duration::from_secs(60))) {
        Ok((200, body)) => Ok(body),
        Ok((code, body)) => Err(Error::answered(address, code, &body)),
        Err(e) => Err(e.into()),
    }
}

/// GETs `path` (with its query) from `address`; the status code and the body.
pub async fn get(
    address: SocketAddr,
    path: &str,
    timeout: Duration,
) -> Result<(u16, String), AskError> {
    tokio::time::timeout(timeout, get_now(address, path))
        .await
        .map_err(|_| AskError::Timeout { address, timeout })?
}

async fn get_now(address: SocketAddr, path: &str) -> Result<(u16, String), AskError> {
    let stream = TcpStream::connect(address)
        .await
        .map_err(|cause| AskError::NotListening { address, cause })?;
    // Connected: a failure from here on is no sign that nothing runs there.
    let exchange = |cause| AskError::Exchange { address, cause };
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(exchange)?;
    let driver = tokio::spawn(connection);
    let request = http::Request::get(path)
        .header(http::header::HOST, address.to_string())
        .body(Empty::<Bytes>::new())
        .map_err(|cause| AskError::Request {
            path: path.to_owned(),
            cause,
        })?;
    let response = sender.send_request(request).await.map_err(exchange)?;
    let code = response.status().as_u16();
    let body = http_body_util::Limited::new(response.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(AskError::Body)?
        .to_bytes();
    driver.abort();
    Ok((code, String::from_utf8_lossy(&body).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_bind_is_asked_over_loopback() {
        let t = |s: &str| target(s.parse().unwrap()).to_string();
        assert_eq!(t("0.0.0.0:10249"), "127.0.0.1:10249");
        assert_eq!(t("[::]:10249"), "[::1]:10249");
        assert_eq!(t("10.0.0.11:9000"), "10.0.0.11:9000");
    }

    #[tokio::test]
    async fn a_proxy_that_is_not_there_is_one_clear_error() {
        // A port just released on loopback: nothing listens there.
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = free.local_addr().unwrap();
        drop(free);
        let e = get(address, "/debug/status", Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(matches!(e, AskError::NotListening { .. }), "{e:?}");
        let e = crate::causes::one_line(&e);
        assert!(
            e.starts_with("cannot reach the proxy's metrics address"),
            "{e}"
        );
        assert_eq!(e.lines().count(), 1);
    }

    #[tokio::test]
    async fn a_listener_that_hangs_up_is_a_failed_exchange_with_its_cause() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            drop(stream);
        });
        let e = get(address, "/debug/status", Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(
            matches!(&e, AskError::Exchange { address: a, .. } if *a == address),
            "{e:?}"
        );
        let hyper = std::error::Error::source(&e).expect("the exchange's cause");
        assert!(hyper.is::<hyper::Error>(), "{hyper:?}");
    }

    #[tokio::test]
    async fn the_answer_is_read_whole_with_its_code() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let app = axum::Router::new().route(
            "/debug/status",
            axum::routing::get(|| async { (http::StatusCode::IM_A_TEAPOT, "x".repeat(100_000)) }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        let (code, body) = get(address, "/debug/status?output=json", Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!((code, body.len()), (418, 100_000));
    }
}
