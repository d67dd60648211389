//! `kubeproxy_rs_ebpf_*`: the datapath counters and map fill levels of a mode that keeps its
//! own datapath (the eBPF mode), read from the [`DatapathSource`] the mode handed over, at each
//! scrape. The series keep the eBPF mode's name: they are an interface operators chart.
//!
//! The collector is registered whatever the mode, so the `# TYPE` lines are always there; it
//! has samples once a mode gave it its handle.

use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::names;
use crate::dataplane::counters::DatapathSource;

/// Where the collector reads; `None` until a mode sets it.
pub type SharedSource = Arc<Mutex<Option<Arc<dyn DatapathSource>>>>;

/// See the module doc.
#[derive(Debug)]
pub struct Datapath(pub SharedSource);

impl Collector for Datapath {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let source = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let reading = source.map(|s| s.counts()).unwrap_or_default();
        let mut m = names::RS_EBPF_DATAPATH.descriptor(&mut encoder)?;
        for (reason, n) in &reading.reasons {
            ConstCounter::new(*n).encode(m.encode_family(&[("reason", *reason)])?)?;
        }
        let mut m = names::RS_EBPF_MAP_ENTRIES.descriptor(&mut encoder)?;
        for (map, n, _) in &reading.maps {
            let n = i64::try_from(*n).unwrap_or(i64::MAX);
            ConstGauge::new(n).encode(m.encode_family(&[("map", *map)])?)?;
        }
        let mut m = names::RS_EBPF_MAP_MAX_ENTRIES.descriptor(&mut encoder)?;
        for (map, _, bound) in &reading.maps {
            ConstGauge::new(i64::from(*bound)).encode(m.encode_family(&[("map", *map)])?)?;
        }
        Ok(())
    }
}
