//! The classic list-then-watch of one kind, with the list decoded object by object as its body
//! arrives ([`list_split`]).
//!
//! Why not kube-rs's `watcher` for this: its list path decodes each response whole (the body's
//! bytes, a copy as text, and every object, all at once), which would set the proxy's peak
//! memory at scale at several times the state it keeps after the lists. The watcher cannot
//! start from a list read elsewhere, so this module does both
//! halves, with the watcher's own events, errors and states, so its backoff
//! (`WatchStreamExt::default_backoff`) and [`translate`](super::translate) apply unchanged:
//!
//! - List (`resourceVersion=0`, served from the API server's watch cache in one response, as
//!   client-go's informers ask; unpaged, since pages of 500 make a request per 500 objects,
//!   which the client's QPS limit spreads over many seconds at scale): `Init`, an `InitApply` per
//!   object as it is decoded, `InitDone`. Asked for as protobuf when the kind has a
//!   [`ProtobufDecoder`] (Services and EndpointSlices, `contentType`'s default), split by
//!   [`protobuf_split`]; JSON otherwise, or when the API server answers
//!   in JSON (it may, for any kind), split by [`list_split`].
//!   An item that does not decode is skipped with a warning naming it (the rest of the list
//!   still counts); a body that breaks off or is not a list is an error and the list starts
//!   over, so a short list never reads as deletions.
//! - Watch from the list's resourceVersion, with bookmarks: `Apply` / `Delete`; a 410 Gone
//!   relists; a watch that ends (its timeout) resumes from the last version seen.

use std::collections::VecDeque;
use std::fmt::Debug;

use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt as _};
use http_body_util::BodyExt as _;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::core::Status;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource, ResourceExt as _};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::protobuf_objects::{self, DecodeError};
use super::{list_split, protobuf_split};

/// The media type of Kubernetes protobuf.
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// Reads one protobuf list item of a kind.
pub type ProtobufDecoder<K> = fn(&[u8]) -> Result<K, DecodeError>;

/// Which objects of a kind are listed and watched.
#[derive(Clone, Debug, Default)]
pub struct Selectors {
    pub labels: Option<String>,
    pub fields: Option<String>,
}

