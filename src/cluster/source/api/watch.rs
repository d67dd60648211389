//! The three watches (Services, EndpointSlices, this Node) as one stream of source events.
//!
//! Each kind has its own kube-rs `watcher` with the watcher's default backoff (0.8 s doubling to
//! 30 s, reset after two quiet minutes, as client-go's reflector), so an outage or a forbidden
//! kind never stops the others. The stream never ends and never yields an error: failures are
//! logged (once per change of state) and retried, and the model keeps its last state meanwhile.

use std::fmt::Debug;

use futures::stream::{self, BoxStream};
use futures::{StreamExt as _, future};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use super::translate::{Note, Translate};
use super::{node_selector, watch_selector};
use crate::cluster::source::{Event, Kind, Object};

/// Services, EndpointSlices and the Node called `node_name`, as one stream.
pub fn watch(client: Client, node_name: &str) -> BoxStream<'static, Event> {
    // Lists are served from the API server's watch cache (`any_semantic`, resourceVersion 0) in
    // one response, as client-go's informers get them: with kube-rs's default pages of 500, the
    // initial list of 44,000 Services and their slices took ~180 requests, which the client's
    // QPS limit (5/s by default) stretched to over 30 s before the first sync.
    let config = |labels: &str| watcher::Config {
        page_size: None,
        ..watcher::Config::default().labels(labels).any_semantic()
    };
    stream::select_all([
        kind(
            Api::<Service>::all(client.clone()),
            config(watch_selector::SERVICES),
            Kind::Service,
        ),
        kind(
            Api::<EndpointSlice>::all(client.clone()),
            config(watch_selector::ENDPOINT_SLICES),
            Kind::EndpointSlice,
        ),
        kind(
            Api::<Node>::all(client),
            watcher::Config::default()
                .fields(&node_selector(node_name))
                .any_semantic(),
            Kind::Node,
        ),
    ])
    .boxed()
}

fn kind<K>(api: Api<K>, config: watcher::Config, kind: Kind) -> BoxStream<'static, Event>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default,
    Object: From<K>,
{
    let mut translate = Translate::new(kind);
    watcher(api, config)
        .default_backoff()
        .filter_map(move |item| {
            let out = match item {
                Ok(event) => {
                    let (out, recovered) = translate.event(map(event));
                    if recovered {
                        tracing::info!(kind = ?translate.kind(), "watch delivering again");
                    }
                    out
                }
                Err(error) => {
                    match translate.error(&error) {
                        Note::Expired => tracing::info!(
                            kind = ?translate.kind(),
                            "watch expired (410 Gone); relisting"
                        ),
                        Note::Failing => tracing::warn!(
                            kind = ?translate.kind(),
                            %error,
                            "watch failed; retrying with backoff, keeping the last state"
                        ),
                        Note::Repeat => {
                            tracing::debug!(kind = ?translate.kind(), %error, "watch still failing")
                        }
                    }
                    None
                }
            };
            future::ready(out)
        })
        .boxed()
}

fn map<K>(event: watcher::Event<K>) -> watcher::Event<Object>
where
    Object: From<K>,
{
    match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(o.into()),
        watcher::Event::Delete(o) => watcher::Event::Delete(o.into()),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(o.into()),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

impl From<Service> for Object {
    fn from(s: Service) -> Object {
        Object::Service(Box::new(s))
    }
}

impl From<EndpointSlice> for Object {
    fn from(s: EndpointSlice) -> Object {
        Object::EndpointSlice(Box::new(s))
    }
}

impl From<Node> for Object {
    fn from(n: Node) -> Object {
        Object::Node(Box::new(n))
    }
}
