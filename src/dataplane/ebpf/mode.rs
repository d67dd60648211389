//! The eBPF mode's parts for the command line ([`crate::dataplane::mode::Mode`]).

use std::path::PathBuf;
use std::sync::Arc;

use super::backend::{self, Kernel, Settings};
use super::stats::Stats;
use super::{EbpfDataplane, names, plan, render, tc};
use crate::cluster::Snapshot;
use crate::config::Config;
use crate::dataplane::cleanup::Report;
use crate::dataplane::leftovers::{Kind, State};
use crate::dataplane::mode::{Feed, Mode, StartError, Started, Task};
use crate::dataplane::node;
use crate::dataplane::tool::Launcher;
use crate::metrics::SyncSeries;

/// See the module doc.
pub struct Ebpf;

/// The eBPF programs could not be loaded, attached or pinned.
#[derive(Debug, thiserror::Error)]
#[error("eBPF")]
pub struct Unattached(#[from] backend::Error);

impl Mode for Ebpf {
    /// Our own counter: upstream has no eBPF mode to match.
    fn sync_series(&self) -> SyncSeries {
        SyncSeries::Ebpf
    }

    /// Programs and maps only: no table, chain or link.
    fn owns(&self) -> &'static [State] {
        &[]
    }

    /// None found at start: its pins are under a configured root, which only `--cleanup`
    /// removes.
    fn leftovers(&self) -> &'static [&'static dyn Kind] {
        &[]
    }

    fn render_plan(&self, config: &Config, snapshot: &Snapshot) -> Result<String, node::Error> {
        let node_ports = plan::node_ports(&config.node_port_addresses, &snapshot.node);
        Ok(format!(
            "\n# ebpf: the map entries this node would write\n{}",
            render::render(&plan::plan(snapshot, &node_ports))
        ))
    }

    /// With `--init-only` (the proxy's container may mount nothing that reaches the host):
    /// mounts bpffs under the pin root where none is mounted, so a mount made from a container
    /// whose mounts reach the host (the DaemonSet's privileged init container) outlives it and
    /// the proxy needs no mount of its own. A failure is a warning: the proxy tries again
    /// itself.
    fn set_up_host(&self, config: &Config) {
        if !config.init_only {
            return;
        }
        let root = pin_root(config);
        match backend::ensure_bpffs(&root) {
            Ok(()) => tracing::info!(pins = %root.display(), "bpffs in place for the pins"),
            Err(error) => tracing::warn!(pins = %root.display(),
                error = %crate::causes::one_line(&error),
                "cannot mount bpffs for the pins; the proxy will try again at start"),
        }
    }

    /// Loads the programs, attaches them to the cgroup and the node's interfaces. Its socket
    /// programs leave no conntrack entry; connected UDP sockets stand for them, and a task
    /// destroys those to a backend that stopped serving.
    fn start(&self, config: &Config) -> Result<Started, StartError> {
        let (dataplane, stats) = attach(config).map_err(Unattached)?;
        Ok(Started {
            datapath: Some(Arc::new(stats)),
            tasks: vec![udp_socket_reaper(config)],
            ..Started::alone(Box::new(dataplane))
        })
    }

    /// Its sock_diag dumps.
    fn fuzz_targets(&self) -> &'static [crate::fuzzing::Target] {
        super::fuzz::TARGETS
    }

    fn inspect(&self) -> &'static dyn crate::dataplane::inspect::Inspect {
        &super::inspect::Inspect
    }

    /// The pins under the configured pin root (its cgroup links, which detaches the programs,
    /// and its maps); pins belong to no network namespace, so only the binary's own `--cleanup`
    /// (with its configuration) removes them.
    fn clean_up(&self, _: &Launcher, config: Option<&Config>, report: &mut Report) {
        let Some(config) = config else { return };
        match backend::remove(&pin_root(config)) {
            Ok(n) => report.removed("eBPF pins (programs detached)", n),
            Err(e) => report.errors.push(crate::causes::one_line(&e)),
        }
    }
}

/// Where the eBPF mode pins (`--bpf-pin-root`).
pub fn pin_root(config: &Config) -> PathBuf {
    config
        .bpf_pin_root
        .clone()
        .unwrap_or_else(|| names::PIN_ROOT.into())
}

/// The dataplane with its programs attached, and its counters.
fn attach(config: &Config) -> Result<(EbpfDataplane<Kernel>, Stats), backend::Error> {
    let settings = Settings {
        cgroup: config
            .bpf_cgroup
            .clone()
            .unwrap_or_else(backend::default_cgroup),
        pin_root: pin_root(config),
    };
    let mut kernel = Kernel::open(&settings)?;
    let interfaces = tc::node_interfaces()?;
    kernel.attach_external(&interfaces)?;
    let stats = Stats::open(&settings.pin_root)?;
    let names: Vec<&str> = interfaces.iter().map(|i| i.name.as_str()).collect();
    tracing::info!(cgroup = %settings.cgroup.display(),
        pins = %settings.pin_root.display(), interfaces = %names.join(","),
        "eBPF programs attached");
    let dataplane =
        EbpfDataplane::new(kernel, config.node_port_addresses.clone()).with_stats(stats.clone());
    Ok((dataplane, stats))
}

/// Destroys connected UDP sockets the programs sent to a backend that stopped serving, after
/// every sync that changed a frontend's endpoints and every sync period.
fn udp_socket_reaper(config: &Config) -> Task {
    let (period, pins) = (config.sync_period, pin_root(config));
    Box::new(move |feed: Feed| {
        tokio::spawn(super::udp_sockets::reconcile::run(
            feed.frontends,
            period,
            feed.metrics,
            pins,
        ));
    })
}
