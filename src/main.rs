//! The kube-proxy-rs binary: parses the command line, resolves the configuration and hands
//! both to the chosen command in `cli`. It decides nothing about a mode (each mode's parts are
//! reached through `dataplane::modes`); besides the wiring it only tunes the process's
//! allocator.

use std::process::ExitCode;

use kube_proxy_rs::causes;
use kube_proxy_rs::cli::{self, Cli, Command, configure};

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
        Err(cli::parse::Stop::Invalid(invalid)) => return fail(causes::one_line(&invalid)),
    };
    match command(cli) {
        Ok(Some(output)) => emit(&output),
        Ok(None) => ExitCode::SUCCESS,
        Err(error) => fail(causes::one_line(&error)),
    }
}

/// A command whose own arguments were checked, before the configuration is read.
enum Todo {
    Run,
    Plan(cli::OutputFormat),
    Status(Option<String>, cli::OutputFormat),
    Explain(cli::explain::command::Asked),
}

/// The command's steps, in the order their errors win: its own arguments, `--version`, the
/// configuration (logging starts with it), `--write-config-to`, then the command itself. What
/// it prints, if anything.
fn command(cli: Cli) -> Result<Option<String>, cli::Error> {
    let (flags, todo) = match cli.command {
        None => (cli.flags, Todo::Run),
        Some(Command::Plan(args)) => (args.flags, Todo::Plan(args.output)),
        Some(Command::Status(args)) => {
            if let Some(bad) = args.service.as_deref().and_then(cli::status::bad_service) {
                return Err(cli::Error::Service(bad));
            }
            (args.flags, Todo::Status(args.service, args.output))
        }
        Some(Command::Explain(args)) => {
            let asked = cli::explain::command::Asked::of(&args)?;
            (args.flags, Todo::Explain(asked))
        }
    };
    if let Some(style) = flags.version_requested() {
        return Ok(Some(cli::version::text(style, &cli::version::info())));
    }
    let config = configure::configure(&flags)?;
    if let Some(path) = &config.write_config_to {
        configure::write_config(path, &config)?;
        return Ok(None);
    }
    let node = || configure::node_name(&config);
    let features = configure::features(&config);
    match todo {
        Todo::Status(service, format) => Ok(Some(cli::status::ask::answer(
            &config,
            service.as_deref(),
            format,
        )?)),
        Todo::Explain(asked) => Ok(Some(cli::explain::command::answer(
            &config,
            &node()?,
            features,
            &asked,
        )?)),
        Todo::Plan(format) => Ok(Some(cli::plan(&config, &node()?, features, format)?)),
        Todo::Run => {
            cli::run::run(&config, &node()?, features)?;
            Ok(None)
        }
    }
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
