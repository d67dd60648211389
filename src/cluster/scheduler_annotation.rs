//! Our per-Service IPVS scheduler annotation (upstream has one scheduler per node,
//! `ipvs.scheduler`): `ipvs.kube-proxy-rs.io/scheduler: mh` and, optionally,
//! `ipvs.kube-proxy-rs.io/scheduler-flags: mh-fallback,mh-port`.
//!
//! Pure. The name must be one of the schedulers Linux ships ([`SCHEDULERS`]); the flags exist
//! only for `sh` and `mh` and must name that scheduler. An invalid annotation is refused with a
//! warning naming it and the accepted values, and the Service keeps the node's scheduler: one
//! Service's typo never stops a sync. Without the flags annotation `mh` hashes the source port
//! too (`mh-port`), as the node-wide setting does. Other modes ignore the annotation.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::cluster::limits::shown;

/// The scheduler of every virtual service of the Service.
pub const ANNOTATION: &str = "ipvs.kube-proxy-rs.io/scheduler";
/// Its flags, comma-separated.
pub const ANNOTATION_FLAGS: &str = "ipvs.kube-proxy-rs.io/scheduler-flags";

/// The reason of the Warning Event an invalid annotation gets on its Service.
pub const EVENT_REASON: &str = "InvalidIPVSScheduler";

/// The schedulers Linux ships (`net/netfilter/ipvs/ip_vs_*.c`).
pub const SCHEDULERS: [&str; 14] = [
    "rr", "wrr", "lc", "wlc", "lblc", "lblcr", "sh", "dh", "sed", "nq", "mh", "fo", "ovf", "twos",
];

/// A Service's own scheduler and flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct SchedulerChoice {
    /// One of [`SCHEDULERS`].
    pub name: &'static str,
    /// `sh-fallback` / `mh-fallback`: skip a destination with weight 0 or overloaded.
    pub fallback: bool,
    /// `sh-port` / `mh-port`: hash the source port too.
    pub port: bool,
}

/// Why a Service's scheduler annotations are refused: the warning (and Event) text, naming
/// the annotation and what it accepts. A value from the object is shown quoted and cut short.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// The flags annotation without the scheduler it is for.
    #[error("{} without {}; ignored", ANNOTATION_FLAGS, ANNOTATION)]
    FlagsAlone,
    /// A scheduler name Linux does not ship.
    #[error(
        "{} {} is not a scheduler: one of {}; the node's scheduler is used",
        ANNOTATION,
        shown(.name),
        SCHEDULERS.join(", ")
    )]
    Scheduler { name: String },
    /// Flags for a scheduler that takes none (only `sh` and `mh` do).
    #[error(
        "{} is only for sh and mh, not {scheduler}; the node's scheduler is used",
        ANNOTATION_FLAGS
    )]
    NoFlags { scheduler: &'static str },
    /// A flag that is not the scheduler's own.
    #[error(
        "{} {} is not {scheduler}-fallback or {scheduler}-port; the node's scheduler is used",
        ANNOTATION_FLAGS,
        shown(.flag)
    )]
    Flag {
        scheduler: &'static str,
        flag: String,
    },
}

/// The Service's choice from its annotations: `Ok(None)` without one, `Err(why)` when invalid.
pub fn parse(
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<Option<SchedulerChoice>, Invalid> {
    let get = |k: &str| annotations.and_then(|a| a.get(k)).map(|v| v.trim());
    let Some(raw) = get(ANNOTATION) else {
        return match get(ANNOTATION_FLAGS) {
            Some(_) => Err(Invalid::FlagsAlone),
            None => Ok(None),
        };
    };
    let Some(name) = SCHEDULERS.iter().copied().find(|s| *s == raw) else {
        return Err(Invalid::Scheduler {
            name: raw.to_owned(),
        });
    };
    let mut choice = SchedulerChoice {
        name,
        fallback: false,
        port: name == "mh",
    };
    let Some(flags) = get(ANNOTATION_FLAGS) else {
        return Ok(Some(choice));
    };
    if name != "sh" && name != "mh" {
        return Err(Invalid::NoFlags { scheduler: name });
    }
    choice.port = false;
    for flag in flags.split(',').map(str::trim).filter(|f| !f.is_empty()) {
        match flag.strip_prefix(name).and_then(|f| f.strip_prefix('-')) {
            Some("fallback") => choice.fallback = true,
            Some("port") => choice.port = true,
            _ => {
                return Err(Invalid::Flag {
                    scheduler: name,
                    flag: flag.to_owned(),
                });
            }
        }
    }
    Ok(Some(choice))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&str, &str)]) -> Result<Option<SchedulerChoice>, Invalid> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        parse(Some(&map))
    }

    #[test]
    fn a_known_scheduler_with_its_own_flags_is_taken() {
        assert_eq!(with(&[]), Ok(None));
        assert_eq!(parse(None), Ok(None));
        let sh = with(&[
            (ANNOTATION, "sh"),
            (ANNOTATION_FLAGS, "sh-port, sh-fallback"),
        ]);
        assert_eq!(
            sh,
            Ok(Some(SchedulerChoice {
                name: "sh",
                fallback: true,
                port: true
            }))
        );
        let mh = with(&[(ANNOTATION, " mh ")]).unwrap().unwrap();
        assert!(mh.port && !mh.fallback, "mh hashes the port by default");
        let mh = with(&[(ANNOTATION, "mh"), (ANNOTATION_FLAGS, "mh-fallback")])
            .unwrap()
            .unwrap();
        assert!(!mh.port && mh.fallback, "given flags replace the default");
    }

    #[test]
    fn unknown_names_foreign_flags_and_hostile_values_are_refused_naming_the_annotation() {
        for (pairs, says) in [
            (
                vec![(ANNOTATION, "roundrobin")],
                "is not a scheduler: one of rr, wrr",
            ),
            (
                vec![(ANNOTATION, "rr"), (ANNOTATION_FLAGS, "sh-port")],
                "only for sh and mh",
            ),
            (
                vec![(ANNOTATION, "sh"), (ANNOTATION_FLAGS, "mh-port")],
                "not sh-fallback or sh-port",
            ),
            (vec![(ANNOTATION_FLAGS, "mh-port")], "without"),
            (
                vec![(ANNOTATION, "rr\"; flush ruleset\n")],
                "is not a scheduler",
            ),
        ] {
            let err = with(&pairs).expect_err(says).to_string();
            assert!(err.contains(says), "{err}");
            assert!(err.contains("ipvs.kube-proxy-rs.io/"), "{err}");
            assert!(!err.contains('\n'), "{err:?}");
        }
        assert_eq!(
            with(&[(ANNOTATION_FLAGS, "mh-port")])
                .unwrap_err()
                .to_string(),
            "ipvs.kube-proxy-rs.io/scheduler-flags without ipvs.kube-proxy-rs.io/scheduler; ignored"
        );
        assert_eq!(
            with(&[(ANNOTATION, "sh"), (ANNOTATION_FLAGS, "mh-port")])
                .unwrap_err()
                .to_string(),
            "ipvs.kube-proxy-rs.io/scheduler-flags \"mh-port\" is not sh-fallback or sh-port; \
             the node's scheduler is used"
        );
        assert_eq!(
            with(&[(ANNOTATION, "rr"), (ANNOTATION_FLAGS, "sh-port")]),
            Err(Invalid::NoFlags { scheduler: "rr" })
        );
        let long = "x".repeat(10_000);
        let err = with(&[(ANNOTATION, &long)]).unwrap_err().to_string();
        assert!(err.len() < 400, "{} bytes", err.len());
    }
}
