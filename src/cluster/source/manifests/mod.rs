//! The manifest-directory source (`--manifests DIR`): Services, EndpointSlices, Nodes and
//! ServiceCIDRs read from YAML or JSON files instead of the API server, the embedded default for
//! demos, dry runs and tests.
//!
//! Three layers, from pure to I/O:
//! - [`parse`] (pure): one file's text → typed objects, warnings and a note of what was skipped.
//!   It never fails and never panics; a bad document is skipped with a [`Warning`] and the rest of
//!   the text still loads.
//! - [`load_dir`] (the I/O seam that reads files): every manifest file of a directory, in name
//!   order, merged into one [`Loaded`] set in which each object (kind, namespace, name) appears once.
//! - [`watch`] (I/O and timers): the directory followed over time, as a stream of
//!   [`Event::Listed`](super::Event::Listed), one per kind, on start and after every change.
//!
//! What is accepted (the same shapes `kubectl apply -f DIR` accepts for these kinds):
//! - `v1 Service`, `discovery.k8s.io/v1 EndpointSlice`, `v1 Node`, `networking.k8s.io/v1
//!   ServiceCIDR`;
//! - `v1 List` with `items`, and the typed lists `v1 ServiceList`, `discovery.k8s.io/v1
//!   EndpointSliceList`, `v1 NodeList`, `networking.k8s.io/v1 ServiceCIDRList` (whose items may omit `apiVersion` and `kind`, as the API
//!   server omits them);
//! - YAML streams of `---` separated documents, or JSON (one or more concatenated values) when the
//!   text's first non-blank character is `{`, the same sniffing kubectl's decoder does.
//!
//! What is deliberately skipped without a warning: every other kind (Pods, Deployments,
//! ConfigMaps, CRDs…), so a directory may hold a whole application's manifests. They are listed
//! in [`Parsed::skipped`] and logged at debug level. Another *version* of one of our kinds (say
//! `discovery.k8s.io/v1beta1 EndpointSlice`) is a warning, because the user meant it for us.
//!
//! YAML is read as YAML 1.2, where kubectl's Go YAML library reads YAML 1.1: unquoted `yes`,
//! `no`, `on`, `off`, `y`, `n` are strings here, not booleans (write `true`/`false`, which both
//! read alike), and `0755` is the decimal 755, not an octal number. `<<` merge keys are expanded as
//! in Go. Duplicate keys in a mapping make the document invalid, as with kubectl.
//!
//! This module never filters by meaning: headless Services, ExternalName Services and the
//! `service.kubernetes.io/service-proxy-name` label are the tracker's business.

mod dir;
mod identity;
mod parse;
mod reload;
mod split;
mod warning;
mod watch;

use std::path::PathBuf;

pub use dir::{Loaded, load_dir};
pub use parse::{MAX_TEXT_BYTES, Parsed, parse};
pub use warning::{Place, Problem, Skipped, Warning};
pub use watch::{Watch, watch};

/// Why a manifest directory could not be read or watched at all. Problems with single files or
/// documents are [`Warning`]s instead; they never stop the rest of the directory from loading.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read manifest directory {}", path.display())]
    ReadDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot watch manifest directory {}", path.display())]
    Watch {
        path: PathBuf,
        #[source]
        source: notify::Error,
    },
}
