//! kube-rs watcher events of one kind → source [`Event`]s, and what to log about that watch.
//!
//! Pure. The watcher lists in pages (`Init`, `InitApply`..., `InitDone`) at start and on every
//! relist (a 410 Gone after the watch fell behind, or a restart); the pages are buffered and
//! emitted as one [`Event::Listed`] at `InitDone`, which the tracker treats as the complete
//! state of that kind: objects it holds that are not in the list are deleted. A list cut short
//! by an error is never emitted, so the model never sees a partial state.

use kube::runtime::watcher;

use crate::cluster::source::{Event, Kind, Object};

/// The translation state of one kind's watch.
#[derive(Debug)]
pub struct Translate {
    kind: Kind,
    /// Objects of the list in progress.
    listing: Option<Vec<Object>>,
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
            listing: None,
            failing: false,
        }
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// One watcher event; returns the source event it completes, if any, and whether this
    /// watch just recovered from a failure.
    pub fn event(&mut self, event: watcher::Event<Object>) -> (Option<Event>, bool) {
        let recovered = std::mem::take(&mut self.failing);
        let out = match event {
            watcher::Event::Init => {
                self.listing = Some(Vec::new());
                None
            }
            watcher::Event::InitApply(object) => {
                self.listing.get_or_insert_with(Vec::new).push(object);
                None
            }
            watcher::Event::InitDone => {
                let objects = self.listing.take().unwrap_or_default();
                Some(Event::Listed(self.kind, objects))
            }
            watcher::Event::Apply(object) => Some(Event::Applied(object)),
            watcher::Event::Delete(object) => Some(Event::Deleted(object)),
        };
        (out, recovered)
    }

    /// One watcher error. A list in progress is kept: the watcher resumes it with the next
    /// page or restarts it with `Init`, which clears it.
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

    fn name(o: &Object) -> String {
        match o {
            Object::Service(s) => s.metadata.name.clone().unwrap_or_default(),
            _ => String::new(),
        }
    }

    #[test]
    fn a_paged_list_becomes_one_listed_event_at_init_done() {
        let mut t = Translate::new(Kind::Service);
        assert_eq!(t.event(watcher::Event::Init).0, None);
        assert_eq!(t.event(watcher::Event::InitApply(svc("a"))).0, None);
        assert_eq!(t.event(watcher::Event::InitApply(svc("b"))).0, None);
        let Some(Event::Listed(Kind::Service, objects)) = t.event(watcher::Event::InitDone).0
        else {
            panic!("Listed expected")
        };
        assert_eq!(objects.iter().map(name).collect::<Vec<_>>(), ["a", "b"]);
    }

    #[test]
    fn an_empty_list_is_still_a_list() {
        let mut t = Translate::new(Kind::Node);
        t.event(watcher::Event::Init);
        assert_eq!(
            t.event(watcher::Event::InitDone).0,
            Some(Event::Listed(Kind::Node, vec![]))
        );
    }

    #[test]
    fn a_restarted_list_drops_the_pages_of_the_abandoned_one() {
        let mut t = Translate::new(Kind::Service);
        t.event(watcher::Event::Init);
        t.event(watcher::Event::InitApply(svc("stale")));
        t.event(watcher::Event::Init);
        t.event(watcher::Event::InitApply(svc("fresh")));
        let Some(Event::Listed(_, objects)) = t.event(watcher::Event::InitDone).0 else {
            panic!("Listed expected")
        };
        assert_eq!(objects.iter().map(name).collect::<Vec<_>>(), ["fresh"]);
    }

    #[test]
    fn watch_events_pass_through() {
        let mut t = Translate::new(Kind::Service);
        assert_eq!(
            t.event(watcher::Event::Apply(svc("a"))).0,
            Some(Event::Applied(svc("a")))
        );
        assert_eq!(
            t.event(watcher::Event::Delete(svc("a"))).0,
            Some(Event::Deleted(svc("a")))
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
