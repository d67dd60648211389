//! The kube-proxy-rs binary: flags → Config → values, then the chosen command. Besides
//! dispatch it renders each mode's plan and makes per-mode start-up choices
//! (docs/architecture.md, "Where mode knowledge lives outside each mode's folder"); everything
//! it calls is tested on its own.

use std::path::Path;
use std::process::ExitCode;

use kube_proxy_rs::causes;
use kube_proxy_rs::cli::{self, Command};
use kube_proxy_rs::cluster::Features;
use kube_proxy_rs::cluster::source::api;
use kube_proxy_rs::config::{self, Config};
use kube_proxy_rs::dataplane::{self, iptables, ipvs, nftables, userspace};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Turns transparent huge pages off for this process (`prctl(PR_SET_THP_DISABLE)`).
///
/// Why: mimalloc asks for huge pages on its arenas (`MADV_HUGEPAGE`), so every first touch of
/// a 2 MiB region is backed, and zeroed, whole. The proxy's memory is many small objects made
/// and freed by several threads, so large parts of those pages stay unused but resident, and
/// zeroing them lies on the cold start's path. Without huge pages the resident and peak
/// memory are lower and the cold start no slower (docs/benchmarks-history.md, "Protobuf
/// lists, huge pages off"). Best effort: a kernel without the call keeps its default.
fn without_huge_pages() {
    if let Err(error) = nix::sys::prctl::set_thp_disable(true) {
        eprintln!("kube-proxy-rs: cannot turn transparent huge pages off ({error}); going on");
    }
}

/// Writes a command's output to stdout. A reader that went away (`| head`, `| grep -q`) ends
/// the command quietly with success, as Unix tools do, instead of a panic and a backtrace.
fn emit(text: &str) -> ExitCode {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => fail(format!("cannot write the output: {e}")),
    }
}

/// One error line and exit code 1, as upstream does for any bad flag or config.
fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(1)
}

/// mimalloc's `mi_option_purge_delay` (`mimalloc.h`; its options keep their numbers across
/// versions, retired ones stay as placeholders, so this index is an interface).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// The environment variables mimalloc sets that option from (the second its older name).
const PURGE_DELAY_VARIABLES: [&str; 2] = ["MIMALLOC_PURGE_DELAY", "MIMALLOC_RESET_DELAY"];

/// Makes mimalloc give freed memory back to the kernel at once, not a second later (its
/// default).
///
/// Why: the proxy's start-up is a hand-over between threads. The lists are decoded on the API
/// source's thread and the first full sync allocates on another; mimalloc keeps the pages a
/// thread freed with that thread until it purges them, so within the delay the sync's memory
/// comes on top of the lists' garbage instead of in its place, and the peak is higher
/// (docs/benchmarks.md, "freed memory purged at once"). An operator's `MIMALLOC_PURGE_DELAY`
/// (which mimalloc reads itself) is left as it is.
#[allow(clippy::disallowed_methods, reason = "mimalloc's own variables")]
fn purge_freed_memory_at_once() {
    if PURGE_DELAY_VARIABLES
        .iter()
        .any(|v| std::env::var_os(v).is_some())
    {
        return;
    }
    // SAFETY: sets one of mimalloc's integer options; any value is valid for it, and options
    // may be set at any time (mimalloc reads them where it decides).
    #[allow(unsafe_code, reason = "mimalloc's option setter")]
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0);
    }
}

