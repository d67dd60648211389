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
    /// Whether the watch has failed since its last good event, and whether that was logged.
    failing: Failing,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failing {
    No,
    Quietly,
    Warned,
}

/// What to log about a watch error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// The watch fell behind the API server's history (410 Gone): it relists.
    Expired,
    /// The first failure after good events that only this watch can tell (an error status
    /// other than 401 and 403, a body that does not decode).
    Failing,
    /// A repeat, or a failure the client's reachability line already tells with its URL and
    /// cause (no response, 401, 403): debug only.
    Quiet,
}

impl Translate {
    pub fn new(kind: Kind) -> Translate {
        Translate {
            kind,
            failing: Failing::No,
        }
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// One watcher event; returns its source event and whether this watch just recovered from
    /// a failure it logged.
    pub fn event(&mut self, event: watcher::Event<Object>) -> (Event, bool) {
        let recovered = std::mem::replace(&mut self.failing, Failing::No) == Failing::Warned;
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
        match self.failing {
            Failing::Warned => Note::Quiet,
            _ if told_by_the_client(error) => {
                self.failing = Failing::Quietly;
                Note::Quiet
            }
            _ => {
                self.failing = Failing::Warned;
                Note::Failing
            }
        }
    }
}

/// Whether the client's reachability layer saw this failure: no response at all, or a 401 or
/// 403.
fn told_by_the_client(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => match e {
            kube::Error::HyperError(_) | kube::Error::Service(_) => true,
            kube::Error::Api(status) => matches!(status.code, 401 | 403),
            _ => false,
        },
        watcher::Error::WatchError(_) | watcher::Error::NoResourceVersion => false,
    }
}

/// A watch error in one line, the API server's status as `code reason: message` rather than
/// its debug form.
pub fn error_text(error: &watcher::Error) -> String {
    let status = match error {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s))
        | watcher::Error::WatchError(s) => s,
        other => return crate::causes::one_line(other),
    };
    let what = match error {
        watcher::Error::InitialListFailed(_) => "list",
        watcher::Error::WatchStartFailed(_) => "watch",
        _ => "watch stream",
    };
    format!(
        "{what}: the API server answered {} {}: {}",
        status.code, status.reason, status.message
    )
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
        assert_eq!(t.error(&failure()), Note::Quiet);
        let (_, recovered) = t.event(watcher::Event::Init);
        assert!(recovered);
        assert_eq!(t.error(&failure()), Note::Failing);
        assert_eq!(t.error(&gone()), Note::Expired);
    }

    fn api(code: u16, reason: &str, message: &str) -> watcher::Error {
        let status = Status::failure(message, reason).with_code(code);
        watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status)))
    }

    #[test]
    fn failures_the_clients_line_tells_are_quiet_and_so_is_their_recovery() {
        let mut t = Translate::new(Kind::Service);
        let refused = || {
            let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
            watcher::Error::InitialListFailed(kube::Error::Service(Box::new(io)))
        };
        assert_eq!(t.error(&refused()), Note::Quiet);
        assert_eq!(t.error(&api(403, "Forbidden", "no")), Note::Quiet);
        let (_, recovered) = t.event(watcher::Event::Init);
        assert!(!recovered, "nothing was warned, so nothing recovers");
        // A failure only the watch can tell is warned, even after quiet ones.
        assert_eq!(t.error(&refused()), Note::Quiet);
        assert_eq!(t.error(&api(500, "InternalError", "etcd")), Note::Failing);
        assert_eq!(t.error(&refused()), Note::Quiet);
        assert!(t.event(watcher::Event::Init).1);
    }

    #[test]
    fn an_error_status_reads_as_code_reason_and_message() {
        let e = api(500, "InternalError", "etcdserver: request timed out");
        assert_eq!(
            error_text(&e),
            "list: the API server answered 500 InternalError: etcdserver: request timed out"
        );
        assert!(!error_text(&e).contains("Status {"));
    }
}