/// One kind's list-then-watch as watcher events; errors are items (the stream never ends), to
/// be spaced out by a backoff. Lists are asked for as protobuf when `protobuf` says how to
/// read its items.
pub fn events<K>(
    client: Client,
    selectors: Selectors,
    protobuf: Option<ProtobufDecoder<K>>,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default,
{
    let watcher = ListWatch {
        client,
        selectors,
        protobuf,
        state: State::Empty,
    };
    stream::unfold(watcher, |mut watcher| async move {
        let event = watcher.step().await;
        Some((event, watcher))
    })
}

struct ListWatch<K> {
    client: Client,
    selectors: Selectors,
    protobuf: Option<ProtobufDecoder<K>>,
    state: State<K>,
}

enum State<K> {
    /// Nothing listed yet, or a relist is due.
    Empty,
    /// A list response is being read.
    Listing(Listing<K>),
    /// Listed (or a watch ended): a watch from this resourceVersion is due.
    Listed { resource_version: String },
    Watching {
        resource_version: String,
        stream: BoxStream<'static, kube::Result<WatchEvent<K>>>,
    },
}

/// A list response being read: its body, the splitter over it, and the objects decoded from
/// its last chunk that are not yet handed on.
struct Listing<K> {
    body: BoxStream<'static, kube::Result<hyper::body::Bytes>>,
    items: Items<K>,
    decoded: VecDeque<K>,
}

/// How a list body is split into items, by the media type it came in.
enum Items<K> {
    Json(list_split::Splitter),
    Protobuf(protobuf_split::Splitter, ProtobufDecoder<K>),
}

impl<K: DeserializeOwned> Items<K> {
    /// Decodes the items that end in `chunk` into `decoded`.
    fn feed(&mut self, chunk: &[u8], decoded: &mut VecDeque<K>) -> Result<(), watcher::Error> {
        match self {
            Items::Json(splitter) => splitter
                .feed(chunk, |item| decoded.extend(decode::<K>(item)))
                .map_err(|e| list_failed(e.to_string())),
            Items::Protobuf(splitter, decoder) => splitter
                .feed(chunk, |item| {
                    decoded.extend(decode_protobuf::<K>(item, *decoder))
                })
                .map_err(|e| list_failed(e.to_string())),
        }
    }

    /// The list's resourceVersion, at the end of a whole body.
    fn finish(self) -> Result<String, watcher::Error> {
        let version = match self {
            Items::Json(splitter) => splitter
                .finish()
                .map_err(|e| list_failed(e.to_string()))?
                .and_then(|m| serde_json::from_slice::<ListMeta>(&m).ok())
                .and_then(|m| m.resource_version),
            Items::Protobuf(splitter, _) => splitter
                .finish()
                .map_err(|e| list_failed(e.to_string()))?
                .and_then(|m| protobuf_objects::list_resource_version(&m)),
        };
        version
            .filter(|v| !v.is_empty())
            .ok_or(watcher::Error::NoResourceVersion)
    }
}

/// The objects of a whole list body and its resourceVersion, read as a listing reads its
/// body when it arrives in `chunk`-byte pieces (protobuf when `protobuf` names the kind's
/// decoder, else JSON): the fuzz targets' way in (`crate::fuzzing`).
pub(crate) fn read_list_body<K: DeserializeOwned>(
    body: &[u8],
    chunk: usize,
    protobuf: Option<ProtobufDecoder<K>>,
) -> Result<(Vec<K>, String), watcher::Error> {
    let mut items = match protobuf {
        Some(decoder) => Items::Protobuf(protobuf_split::Splitter::default(), decoder),
        None => Items::Json(list_split::Splitter::default()),
    };
    let mut decoded = VecDeque::new();
    for piece in body.chunks(chunk.max(1)) {
        items.feed(piece, &mut decoded)?;
    }
    let resource_version = items.finish()?;
    Ok((decoded.into(), resource_version))
}

impl<K> ListWatch<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default,
{
    /// The next event or error; steps that yield neither (a watch started, a bookmark) loop.
    async fn step(&mut self) -> Result<Event<K>, watcher::Error> {
        loop {
            match std::mem::replace(&mut self.state, State::Empty) {
                State::Empty => {
                    let (body, as_protobuf) = list::<K>(
                        self.client.clone(),
                        self.selectors.clone(),
                        self.protobuf.is_some(),
                    )
                    .await
                    .map_err(watcher::Error::InitialListFailed)?;
                    let items = match (self.protobuf, as_protobuf) {
                        (Some(decoder), true) => {
                            Items::Protobuf(protobuf_split::Splitter::default(), decoder)
                        }
                        _ => Items::Json(list_split::Splitter::default()),
                    };
                    self.state = State::Listing(Listing {
                        body,
                        items,
                        decoded: VecDeque::new(),
                    });
                    return Ok(Event::Init);
                }
                State::Listing(mut listing) => {
                    if let Some(object) = listing.decoded.pop_front() {
                        self.state = State::Listing(listing);
                        return Ok(Event::InitApply(object));
                    }
                    match listing.body.next().await {
                        Some(Ok(chunk)) => {
                            let Listing { items, decoded, .. } = &mut listing;
                            items.feed(&chunk, decoded)?;
                            self.state = State::Listing(listing);
                        }
                        Some(Err(error)) => return Err(watcher::Error::InitialListFailed(error)),
                        None => {
                            let resource_version = listing.items.finish()?;
                            self.state = State::Listed { resource_version };
                            return Ok(Event::InitDone);
                        }
                    }
                }
                State::Listed { resource_version } => {
                    let api = Api::<K>::all(self.client.clone());
                    let params = self.watch_params();
                    match api.watch(&params, &resource_version).await {
                        Ok(stream) => {
                            self.state = State::Watching {
                                resource_version,
                                stream: stream.boxed(),
                            }
                        }
                        Err(error) => {
                            self.state = State::Listed { resource_version };
                            return Err(watcher::Error::WatchStartFailed(error));
                        }
                    }
                }
                State::Watching {
                    resource_version,
                    mut stream,
                } => match stream.next().await {
                    Some(Ok(WatchEvent::Added(object) | WatchEvent::Modified(object))) => {
                        return self.watched(stream, object, Event::Apply);
                    }
                    Some(Ok(WatchEvent::Deleted(object))) => {
                        return self.watched(stream, object, Event::Delete);
                    }
                    Some(Ok(WatchEvent::Bookmark(bookmark))) => {
                        self.state = State::Watching {
                            resource_version: bookmark.metadata.resource_version,
                            stream,
                        };
                    }
                    Some(Ok(WatchEvent::Error(status))) => {
                        // 410 Gone: the API server no longer has the history from this
                        // version on; only a new list catches up.
                        if status.code != 410 {
                            self.state = State::Watching {
                                resource_version,
                                stream,
                            };
                        }
                        return Err(watcher::Error::WatchError(status.boxed()));
                    }
                    Some(Err(error)) => {
                        self.state = State::Watching {
                            resource_version,
                            stream,
                        };
                        return Err(watcher::Error::WatchFailed(error));
                    }
                    None => self.state = State::Listed { resource_version },
                },
            }
        }
    }

    /// A watched object's event; the watch goes on from its resourceVersion.
    fn watched(
        &mut self,
        stream: BoxStream<'static, kube::Result<WatchEvent<K>>>,
        object: K,
        event: fn(K) -> Event<K>,
    ) -> Result<Event<K>, watcher::Error> {
        let resource_version = object.resource_version().unwrap_or_default();
        if resource_version.is_empty() {
            return Err(watcher::Error::NoResourceVersion);
        }
        self.state = State::Watching {
            resource_version,
            stream,
        };
        Ok(event(object))
    }

    fn watch_params(&self) -> WatchParams {
        WatchParams {
            label_selector: self.selectors.labels.clone(),
            field_selector: self.selectors.fields.clone(),
            ..WatchParams::default()
        }
    }
}

/// Sends the list request, asking for protobuf (JSON as the API server's fallback) when
/// `protobuf`; its body, chunk by chunk, and whether the body is protobuf.
async fn list<K>(
    client: Client,
    selectors: Selectors,
    protobuf: bool,
) -> kube::Result<(BoxStream<'static, kube::Result<hyper::body::Bytes>>, bool)>
where
    K: Resource,
    K::DynamicType: Default,
{
    let params = ListParams {
        label_selector: selectors.labels,
        field_selector: selectors.fields,
        ..ListParams::default()
    }
    .match_any();
    let url = K::url_path(&K::DynamicType::default(), None);
    let mut request = kube::core::Request::new(url)
        .list(&params)
        .map_err(kube::Error::BuildRequest)?;
    request.extensions_mut().insert("list");
    if protobuf {
        request.headers_mut().insert(
            http::header::ACCEPT,
            http::HeaderValue::from_static("application/vnd.kubernetes.protobuf, application/json"),
        );
    }
    let response = client.send(request.map(kube::client::Body::from)).await?;
    let status = response.status();
    let is_protobuf = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|t| t.to_str().ok())
        .is_some_and(|t| t.starts_with(PROTOBUF));
    let body = response.into_body();
    if status.is_client_error() || status.is_server_error() {
        let bytes = body.collect().await?.to_bytes();
        let code = status.as_u16();
        // The API server answers an error in the media type asked for.
        let decoded = match is_protobuf {
            true => protobuf_objects::status(&bytes)
                .map(|(message, reason)| Status::failure(&message, &reason).with_code(code)),
            false => serde_json::from_slice::<Status>(&bytes).ok(),
        };
        let status = decoded.unwrap_or_else(|| {
            let text = String::from_utf8_lossy(&bytes);
            Status::failure(text.trim(), "Failed to parse error data").with_code(code)
        });
        return Err(kube::Error::Api(status.boxed()));
    }
    Ok((body.into_data_stream().boxed(), is_protobuf))
}

/// The part of a list's `metadata` read here.
#[derive(Deserialize)]
struct ListMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
}

