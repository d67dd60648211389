//! A manifest directory followed over time: the long-running proxy's source when `--manifests` is
//! given.
//!
//! Guarantees: the stream starts with one [`Event::Listed`] per kind, and after every change in
//! the directory (debounced, so an editor's save storm costs one re-read) it re-reads the whole
//! directory and emits one `Listed` per kind again; the tracker diffs. A failed re-read (the
//! directory removed or unreadable) emits nothing, keeps the last state in force, and is retried
//! until it succeeds. The file-system watch lives exactly as long as the stream. Warnings are
//! logged once for as long as they persist, not on every re-read.
//!
//! It must never emit a partial state: each re-read's lists are complete or absent.

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use super::Error;
use super::dir::{Loaded, is_editor_scratch, load_dir, log_skipped, log_warning};
use super::reload::Reload;
use crate::cluster::source::Event;

/// Quiet time after the last change before the directory is re-read: long enough to cover an
/// editor's write-rename-chmod sequence or `kubectl get -o yaml > file` in several writes.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// Longest a continuous trickle of changes may delay a re-read.
const MAX_DELAY: Duration = Duration::from_secs(2);

/// How often a directory that could not be read is tried again. Needed because a removed
/// directory takes its file-system watch with it, so its return produces no notification.
const RETRY: Duration = Duration::from_secs(2);

/// The stream of [`Event`]s from a watched directory. Dropping it stops the watch.
pub struct Watch {
    inner: Pin<Box<dyn Stream<Item = Event> + Send>>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch").finish_non_exhaustive()
    }
}

impl Stream for Watch {
    type Item = Event;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// Starts watching `dir` and reads it once. Fails if the directory cannot be watched or listed
/// now; later failures are logged and retried instead. Reads the directory synchronously before
/// returning (the initial state is then ready on the first poll); the stream itself must be
/// polled inside a tokio runtime with timers enabled.
pub fn watch(dir: PathBuf) -> Result<Watch, Error> {
    let (tx, changes) = mpsc::unbounded_channel();
    let watched = dir.clone();
    let handler = move |result: notify::Result<notify::Event>| {
        let change = match result {
            Ok(event) if !is_change(&event) => return,
            // The directory itself was removed or moved: its watch is gone with it.
            Ok(event) => Change {
                rewatch: event.paths.iter().any(|p| p == &watched),
                paths: event.paths.into_iter().filter(|p| p != &watched).collect(),
            },
            // The event queue overflowed, or similar: re-read, and re-arm to be safe.
            Err(_) => Change {
                rewatch: true,
                paths: Vec::new(),
            },
        };
        // Fails only once the stream is gone, when nobody cares any more.
        let _ = tx.send(change);
    };
    let watch_error = |source| Error::Watch {
        path: dir.clone(),
        source,
    };
    let mut watcher = notify::recommended_watcher(handler).map_err(watch_error)?;
    // Watch first, then read: a change between the two is then seen, never lost.
    watcher
        .watch(&dir, RecursiveMode::NonRecursive)
        .map_err(watch_error)?;
    let loaded = load_dir(&dir)?;
    let mut state = State {
        dir,
        watcher,
        changes,
        pending: VecDeque::new(),
        logged: HashSet::new(),
        failing: false,
        rewatch: false,
        touched: BTreeSet::new(),
        objects: None,
    };
    state.accept(loaded);
    let stream = futures::stream::unfold(state, |mut state| async move {
        let event = state.next().await?;
        Some((event, state))
    });
    Ok(Watch {
        inner: Box::pin(stream),
    })
}

/// Whether a notification may mean the manifests changed. Opening and reading files is not a
/// change (our own re-reads would otherwise trigger re-reads forever), nor is an editor's
/// scratch file; every other change, including to hidden entries such as a mounted ConfigMap's
/// `..data` link swap, is.
fn is_change(event: &notify::Event) -> bool {
    if let EventKind::Access(access) = event.kind {
        return access == AccessKind::Close(AccessMode::Write);
    }
    let scratch = |p: &PathBuf| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(is_editor_scratch)
    };
    event.paths.is_empty() || !event.paths.iter().all(scratch)
}

