//! The API source on a thread of its own: the client, its connections and the watches run on a
//! single-threaded runtime there, and the events reach the proxy in batches.
//!
//! Why: a list arrives as thousands of body chunks, each handed from hyper's connection task to
//! the task decoding it. On a multi-threaded runtime those two tasks sit on different threads,
//! so every chunk costs a cross-thread wake-up and much of the source's CPU goes to the
//! scheduler (`examples/source_lists`; docs/benchmarks-history.md, "Lists read object by
//! object"). Here the connection, the decoding and the splitting into objects share one thread,
//! and the proxy's runner receives the objects a batch at a time: one hand-off per batch of up
//! to [`BATCH`] events, not per chunk.
//!
//! The client is made on that thread too (kube-rs's client starts its request buffer on the
//! runtime it is made on), and handed back: other users (the Event publisher) send their
//! requests through it from the main runtime.

use futures::StreamExt as _;
use futures::stream::{self, BoxStream};
use kube::Client;

use super::{Encoding, Error, Lists, Reachability, client, watch};
use crate::cluster::source::Event;
use crate::config::ClientConnection;

/// Events handed to the proxy at once, at most: during a list, a few milliseconds of objects.
pub const BATCH: usize = 256;

/// [`watch`](fn@watch) for `node_name` over a client for `connection`, run on a thread of its own; the
/// stream, the client's reachability and the client. Fails as [`client`](fn@client) does.
pub async fn watch_on_own_thread(
    connection: ClientConnection,
    node_name: String,
    lists: Lists,
) -> Result<(BoxStream<'static, Event>, Reachability, Client), Error> {
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let (tx, rx) = tokio::sync::mpsc::channel::<Vec<Event>>(16);
    std::thread::Builder::new()
        .name("api-source".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    let _ = ready_tx.send(Err(Error::SourceThread(e.to_string())));
                    return;
                }
            };
            runtime.block_on(async move {
                let (client, reachability) = match client(&connection).await {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let encoding = Encoding::of(&connection);
                let mut events =
                    watch(client.clone(), &node_name, lists, encoding).ready_chunks(BATCH);
                if ready_tx.send(Ok((reachability, client))).is_err() {
                    return;
                }
                // Until the proxy drops the stream: the thread, its client and its watches
                // end then, even while no event comes.
                loop {
                    tokio::select! {
                        batch = events.next() => {
                            let Some(batch) = batch else { return };
                            if tx.send(batch).await.is_err() {
                                return;
                            }
                        }
                        () = tx.closed() => return,
                    }
                }
            });
        })
        .map_err(|e| Error::SourceThread(e.to_string()))?;
    let (reachability, client) = ready_rx.await.map_err(|_| {
        Error::SourceThread("the source thread ended before its client was made".into())
    })??;
    let events = stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|batch| (stream::iter(batch), rx))
    })
    .flatten()
    .boxed();
    Ok((events, reachability, client))
}