/// One JSON list item, or `None` with a warning naming it when it does not decode.
fn decode<K: DeserializeOwned>(item: &[u8]) -> Option<K> {
    match serde_json::from_slice(item) {
        Ok(object) => Some(object),
        Err(error) => {
            let name = serde_json::from_slice::<Named>(item)
                .ok()
                .and_then(|n| n.metadata)
                .map(|m| {
                    format!(
                        "{}/{}",
                        m.namespace.unwrap_or_default(),
                        m.name.unwrap_or_default()
                    )
                });
            skipped::<K>(name, &error);
            None
        }
    }
}

/// One protobuf list item, or `None` with a warning naming it when it does not decode.
fn decode_protobuf<K>(item: &[u8], decoder: ProtobufDecoder<K>) -> Option<K> {
    decoder(item)
        .inspect_err(|error| skipped::<K>(protobuf_objects::name_of(item), error))
        .ok()
}

/// Warns of a listed object skipped because it does not decode.
fn skipped<K>(name: Option<String>, error: &dyn std::fmt::Display) {
    let name = name.unwrap_or_else(|| "(no name)".to_owned());
    tracing::warn!(
        kind = std::any::type_name::<K>().rsplit("::").next().unwrap_or("object"),
        object = %name.chars().take(256).collect::<String>(),
        %error,
        "skipping a listed object that does not decode"
    );
}

/// An object's name, for a warning about an object that does not decode otherwise.
#[derive(Deserialize)]
struct Named {
    metadata: Option<NamedMeta>,
}

#[derive(Deserialize)]
struct NamedMeta {
    name: Option<String>,
    namespace: Option<String>,
}

/// A list body that is not a whole list, as the error a failed list request is.
fn list_failed(what: String) -> watcher::Error {
    watcher::Error::InitialListFailed(kube::Error::SerdeError(serde::de::Error::custom(what)))
}

#[cfg(test)]
mod tests {
    use super::decode;
    use crate::cluster::source::lean::Service;

    #[test]
    fn an_item_that_does_not_decode_is_skipped_and_the_next_one_is_not() {
        let bad = br#"{"metadata":{"name":"x","namespace":"n"},"spec":{"ports":"not a list"}}"#;
        let good = br#"{"metadata":{"name":"y","namespace":"n","resourceVersion":"7"},"spec":{"clusterIP":"10.0.0.1"}}"#;
        assert_eq!(decode::<Service>(bad), None);
        let service = decode::<Service>(good).expect("a good item decodes");
        assert_eq!(service.metadata.name.as_deref(), Some("y"));
        assert_eq!(
            service.spec.and_then(|s| s.cluster_ip).as_deref(),
            Some("10.0.0.1")
        );
    }
}
