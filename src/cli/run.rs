//! The long-running proxy: a source (the API server, or a manifest directory with
//! `--manifests`), the sync runner, and a dataplane.
//!
//! Wiring only: building the values and handing them to each other. The handles health and
//! metrics need ([`Proxy::status`], [`Proxy::reachability`]) are exposed before it runs.

use std::sync::Arc;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use tokio::sync::watch;

use crate::cluster::source::{Event, api, interfaces, manifests};
use crate::cluster::{Features, Tracker};
use crate::config::{Config, ProxyMode};
use crate::dataplane::Dataplane;
use crate::dataplane::monitor::{Drift, Watch};
use crate::dataplane::nftables::{self, ModeConfig, NftablesDataplane};
use crate::dataplane::{ebpf, iptables, ipvs, userspace};
use crate::sync::{Periods, Runner, Status};

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Api(#[from] api::Error),
    #[error(transparent)]
    Manifests(#[from] manifests::Error),
}

/// The dataplane of `config`'s mode, and what its kernel watcher needs.
pub struct Mode {
    pub dataplane: Box<dyn Dataplane>,
    /// The modes whose rules live in nf_tables (nftables, iptables-nft): what the monitor
    /// watches and reports outside changes into. `main` starts
    /// [`crate::dataplane::monitor::run`] with it and hands [`Drift::waker`] to the runner;
    /// [`Drift::repairs`] is the mode's `kubeproxy_rs_*_repairs_total`.
    pub monitor: Option<(Arc<Drift>, Watch)>,
    /// The mode's per-Service traffic counters, read by the metrics at each scrape (IPVS).
    pub traffic: Option<Arc<dyn crate::dataplane::TrafficSource>>,
    /// The userspace relay's listeners, read by the metrics at each scrape.
    pub relay: Option<userspace::ListenerCounters>,
    /// eBPF mode: its datapath counters and map fill levels, read by the metrics.
    pub ebpf: Option<ebpf::stats::Stats>,
    /// IPVS mode: what [`ipvs::watch::spawn`] probes and where it reports a flush by another
    /// program; `main` starts it.
    pub ipvs_watch: Option<(ipvs::traffic::Owners, Arc<Drift>)>,
}

/// Why the dataplane of the configured mode cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum ModeError {
    #[error(transparent)]
    Policy(#[from] crate::dataplane::node::Error),
    #[error(transparent)]
    NoIptables(#[from] iptables::NoUsableFamily),
    /// The kernel cannot run the IPVS mode as configured (no `ip_vs`, no such scheduler).
    #[error("IPVS: {0}")]
    Ipvs(#[from] ipvs::apply::Error),
    /// `portRange` in a form userspace mode cannot read (config validation accepts the same
    /// forms, so a validated configuration never gives this).
    #[error("portRange {0:?}: not a port range")]
    PortRange(String),
    /// The eBPF programs could not be loaded, attached or pinned.
    #[error("eBPF")]
    Ebpf(#[from] ebpf::backend::Error),
}

/// The dataplane for `config`, after the host set-up its mode needs at start-up (IPVS: the
/// scheduler check, the sysctls and the connection timeouts), with the loopback NodePort
/// listeners beside it when `--nodeport-localhost` asks for them.
pub fn dataplane(config: &Config) -> Result<Mode, ModeError> {
    let mode = mode_dataplane(config)?;
    let beside = matches!(config.mode, ProxyMode::Nftables | ProxyMode::Userspace);
    if !(config.userspace.node_port_localhost && beside) {
        return Ok(mode);
    }
    tracing::info!("serving NodePorts on 127.0.0.1 and ::1 through the relay");
    let counters = mode.relay.clone().unwrap_or_default();
    Ok(Mode {
        dataplane: Box::new(userspace::loopback::WithLoopbackNodePorts::new(
            mode.dataplane,
            relay_settings(config),
            counters.clone(),
        )),
        relay: Some(counters),
        ..mode
    })
}

/// The relay's settings from the configuration.
fn relay_settings(config: &Config) -> userspace::relay::Settings {
    userspace::relay::Settings {
        max_connections_per_service: config.userspace.max_connections_per_service as usize,
        max_connections: config.userspace.max_connections as usize,
        udp_idle_timeout: config.userspace.udp_idle_timeout,
        ..userspace::relay::Settings::default()
    }
}

fn mode_dataplane(config: &Config) -> Result<Mode, ModeError> {
    match config.mode {
        ProxyMode::Nftables => {
            let drift = Drift::new();
            let backend = nftables::backend::for_encoder(config.nftables_encoder, None);
            let encoder = match config.nftables_encoder {
                crate::config::NftablesEncoder::Netlink => "netlink",
                crate::config::NftablesEncoder::Nft => "nft",
            };
            tracing::info!(encoder, "nftables encoder");
            let dataplane =
                NftablesDataplane::new(ModeConfig::new(config)?, backend, drift.clone());
            return Ok(Mode {
                dataplane: Box::new(dataplane),
                monitor: Some((drift, Watch::NftablesTable)),
                traffic: None,
                relay: None,
                ebpf: None,
                ipvs_watch: None,
            });
        }
        ProxyMode::Iptables => {
            let cfg = iptables::ModeConfig::new(config)?;
            let flavour = iptables::IptablesCommand::detect(&[]);
            tracing::info!(flavour = flavour.as_str(), "iptables back end chosen");
            let backend = iptables::IptablesCommand::new(flavour);
            let mut dataplane = iptables::IptablesDataplane::new(cfg, backend);
            dataplane.keep_usable_families()?;
            // iptables-nft rules are nf_tables objects: the monitor sees another program delete
            // them. iptables-legacy keeps only the canary check at each sync.
            let monitor = (flavour == iptables::Flavour::Nft).then(|| {
                let drift = Drift::new();
                dataplane.watched_by(drift.clone());
                (drift, Watch::IptablesNft)
            });
            return Ok(Mode {
                dataplane: Box::new(dataplane),
                monitor,
                traffic: None,
                relay: None,
                ebpf: None,
                ipvs_watch: None,
            });
        }
        ProxyMode::Userspace => {
            let range = userspace::ports::PortRange::parse(&config.port_range)
                .ok_or_else(|| ModeError::PortRange(config.port_range.clone()))?;
            let settings = relay_settings(config);
            let drift = Drift::new();
            let rules = nftables::backend::for_encoder(config.nftables_encoder, None);
            let node = crate::dataplane::node::NodePolicy::new(config)?;
            let redirect = userspace::redirect::Settings::of(config, &node);
            let dataplane =
                userspace::UserspaceDataplane::new(settings, range, config.bind_address)
                    .with_redirect(rules, redirect, drift.clone());
            let relay = Some(dataplane.listener_counters());
            return Ok(Mode {
                dataplane: Box::new(dataplane),
                monitor: Some((drift, Watch::NftablesTable)),
                traffic: None,
                relay,
                ebpf: None,
                ipvs_watch: None,
            });
        }
        ProxyMode::Ebpf => {
            let settings = ebpf::backend::Settings {
                cgroup: config
                    .bpf_cgroup
                    .clone()
                    .unwrap_or_else(ebpf::backend::default_cgroup),
                pin_root: ebpf_pin_root(config),
            };
            let mut kernel = ebpf::backend::Kernel::open(&settings)?;
            let interfaces = ebpf::tc::node_interfaces()?;
            kernel.attach_external(&interfaces)?;
            let stats = ebpf::stats::Stats::open(&settings.pin_root)?;
            let names: Vec<&str> = interfaces.iter().map(|i| i.name.as_str()).collect();
            tracing::info!(cgroup = %settings.cgroup.display(),
                pins = %settings.pin_root.display(), interfaces = %names.join(","),
                "eBPF programs attached");
            return Ok(Mode {
                dataplane: Box::new(
                    ebpf::EbpfDataplane::new(kernel, config.node_port_addresses.clone())
                        .with_stats(stats.clone()),
                ),
                monitor: None,
                traffic: None,
                relay: None,
                ebpf: Some(stats),
                ipvs_watch: None,
            });
        }
        ProxyMode::Ipvs => {}
    }
    let cfg = ipvs::ModeConfig::new(config)?;
    let mut backend = ipvs::apply::KernelBackend::new(None);
    ipvs::apply::check_scheduler(&mut backend, &cfg)?;
    set_ipvs_sysctls(config.ipvs.strict_arp);
    ipvs::apply::set_timeouts(&mut backend, &cfg)?;
    tracing::info!(scheduler = cfg.scheduler.as_str(), "IPVS mode");
    let drift = Drift::new();
    let rules = nftables::backend::for_encoder(config.nftables_encoder, None);
    let dataplane = ipvs::apply::IpvsDataplane::new(
        cfg,
        backend,
        rules,
        ipvs::apply::MonotonicClock,
        drift.clone(),
    );
    let traffic = ipvs::traffic::KernelTraffic::new(None, dataplane.owners());
    let owners = dataplane.owners();
    let watch_drift = drift.clone();
    Ok(Mode {
        dataplane: Box::new(dataplane),
        monitor: Some((drift, Watch::NftablesTable)),
        traffic: Some(Arc::new(traffic)),
        relay: None,
        ebpf: None,
        ipvs_watch: Some((owners, watch_drift)),
    })
}

/// Where the eBPF mode pins (`--bpf-pin-root`), for the mode and for `--cleanup`.
pub fn ebpf_pin_root(config: &Config) -> std::path::PathBuf {
    config
        .bpf_pin_root
        .clone()
        .unwrap_or_else(|| ebpf::names::PIN_ROOT.into())
}

/// The eBPF mode's privileged host setup, for `--init-only`: mounts bpffs under the pin root
/// where none is mounted, so a mount made from a container whose mounts reach the host (the
/// DaemonSet's privileged init container) outlives it and the proxy needs no mount of its own.
/// A failure is a warning: the proxy tries again itself.
pub fn ebpf_host_setup(config: &Config) {
    let root = ebpf_pin_root(config);
    match ebpf::backend::ensure_bpffs(&root) {
        Ok(()) => tracing::info!(pins = %root.display(), "bpffs in place for the pins"),
        Err(error) => tracing::warn!(pins = %root.display(),
            error = %crate::causes::one_line(&error),
            "cannot mount bpffs for the pins; the proxy will try again at start"),
    }
}

/// The IPVS mode's privileged host setup, for `--init-only`: loads `ip_vs` (an IPVS socket
/// resolves its generic netlink family, which the kernel loads on demand; its sysctls exist
/// only then) and sets the sysctls. A failure is a warning: the proxy tries again itself.
pub fn ipvs_host_setup(strict_arp: bool) {
    if let Err(error) = ipvs::backend::netlink::Client::open(None) {
        tracing::warn!(%error, "cannot load IPVS; the proxy will try again at start");
    }
    set_ipvs_sysctls(strict_arp);
}

/// The sysctls the IPVS mode needs; one the kernel refuses is one warning, and start-up goes on
/// (upstream logs and goes on too).
fn set_ipvs_sysctls(strict_arp: bool) {
    let applied = ipvs::sysctls::apply(std::path::Path::new("/proc/sys"), strict_arp);
    for w in &applied.written {
        tracing::info!(sysctl = w.path, value = w.value, "set IPVS sysctl");
    }
    for (w, error) in &applied.refused {
        tracing::warn!(sysctl = w.path, value = w.value, %error,
            "cannot set IPVS sysctl; going on with the kernel's value");
    }
}

/// A proxy ready to run.
pub struct Proxy {
    runner: Runner,
    events: BoxStream<'static, Event>,
    /// The runner's status, for `/healthz` and metrics.
    pub status: watch::Receiver<Status>,
    /// Whether the API server answers; `None` with `--manifests`.
    pub reachability: Option<api::Reachability>,
    /// The API client, for publishing Events; `None` with `--manifests`.
    pub client: Option<kube::Client>,
}

impl Proxy {
    /// Builds the source for `config` and a runner around `dataplane`. Connects nothing yet
    /// beyond reading the kubeconfig (or starting the directory watch).
    pub async fn build(
        config: &Config,
        node_name: &str,
        features: Features,
        dataplane: Box<dyn Dataplane>,
        lists: api::Lists,
    ) -> Result<Proxy, Error> {
        let (events, reachability, client) = match &config.manifests {
            Some(dir) => {
                tracing::info!(manifests = %dir.display(), "source: manifest directory");
                (manifests::watch(dir.clone())?.boxed(), None, None)
            }
            None => {
                let (events, reachability, client) =
                    api::watch_on_own_thread(config.client.clone(), node_name.to_owned(), lists)
                        .await?;
                (events, Some(reachability), Some(client))
            }
        };
        // The host's interface addresses join the cluster's objects (nodePortAddresses CIDRs).
        // The proxy still ends when the cluster source does.
        let events = futures::stream::select(
            events.map(Some).chain(futures::stream::iter([None])),
            interfaces::watch().map(Some),
        )
        .take_while(|e| std::future::ready(e.is_some()))
        .filter_map(std::future::ready)
        .boxed();
        let runner = Runner::new(
            Tracker::new(node_name, features),
            dataplane,
            Periods::new(config.min_sync_period, config.sync_period),
        );
        Ok(Proxy {
            status: runner.status(),
            runner,
            events,
            reachability,
            client,
        })
    }

    /// Adds an observer of every sync report (health, metrics).
    pub fn on_report(
        &mut self,
        observer: impl FnMut(&crate::sync::Report, &crate::cluster::Snapshot) + Send + 'static,
    ) {
        self.runner.on_report(observer);
    }

    /// Adds an observer of the warnings that ask for an Event on their object.
    pub fn on_event_warning(
        &mut self,
        observer: impl FnMut(&crate::cluster::warning::Warning) + Send + 'static,
    ) {
        self.runner.on_event_warning(observer);
    }

    /// A handle on the runner's model for the debug endpoints.
    pub fn peek(&mut self) -> crate::sync::Peek {
        self.runner.peek()
    }

    /// Starts a full sync whenever `trigger` is notified (the dataplane's outside-change monitor).
    pub fn full_sync_on(&mut self, trigger: Arc<tokio::sync::Notify>) {
        self.runner.full_sync_on(trigger);
    }

    /// Runs until the source ends (a manifest directory's watch can; the API source cannot).
    pub async fn run(self) {
        self.runner.run(self.events).await;
    }
}
