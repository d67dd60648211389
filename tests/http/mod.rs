//! A tiny HTTP/1.1 client for the server tests: one request per connection, `Connection: close`,
//! no redirects or chunked bodies (our servers send `Content-Length`). Only loopback addresses
//! are ever passed in.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A parsed answer.
#[derive(Debug)]
pub struct Reply {
    pub code: u16,
    /// Header names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == &name.to_ascii_lowercase())
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).expect("JSON body")
    }
}

/// GET `path` from `addr`; an error when the connection is refused.
pub async fn get(addr: SocketAddr, path: &str) -> std::io::Result<Reply> {
    request(addr, "GET", path).await
}

/// The methods that ask a server to change something: every one must get 405.
pub const CHANGING: [&str; 4] = ["POST", "PUT", "PATCH", "DELETE"];

/// `method` on `path` at `addr`, with an empty body; an error when the connection is refused.
pub async fn request(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<Reply> {
    let mut stream = TcpStream::connect(addr).await?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let text = String::from_utf8(raw).expect("UTF-8 answer");
    let (head, body) = text.split_once("\r\n\r\n").expect("header end");
    let mut lines = head.split("\r\n");
    let status = lines.next().expect("status line");
    let code = status
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok(Reply {
        code,
        headers,
        body: body.to_owned(),
    })
}

/// GET that must succeed.
pub async fn must_get(addr: SocketAddr, path: &str) -> Reply {
    get(addr, path)
        .await
        .unwrap_or_else(|e| panic!("GET http://{addr}{path}: {e}"))
}
