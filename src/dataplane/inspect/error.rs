//! Why a mode's inspection could not plan or read: the one error of the boundary between
//! `explain`/`status` and the modes.
//!
//! Every variant keeps what failed as its source, so [`crate::causes::one_line`] tells the
//! whole chain. The backends' errors are boxed: this module is mode-neutral and names none of
//! the modes' types, and each backend's own error already says which object it was reading.

use crate::dataplane::node;

use super::clock::TIMER_LIST;

/// A mode backend's error, kept as a source.
pub type Source = Box<dyn std::error::Error + Send + Sync>;

/// Why a mode's inspection failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration cannot drive the mode's dataplane.
    #[error(transparent)]
    Config(#[from] node::Error),
    /// The mode's backend could not read or list what was asked of the kernel; `doing` says
    /// what ("reading our nftables table").
    #[error("{doing}")]
    Kernel {
        doing: String,
        #[source]
        source: Source,
    },
    /// The mode's backend failed, its own error naming what it was reading.
    #[error(transparent)]
    Backend(Source),
    /// A file the kernel shows its state in could not be read (a missing one is no error
    /// where its absence means something, such as a module not loaded).
    #[error("reading {path}")]
    Proc {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The kernel's monotonic clock, which an entry's age is measured against, is not in
    /// [`TIMER_LIST`].
    #[error("the kernel's clock is not readable in {TIMER_LIST}")]
    Clock,
}

impl Error {
    /// The backend's `source`, with what the inspection was doing when it failed.
    pub fn kernel(
        doing: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Error {
        Error::Kernel {
            doing: doing.into(),
            source: Box::new(source),
        }
    }

    /// Reading `path` failed with `source`.
    pub fn proc(path: impl Into<String>, source: std::io::Error) -> Error {
        Error::Proc {
            path: path.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::causes::one_line;

    #[derive(Debug, thiserror::Error)]
    #[error("netlink")]
    struct Backend(#[source] std::io::Error);

    #[test]
    fn the_context_leads_and_every_cause_follows() {
        let e = Error::kernel(
            "reading our nftables table",
            Backend(std::io::Error::other("refused")),
        );
        assert_eq!(one_line(&e), "reading our nftables table: netlink: refused");
        let e = Error::proc(
            "/proc/net/ip_vs_conn",
            std::io::Error::from_raw_os_error(13),
        );
        assert_eq!(
            one_line(&e),
            "reading /proc/net/ip_vs_conn: Permission denied (os error 13)"
        );
        let e = Error::Backend(Box::new(Backend(std::io::Error::other("gone"))));
        assert_eq!(one_line(&e), "netlink: gone");
        assert_eq!(
            one_line(&Error::Clock),
            "the kernel's clock is not readable in /proc/timer_list"
        );
    }
}
