//! Runs a socket's opening inside a named network namespace (`ip netns` names, bound at
//! `/run/netns/NAME`), or one given by path (`/proc/PID/ns/net`), without moving the caller: `setns` changes only the calling thread, so a
//! short-lived thread enters the namespace, opens the socket and ends. A socket stays bound to
//! the namespace it was made in, whichever thread uses it later.
//!
//! The seam between a namespace name and the kernel; needs `CAP_SYS_ADMIN` to enter another
//! namespace.

use std::os::fd::AsFd as _;

/// Where `ip netns` binds the namespaces it names.
const NETNS_DIR: &str = "/run/netns";

/// Runs `open` in the named network namespace (an absolute path is the namespace file itself,
/// such as `/proc/PID/ns/net`), or on the calling thread when `netns` is `None`.
pub fn run_in<T: Send>(
    netns: Option<&str>,
    open: impl FnOnce() -> std::io::Result<T> + Send,
) -> std::io::Result<T> {
    let Some(name) = netns else {
        return open();
    };
    let path = if name.starts_with('/') {
        name.to_owned()
    } else {
        format!("{NETNS_DIR}/{name}")
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            let ns = std::fs::File::open(&path)?;
            nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(std::io::Error::from)?;
            open()
        })
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("namespace thread panicked")))
    })
}
