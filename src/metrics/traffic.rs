//! `kubeproxy_rs_ipvs_{connections,packets,bytes}_total`: the dataplane's per-Service traffic
//! counters, read from its [`TrafficSource`] at each scrape and written as they are (totals
//! from the kernel: a re-created virtual service starts again from zero, which Prometheus reads
//! as a counter reset).
//!
//! The collector is registered whatever the mode, so the three `# TYPE` lines are always
//! there; it has samples once a mode that counts (IPVS) gave it a source.

use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;

use super::labels::{Direction, TrafficLabels};
use super::names;
use crate::dataplane::{ServiceTraffic, TrafficSource};

/// Where the collector reads; `None` until a mode sets it.
pub type SharedSource = Arc<Mutex<Option<Arc<dyn TrafficSource>>>>;

/// See the module doc.
pub struct Traffic(pub SharedSource);

impl std::fmt::Debug for Traffic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Traffic")
    }
}

fn labels(t: &ServiceTraffic) -> TrafficLabels {
    TrafficLabels {
        ip_family: t.family,
        namespace: t.port.service.namespace.to_string(),
        service: t.port.service.name.to_string(),
        port: t.port.port.to_string(),
        protocol: t.port.protocol.as_str().to_owned(),
        frontend: t.frontend.to_owned(),
    }
}

impl Collector for Traffic {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let source = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let traffic = source.map(|s| s.read()).unwrap_or_default();
        let all: Vec<(TrafficLabels, &ServiceTraffic)> =
            traffic.iter().map(|t| (labels(t), t)).collect();
        let mut m = names::RS_IPVS_CONNECTIONS.descriptor(&mut encoder)?;
        for (l, t) in &all {
            ConstCounter::new(t.connections).encode(m.encode_family(l)?)?;
        }
        for (spec, pick) in [
            (
                &names::RS_IPVS_PACKETS,
                (|t: &ServiceTraffic| [t.packets_in, t.packets_out])
                    as fn(&ServiceTraffic) -> [u64; 2],
            ),
            (&names::RS_IPVS_BYTES, |t| [t.bytes_in, t.bytes_out]),
        ] {
            let mut m = spec.descriptor(&mut encoder)?;
            for (l, t) in &all {
                let [inward, outward] = pick(t);
                for (direction, v) in [(Direction::In, inward), (Direction::Out, outward)] {
                    ConstCounter::new(v).encode(m.encode_family(&l.directed(direction))?)?;
                }
            }
        }
        Ok(())
    }
}
