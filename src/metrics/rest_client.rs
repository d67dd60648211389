//! `rest_client_requests_total{code,host,method}`: the API client's requests by result, as
//! client-go counts them for upstream, read from the client's [`RequestCounts`] at each scrape.
//!
//! The collector is registered whatever the source, so the `# TYPE` line is always there; it
//! has samples once the proxy runs with the API server as its source (`--manifests` has no
//! client).

use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;

use super::labels::RestClientLabels;
use super::names;
use crate::cluster::source::api::RequestCounts;

/// Where the collector reads; `None` until the API source sets it.
pub type SharedSource = Arc<Mutex<Option<RequestCounts>>>;

/// See the module doc.
#[derive(Debug)]
pub struct RestClient(pub SharedSource);

impl Collector for RestClient {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let source = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut m = names::REST_CLIENT_REQUESTS.descriptor(&mut encoder)?;
        let Some(counts) = source else {
            return Ok(());
        };
        for (series, n) in counts.read() {
            let labels = RestClientLabels {
                code: series.code,
                host: counts.host().to_owned(),
                method: series.method,
            };
            ConstCounter::new(n).encode(m.encode_family(&labels)?)?;
        }
        Ok(())
    }
}
