//! The traffic probe: a lab process (see `helper.rs`) that opens connections or exchanges
//! datagrams from inside a namespace and prints one [`Attempt`] per try, so a single process
//! start covers many connections.
//!
//! Errors are classified the way the scenarios care about them: `refused` (a TCP reset or an ICMP
//! port unreachable: what a REJECT rule sends), `unreachable` (ICMP host/net unreachable: usually
//! no route, nothing captured the address), `timeout` (dropped), or anything else verbatim.

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, UdpSocket};

use super::helper::{Proto, RESULT_PREFIX};

/// What to send where, how often.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    pub proto: Proto,
    pub target: SocketAddr,
    pub count: u32,
    /// Per attempt: connect plus reply.
    pub timeout_ms: u64,
    /// Source address to bind (the namespace must own it); the kernel's choice when `None`.
    pub bind: Option<IpAddr>,
    /// Bytes to send first (TCP: e.g. an HTTP request); UDP always sends at least one byte.
    pub send: Option<String>,
    /// Pause between attempts.
    pub interval_ms: u64,
    /// Every attempt over the same socket (one flow), not a fresh one; UDP: a new socket
    /// after an attempt that failed with an error (not a timeout). TCP: one connection to
    /// a session port (`echo::SESSION_PORT`): the first attempt reads the line the server
    /// sends at once, each later one sends a line and reads the answer; at the end the
    /// connection is reset, not closed (so no TIME_WAIT is left behind in the kernel).
    pub same_socket: bool,
}

/// The outcome of one attempt, as printed after [`RESULT_PREFIX`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Attempt {
    /// Everything the server sent (TCP: until it closed).
    pub reply: Option<String>,
    /// `refused`, `unreachable`, `timeout`, `reset` or the error text.
    pub error: Option<String>,
    /// Milliseconds from the start of the attempt to its end.
    pub ms: u64,
}

/// Runs the request and prints the attempts; returns when done.
pub fn run(request: &Request) {
    run_while(request, || true);
}

/// Runs the request as [`run`] does, but makes no further attempt once this process's stdin
/// has closed: the lab closes it when a scenario has seen enough (`Lab::probe_during`), so a
/// stream sized for the slowest machine ends as soon as its answer is known.
pub fn run_until_stdin_closes(request: &Request) {
    let closed = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&closed);
    // A thread, not a runtime task: a read of stdin cannot be cancelled, and the process
    // exits without waiting for it.
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        seen.store(true, Ordering::Relaxed);
    });
    run_while(request, || !closed.load(Ordering::Relaxed));
}

/// Prints each attempt of `request` while `keep_going` says so before it (the first attempt is
/// always made).
fn run_while(request: &Request, keep_going: impl Fn() -> bool) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("probe runtime");
    runtime.block_on(attempts(request, keep_going, |attempt| {
        println!(
            "{RESULT_PREFIX}{}",
            serde_json::to_string(&attempt).expect("attempt JSON")
        );
    }));
}

/// One request of a batch ([`run_batch`]): its attempts run `parallel` at once, each on a
/// fresh socket, and it gives up once `give_up_after` attempts failed while none succeeded (a
/// frontend that drops costs a whole timeout per attempt; one that fails only sometimes is
/// still tried `count` times, each attempt started after one was served allowed only
/// `timeout_once_served_ms`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BatchItem {
    pub request: Request,
    pub parallel: u32,
    pub give_up_after: u32,
    pub timeout_once_served_ms: u64,
}

/// One attempt of a batch, with the index of its item.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BatchAttempt {
    pub item: usize,
    pub attempt: Attempt,
}

/// Runs the items of a batch, at most `concurrency` at once, and prints one [`BatchAttempt`]
/// per attempt; returns when all are done. One process for many frontends: a probe process
/// costs more than the connections it makes.
pub fn run_batch(items: &[BatchItem], concurrency: usize) {
    use futures::StreamExt;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("probe runtime");
    runtime.block_on(
        futures::stream::iter(items.iter().enumerate()).for_each_concurrent(
            concurrency.max(1),
            |(item, b)| async move {
                let print = |attempt: Attempt| {
                    let line = BatchAttempt { item, attempt };
                    println!(
                        "{RESULT_PREFIX}{}",
                        serde_json::to_string(&line).expect("attempt JSON")
                    );
                };
                parallel_attempts(b, print).await;
            },
        ),
    );
}

/// The attempts of one batch item, `parallel` at once, each on its own socket.
async fn parallel_attempts(item: &BatchItem, mut emit: impl FnMut(Attempt)) {
    use futures::StreamExt;
    assert!(
        !item.request.same_socket,
        "a batch item's attempts are independent"
    );
    let served = std::cell::Cell::new(0u32);
    let mut failed = 0;
    let mut running = futures::stream::iter(0..item.request.count)
        .map(|_| {
            let mut request = item.request.clone();
            if served.get() > 0 {
                request.timeout_ms = request.timeout_ms.min(item.timeout_once_served_ms);
            }
            async move { one_attempt(&request, &mut None, &mut None).await }
        })
        .buffer_unordered(item.parallel.max(1) as usize);
    while let Some(attempt) = running.next().await {
        if attempt.error.is_some() {
            failed += 1;
        } else {
            served.set(served.get() + 1);
        }
        emit(attempt);
        if served.get() == 0 && failed >= item.give_up_after {
            break;
        }
    }
}