fn main() -> ExitCode {
    without_huge_pages();
    purge_freed_memory_at_once();
    let cli = match cli::parse::parse(std::env::args_os()) {
        Ok(cli) => cli,
        Err(cli::parse::Stop::Help(e)) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(cli::parse::Stop::Invalid(line)) => return fail(line),
    };
    let mut status = None;
    let (flags, plan, explain) = match cli.command {
        None => (cli.flags, None, None),
        Some(Command::Plan(args)) => (args.flags, Some(args.output), None),
        Some(Command::Status(args)) => {
            if let Some(bad) = args.service.as_deref().and_then(cli::status::bad_service) {
                return fail(format!("--{bad}"));
            }
            status = Some((args.service, args.output));
            (args.flags, None, None)
        }
        Some(Command::Explain(args)) => {
            let request = match cli::explain::Request::parse(
                &args.to,
                args.from.as_deref(),
                args.in_interface.as_deref(),
            ) {
                Ok(r) => r,
                Err(e) => return fail(e),
            };
            let remote = cli::explain::remote::path(
                &args.to,
                args.from.as_deref(),
                args.in_interface.as_deref(),
                args.output,
            );
            (args.flags, None, Some((request, args.output, remote)))
        }
    };
    if let Some(style) = flags.version_requested() {
        return emit(&cli::version::text(style, &cli::version::info()));
    }
    let file_text = match &flags.config {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => Some(text),
            Err(e) => return fail(format!("config file {}: cannot read: {e}", path.display())),
        },
        None => None,
    };
    let file = flags.config.as_deref().zip(file_text.as_deref());
    let resolved = match config::resolve(&flags, file) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let config = resolved.config;
    cli::logging::init(&config);
    for w in &resolved.warnings {
        tracing::warn!("{w}");
    }
    if let Some(path) = &config.write_config_to {
        return write_config(path, &config);
    }
    if let Some((service, format)) = status {
        return ask_status(&config, service.as_deref(), format);
    }
    let node_name = match node_name(&config) {
        Ok(n) => n,
        Err(e) => return fail(e),
    };
    let features = Features {
        prefer_same_node: config.gate("PreferSameTrafficDistribution"),
    };
    if let Some((request, format, remote)) = explain {
        // Without --manifests the running proxy answers first, as for `status`.
        if config.manifests.is_none() {
            match cli::explain::remote::ask(config.metrics_bind_address, &remote) {
                Ok(Some(answer)) => return emit(&answer),
                Ok(None) => {
                    tracing::info!("no proxy answers on the metrics address; asking the API server")
                }
                Err(e) => return fail(e),
            }
        }
        let loaded = match load(&config, &node_name, features) {
            Ok(l) => l,
            Err(e) => return fail(e),
        };
        return match cli::explain::live::explain_on_node(
            &config,
            &loaded.snapshot,
            &request,
            config.manifests.is_some(),
        ) {
            Ok(e) => emit(&match format {
                cli::OutputFormat::Table => cli::explain::render::text(&e),
                cli::OutputFormat::Json => cli::explain::render::json(&e),
            }),
            Err(e) => fail(e),
        };
    }
    if let Some(format) = plan {
        let loaded = match load(&config, &node_name, features) {
            Ok(l) => l,
            Err(e) => return fail(e),
        };
        let report = cli::plan::report(&loaded.snapshot, &loaded.ignored, &loaded.warnings);
        let mut text = cli::render(&report, format);
        if config.mode == config::ProxyMode::Nftables && format == cli::OutputFormat::Table {
            let mode = match nftables::ModeConfig::new(&config) {
                Ok(m) => m,
                Err(e) => return fail(e),
            };
            let rulesets = nftables::plan_all(&loaded.snapshot, &mode);
            text.push_str("\n# nftables: the ruleset this node would program (nft -f -)\n");
            text.push_str(&nftables::render_from_scratch(&rulesets));
        }
        if config.mode == config::ProxyMode::Iptables && format == cli::OutputFormat::Table {
            let mode = match iptables::ModeConfig::new(&config) {
                Ok(m) => m,
                Err(e) => return fail(e),
            };
            let rulesets = iptables::plan_all(&loaded.snapshot, &mode);
            text.push_str(
                "\n# iptables: the restore input this node would apply on a node without our rules\n",
            );
            text.push_str(&iptables::render_from_scratch(&rulesets));
        }
        if config.mode == config::ProxyMode::Ipvs && format == cli::OutputFormat::Table {
            let mode = match ipvs::ModeConfig::new(&config) {
                Ok(m) => m,
                Err(e) => return fail(e),
            };
            // Offline: the Node object's addresses stand in for the host's.
            let states = ipvs::plan_all(&loaded.snapshot, &mode, &ipvs::HostAddresses::default());
            text.push_str(
                "\n# ipvs: the virtual services this node would program (as ipvsadm -Sn lists them)\n",
            );
            text.push_str(&ipvs::render_all(&states));
            let node_ips = loaded.snapshot.node.local_addresses().into_iter().collect();
            let bound = ipvs::bound_addresses(&states, &node_ips);
            let tables = ipvs::rules_all(&states, &mode, &loaded.snapshot.node, &bound);
            text.push_str(
                "\n# ipvs: the helper rules this node would program in our nftables table (nft -f -)\n",
            );
            text.push_str(&nftables::render_from_scratch(&tables));
        }
        if config.mode == config::ProxyMode::Ebpf && format == cli::OutputFormat::Table {
            // Offline: the Node object's addresses stand in for the host's.
            let node_ports = dataplane::ebpf::plan::node_ports(
                &config.node_port_addresses,
                &loaded.snapshot.node,
            );
            let plan = dataplane::ebpf::plan::plan(&loaded.snapshot, &node_ports);
            text.push_str("\n# ebpf: the map entries this node would write\n");
            text.push_str(&dataplane::ebpf::render::render(&plan));
        }
        if config.mode == config::ProxyMode::Userspace && format == cli::OutputFormat::Table {
            let listeners = userspace::plan::plan(&loaded.snapshot);
            text.push_str("\n# userspace: the listeners this node would open\n");
            text.push_str(&userspace::render::render(&listeners));
        }
        return emit(&text);
    }
    run(&config, &node_name, features)
}

