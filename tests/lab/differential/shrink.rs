//! Shrinking: from a world where the proxies disagree, the smallest world (by one step at a
//! time) where they still do. Each step removes one thing (a Service, a port, a slice, an
//! endpoint, an address) or makes one field plainer (a policy back to Cluster, affinity off,
//! an endpoint ready, hints gone); the first step that keeps the difference is taken and the
//! steps are tried again from the start, until none keeps it or the trials run out.

use super::generate::make_duplicates_consistent;
use super::model::{EpNode, Families, Hints, Kind, Target, World};
use crate::lab::cluster::Family;

/// The world with only the Services named `names`.
pub fn only(world: &World, names: &[String]) -> World {
    World {
        services: world
            .services
            .iter()
            .filter(|s| names.contains(&s.name))
            .cloned()
            .collect(),
    }
}

/// Every world one step smaller or plainer than `world`, coarsest first, each with what the
/// step did.
pub fn candidates(world: &World) -> Vec<(String, World)> {
    let mut out: Vec<(String, World)> = Vec::new();
    let mut step = |what: String, f: &dyn Fn(&mut World)| {
        let mut w = world.clone();
        f(&mut w);
        make_duplicates_consistent(&mut w);
        if w != *world {
            out.push((what, w));
        }
    };
    for (i, svc) in world.services.iter().enumerate() {
        step(format!("without Service {}", svc.name), &|w| {
            w.services.remove(i);
        });
    }
    for (i, svc) in world.services.iter().enumerate() {
        let s = &svc.name;
        for (j, port) in svc.ports.iter().enumerate().filter(|_| svc.ports.len() > 1) {
            step(format!("{s}: without port {}", port.label()), &|w| {
                let svc = &mut w.services[i];
                let gone = svc.ports.remove(j);
                for slice in &mut svc.slices {
                    slice
                        .ports
                        .retain(|p| !(p.name == gone.name && p.proto == gone.proto));
                }
            });
        }
        for (k, slice) in svc.slices.iter().enumerate() {
            step(format!("{s}: without slice {}", slice.name), &|w| {
                w.services[i].slices.remove(k);
            });
        }
        for (k, slice) in svc.slices.iter().enumerate() {
            for (e, ep) in slice.endpoints.iter().enumerate() {
                step(format!("{s}: {} without {}", slice.name, ep.pod), &|w| {
                    w.services[i].slices[k].endpoints.remove(e);
                });
            }
        }
        for (e, ip) in svc.external_ips.iter().enumerate() {
            step(format!("{s}: without externalIP {ip}"), &|w| {
                w.services[i].external_ips.remove(e);
            });
        }
        for e in 0..svc.ingress.len() {
            step(format!("{s}: without ingress {e}"), &|w| {
                w.services[i].ingress.remove(e);
            });
        }
        for (e, r) in svc.source_ranges.iter().enumerate() {
            step(format!("{s}: without source range {r}"), &|w| {
                w.services[i].source_ranges.remove(e);
            });
        }
        plainer(i, svc, &mut step);
    }
    out
}

/// Sets one field of a Service back to its plainest value.
type Clear = fn(&mut super::model::Svc);

