//! Sources of cluster objects: the only code that knows where Services, EndpointSlices, Nodes
//! and ServiceCIDRs come from: the API server through kube-rs ([`api`]) or a directory of manifests
//! ([`manifests`]), and the host's addresses ([`interfaces`]).
//!
//! A source emits [`Event`]s; it filters nothing by meaning (the tracker decides what is ignored)
//! and never panics on malformed input: an object that cannot be decoded is skipped with a warning
//! naming where it came from.

pub mod api;
pub mod interfaces;
pub mod lean;
pub mod manifests;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use lean::{EndpointSlice, Service};

/// One object from the API server or a manifest, typed by kind. Services and EndpointSlices
/// are held as [`lean`] decodes them: only what the tracker reads.
#[derive(Clone, Debug, PartialEq)]
pub enum Object {
    Service(Box<Service>),
    EndpointSlice(Box<EndpointSlice>),
    Node(Box<Node>),
    ServiceCidr(Box<ServiceCIDR>),
}

/// The kinds of object a source delivers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Service,
    EndpointSlice,
    Node,
    ServiceCidr,
}

impl Kind {
    /// All kinds, in the order a source lists them.
    pub const ALL: [Kind; 4] = [
        Kind::Service,
        Kind::EndpointSlice,
        Kind::Node,
        Kind::ServiceCidr,
    ];

    /// Whether the first sync waits for this kind's first list, as upstream waits for its
    /// Service and EndpointSlice informers. ServiceCIDRs are not waited for (upstream does not
    /// either): an API server that does not serve them (before 1.33) or a ClusterRole that does
    /// not grant them must not keep every Service from being programmed. Until they are listed
    /// no Service CIDR is known, and nothing is dropped for being unallocated.
    pub fn awaited(self) -> bool {
        !matches!(self, Kind::ServiceCidr)
    }

    /// The API's name of the kind, as logs name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Service => "Service",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::Node => "Node",
            Kind::ServiceCidr => "ServiceCIDR",
        }
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

impl From<ServiceCIDR> for Object {
    fn from(c: ServiceCIDR) -> Object {
        Object::ServiceCidr(Box::new(c))
    }
}

/// A Service built in full (tests, examples), as the API source would decode it.
impl From<k8s_openapi::api::core::v1::Service> for Object {
    fn from(s: k8s_openapi::api::core::v1::Service) -> Object {
        Object::from(Service::from(s))
    }
}

/// An EndpointSlice built in full (tests, examples), as the API source would decode it.
impl From<k8s_openapi::api::discovery::v1::EndpointSlice> for Object {
    fn from(s: k8s_openapi::api::discovery::v1::EndpointSlice) -> Object {
        Object::from(EndpointSlice::from(s))
    }
}

impl Object {
    pub fn kind(&self) -> Kind {
        match self {
            Object::Service(_) => Kind::Service,
            Object::EndpointSlice(_) => Kind::EndpointSlice,
            Object::Node(_) => Kind::Node,
            Object::ServiceCidr(_) => Kind::ServiceCidr,
        }
    }

    /// The object's namespace (`default` when a namespaced object has none; empty for the
    /// cluster-scoped Nodes and ServiceCIDRs) and name, borrowed.
    pub fn namespace_and_name(&self) -> (&str, &str) {
        match self {
            Object::Service(s) => namespace_and_name(&s.metadata, "default"),
            Object::EndpointSlice(s) => namespace_and_name(&s.metadata, "default"),
            Object::Node(n) => namespace_and_name(&n.metadata, ""),
            Object::ServiceCidr(c) => namespace_and_name(&c.metadata, ""),
        }
    }

    /// `namespace/name` (the name alone when cluster-scoped): the key a list's items and an
    /// object's warnings are remembered under.
    pub fn id(&self) -> String {
        match self.namespace_and_name() {
            ("", name) => name.to_string(),
            (ns, name) => format!("{ns}/{name}"),
        }
    }
}

/// `meta`'s namespace (`default_ns` when unset) and name (empty when unset), borrowed.
pub fn namespace_and_name<'a>(meta: &'a ObjectMeta, default_ns: &'a str) -> (&'a str, &'a str) {
    (
        meta.namespace.as_deref().unwrap_or(default_ns),
        meta.name.as_deref().unwrap_or(""),
    )
}

/// What a source tells the tracker.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// An object was created or changed.
    Applied(Object),
    /// An object was deleted (its last known state).
    Deleted(Object),
    /// The complete current list of one kind (an initial list, a relist after a reconnect, or a
    /// re-read manifest directory): objects of that kind the tracker holds that are not in the list
    /// are gone. Also marks that kind as synced. The same as [`ListStarted`](Event::ListStarted),
    /// a [`ListItem`](Event::ListItem) per object and [`ListEnded`](Event::ListEnded).
    Listed(Kind, Vec<Object>),
    /// A list of one kind begins; its objects follow one by one as [`ListItem`](Event::ListItem)s
    /// and [`ListEnded`](Event::ListEnded) closes it. A source that streams its lists uses these
    /// rather than [`Listed`](Event::Listed), so no one holds a whole list of decoded objects:
    /// each is folded into the model as it arrives. A new `ListStarted` of the same kind before
    /// the end (a list restarted after an error) starts over.
    ListStarted(Kind),
    /// One object of the list in progress of its kind: applied at once, like
    /// [`Applied`](Event::Applied), and remembered as present.
    ListItem(Object),
    /// The list in progress of this kind is complete: objects of that kind the tracker holds
    /// that were not among its items are gone. Also marks that kind as synced. A list cut short
    /// (no end) deletes nothing; the items it delivered stay, as each is a real version.
    ListEnded(Kind),
    /// Every address configured on this host's interfaces, sorted (not from the API server:
    /// see [`interfaces`]). Replaces the previous list.
    HostAddresses(Vec<std::net::IpAddr>),
}