/// `status`: asks the running proxy's metrics address for `/debug/status` and prints it.
fn ask_status(config: &Config, service: Option<&str>, format: cli::OutputFormat) -> ExitCode {
    let mut path = format!("{}?", cli::debug::STATUS_PATH);
    if let Some(s) = service {
        // Checked by bad_service: only characters that need no escaping in a query.
        path.push_str(&format!("service={s}&"));
    }
    if format == cli::OutputFormat::Json {
        path.push_str("output=json");
    }
    let address = cli::status::ask::target(config.metrics_bind_address);
    let answer = runtime().and_then(|rt| {
        rt.block_on(cli::status::ask::get(
            address,
            &path,
            std::time::Duration::from_secs(60),
        ))
        .map_err(|e| e.to_string())
    });
    match answer {
        Ok((200, body)) => emit(&body),
        Ok((code, body)) => fail(format!(
            "the proxy at {address} answered {code}: {}",
            body.lines().next().unwrap_or_default()
        )),
        Err(e) => fail(e),
    }
}

/// The cluster's objects as `plan` and `explain` see them: from `--manifests`, else listed
/// once from the API server.
fn load(config: &Config, node_name: &str, features: Features) -> Result<cli::Loaded, String> {
    match &config.manifests {
        Some(dir) => {
            cli::load_manifests(dir, node_name, features).map_err(|e| causes::one_line(&e))
        }
        None => runtime().and_then(|rt| {
            rt.block_on(cli::load_cluster(&config.client, node_name, features))
                .map_err(|e| causes::one_line(&e))
        }),
    }
}

