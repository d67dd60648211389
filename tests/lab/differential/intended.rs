//! The differences between ours and upstream that are intended: one named list, each entry
//! with its reason (the behaviour is documented in docs/operations.md, "Where kube-proxy-rs
//! behaves differently from upstream") and an exact test of which differences it covers: the
//! outcomes must differ in that way and no other. A difference no entry covers fails the
//! differential test.

use super::frontends::{Key, Source};
use super::model::Svc;
use super::outcome::{Obs, Outcome, Seen};
use crate::lab::Mode;

/// One intended difference.
pub struct Intended {
    pub name: &'static str,
    /// The modes of ours it applies to.
    pub modes: &'static [Mode],
    pub reason: &'static str,
    /// Whether upstream's outcome `up` and ours `ours` at frontend `key` of `svc` (none for
    /// an unallocated service address) differ exactly in this way.
    pub covers: fn(svc: Option<&Svc>, key: &Key, up: &Outcome, ours: &Outcome) -> bool,
}

/// Every intended difference.
pub const INTENDED: &[Intended] = &[Intended {
    name: "userspace relays from the node",
    modes: &[Mode::Userspace],
    reason: "the userspace proxy relays each connection itself, so an endpoint sees the \
             relaying node's address, never the client's, whatever the traffic policy; which \
             endpoints serve is the same",
    covers: |_, _, up, ours| all_seen_are_nodes(ours) && same_but_seen(up, ours),
}];

/// The intended difference that covers this one, if any.
pub fn find(
    mode: Mode,
    svc: Option<&Svc>,
    key: &Key,
    up: &Outcome,
    ours: &Outcome,
) -> Option<&'static Intended> {
    INTENDED
        .iter()
        .find(|i| i.modes.contains(&mode) && (i.covers)(svc, key, up, ours))
}

/// `o` with whose address each endpoint saw left out.
fn without_seen(o: &Outcome) -> Outcome {
    Outcome(
        o.0.iter()
            .map(|obs| match obs {
                Obs::Served { pod, port, .. } => Obs::Served {
                    pod: pod.clone(),
                    port: *port,
                    seen: Seen::Other(std::net::Ipv4Addr::UNSPECIFIED.into()),
                },
                other => other.clone(),
            })
            .collect(),
    )
}

/// Whether `a` and `b` differ at most in whose address the endpoints saw.
fn same_but_seen(a: &Outcome, b: &Outcome) -> bool {
    without_seen(a) == without_seen(b)
}

/// Whether every served attempt of `o` reached its endpoint from a node's address (for a
/// source that is a node, its own counts).
fn all_seen_are_nodes(o: &Outcome) -> bool {
    o.0.iter().all(|obs| match obs {
        Obs::Served { seen, .. } => matches!(seen, Seen::Node(_) | Seen::Client),
        _ => true,
    })
}

/// Whether `source` is inside the cluster (a pod or a node).
#[allow(dead_code, reason = "for entries that tell sources apart")]
fn inside(source: Source) -> bool {
    matches!(source, Source::Pod { .. } | Source::Node(_))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::differential::frontends::Via;
    use crate::differential::generate::generate;
    use crate::lab::Proto;
    use crate::lab::cluster::Family;

    fn served(pod: &str, seen: Seen) -> Obs {
        Obs::Served {
            pod: pod.into(),
            port: 8080,
            seen,
        }
    }

    fn key() -> Key {
        Key {
            service: "s0".into(),
            port: "t0/TCP".into(),
            proto: Proto::Tcp,
            family: Family::V4,
            via: Via::ClusterIp,
            source: Source::Pod { node: 0 },
        }
    }

    #[test]
    fn every_entry_names_its_modes_and_reason_once() {
        let mut names: Vec<&str> = INTENDED.iter().map(|i| i.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), INTENDED.len(), "names are unique");
        for i in INTENDED {
            assert!(!i.modes.is_empty() && i.reason.len() > 40, "{}", i.name);
        }
    }

    #[test]
    fn the_relay_covers_only_a_changed_source_address() {
        let world = generate(1);
        let svc = Some(&world.services[0]);
        let up = Outcome([served("n2-a", Seen::Client), served("n3-a", Seen::Client)].into());
        let relayed =
            Outcome([served("n2-a", Seen::Node(0)), served("n3-a", Seen::Node(0))].into());
        let k = key();
        assert!(find(Mode::Userspace, svc, &k, &up, &relayed).is_some());
        // Not in another mode.
        assert!(find(Mode::Nftables, svc, &k, &up, &relayed).is_none());
        // Not when an endpoint is missing.
        let fewer = Outcome([served("n2-a", Seen::Node(0))].into());
        assert!(find(Mode::Userspace, svc, &k, &up, &fewer).is_none());
        // Not when a failure differs.
        let refused = Outcome([Obs::Refused].into());
        let dropped = Outcome([Obs::Dropped].into());
        assert!(find(Mode::Userspace, svc, &k, &refused, &dropped).is_none());
    }
}
