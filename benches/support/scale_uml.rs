//! `--uml`: the whole scale harness inside a User-mode Linux guest, so ipvs mode can be measured
//! (this host's kernel has no IPVS) with ours and upstream side by side on one kernel.
//!
//! The bench boots the UML kernel of `tests/support/uml.rs` (6.1, IPVS and nf_tables built in)
//! and re-runs this very binary in it with the same arguments minus `--uml`, `--uml-limit` and
//! `--out`: the testenv control plane, the objects, the namespaces and both proxies all run in the
//! guest's kernel, on its one CPU. The guest sees the host's `/` over hostfs, so the binaries are
//! the host's; its control plane state and logs are on its own tmpfs (`KPRS_SCRATCH_DIR`, as
//! `tests/lab_uml.rs` does), because etcd on hostfs would measure hostfs.
//!
//! What lands on the host: the guest writes the report into a staging directory under
//! `target/tmp` (hostfs; the guest's `/tmp` and `/run` are its own tmpfs, so an `--out` there
//! would vanish with it), with every `*.log` of its scratch directory under `logs/`; the host
//! copies that into `--out` and removes it. The guest's console (the harness's progress on
//! stderr, the tables) is copied to this process's stderr as it arrives.
//!
//! Cleanup: everything the harness creates lives in the guest and dies with it. The guest is
//! killed when its time limit passes, when this process gets SIGINT, SIGTERM or SIGHUP (handled
//! here for that), or when the bench panics; only a SIGKILL of the bench leaves it running to
//! its own end.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::uml::Uml;

/// The guest's memory in MiB unless `--uml` names it (as clap takes it): etcd, kube-apiserver,
/// upstream kube-proxy and ours at 10,000 × 10, with the control plane's state on the guest's
/// tmpfs.
pub const DEFAULT_MEMORY_MIB: &str = "8192";
/// The guest's scratch directory (its tmpfs): the control plane's state and every log.
const GUEST_SCRATCH: &str = "/run/scratch";
/// What the guest's harness puts in the report's command line (the host's command, with
/// `--uml`) and its "Run in" line.
pub const COMMAND_VAR: &str = "KPRS_SCALE_COMMAND";
pub const GUEST_VAR: &str = "KPRS_SCALE_GUEST";
/// The kernel features the harness uses; each is built in, the init script checks that.
const MODULES: &[&str] = &["ip_vs", "ip_vs_rr", "dummy", "veth"];

/// One run in a guest.
pub struct GuestRun<'a> {
    pub memory_mib: u64,
    /// Killed after this.
    pub limit: Duration,
    /// This binary's arguments for the guest: the host's minus `--uml`, `--uml-limit`, `--out`.
    pub args: Vec<String>,
    /// Where the report goes on the host.
    pub out: &'a Path,
    /// The host's command line, for the report.
    pub command: &'a str,
    /// The host's description, for the report.
    pub host: String,
}

/// The arguments (without the program) for the guest: `--uml [MIB]`, `--uml-limit S` and
/// `--out DIR` (in any of clap's spellings) taken out, everything else kept in order.
pub fn guest_args(host: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = host.iter().peekable();
    while let Some(a) = it.next() {
        let name = a.split_once('=').map_or(a.as_str(), |(n, _)| n);
        let inline = a.contains('=');
        match name {
            // `--uml` takes an optional value: the next word when it is not a flag.
            "--uml" => {
                if !inline && it.peek().is_some_and(|n| !n.starts_with('-')) {
                    it.next();
                }
            }
            "--uml-limit" | "--out" => {
                if !inline {
                    it.next();
                }
            }
            _ => out.push(a.clone()),
        }
    }
    out
}