fn run(config: &Config, node_name: &str, features: Features) -> ExitCode {
    if !config.mode_explicit {
        tracing::warn!(
            mode = config.mode.as_str(),
            "no proxy mode given; defaulting as upstream does"
        );
    }
    if config.cleanup {
        return cleanup(&cli::run::ebpf_pin_root(config));
    }
    cli::host_setup::conntrack_sysctls(config);
    if config.mode == config::ProxyMode::Iptables {
        cli::host_setup::route_localnet(config);
    }
    if config.init_only && config.mode == config::ProxyMode::Ipvs {
        // The proxy itself sets them too, but unprivileged its /proc/sys is read-only; values
        // already in place are not written again, so it then has nothing to do.
        cli::run::ipvs_host_setup(config.ipvs.strict_arp);
    }
    if config.init_only && config.mode == config::ProxyMode::Ebpf {
        // The proxy's container may mount nothing that reaches the host.
        cli::run::ebpf_host_setup(config);
    }
    if config.init_only {
        // Upstream's --init-only does the host setup that needs full privileges (the conntrack
        // sysctls) and exits, so the long-running proxy can do with CAP_NET_ADMIN.
        tracing::info!("--init-only: privileged host setup done; exiting");
        return ExitCode::SUCCESS;
    }
    cli::version::log_start(config, node_name);
    cli::host_setup::oom_score_adj(config);
    let runtime = match runtime() {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let lists = match watch_list_client() {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    runtime.block_on(async move {
        let mode = match cli::run::dataplane(config) {
            Ok(m) => m,
            Err(e) => return fail(causes::one_line(&e)),
        };
        let mut proxy = match cli::run::Proxy::build(
            config,
            node_name,
            features,
            mode.dataplane,
            lists,
        )
        .await
        {
            Ok(p) => p,
            Err(e) => return fail(causes::one_line(&e)),
        };
        if let Some(client) = proxy.client.clone() {
            tokio::spawn(cli::events::follow(
                client.clone(),
                node_name.to_string(),
                proxy.status.clone(),
            ));
            let (tx, rx) = tokio::sync::mpsc::channel(64);
            proxy.on_event_warning(move |w| {
                // Full: the budget would have dropped it anyway.
                let _ = tx.try_send(w.clone());
            });
            tokio::spawn(cli::events::publish_object_warnings(
                client,
                node_name.to_string(),
                rx,
            ));
        }
        let mut observe = cli::observe::Observe::new(config);
        let (health, relay) = (observe.health.clone(), mode.relay.clone());
        observe
            .metrics
            .set_rest_client_source(proxy.reachability.as_ref().map(|r| r.requests()));
        if let Some(relay) = mode.relay.clone() {
            observe.metrics.set_relay_source(relay);
        }
        if let Some(stats) = mode.ebpf.clone() {
            observe.metrics.set_ebpf_source(stats);
        }
        if let Some(traffic) = mode.traffic.clone() {
            observe.metrics.set_traffic_source(traffic);
        }
        if let Some((owners, drift)) = mode.ipvs_watch {
            dataplane::ipvs::watch::spawn(owners, drift);
        }
        if let Some((drift, watch)) = mode.monitor {
            proxy.full_sync_on(drift.waker());
            observe.count_repairs(drift.clone());
            tokio::spawn(dataplane::monitor::run(None, drift, watch));
        }
        proxy.on_report(observe.observer());
        tokio::spawn(dataplane::leftovers::remove_after_first_sync(
            config.mode,
            proxy.status.clone(),
        ));
        tokio::spawn(observe.clone().follow_status(proxy.status.clone()));
        tokio::spawn(
            observe
                .clone()
                .serve_health_checks(config.node_port_addresses.clone()),
        );
        // --bind-address-hard-fail: a server that cannot serve ends the proxy.
        let (hard_fail, mut failed) = tokio::sync::mpsc::unbounded_channel();
        let hard_fail = config.bind_address_hard_fail.then_some(hard_fail);
        if let Some(address) = config.healthz_bind_address {
            tokio::spawn(observe.clone().serve_health(address, hard_fail.clone()));
        }
        if matches!(
            config.mode,
            config::ProxyMode::Nftables | config::ProxyMode::Iptables | config::ProxyMode::Ipvs
        ) {
            // Only a mode that programs rules has flows to clean up after.
            tokio::spawn(observe.clone().reconcile_conntrack(config.sync_period));
        }
        if config.mode == config::ProxyMode::Ebpf {
            // Its socket programs leave no conntrack entry; connected UDP sockets stand for them.
            let pins = cli::run::ebpf_pin_root(config);
            tokio::spawn(
                observe
                    .clone()
                    .destroy_stale_udp_sockets(config.sync_period, pins),
            );
        }
        let debug = cli::debug::router(cli::debug::Handles {
            peek: proxy.peek(),
            config: std::sync::Arc::new(config.clone()),
            sync: proxy.status.clone(),
            health_checks: observe.health_checks(),
        });
        let metrics = config.metrics_bind_address;
        tokio::spawn(observe.serve_metrics(metrics, config.clone(), debug, hard_fail));
        tokio::select! {
            Some(failure) = failed.recv() => fail(format!("{failure} (--bind-address-hard-fail)")),
            () = cli::shutdown::run_until_stopped(proxy.run(), &health, relay.as_ref()) => {
                ExitCode::SUCCESS
            }
        }
    })
}

/// `--cleanup`: removes our nftables tables and upstream kube-proxy's leftovers, whatever the
/// mode, and exits; 1 when a tool refused.
fn cleanup(bpf_pin_root: &std::path::Path) -> ExitCode {
    let mut report = dataplane::cleanup::cleanup(&dataplane::tool::Launcher::here());
    dataplane::cleanup::cleanup_ebpf(bpf_pin_root, &mut report);
    for table in &report.tables {
        tracing::info!(table = %table, "--cleanup: removed nftables table");
    }
    for (tool, chains) in &report.iptables {
        tracing::info!(tool = %tool, chains, "--cleanup: removed KUBE-* chains");
    }
    if report.ipvs_services > 0 || report.ipvs_link {
        tracing::info!(
            services = report.ipvs_services,
            link = report.ipvs_link,
            "--cleanup: removed IPVS virtual services and kube-ipvs0"
        );
    }
    if report.ebpf_pins > 0 {
        tracing::info!(
            pins = report.ebpf_pins,
            "--cleanup: removed eBPF pins (programs detached)"
        );
    }
    if report.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        fail(format!("--cleanup: {}", report.errors.join("; ")))
    }
}

/// The blocking threads (each sync runs on one) are kept for an hour rather than tokio's 10 s:
/// with the default, every periodic sync after a quiet `syncPeriod` (30 s) would start a new
/// thread first, a hand-off many times slower than waking a kept thread (`handoff` in the
/// sync's debug line; docs/benchmarks.md, "Blocking threads kept").
const SYNC_THREAD_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(3600);

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_keep_alive(SYNC_THREAD_KEEP_ALIVE)
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

#[allow(clippy::disallowed_methods)] // the one place that writes the requested config file
fn write_config(path: &Path, config: &Config) -> ExitCode {
    match std::fs::write(path, config::render(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(format!("--write-config-to {}: {e}", path.display())),
    }
}

/// `--hostname-override`, else the kernel's host name, lower-cased as upstream does.
fn node_name(config: &Config) -> Result<String, String> {
    if let Some(name) = &config.hostname_override {
        return Ok(name.clone());
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_lowercase())
        .map_err(|e| format!("cannot read the host name ({e}); give --hostname-override"))
}

/// How the API watches read their lists: client-go's environment switch
/// `KUBE_FEATURE_WatchListClient`, which upstream's kube-proxy honours too.
#[allow(clippy::disallowed_methods)] // the one environment read: client-go's switch
fn watch_list_client() -> Result<api::Lists, api::NotABoolean> {
    let value = std::env::var("KUBE_FEATURE_WatchListClient").ok();
    api::Lists::from_env_value(value.as_deref())
}

#[cfg(test)]
mod tests {
    /// The option index is mimalloc's purge delay: its default, 1,000 ms, unless the
    /// environment sets it.
    #[test]
    #[allow(
        unsafe_code,
        clippy::disallowed_methods,
        reason = "mimalloc's option getter; its environment"
    )]
    fn the_purge_delay_option_is_mimallocs() {
        if super::PURGE_DELAY_VARIABLES
            .iter()
            .any(|v| std::env::var_os(v).is_some())
        {
            return;
        }
        // SAFETY: reads an integer option.
        let delay = unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        assert_eq!(delay, 1000);
    }
}
