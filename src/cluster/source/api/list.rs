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

/// Every object of a kind, in pages of [`PAGE`]; when a page after the first fails because its
/// continue token expired (etcd compacted the revision the first page was read at), the pages
/// read so far are dropped and the kind is read again as one whole list, as client-go's pager
/// does (`FullListIfExpired`), rather than failing.
async fn all<K>(api: Api<K>, params: ListParams, kind: Kind) -> Result<Event, Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    Object: From<K>,
{
    let whole = params.clone();
    let mut params = params.limit(PAGE);
    let mut objects = Vec::new();
    loop {
        let page = match api.list(&params).await {
            Ok(page) => page,
            Err(source) if expired_continue(&source, params.continue_token.is_some()) => {
                let list = api
                    .list(&whole)
                    .await
                    .map_err(|source| Error::List { kind, source })?;
                let objects = list.items.into_iter().map(Object::from).collect();
                return Ok(Event::Listed(kind, objects));
            }
            Err(source) => return Err(Error::List { kind, source }),
        };
        objects.extend(page.items.into_iter().map(Object::from));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(Event::Listed(kind, objects)),
        }
    }
}

/// Whether `error`, answering a page asked for with a continue token (`continued`), says the
/// token expired (410, reason `Expired`): only then is a whole list the way on.
pub fn expired_continue(error: &kube::Error, continued: bool) -> bool {
    continued
        && matches!(error, kube::Error::Api(status)
            if status.code == 410 && status.reason == kube::core::response::reason::EXPIRED)
}

#[cfg(test)]
mod tests {
    use super::expired_continue;
    use kube::core::Status;

    fn status(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(
            Status {
                code,
                reason: reason.to_owned(),
                ..Status::default()
            }
            .boxed(),
        )
    }

    #[test]
    fn only_an_expired_continue_token_falls_back_to_a_whole_list() {
        assert!(expired_continue(&status(410, "Expired"), true));
        // The first page has no token: its 410 is the list's own failure.
        assert!(!expired_continue(&status(410, "Expired"), false));
        assert!(!expired_continue(&status(410, "Gone"), true));
        assert!(!expired_continue(&status(500, "InternalError"), true));
        assert!(!expired_continue(&status(403, "Forbidden"), true));
    }
}
