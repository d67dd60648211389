//! kube-rs watcher events of one kind → source [`Event`]s, and what to log about that watch.
//!
//! Pure. The watcher lists (`Init`, `InitApply`..., `InitDone`) at start and on every relist (a
//! 410 Gone after the watch fell behind, or a restart), from a streamed list (watch-list) or a
//! plain one; each step passes straight through as [`Event::ListStarted`], [`Event::ListItem`]
//! and [`Event::ListEnded`], so no list is held here: the tracker folds each object into the
//! model as it arrives and settles what is gone at the end. A list cut short by an error never
//! ends, so it deletes nothing; a restarted one starts over.

use kube::runtime::watcher;

use crate::cluster::source::{Event, Kind, Object};

/// The translation state of one kind's watch.
#[derive(Debug)]
pub struct Translate {
    kind: Kind,
    /// The watch has failed since its last good event; a failure is logged once.
    failing: bool,
}

/// What to log about a watch error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// The watch fell behind the API server's history (410 Gone): it relists.
    Expired,
    /// The first failure after good events (later ones are repeats and only debug-logged).
    Failing,
    Repeat,
}

impl Translate {
    pub fn new(kind: Kind) -> Translate {
        Translate {
            kind,
            failing: false,
        }
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// One watcher event; returns its source event and whether this watch just recovered from
    /// a failure.
    pub fn event(&mut self, event: watcher::Event<Object>) -> (Event, bool) {
        let recovered = std::mem::take(&mut self.failing);
        let out = match event {
            watcher::Event::Init => Event::ListStarted(self.kind),
            watcher::Event::InitApply(object) => Event::ListItem(object),
            watcher::Event::InitDone => Event::ListEnded(self.kind),
            watcher::Event::Apply(object) => Event::Applied(object),
            watcher::Event::Delete(object) => Event::Deleted(object),
        };
        (out, recovered)
    }

    /// One watcher error. A list in progress stays open: the watcher resumes it with the next
    /// page or restarts it with `Init`.
    pub fn error(&mut self, error: &watcher::Error) -> Note {
        if let watcher::Error::WatchError(status) = error
            && status.code == 410
        {
            return Note::Expired;
        }
        if std::mem::replace(&mut self.failing, true) {
            Note::Repeat
        } else {
            Note::Failing
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;
    use crate::testing;

    fn svc(name: &str) -> Object {
        Object::Service(Box::new(testing::service(
            "ns",
            name,
            "172.30.0.1",
            &[("", 80, "TCP")],
        )))
    }

    #[test]
    fn a_list_passes_through_item_by_item() {
        let mut t = Translate::new(Kind::Service);
        assert_eq!(
            t.event(watcher::Event::Init).0,
            Event::ListStarted(Kind::Service)
        );
        assert_eq!(
            t.event(watcher::Event::InitApply(svc("a"))).0,
            Event::ListItem(svc("a"))
        );
        assert_eq!(
            t.event(watcher::Event::InitDone).0,
            Event::ListEnded(Kind::Service)
        );
    }

    #[test]
    fn an_empty_list_is_still_a_list() {
        let mut t = Translate::new(Kind::Node);
        assert_eq!(
            t.event(watcher::Event::Init).0,
            Event::ListStarted(Kind::Node)
        );
        assert_eq!(
            t.event(watcher::Event::InitDone).0,
            Event::ListEnded(Kind::Node)
        );
    }

    #[test]
    fn watch_events_pass_through() {
        let mut t = Translate::new(Kind::Service);
        assert_eq!(
            t.event(watcher::Event::Apply(svc("a"))).0,
            Event::Applied(svc("a"))
        );
        assert_eq!(
            t.event(watcher::Event::Delete(svc("a"))).0,
            Event::Deleted(svc("a"))
        );
    }

    fn gone() -> watcher::Error {
        let status = Status::failure("too old resource version", "Expired").with_code(410);
        watcher::Error::WatchError(Box::new(status))
    }

    #[test]
    fn failures_are_noted_once_until_the_watch_delivers_again() {
        let mut t = Translate::new(Kind::Service);
        let failure = || watcher::Error::NoResourceVersion;
        assert_eq!(t.error(&failure()), Note::Failing);
        assert_eq!(t.error(&failure()), Note::Repeat);
        let (_, recovered) = t.event(watcher::Event::Init);
        assert!(recovered);
        assert_eq!(t.error(&failure()), Note::Failing);
        assert_eq!(t.error(&gone()), Note::Expired);
    }
}
