//! The four watches (Services, EndpointSlices, this Node, ServiceCIDRs) as one stream of source
//! events.
//!
//! Each kind has its own stream with kube-rs's watcher backoff (0.8 s doubling to 30 s, reset
//! after two quiet minutes, as client-go's reflector), so an outage or a forbidden kind never
//! stops the others. The stream never ends and never yields an error: failures are logged
//! (once per change of state) and retried, and the model keeps its last state meanwhile.
//!
//! How lists are read is [`Lists`]. Classic (the default): one list request per kind, served
//! from the API server's watch cache in one response and decoded object by object as it
//! arrives (as protobuf for Services and EndpointSlices unless [`Encoding`] says JSON), then a
//! watch ([`list_watch`]). Streamed (watch-list: a watch
//! with `sendInitialEvents`, the objects as events and a bookmark at the end, as client-go's
//! reflector does by default since 1.35, `WatchListClient`), through kube-rs's `watcher`. An
//! API server that refuses streamed lists (its `WatchList` gate off, as on 1.33 by default)
//! answers the first watch with 400 or 422; that kind then lists the classic way for the rest
//! of the process.
//!
//! Why classic is the default (docs/benchmarks-history.md, "Cold start"): streamed lists send
//! one event per object, one at a time from the API server, which is slower than two whole
//! responses at scale; and since classic lists are decoded object by object too, streaming
//! saves no memory.

use std::fmt::Debug;

use futures::stream::{self, BoxStream};
use futures::{StreamExt as _, future};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use super::list_watch::{self, ProtobufDecoder, Selectors};
use super::protobuf_objects::FromProtobuf;
use super::translate::{Note, Translate, error_text};
use super::{node_selector, watch_selector};
use crate::cluster::source::lean::{EndpointSlice, Service};
use crate::cluster::source::{Event, Kind, Object};

/// How the watches read their lists (see the module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Lists {
    /// One list request per kind, then a watch.
    #[default]
    Classic,
    /// Watch-list (`sendInitialEvents`), falling back to classic where refused.
    Streamed,
}

impl Lists {
    /// From client-go's switch for the same choice, the environment variable
    /// `KUBE_FEATURE_WatchListClient` (`true` or `false`, as Go's `strconv.ParseBool` takes
    /// them); unset is [`Lists::Classic`].
    pub fn from_env_value(value: Option<&str>) -> Result<Lists, NotABoolean> {
        match value {
            None => Ok(Lists::Classic),
            Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(Lists::Streamed),
            Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(Lists::Classic),
            Some(other) => Err(NotABoolean {
                value: other.to_owned(),
            }),
        }
    }
}

/// `KUBE_FEATURE_WatchListClient` holds something other than a boolean.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("KUBE_FEATURE_WatchListClient={value:?}: not a boolean (accepted: true, false)")]
pub struct NotABoolean {
    /// The variable's value.
    pub value: String,
}

/// How the classic lists of Services and EndpointSlices are asked for
/// (`clientConnection.contentType`). The Node's list (one object) and every watch are JSON.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Encoding {
    /// Protobuf, JSON where the API server answers in JSON (upstream's default).
    #[default]
    Protobuf,
    Json,
}

impl Encoding {
    /// `application/json` is JSON; anything else (the default) protobuf.
    pub fn of(connection: &crate::config::ClientConnection) -> Encoding {
        match connection.lists_as_protobuf() {
            true => Encoding::Protobuf,
            false => Encoding::Json,
        }
    }

    fn decoder<K: FromProtobuf>(self) -> Option<ProtobufDecoder<K>> {
        (self == Encoding::Protobuf).then_some(K::from_protobuf as ProtobufDecoder<K>)
    }
}

