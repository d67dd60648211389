//! The kube-proxy-rs binary: flags → Config → values, then the chosen command. No decisions
//! here beyond dispatch; everything it calls is tested on its own.

use std::path::Path;
use std::process::ExitCode;

use clap::Parser;
use kube_proxy_rs::cli::{self, Cli, Command};
use kube_proxy_rs::cluster::Features;
use kube_proxy_rs::config::{self, Config, Flags, LogFormat};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// One error line and exit code 1, as upstream does for any bad flag or config.
fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(1)
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help: print it and succeed.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            return fail(format!(
                "{} (see --help)",
                first.trim_start_matches("error: ")
            ));
        }
    };
    let (flags, plan) = match cli.command {
        None => (cli.flags, None),
        Some(Command::Plan(args)) => {
            if cli.flags != Flags::default() {
                return fail("give flags after `plan`, not before it");
            }
            (args.flags, Some(args.output))
        }
    };
    if let Some(style) = flags.version_requested() {
        println!("kube-proxy-rs v{}", env!("CARGO_PKG_VERSION"));
        if style == config::VersionStyle::Raw {
            println!("rust-version: {}", env!("CARGO_PKG_RUST_VERSION"));
        }
        return ExitCode::SUCCESS;
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
    init_logging(&config);
    for w in &resolved.warnings {
        tracing::warn!("{w}");
    }
    if let Some(path) = &config.write_config_to {
        return write_config(path, &config);
    }
    let node_name = match node_name(&config) {
        Ok(n) => n,
        Err(e) => return fail(e),
    };
    let features = Features {
        prefer_same_node: config.gate("PreferSameTrafficDistribution"),
    };
    if let Some(format) = plan {
        let Some(dir) = &config.manifests else {
            return fail("plan needs --manifests DIR (reading from the API server comes later)");
        };
        return match cli::plan_manifests(dir, &node_name, features) {
            Ok(report) => {
                print!("{}", cli::render(&report, format));
                ExitCode::SUCCESS
            }
            Err(e) => fail(e),
        };
    }
    run(&config, &node_name, features)
}

fn run(config: &Config, node_name: &str, features: Features) -> ExitCode {
    if !config.mode_explicit {
        tracing::warn!(
            mode = config.mode.as_str(),
            "no proxy mode given; defaulting as upstream does"
        );
    }
    if config.cleanup {
        tracing::info!(
            "--cleanup: no dataplane mode is implemented yet, so there is nothing of ours to remove"
        );
        return ExitCode::SUCCESS;
    }
    let Some(dir) = config.manifests.clone() else {
        return fail("watching the API server is not implemented yet; use --manifests DIR");
    };
    tracing::info!(node = node_name, mode = config.mode.as_str(), manifests = %dir.display(), "starting");
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(format!("cannot start the runtime: {e}")),
    };
    let node = node_name.to_string();
    runtime.block_on(async move {
        tokio::select! {
            result = cli::run::follow_manifests(&dir, &node, features) => match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(e),
            },
            _ = tokio::signal::ctrl_c() => {
                tracing::info!("stopping");
                ExitCode::SUCCESS
            }
        }
    })
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

/// Maps klog verbosity to levels: 0–3 info, 4–5 debug, 6 and up trace.
fn init_logging(config: &Config) {
    let level = match config.verbosity() {
        0..=3 => tracing::Level::INFO,
        4..=5 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    };
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr);
    match config.logging.format {
        LogFormat::Json => builder.json().init(),
        _ => builder.init(),
    }
}