/// Makes the request's attempts in turn, giving each to `emit`, while `keep_going` says so.
async fn attempts(request: &Request, keep_going: impl Fn() -> bool, mut emit: impl FnMut(Attempt)) {
    let mut shared = None;
    let mut session = None;
    for i in 0..request.count {
        if i > 0 && !keep_going() {
            break;
        }
        if i > 0 && request.interval_ms > 0 {
            tokio::time::sleep(Duration::from_millis(request.interval_ms)).await;
        }
        emit(one_attempt(request, &mut shared, &mut session).await);
    }
    if let Some(stream) = session {
        let _ = socket2::SockRef::from(stream.get_ref()).set_linger(Some(Duration::ZERO));
    }
}

/// One attempt: a connection or a datagram exchange, over the shared socket or session when
/// the request keeps one.
async fn one_attempt(
    request: &Request,
    shared: &mut Option<UdpSocket>,
    session: &mut Option<tokio::io::BufReader<tokio::net::TcpStream>>,
) -> Attempt {
    let started = tokio::time::Instant::now();
    let timeout = Duration::from_millis(request.timeout_ms);
    let result = match request.proto {
        Proto::Tcp if request.same_socket => {
            tokio::time::timeout(timeout, tcp_session(request, session)).await
        }
        Proto::Tcp => tokio::time::timeout(timeout, tcp(request)).await,
        Proto::Udp => tokio::time::timeout(timeout, udp(request, shared)).await,
    };
    if matches!(result, Ok(Err(_))) {
        // As a DNS client does: a socket that failed (an ICMP error, or destroyed
        // because its backend went away) is replaced by a new one for the next attempt.
        *shared = None;
    }
    let (reply, error) = match result {
        Ok(Ok(text)) => (Some(text), None),
        Ok(Err(e)) => (None, Some(classify(&e))),
        Err(_) => (None, Some("timeout".to_owned())),
    };
    Attempt {
        reply,
        error,
        ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    }
}

fn classify(e: &std::io::Error) -> String {
    match e.kind() {
        ErrorKind::ConnectionRefused => "refused".to_owned(),
        ErrorKind::HostUnreachable | ErrorKind::NetworkUnreachable => "unreachable".to_owned(),
        ErrorKind::TimedOut => "timeout".to_owned(),
        ErrorKind::ConnectionReset => "reset".to_owned(),
        _ => e.to_string(),
    }
}

/// A TCP connection to the target, from the bound address when there is one.
async fn connect(request: &Request) -> std::io::Result<tokio::net::TcpStream> {
    let socket = if request.target.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(ip) = request.bind {
        socket.bind(SocketAddr::new(ip, 0))?;
    }
    socket.connect(request.target).await
}

async fn tcp(request: &Request) -> std::io::Result<String> {
    let mut stream = connect(request).await?;
    if let Some(data) = &request.send {
        stream.write_all(data.as_bytes()).await?;
    }
    let mut text = Vec::new();
    stream.read_to_end(&mut text).await?;
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// One attempt of a session (see [`Request::same_socket`]): the line the server sends first,
/// or the answer to a line sent.
async fn tcp_session(
    request: &Request,
    session: &mut Option<tokio::io::BufReader<tokio::net::TcpStream>>,
) -> std::io::Result<String> {
    use tokio::io::AsyncBufReadExt;
    let stream = match session {
        Some(s) => {
            s.get_mut().write_all(b"ping\n").await?;
            s
        }
        None => session.insert(tokio::io::BufReader::new(connect(request).await?)),
    };
    let mut line = String::new();
    if stream.read_line(&mut line).await? == 0 {
        return Err(std::io::Error::from(ErrorKind::ConnectionReset));
    }
    Ok(line)
}

async fn udp(request: &Request, shared: &mut Option<UdpSocket>) -> std::io::Result<String> {
    let fresh;
    let socket = match shared {
        Some(s) if request.same_socket => &*s,
        _ => {
            let local = match (request.bind, request.target) {
                (Some(ip), _) => SocketAddr::new(ip, 0),
                (None, SocketAddr::V4(_)) => SocketAddr::from(([0, 0, 0, 0], 0)),
                (None, SocketAddr::V6(_)) => SocketAddr::from(([0u16; 8], 0)),
            };
            let s = UdpSocket::bind(local).await?;
            s.connect(request.target).await?;
            if request.same_socket {
                &*shared.insert(s)
            } else {
                fresh = s;
                &fresh
            }
        }
    };
    let payload = request.send.as_deref().unwrap_or("probe");
    socket.send(payload.as_bytes()).await?;
    let mut buf = [0u8; 1500];
    let n = socket.recv(&mut buf).await?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}
