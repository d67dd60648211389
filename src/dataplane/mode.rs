//! The parts every proxy mode hands the command line, the same for all five: what `plan`
//! prints of it, what `explain` and `status` ask of it, the host set-up it needs, how it
//! starts (its dataplane, side tasks and counters), what `--cleanup` removes of it, and what it declares of itself (upstream's
//! failure series its syncs feed, the node state it owns, the kinds of leftovers it finds and
//! removes, the nf_tables objects the monitor watches for it, the link it binds Services to,
//! its decoders' fuzz targets).
//!
//! Each mode implements [`Mode`] in its own folder (`<mode>/mode.rs`); [`super::modes`] is the
//! one place that lists them, so the commands ask a mode for its part instead of deciding per
//! mode themselves.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::cleanup::Report;
use super::counters::{DatapathSource, RelaySource};
use super::inspect::Inspect;
use super::leftovers::{Kind, State};
use super::monitor::{Drift, Watch};
use super::tool::Launcher;
use super::{Dataplane, TrafficSource, node};
use crate::cluster::Snapshot;
use crate::config::Config;
use crate::conntrack::Frontends;
use crate::conntrack::reconcile::Translations;
use crate::fuzzing::Target;
use crate::metrics::{Metrics, SyncSeries};

/// One proxy mode's parts.
pub trait Mode: Sync {
    /// What `plan` prints after its report in table format: a comment line naming what follows,
    /// then the mode's desired state for `snapshot` as its own tool would list it. Offline:
    /// the Node object's addresses stand in for the host's.
    fn render_plan(&self, config: &Config, snapshot: &Snapshot) -> Result<String, node::Error>;

    /// Upstream's series the mode's syncs feed: which failure counters a failed sync counts.
    fn sync_series(&self) -> SyncSeries;

    /// What of a node's Service state the mode programs itself, so that once its rules are in
    /// place only what it does not own is removed as another proxy's leftover.
    fn owns(&self) -> &'static [State];

    /// The kinds of state the mode knows how to find and remove when another proxy (upstream's
    /// mode of the same name, or a mode of ours) left them; [`super::leftovers`] asks every
    /// mode's.
    fn leftovers(&self) -> &'static [&'static dyn Kind];

    /// The nf_tables objects that hold the mode's rules, for the monitor to watch: what
    /// [`Started::monitor`] reports outside changes of. `None` for a mode whose rules are not
    /// in nf_tables.
    fn watch(&self) -> Option<&'static dyn Watch> {
        None
    }

    /// The link the mode binds Service addresses to, if it has one: its addresses are the
    /// Services', not the node's, so they are left out of the host addresses NodePorts and
    /// `nodePortAddresses` are planned over.
    fn service_address_link(&self) -> Option<&'static str> {
        None
    }

    /// The host set-up the mode makes before the proxy starts, and before `--init-only` exits:
    /// with `--init-only`, what needs more privileges than the long-running proxy has.
    fn set_up_host(&self, config: &Config) {
        let _ = config;
    }

    /// Builds the mode's dataplane for `config`, after the host set-up its start needs, with
    /// what runs beside it. Called inside the runtime, through [`super::modes::start`].
    fn start(&self, config: &Config) -> Result<Started, StartError>;

    /// Whether `--nodeport-localhost` is served by the relay's loopback listeners beside this
    /// mode's rules (the registry adds them, [`super::modes::start`]); a mode that serves
    /// loopback NodePorts itself, or not at all as upstream's mode of its kind, says no.
    fn relays_loopback_node_ports(&self) -> bool {
        false
    }

    /// The mode's part in `explain` and `status`: its plan, the walk of a packet over it, and
    /// the kernel's reading on a live node.
    fn inspect(&self) -> &'static dyn Inspect;

    /// Derives the mode's own settings from `config`, as its plan and start do, so that the
    /// configuration file's fuzz target reaches every mode's derivation through the registry.
    /// A mode that derives none of its own keeps the default.
    fn check_config(&self, config: &Config) -> Result<(), node::Error> {
        let _ = config;
        Ok(())
    }

    /// The entry points into the mode's decoders of bytes it reads from the kernel or a rule
    /// tool, which other programs can shape: [`crate::fuzzing`] fuzzes them, and replays their
    /// corpora, by name. A target named as a shared one is the mode's part of it, run on the
    /// same input after the shared decoders; any other is a target of its own.
    fn fuzz_targets(&self) -> &'static [Target] {
        &[]
    }

    /// Removes what this mode leaves on the node into `report`; `--cleanup` runs every mode's.
    /// `tools` runs in the network namespace to clean; `config` is the binary's own (`None` in
    /// a test that cleans one namespace), for what lives outside any namespace.
    fn clean_up(&self, tools: &Launcher, config: Option<&Config>, report: &mut Report);
}

/// A started mode: its dataplane and what the proxy runs and reads beside it.
pub struct Started {
    pub dataplane: Box<dyn Dataplane>,
    /// Where the monitor reports outside changes of the mode's [`Mode::watch`], when its rules
    /// are there (the iptables mode's only on the nft back end). The proxy starts
    /// [`super::monitor::run`] over both and hands [`Drift::waker`] to the runner;
    /// [`Drift::repairs`] counts in the watch's repairs series.
    pub monitor: Option<Arc<Drift>>,
    /// Per-Service traffic counters, read by the metrics at each scrape (IPVS).
    pub traffic: Option<Arc<dyn TrafficSource>>,
    /// The relay's listeners: read by the metrics at each scrape, drained when the proxy stops.
    pub relay: Option<Arc<dyn RelaySource>>,
    /// The eBPF datapath's counters and map fill levels, read by the metrics.
    pub datapath: Option<Arc<dyn DatapathSource>>,
    /// Background tasks the proxy starts once it is built.
    pub tasks: Vec<Task>,
}

impl Started {
    /// A dataplane with nothing beside it.
    pub fn alone(dataplane: Box<dyn Dataplane>) -> Started {
        Started {
            dataplane,
            monitor: None,
            traffic: None,
            relay: None,
            datapath: None,
            tasks: Vec::new(),
        }
    }
}

/// A background task of a mode: starts itself (a tokio task or a thread) with what the
/// proxy hands it. Called inside the runtime.
pub type Task = Box<dyn FnOnce(Feed) + Send>;

/// What the proxy hands a mode's background tasks.
pub struct Feed {
    /// The UDP and SCTP frontends of the last successful sync.
    pub frontends: watch::Receiver<Option<Arc<Frontends>>>,
    /// Where the tasks count what they did.
    pub metrics: Metrics,
}

/// The conntrack reconciler, for a mode that programs NAT rules (a socket-level mode leaves no
/// flows to clean up after): deletes stale UDP and SCTP flows after each sync that changed a
/// frontend's endpoints, and every `period` (the sync period), judging them as the mode's NAT
/// works (`translation`).
pub fn conntrack_reconciler(period: Duration, translation: Translations) -> Task {
    Box::new(move |feed: Feed| {
        tokio::spawn(crate::conntrack::reconcile::run(
            feed.frontends,
            period,
            feed.metrics,
            translation,
        ));
    })
}

/// Why a mode cannot start as configured: each mode's own typed error, its causes kept.
pub type StartError = Box<dyn std::error::Error + Send + Sync>;