/// One notification: the paths it named, and whether the watch must be re-armed.
struct Change {
    rewatch: bool,
    paths: Vec<PathBuf>,
}

struct State {
    dir: PathBuf,
    watcher: RecommendedWatcher,
    /// One message per notification.
    changes: mpsc::UnboundedReceiver<Change>,
    pending: VecDeque<Event>,
    /// Warnings and skips of the last successful read, already logged.
    logged: HashSet<String>,
    /// The last read failed: retry on a timer, and re-arm the watch first.
    failing: bool,
    rewatch: bool,
    /// Paths the notifications since the last read named.
    touched: BTreeSet<PathBuf>,
    /// The objects of the last read, to say what a re-read changed; `None` before the first.
    objects: Option<Vec<crate::cluster::source::Object>>,
}

impl State {
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            if self.failing {
                // A change or the retry timer, whichever comes first.
                if let Ok(change) = tokio::time::timeout(RETRY, self.changes.recv()).await {
                    self.note(change?);
                }
            } else {
                let change = self.changes.recv().await?;
                self.note(change);
            }
            self.settle().await?;
            self.reread().await;
        }
    }

    /// Waits until the directory has been quiet for [`DEBOUNCE`] (at most [`MAX_DELAY`]).
    async fn settle(&mut self) -> Option<()> {
        let deadline = tokio::time::Instant::now() + MAX_DELAY;
        loop {
            let quiet = (tokio::time::Instant::now() + DEBOUNCE).min(deadline);
            match tokio::time::timeout_at(quiet, self.changes.recv()).await {
                Ok(change) => self.note(change?),
                Err(_elapsed) => return Some(()),
            }
        }
    }

    fn note(&mut self, change: Change) {
        self.rewatch |= change.rewatch;
        self.touched.extend(change.paths);
    }

    async fn reread(&mut self) {
        if self.failing || self.rewatch {
            let _ = self.watcher.unwatch(&self.dir);
            if let Err(e) = self.watcher.watch(&self.dir, RecursiveMode::NonRecursive) {
                return self.fail(&e);
            }
            self.rewatch = false;
        }
        let dir = self.dir.clone();
        match tokio::task::spawn_blocking(move || load_dir(&dir)).await {
            Ok(Ok(loaded)) => {
                if self.failing {
                    tracing::info!(dir = %self.dir.display(), "manifest directory readable again");
                }
                self.failing = false;
                self.accept(loaded);
            }
            Ok(Err(e)) => self.fail(&e),
            Err(e) => self.fail(&e),
        }
    }

    fn fail(&mut self, error: &dyn std::error::Error) {
        if !self.failing {
            tracing::warn!(
                dir = %self.dir.display(),
                error = %error_chain(error),
                "cannot read manifest directory; keeping the last state",
            );
        }
        self.failing = true;
    }

    /// Logs what is new since the last read and queues the lists.
    fn accept(&mut self, loaded: Loaded) {
        let mut logged = HashSet::with_capacity(loaded.warnings.len() + loaded.skipped.len());
        for warning in &loaded.warnings {
            let key = warning.to_string();
            if !self.logged.contains(&key) {
                log_warning(warning);
            }
            logged.insert(key);
        }
        for skipped in &loaded.skipped {
            let key = format!("{} {}", skipped.place, skipped.type_name);
            if !self.logged.contains(&key) {
                log_skipped(skipped);
            }
            logged.insert(key);
        }
        self.logged = logged;
        tracing::debug!(dir = %self.dir.display(), objects = loaded.objects.len(), "manifest directory read");
        let touched = std::mem::take(&mut self.touched);
        if let Some(before) = &self.objects {
            Reload::of(&touched, before, &loaded.objects).log(&self.dir);
        }
        self.objects = Some(loaded.objects.clone());
        self.pending.extend(loaded.into_events());
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests;
