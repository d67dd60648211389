//! Copies one relayed TCP connection's bytes both ways, with half-close, holding a buffer only
//! while data flows.
//!
//! Why not `tokio::io::copy_bidirectional`: it keeps a buffer per direction for the whole life
//! of the connection, 16 KiB for two 8 KiB buffers at the smallest useful size, which is
//! 160 MB for 10,000 idle connections. Here each direction waits for readability with no
//! buffer, then borrows one for as long as the socket has bytes to read, and frees it when the
//! read would block. An idle relayed connection costs its task and its two sockets.
//!
//! Half-close: when one side ends its stream (EOF), the other side's write half is shut down,
//! and the opposite direction goes on until it ends too; a client that shuts its write side
//! still gets the reply. An error in either direction (a reset) ends both, and the other side
//! is reset too, so neither peer waits on a connection that is gone.

use std::io;

use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};

use super::counters::{Counters, Event};

/// The buffer one direction borrows while it has bytes to move starts at this size: a
/// request or a reply of a chatty connection fits.
const CHUNK_MIN: usize = 64 * 1024;
/// A direction that fills its buffer doubles it up to this size: a bulk transfer then moves
/// a megabyte per read and write: fewer, larger hand-offs between the relay and the peers'
/// threads carry more of a direct connection's throughput (`examples/userspace_relay.rs`,
/// docs/benchmarks.md). The buffer exists only while data flows, so idle connections cost
/// nothing; each connection keeps the size it reached.
const CHUNK_MAX: usize = 1024 * 1024;

/// Relays until both directions have ended, or one failed. Bytes are counted in `counters` as
/// they are written, so a long-lived connection's traffic shows before it ends.
pub async fn relay(
    client: &mut TcpStream,
    endpoint: &mut TcpStream,
    counters: &Counters,
) -> io::Result<()> {
    let outcome = {
        let (client_read, mut client_write) = client.split();
        let (endpoint_read, mut endpoint_write) = endpoint.split();
        let up = Bytes(counters, Event::BytesToEndpoint);
        let down = Bytes(counters, Event::BytesToClient);
        tokio::try_join!(
            copy(client_read, &mut endpoint_write, up),
            copy(endpoint_read, &mut client_write, down),
        )
    };
    if outcome.is_err() {
        // Pass the failure on as a reset rather than an orderly close.
        let _ = client.set_zero_linger();
        let _ = endpoint.set_zero_linger();
    }
    outcome.map(|_| ())
}

/// Where one direction counts its bytes.
#[derive(Clone, Copy)]
struct Bytes<'a>(&'a Counters, Event);

/// One direction: reads until EOF, then shuts down `to`'s write side.
async fn copy(from: ReadHalf<'_>, to: &mut WriteHalf<'_>, bytes: Bytes<'_>) -> io::Result<()> {
    let mut size = CHUNK_MIN;
    loop {
        from.readable().await?;
        let mut buf = Vec::with_capacity(size);
        loop {
            buf.clear();
            match from.try_read_buf(&mut buf) {
                Ok(0) => return shut_write(to).await,
                Ok(n) => {
                    to.write_all(&buf).await?;
                    bytes.0.add(bytes.1, n as u64);
                    if n == buf.capacity() && size < CHUNK_MAX {
                        size *= 2;
                        buf = Vec::with_capacity(size);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Ends the write side; a peer that has already gone is not an error of this direction (its
/// own direction reports it).
async fn shut_write(to: &mut WriteHalf<'_>) -> io::Result<()> {
    match to.shutdown().await {
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
        other => other,
    }
}
