//! The sysctls the IPVS mode needs, as upstream sets them at start-up:
//! what to write, decided purely from the configuration and the kernel's version and current
//! values; the reads and writes are the shell's.
//!
//! - `net/ipv4/vs/conntrack = 1`: IPVS connections get conntrack entries, so the helper rules'
//!   masquerade and the conntrack cleanup see them;
//! - `net/ipv4/vs/expire_nodest_conn = 1`: a connection to a deleted destination ends at its
//!   next packet, so UDP flows move at once;
//! - `net/ipv4/vs/expire_quiescent_template = 1`: a persistence entry pointing at a weight-0
//!   destination expires, so ClientIP affinity moves off a draining endpoint;
//! - `net/ipv4/vs/conn_reuse_mode = 0` only on kernels 4.1 to 5.8, where the default made a
//!   connection that reused a recent source port wait about a second; 5.9 fixed it
//!   (upstream's `IPVSConnReuseModeFixedKernelVersion`), so later kernels keep theirs;
//! - `net/ipv4/ip_forward = 1`;
//! - with `ipvs.strictARP`: `net/ipv4/conf/all/arp_ignore = 1` and `arp_announce = 2`, so the
//!   node does not answer ARP for the addresses on `kube-ipvs0` (MetalLB's L2 mode needs it).
//!
//! A value already in place is not written again.

/// One sysctl to write, relative to `/proc/sys`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Write {
    pub path: &'static str,
    pub value: u64,
}

/// A kernel version, `major.minor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct KernelVersion(pub u32, pub u32);

impl KernelVersion {
    /// From `/proc/sys/kernel/osrelease` (`6.1.0-18-amd64`, `6.18.5`).
    pub fn parse(release: &str) -> Option<KernelVersion> {
        let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(KernelVersion(major, minor))
    }
}

/// What to write, in order. `current(path)` is the kernel's value, `None` when unreadable.
pub fn plan(
    strict_arp: bool,
    kernel: Option<KernelVersion>,
    current: impl Fn(&str) -> Option<u64>,
) -> Vec<Write> {
    let mut wanted = vec![
        Write {
            path: "net/ipv4/vs/conntrack",
            value: 1,
        },
        Write {
            path: "net/ipv4/vs/expire_nodest_conn",
            value: 1,
        },
        Write {
            path: "net/ipv4/vs/expire_quiescent_template",
            value: 1,
        },
        Write {
            path: "net/ipv4/ip_forward",
            value: 1,
        },
    ];
    if kernel.is_some_and(|k| k >= KernelVersion(4, 1) && k < KernelVersion(5, 9)) {
        wanted.push(Write {
            path: "net/ipv4/vs/conn_reuse_mode",
            value: 0,
        });
    }
    if strict_arp {
        wanted.push(Write {
            path: "net/ipv4/conf/all/arp_ignore",
            value: 1,
        });
        wanted.push(Write {
            path: "net/ipv4/conf/all/arp_announce",
            value: 2,
        });
    }
    wanted.retain(|w| current(w.path) != Some(w.value));
    wanted
}

/// What [`apply`] did.
#[derive(Debug, Default)]
pub struct Applied {
    pub written: Vec<Write>,
    /// Writes the kernel refused (no such sysctl, read-only, no permission).
    pub refused: Vec<(Write, std::io::Error)>,
}

/// Reads the kernel's version and current values under `proc_sys` (`/proc/sys`, or a fake
/// tree in tests), plans, and writes. The `vs/` sysctls exist once `ip_vs` is loaded, so this
/// runs after the IPVS socket opened (the scheduler check). Every write is attempted.
pub fn apply(proc_sys: &std::path::Path, strict_arp: bool) -> Applied {
    let read = |path: &str| std::fs::read_to_string(proc_sys.join(path)).ok();
    let kernel = read("kernel/osrelease").and_then(|r| KernelVersion::parse(&r));
    let writes = plan(strict_arp, kernel, |p| read(p)?.trim().parse().ok());
    let mut applied = Applied::default();
    for w in writes {
        #[allow(
            clippy::disallowed_methods,
            reason = "the seam that writes the IPVS sysctls at start-up"
        )]
        match std::fs::write(proc_sys.join(w.path), format!("{}\n", w.value)) {
            Ok(()) => applied.written.push(w),
            Err(e) => applied.refused.push((w, e)),
        }
    }
    applied
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(w: &[Write]) -> Vec<&str> {
        w.iter().map(|w| w.path).collect()
    }

    #[test]
    fn the_ipvs_sysctls_are_written_unless_already_set() {
        let all = plan(false, Some(KernelVersion(6, 1)), |_| None);
        assert_eq!(
            paths(&all),
            [
                "net/ipv4/vs/conntrack",
                "net/ipv4/vs/expire_nodest_conn",
                "net/ipv4/vs/expire_quiescent_template",
                "net/ipv4/ip_forward"
            ]
        );
        let some = plan(false, Some(KernelVersion(6, 1)), |p| {
            (p == "net/ipv4/ip_forward").then_some(1)
        });
        assert_eq!(some.len(), 3, "ip_forward is 1 already");
    }

    #[test]
    fn conn_reuse_mode_only_on_the_kernels_that_need_it_and_strict_arp_when_asked() {
        let has = |k, arp| {
            let w = plan(arp, k, |_| None);
            (
                paths(&w).contains(&"net/ipv4/vs/conn_reuse_mode"),
                paths(&w).contains(&"net/ipv4/conf/all/arp_announce"),
            )
        };
        assert_eq!(has(Some(KernelVersion(5, 4)), false), (true, false));
        assert_eq!(has(Some(KernelVersion(5, 9)), true), (false, true));
        assert_eq!(has(Some(KernelVersion(4, 0)), false), (false, false));
        assert_eq!(has(None, false), (false, false));
    }

    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "builds a fake /proc/sys tree with std::fs::write"
    )]
    fn apply_writes_what_differs_into_the_tree_and_reports_what_it_could_not() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("kernel")).unwrap();
        std::fs::create_dir_all(root.join("net/ipv4/vs")).unwrap();
        std::fs::write(root.join("kernel/osrelease"), "5.4.0-1-amd64\n").unwrap();
        std::fs::write(root.join("net/ipv4/ip_forward"), "1\n").unwrap();
        let applied = apply(root, false);
        let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
        assert_eq!(read("net/ipv4/vs/conntrack"), "1\n");
        assert_eq!(read("net/ipv4/vs/conn_reuse_mode"), "0\n", "a 5.4 kernel");
        assert!(!paths(&applied.written).contains(&"net/ipv4/ip_forward"));
        assert!(applied.refused.is_empty());
        let missing = apply(&root.join("nothing"), true);
        assert!(missing.written.is_empty());
        assert_eq!(missing.refused.len(), 6, "{:?}", missing.refused);
    }

    #[test]
    fn kernel_releases_parse_to_major_and_minor() {
        assert_eq!(
            KernelVersion::parse("6.1.0-18-amd64"),
            Some(KernelVersion(6, 1))
        );
        assert_eq!(KernelVersion::parse("6.18.5\n"), Some(KernelVersion(6, 18)));
        assert_eq!(KernelVersion::parse("5.10"), Some(KernelVersion(5, 10)));
        assert_eq!(KernelVersion::parse("garbage"), None);
    }
}
