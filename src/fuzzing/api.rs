//! Targets for what the API server and files on disk send: list bodies (protobuf and JSON), as
//! a listing reads them chunk by chunk, manifests, and the KubeProxyConfiguration file. What
//! decodes is folded into a [`Tracker`] and a snapshot taken, as the source's events are.

use std::path::Path;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::networking::v1::ServiceCIDR;

use crate::cluster::Tracker;
use crate::cluster::source::api::list_watch::{ProtobufDecoder, read_list_body};
use crate::cluster::source::api::protobuf_objects::{self, FromProtobuf};
use crate::cluster::source::lean::{EndpointSlice, Service};
use crate::cluster::source::{Event, Kind, Object, manifests};
use crate::cluster::topology::Features;
use crate::dataplane::modes;

/// Chunk sizes a body arrives in, one picked by the body's length: the fuzzer varies lengths,
/// so every size meets every place a field or item can be cut.
const CHUNKS: [usize; 6] = [usize::MAX, 1, 7, 64, 3, 4096];

fn chunk(body: &[u8]) -> usize {
    CHUNKS[body.len() % CHUNKS.len()]
}

/// Folds `objects` into a tracker as one list of each kind, and takes the snapshot.
fn track(objects: Vec<Object>) {
    let mut tracker = Tracker::new("node-a", Features::default());
    for kind in Kind::ALL {
        tracker.apply(&Event::Listed(kind, objects.clone()));
    }
    let _ = tracker.snapshot();
}

/// The objects of one kind in a list body, as a listing of that kind reads it.
fn listed<K: serde::de::DeserializeOwned + Into<Object>>(
    body: &[u8],
    protobuf: Option<ProtobufDecoder<K>>,
    objects: &mut Vec<Object>,
) {
    if let Ok((items, _version)) = read_list_body(body, chunk(body), protobuf) {
        objects.extend(items.into_iter().map(Into::into));
    }
}

/// A Service or EndpointSlice list body in protobuf, and an error body's `Status`.
pub fn protobuf_list(body: &[u8]) {
    let mut objects = Vec::new();
    listed::<Service>(body, Some(Service::from_protobuf), &mut objects);
    listed::<EndpointSlice>(body, Some(EndpointSlice::from_protobuf), &mut objects);
    let _ = protobuf_objects::status(body);
    track(objects);
}

/// A list body in JSON, of each kind listed as JSON.
pub fn json_list(body: &[u8]) {
    let mut objects = Vec::new();
    listed::<Service>(body, None, &mut objects);
    listed::<EndpointSlice>(body, None, &mut objects);
    listed::<Node>(body, None, &mut objects);
    listed::<ServiceCIDR>(body, None, &mut objects);
    track(objects);
}

/// A manifest file (the manifest source reads files as UTF-8 text; others are refused before
/// parsing).
pub fn manifests(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    let parsed = manifests::parse(text, "fuzz.yaml");
    track(parsed.objects);
}

/// A KubeProxyConfiguration file, and the settings each dataplane mode derives from it
/// ([`check_config`](crate::dataplane::mode::Mode::check_config)).
pub fn config(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    if let Ok(config) = crate::config::from_file(Path::new("fuzz.yaml"), text) {
        for mode in modes::ALL {
            let _ = modes::of(mode).check_config(&config);
        }
    }
}