/// Boots the guest, runs the harness in it and copies its report to `run.out`. Returns the
/// report's text and where it was written.
pub fn run(run: &GuestRun<'_>) -> Result<String, String> {
    crate::testenv::require_root();
    let uml = Uml::find().ok_or("no User-mode Linux kernel (see the SKIPPED line above)")?;
    let stage = Stage::new()?;
    let stop = stop_on_signals()?;
    let exe = std::env::current_exe().map_err(|e| format!("this binary's path: {e}"))?;
    let guest = format!(
        "a User-mode Linux guest (one CPU, {} MiB) on the host: {}",
        run.memory_mib, run.host
    );
    let logs = stage.dir.join("logs");
    let logs_q = quote(&logs.display().to_string());
    let copy_logs = format!(
        "(cd {GUEST_SCRATCH} && find . -name '*.log' -exec cp --parents {{}} {logs_q}/ \\;) \
         2>/dev/null"
    );
    // The logs are copied every 30 s as well as at the end, so a guest killed at its limit
    // (or by a signal) still leaves what the control plane and the proxies said.
    let mut line = format!(
        "mkdir -p {logs_q}; (while sleep 30; do {copy_logs}; done) & copier=$!; \
         {}={GUEST_SCRATCH} {COMMAND_VAR}={} {GUEST_VAR}={} {}",
        crate::testenv::SCRATCH_VAR,
        quote(run.command),
        quote(&guest),
        quote(&exe.display().to_string()),
    );
    for a in &run.args {
        line.push(' ');
        line.push_str(&quote(a));
    }
    line.push_str(&format!(
        " --out {stage}; rc=$?; kill $copier; {copy_logs}; (exit $rc)",
        stage = quote(&stage.dir.display().to_string()),
    ));
    ensure_map_count(run.memory_mib)?;
    eprintln!(
        "scale: booting a User-mode Linux guest ({} MiB, killed after {} s); its console follows",
        run.memory_mib,
        run.limit.as_secs()
    );
    let done = uml
        .with_memory(run.memory_mib)
        .with_live_output()
        .with_stop(stop.clone())
        .run(
            MODULES,
            Path::new(env!("CARGO_MANIFEST_DIR")),
            &line,
            run.limit,
        );
    copy_tree(&stage.dir, run.out)?;
    point_logs_at_the_host(run.out)?;
    if stop.load(Ordering::SeqCst) {
        return Err("interrupted: the guest was killed".into());
    }
    if done.exit_code != Some(0) {
        return Err(format!(
            "the harness in the guest failed (exit {:?} after {:.0} s; its console is above{})",
            done.exit_code,
            done.took.as_secs_f64(),
            if done.exit_code.is_none() {
                "; killed at the time limit (--uml-limit) or it never got to run"
            } else {
                ""
            }
        ));
    }
    let md = run.out.join("scale-report.md");
    let text = std::fs::read_to_string(&md).map_err(|e| format!("read {}: {e}", md.display()))?;
    Ok(format!(
        "{text}\n(written to {}; the guest's logs in {})",
        run.out.display(),
        run.out.join("logs").display()
    ))
}

/// The report's notes name each proxy's log where the guest had it; point them at the copy.
fn point_logs_at_the_host(out: &Path) -> Result<(), String> {
    let guest = format!("{GUEST_SCRATCH}/");
    let host = format!("{}/", out.join("logs").display());
    for name in ["scale-report.md", "scale-results.json"] {
        let path = out.join(name);
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        std::fs::write(&path, text.replace(&guest, &host))
            .map_err(|e| format!("write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// `text` as one shell word.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Copies every file under `from` into `to`, keeping sub-directories.
fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("create {}: {e}", to.display()))?;
    let entries = std::fs::read_dir(from).map_err(|e| format!("read {}: {e}", from.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_tree(&path, &target)?;
        } else {
            std::fs::copy(&path, &target)
                .map_err(|e| format!("copy {} to {}: {e}", path.display(), target.display()))?;
        }
    }
    Ok(())
}

/// The guest's output directory on the host (under `target/tmp`, on hostfs for the guest),
/// removed on drop.
struct Stage {
    dir: PathBuf,
}

impl Stage {
    fn new() -> Result<Stage, String> {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("scale-uml-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        Ok(Stage { dir })
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("scale: cleanup: remove {}: {e}", self.dir.display());
        }
    }
}

/// A flag set when this process gets SIGINT, SIGTERM or SIGHUP, which then no longer end it:
/// the guest's run loop sees the flag, kills the guest, and the bench exits with an error.
fn stop_on_signals() -> Result<Arc<AtomicBool>, String> {
    use tokio::signal::unix::{SignalKind, signal};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("a runtime for signals: {e}"))?;
    let listen = |kind| {
        let _entered = runtime.enter();
        signal(kind).map_err(|e| format!("handle a signal: {e}"))
    };
    let mut int = listen(SignalKind::interrupt())?;
    let mut term = listen(SignalKind::terminate())?;
    let mut hup = listen(SignalKind::hangup())?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::spawn(move || {
        runtime.block_on(async {
            let which = tokio::select! {
                _ = int.recv() => "SIGINT",
                _ = term.recv() => "SIGTERM",
                _ = hup.recv() => "SIGHUP",
            };
            eprintln!("scale: {which}: killing the User-mode Linux guest");
            flag.store(true, Ordering::SeqCst);
        });
    });
    Ok(stop)
}

/// UML maps the guest's memory into its host process piece by piece, at most one map per guest
/// page, and a large guest under load passes the host's `vm.max_map_count` (65,530 by
/// default): the guest then dies mid-run ("UML ran out of memory on the host side", seen at
/// 10,000 × 10 in 8 GiB). Raises the limit to what the guest could need, and says so: the one
/// host setting the bench changes (it runs as root), and it stays raised.
fn ensure_map_count(memory_mib: u64) -> Result<(), String> {
    let path = "/proc/sys/vm/max_map_count";
    let want = memory_mib * 256 + 65_536;
    let now: u64 = std::fs::read_to_string(path)
        .map_err(|e| format!("read {path}: {e}"))?
        .trim()
        .parse()
        .map_err(|e| format!("{path}: {e}"))?;
    if now >= want {
        return Ok(());
    }
    std::fs::write(path, want.to_string()).map_err(|e| format!("raise {path} to {want}: {e}"))?;
    eprintln!(
        "scale: raised vm.max_map_count from {now} to {want} for the guest's {memory_mib} MiB"
    );
    Ok(())
}
