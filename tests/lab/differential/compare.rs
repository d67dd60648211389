//! Upstream's outcomes against ours, frontend by frontend, and what each difference is: one of
//! the intended differences ([`super::intended::INTENDED`]), or unexplained.

use std::collections::BTreeMap;
use std::fmt;

use super::frontends::{Frontend, Key};
use super::intended::{self, Intended};
use super::model::World;
use super::outcome::Outcome;
use crate::lab::Mode;

/// A frontend where the two proxies did not do the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub key: Key,
    pub upstream: Outcome,
    pub ours: Outcome,
    /// The intended difference this is, if any.
    pub intended: Option<&'static str>,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: upstream {}; ours {}",
            self.key, self.upstream, self.ours
        )?;
        if let Some(name) = self.intended {
            write!(f, " [intended: {name}]")?;
        }
        Ok(())
    }
}

/// The outcome of `frontend` as compared: under ClientIP affinity, which pod is hidden.
pub fn comparable(frontend: &Frontend, outcome: &Outcome) -> Outcome {
    if frontend.sticky {
        outcome.clone().sticky()
    } else {
        outcome.clone()
    }
}

/// Every frontend whose outcomes differ, each with the intended difference it is (if any).
/// A frontend missing on either side counts as an empty outcome.
pub fn compare(
    mode: Mode,
    world: &World,
    frontends: &[Frontend],
    upstream: &BTreeMap<Key, Outcome>,
    ours: &BTreeMap<Key, Outcome>,
) -> Vec<Difference> {
    let none = Outcome::default();
    frontends
        .iter()
        .filter_map(|f| {
            let up = comparable(f, upstream.get(&f.key).unwrap_or(&none));
            let us = comparable(f, ours.get(&f.key).unwrap_or(&none));
            (up != us).then(|| {
                let svc = world.services.iter().find(|s| s.name == f.key.service);
                let intended =
                    intended::find(mode, svc, &f.key, &up, &us).map(|i: &Intended| i.name);
                Difference {
                    key: f.key.clone(),
                    upstream: up,
                    ours: us,
                    intended,
                }
            })
        })
        .collect()
}
