//! One task drives every listener's loop (TCP accept, UDP receive): an idle listener costs its
//! socket and its loop's suspended state, not a task of its own. A node with thousands of
//! Service ports has thousands of listeners, nearly all idle at any moment.
//!
//! The loops are futures in one `FuturesUnordered`, which polls only those whose socket woke
//! them; each is wrapped in an `Abortable`, whose handle the [`Listener`](super::Listener)
//! keeps, so closing a listener ends its loop (and drops its socket) on the driving task's next
//! turn, just after the sync that closed it returns; a TCP listener stops listening before
//! that, when it is dropped (`Listener`'s `Drop`). Connections and UDP flows still get a
//! task each: they carry bytes, and must not wait on each other.

use futures::future::{AbortHandle, Abortable, BoxFuture};
use futures::stream::{FuturesUnordered, StreamExt as _};
use tokio::sync::mpsc;

/// Where listener loops are sent to be driven; the driving task ends when this is dropped
/// and every loop it drives has ended.
#[derive(Debug)]
pub(super) struct Driver {
    loops: mpsc::UnboundedSender<BoxFuture<'static, ()>>,
}

impl Driver {
    /// Starts the driving task on the current tokio runtime.
    pub(super) fn start() -> Driver {
        let (loops, mut incoming) = mpsc::unbounded_channel::<BoxFuture<'static, ()>>();
        tokio::spawn(async move {
            let mut running = FuturesUnordered::new();
            loop {
                tokio::select! {
                    next = incoming.recv() => match next {
                        Some(l) => running.push(l),
                        None => break,
                    },
                    Some(()) = running.next(), if !running.is_empty() => {}
                }
            }
            // The relay is gone: finish what is still running (loops end when aborted).
            while running.next().await.is_some() {}
        });
        Driver { loops }
    }

    /// Drives `listener_loop` until the returned handle aborts it.
    pub(super) fn drive(
        &self,
        listener_loop: impl Future<Output = ()> + Send + 'static,
    ) -> AbortHandle {
        let (handle, registration) = AbortHandle::new_pair();
        let abortable = Abortable::new(listener_loop, registration);
        let boxed: BoxFuture<'static, ()> = Box::pin(async move {
            let _ = abortable.await;
        });
        if self.loops.send(boxed).is_err() {
            // The driving task is gone (its runtime shut down): nothing can run the loop.
            handle.abort();
        }
        handle
    }
}
