//! One complete read of the cluster, without watching: what `plan` shows for a live cluster.
//!
//! The same selectors as the watches, one paginated list per kind, so the report matches what
//! the running proxy would see.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::api::ListParams;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use super::{Error, node_selector, watch_selector};
use crate::cluster::source::lean::{EndpointSlice, Service};
use crate::cluster::source::{Event, Kind, Object};

/// Objects per page, as the watcher's initial list uses.
const PAGE: u32 = 500;

/// One [`Event::Listed`] per kind; ServiceCIDRs left out (with a warning) where they cannot
/// be listed.
pub async fn list(client: &Client, node_name: &str) -> Result<Vec<Event>, Error> {
    let services = all(
        Api::<Service>::all(client.clone()),
        ListParams::default().labels(watch_selector::SERVICES),
        Kind::Service,
    )
    .await?;
    let slices = all(
        Api::<EndpointSlice>::all(client.clone()),
        ListParams::default().labels(watch_selector::ENDPOINT_SLICES),
        Kind::EndpointSlice,
    )
    .await?;
    let nodes = all(
        Api::<Node>::all(client.clone()),
        ListParams::default().fields(&node_selector(node_name)),
        Kind::Node,
    )
    .await?;
    // Not every API server serves ServiceCIDRs (before 1.33), nor every ClusterRole grants
    // them: without them the plan drops nothing for being unallocated, as the proxy would.
    let service_cidrs = all(
        Api::<ServiceCIDR>::all(client.clone()),
        ListParams::default(),
        Kind::ServiceCidr,
    )
    .await;
    let mut events = vec![services, slices, nodes];
    match service_cidrs {
        Ok(listed) => events.push(listed),
        Err(e) => tracing::warn!(
            err = %crate::causes::one_line(&e),
            "cannot list ServiceCIDRs; planning without Service CIDRs"
        ),
    }
    Ok(events)
}

async fn all<K>(api: Api<K>, params: ListParams, kind: Kind) -> Result<Event, Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    Object: From<K>,
{
    let mut params = params.limit(PAGE);
    let mut objects = Vec::new();
    loop {
        let page = api
            .list(&params)
            .await
            .map_err(|source| Error::List { kind, source })?;
        objects.extend(page.items.into_iter().map(Object::from));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(Event::Listed(kind, objects)),
        }
    }
}
