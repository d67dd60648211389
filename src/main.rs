//! The kube-proxy-rs binary: flags → Config → values, then the chosen command. Besides
//! dispatch it renders each mode's plan and makes per-mode start-up choices
//! (docs/architecture.md, "Where mode knowledge lives outside each mode's folder"); everything
//! it calls is tested on its own.

use std::path::Path;
use std::process::ExitCode;

use kube_proxy_rs::causes;
use kube_proxy_rs::cli::{self, Command};
use kube_proxy_rs::cluster::Features;
use kube_proxy_rs::config::{self, Config};
use kube_proxy_rs::dataplane;

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
        if format == cli::OutputFormat::Table {
            match dataplane::modes::of(config.mode).render_plan(&config, &loaded.snapshot) {
                Ok(mode) => text.push_str(&mode),
                Err(e) => return fail(e),
            }
        }
        return emit(&text);
    }
    match cli::run::run(&config, &node_name, features) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
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
    let answer = cli::run::runtime().and_then(|rt| {
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
        None => cli::run::runtime().and_then(|rt| {
            rt.block_on(cli::load_cluster(&config.client, node_name, features))
                .map_err(|e| causes::one_line(&e))
        }),
    }
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