/// Services, EndpointSlices, the Node called `node_name` and ServiceCIDRs, as one stream.
pub fn watch(
    client: Client,
    node_name: &str,
    lists: Lists,
    encoding: Encoding,
) -> BoxStream<'static, Event> {
    let labels = |labels: &str| Selectors {
        labels: Some(labels.to_owned()),
        fields: None,
    };
    stream::select_all([
        kind::<Service>(
            client.clone(),
            labels(watch_selector::SERVICES),
            Kind::Service,
            lists,
            encoding.decoder(),
        ),
        kind::<EndpointSlice>(
            client.clone(),
            labels(watch_selector::ENDPOINT_SLICES),
            Kind::EndpointSlice,
            lists,
            encoding.decoder(),
        ),
        kind::<Node>(
            client.clone(),
            Selectors {
                labels: None,
                fields: Some(node_selector(node_name)),
            },
            Kind::Node,
            lists,
            None,
        ),
        kind::<ServiceCIDR>(client, Selectors::default(), Kind::ServiceCidr, lists, None),
    ])
    .boxed()
}

/// Whether the first watch's error says the API server does not stream lists (it validates
/// `sendInitialEvents` and refuses it when its `WatchList` gate is off), rather than that it
/// is unreachable or forbids the watch, which the classic list would meet too.
fn refuses_streamed_lists(error: &watcher::Error) -> bool {
    matches!(
        error,
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
            if status.code == 400 || status.code == 422
    )
}

/// One kind's events: classic lists, or streamed ones until the API server refuses one (see
/// the module doc).
fn kind<K>(
    client: Client,
    selectors: Selectors,
    kind: Kind,
    lists: Lists,
    protobuf: Option<ProtobufDecoder<K>>,
) -> BoxStream<'static, Event>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default,
    Object: From<K>,
{
    if lists == Lists::Classic {
        return translated(
            list_watch::events::<K>(client, selectors, protobuf).default_backoff(),
            kind,
        );
    }
    let mut config = watcher::Config::default().streaming_lists();
    config.label_selector = selectors.labels.clone();
    config.field_selector = selectors.fields.clone();
    let streamed = watcher(Api::<K>::all(client.clone()), config)
        .default_backoff()
        .take_while(move |item| {
            let refused = item.as_ref().err().is_some_and(refuses_streamed_lists);
            if let (true, Err(error)) = (refused, item) {
                tracing::info!(
                    kind = kind.as_str(),
                    err = %error_text(error),
                    "the API server does not stream lists; listing and watching instead"
                );
            }
            future::ready(!refused)
        });
    let classic = stream::once(future::lazy(move |_| {
        list_watch::events::<K>(client, selectors, protobuf).default_backoff()
    }))
    .flatten();
    translated(streamed.chain(classic), kind)
}

/// Watcher events of one kind as source events, with its errors logged.
fn translated<K>(
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    kind: Kind,
) -> BoxStream<'static, Event>
where
    K: Send + 'static,
    Object: From<K>,
{
    let mut translate = Translate::new(kind);
    events
        .filter_map(move |item| {
            let kind = translate.kind().as_str();
            let out = match item {
                Ok(event) => {
                    let (out, recovered) = translate.event(map(event));
                    if recovered {
                        tracing::info!(kind, "watch delivering again");
                    }
                    Some(out)
                }
                Err(error) => {
                    let err = error_text(&error);
                    match translate.error(&error) {
                        Note::Expired => {
                            tracing::info!(kind, "watch expired (410 Gone); relisting")
                        }
                        Note::Failing => tracing::warn!(
                            kind,
                            %err,
                            "watch failed; retrying with backoff, keeping the last state"
                        ),
                        Note::Quiet => tracing::debug!(kind, %err, "watch failing"),
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

#[cfg(test)]
mod tests {
    use super::Lists;

    #[test]
    fn the_switch_takes_client_gos_booleans_and_names_the_variable_otherwise() {
        assert_eq!(Lists::from_env_value(None), Ok(Lists::Classic));
        assert_eq!(Lists::from_env_value(Some("true")), Ok(Lists::Streamed));
        assert_eq!(Lists::from_env_value(Some("0")), Ok(Lists::Classic));
        let e = Lists::from_env_value(Some("yes")).unwrap_err();
        assert_eq!(e.value, "yes");
        assert_eq!(
            e.to_string(),
            "KUBE_FEATURE_WatchListClient=\"yes\": not a boolean (accepted: true, false)"
        );
    }
}
