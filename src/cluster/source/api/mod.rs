//! The API server as a source: a list-then-watch each for Services, EndpointSlices and this
//! node's Node, turned into [`Event`](super::Event)s.
//!
//! Guarantees: the stream starts with each kind's initial list, object by object
//! (`ListStarted`, a `ListItem` per object as it is decoded, `ListEnded`), and lists again
//! after every relist (410 Gone, restart); the tracker treats a list that ended as the complete
//! state of that kind. In between it emits `Applied` and `Deleted`. It never
//! ends and never yields an error: failures are retried with backoff and logged once per change
//! of state with the request's URL and the cause, and [`Reachability`] tells whether the API
//! server answers and since when, and counts every request by result. It filters only what
//! upstream's informers filter, by label and field selector.
//!
//! Parts: [`client`](mod@client) (configuration, rate limit), [`watch`](mod@watch) (the streams), [`thread`] (the
//! same on a thread of its own, as the proxy runs them), [`list_watch`] (the
//! classic list-then-watch, each list read item by item through [`list_split`] (JSON) or
//! [`protobuf_split`] and [`protobuf_objects`] (protobuf), pure),
//! [`translate`] (watcher events to source events, pure), [`list`](mod@list) (one read for `plan`),
//! [`rate_limit`] and [`reachability`] (the client's tower layers), [`failure`] (the cause of a
//! failed request, pure) and [`requests`] (requests counted by result).

pub mod client;
pub mod failure;
pub mod list;
pub mod list_split;
pub mod list_watch;
pub mod protobuf_objects;
pub mod protobuf_split;
pub mod rate_limit;
pub mod reachability;
pub mod requests;
pub mod thread;
pub mod translate;
pub mod watch;

use std::path::PathBuf;

pub use client::client;
pub use list::list;
pub use reachability::{Health, Reachability};
pub use requests::RequestCounts;
pub use thread::watch_on_own_thread;
pub use watch::{Encoding, Lists, NotABoolean, watch};

use super::Kind;

/// Label selectors of the watches, each kind with its own requirement as upstream's informers
/// have them: Services another proxy serves (`service.kubernetes.io/service-proxy-name`) are
/// skipped, and so are headless Services' slices (`service.kubernetes.io/headless`). A Service
/// that carries the headless label but has a ClusterIP is served, and a slice that carries the
/// proxy-name label counts for its Service, whose own labels decide.
pub mod watch_selector {
    pub const SERVICES: &str = "!service.kubernetes.io/service-proxy-name";
    pub const ENDPOINT_SLICES: &str = "!service.kubernetes.io/headless";
}

/// The field selector for this node's Node object.
pub fn node_selector(node_name: &str) -> String {
    format!("metadata.name={node_name}")
}

/// Why the API source could not start or a list failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubeconfig {}: cannot load it", path.display())]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no --kubeconfig given and no kubeconfig or in-cluster configuration found")]
    Infer(#[source] kube::config::InferConfigError),
    #[error("--master {url}: not a URL")]
    Master {
        url: String,
        #[source]
        source: http::uri::InvalidUri,
    },
    #[error("cannot build the API client")]
    Client(#[source] kube::Error),
    #[error("cannot start the API source's thread: {0}")]
    SourceThread(String),
    #[error("list {kind:?} from the API server")]
    List {
        kind: Kind,
        #[source]
        source: kube::Error,
    },
}