/// The steps that make one field of Service `i` plainer.
fn plainer(i: usize, svc: &super::model::Svc, step: &mut impl FnMut(String, &dyn Fn(&mut World))) {
    let s = &svc.name;
    if svc.families == Families::Dual {
        for (keep, name) in [(Families::V4, "IPv4"), (Families::V6, "IPv6")] {
            let family = if keep == Families::V4 {
                Family::V4
            } else {
                Family::V6
            };
            step(format!("{s}: {name} only"), &|w| {
                let svc = &mut w.services[i];
                svc.families = keep;
                svc.slices.retain(|sl| sl.family == family);
            });
        }
    }
    match svc.kind {
        Kind::LoadBalancer { .. } => step(format!("{s}: NodePort, not LoadBalancer"), &|w| {
            let svc = &mut w.services[i];
            svc.kind = Kind::NodePort;
            svc.ingress.clear();
            svc.source_ranges.clear();
        }),
        Kind::NodePort => step(format!("{s}: ClusterIP, not NodePort"), &|w| {
            w.services[i].kind = Kind::ClusterIp;
        }),
        _ => {}
    }
    let fields: [(&str, bool, Clear); 5] = [
        ("externalTrafficPolicy Cluster", svc.etp_local, |s| {
            s.etp_local = false
        }),
        ("internalTrafficPolicy Cluster", svc.itp_local, |s| {
            s.itp_local = false
        }),
        ("no affinity", svc.affinity.is_some(), |s| s.affinity = None),
        ("no trafficDistribution", svc.distribution.is_some(), |s| {
            s.distribution = None
        }),
        ("no proxy label", svc.label.is_some(), |s| s.label = None),
    ];
    for (what, set, clear) in fields {
        if set {
            step(format!("{s}: {what}"), &|w| clear(&mut w.services[i]));
        }
    }
    for (j, port) in svc.ports.iter().enumerate() {
        if let Target::Named(_) = port.target {
            step(format!("{s}: numeric target port"), &|w| {
                w.services[i].ports[j].target = Target::Number(8080);
            });
        }
    }
    for (k, slice) in svc.slices.iter().enumerate() {
        if slice.ports.iter().any(|p| p.name == "stray") {
            step(
                format!("{s}: {} without its stray port", slice.name),
                &|w| {
                    w.services[i].slices[k].ports.retain(|p| p.name != "stray");
                },
            );
        }
        for (e, ep) in slice.endpoints.iter().enumerate() {
            let at = format!("{s}: {} {}", slice.name, ep.pod);
            let ready = (Some(true), Some(true), Some(false));
            if (ep.ready, ep.serving, ep.terminating) != ready {
                step(format!("{at} ready"), &|w| {
                    let ep = &mut w.services[i].slices[k].endpoints[e];
                    (ep.ready, ep.serving, ep.terminating) = ready;
                });
            }
            if ep.hints != Hints::default() {
                step(format!("{at} without hints"), &|w| {
                    w.services[i].slices[k].endpoints[e].hints = Hints::default();
                });
            }
            if ep.node == EpNode::Absent {
                step(format!("{at} with its nodeName"), &|w| {
                    w.services[i].slices[k].endpoints[e].node = EpNode::Own;
                });
            }
        }
    }
}

/// Greedy shrinking: takes the first candidate `fails` says still fails, and starts over from
/// it, until no candidate does or `max_trials` calls were made. Returns the smallest world
/// found and the number of calls.
pub async fn shrink<F, Fut>(start: World, max_trials: usize, mut fails: F) -> (World, usize)
where
    F: FnMut(String, World) -> Fut,
    Fut: Future<Output = bool>,
{
    let mut current = start;
    let mut trials = 0;
    'outer: loop {
        for (what, candidate) in candidates(&current) {
            if trials >= max_trials {
                break 'outer;
            }
            trials += 1;
            if fails(what, candidate.clone()).await {
                current = candidate;
                continue 'outer;
            }
        }
        break;
    }
    (current, trials)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::differential::generate::generate;

    /// A stand-in for "the proxies still disagree": some Service has an endpoint on pod
    /// `n2-a` in an IPv4 slice and `externalTrafficPolicy: Local`.
    fn has_local_n2a(w: &World) -> bool {
        w.services.iter().any(|s| {
            s.etp_local
                && s.slices.iter().any(|sl| {
                    sl.family == Family::V4 && sl.endpoints.iter().any(|e| e.pod == "n2-a")
                })
        })
    }

    #[test]
    fn every_candidate_is_one_step_from_the_world() {
        for seed in 0..40 {
            let world = generate(seed);
            for (what, w) in candidates(&world) {
                assert_ne!(w, world, "seed {seed}: {what} changed nothing");
            }
        }
    }

    #[test]
    fn shrinking_keeps_the_failure_and_ends_minimal() {
        let seed = (0..500)
            .find(|&s| has_local_n2a(&generate(s)) && generate(s).services.len() > 6)
            .expect("a seed with such a Service");
        let world = generate(seed);
        let (small, trials) = futures::executor::block_on(shrink(world, 10_000, |_, w| {
            std::future::ready(has_local_n2a(&w))
        }));
        assert!(has_local_n2a(&small));
        assert_eq!(small.services.len(), 1, "{small:#?}");
        let svc = &small.services[0];
        assert_eq!(svc.slices.len(), 1, "{small:#?}");
        assert_eq!(svc.slices[0].endpoints.len(), 1, "{small:#?}");
        assert_eq!(svc.ports.len(), 1, "{small:#?}");
        assert!(svc.external_ips.is_empty() && svc.affinity.is_none() && !svc.itp_local);
        // Minimal: no candidate still has it.
        assert!(candidates(&small).iter().all(|(_, w)| !has_local_n2a(w)));
        assert!(trials > 1);
    }

    #[test]
    fn shrinking_stops_at_the_trial_limit() {
        let world = generate(3);
        let (_, trials) =
            futures::executor::block_on(shrink(world, 5, |_, _| std::future::ready(true)));
        assert_eq!(trials, 5);
    }
}
