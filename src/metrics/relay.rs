//! `kubeproxy_rs_userspace_*`: what each listener of the userspace relay has relayed, read
//! from the [`RelaySource`] the mode handed over at each scrape. A listener's series appear when
//! it opens and leave when it closes; a re-opened listener counts from zero again, which
//! Prometheus reads as a counter reset.
//!
//! The collector is registered whatever the mode, so the `# TYPE` lines are always there; it
//! has samples once userspace mode gave it its listeners.

use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::labels::{DirectedRelayLabels, Direction, RefusedRelayLabels, RelayLabels};
use super::names;
use crate::dataplane::counters::{RelaySource, RelayedCounts, RelayedListener};

/// Where the collector reads; `None` until userspace mode sets it.
pub type SharedSource = Arc<Mutex<Option<Arc<dyn RelaySource>>>>;

/// See the module doc.
#[derive(Debug)]
pub struct Relayed(pub SharedSource);

fn labels(l: &RelayedListener) -> RelayLabels {
    RelayLabels {
        ip_family: l.family,
        namespace: l.port.service.namespace.to_string(),
        service: l.port.service.name.to_string(),
        port: l.port.port.to_string(),
        protocol: l.port.protocol.as_str().to_owned(),
        listener: l.listener,
    }
}

impl Collector for Relayed {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let source = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let read = source.map(|s| s.listeners()).unwrap_or_default();
        let all: Vec<(RelayLabels, RelayedCounts)> =
            read.iter().map(|l| (labels(l), l.counts)).collect();

        let mut m = names::RS_USERSPACE_CONNECTIONS.descriptor(&mut encoder)?;
        for (l, v) in &all {
            ConstGauge::new(v.active as i64).encode(m.encode_family(l)?)?;
        }
        for (spec, pick) in [
            (
                &names::RS_USERSPACE_CONNECTIONS_TOTAL,
                (|v: &RelayedCounts| v.total) as fn(&RelayedCounts) -> u64,
            ),
            (&names::RS_USERSPACE_DIAL_FAILURES, |v| v.dial_failures),
            (&names::RS_USERSPACE_DIAL_RETRIES, |v| v.retries),
        ] {
            let mut m = spec.descriptor(&mut encoder)?;
            for (l, v) in &all {
                ConstCounter::new(pick(v)).encode(m.encode_family(l)?)?;
            }
        }
        let mut m = names::RS_USERSPACE_BYTES.descriptor(&mut encoder)?;
        for (l, v) in &all {
            for (direction, n) in [
                (Direction::In, v.bytes_to_endpoint),
                (Direction::Out, v.bytes_to_client),
            ] {
                let labels = DirectedRelayLabels {
                    relay: l.clone(),
                    direction,
                };
                ConstCounter::new(n).encode(m.encode_family(&labels)?)?;
            }
        }
        let mut m = names::RS_USERSPACE_REFUSED.descriptor(&mut encoder)?;
        for (l, v) in &all {
            for (reason, n) in [("limit", v.over_limit), ("no-endpoint", v.no_endpoint)] {
                let labels = RefusedRelayLabels {
                    relay: l.clone(),
                    reason,
                };
                ConstCounter::new(n).encode(m.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}
