//! Asking the running proxy for its model from beside the sync: the debug endpoints hold a
//! [`Peek`], the runner answers on its own task with the tracker's current snapshot
//! ([`Tracker::peek`](crate::cluster::Tracker::peek)), so no reader ever touches the tracker,
//! and no sync loses its changes to one.

use tokio::sync::{mpsc, oneshot};

use crate::cluster::Snapshot;

/// Requests waiting for the runner; more are refused (the endpoint answers 503) rather than
/// queued without bound.
const WAITING: usize = 16;

/// A handle on the runner's model. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Peek(mpsc::Sender<oneshot::Sender<Snapshot>>);

/// The runner's end.
pub(super) type Requests = mpsc::Receiver<oneshot::Sender<Snapshot>>;

impl Peek {
    pub(super) fn channel() -> (Peek, Requests) {
        let (tx, rx) = mpsc::channel(WAITING);
        (Peek(tx), rx)
    }

    /// The model as the runner has it now; `None` when the runner is gone or busy with too many
    /// requests. The snapshot shares the tracker's map: holding it while the tracker changes
    /// costs one copy of the map, so drop it as soon as the answer is built.
    pub async fn snapshot(&self) -> Option<Snapshot> {
        let (reply, answer) = oneshot::channel();
        self.0.try_send(reply).ok()?;
        answer.await.ok()
    }
}
