//! A User-mode Linux kernel for tests of what this host's kernel lacks (IPVS first): a 6.1
//! kernel built as a UML binary runs as an ordinary process, no emulation and no KVM, with the
//! host's `/` as its root over hostfs, so the test binary and the host's tools run in it
//! unchanged. One boot takes about a second.
//!
//! The kernel is built from Debian's `linux-source-6.1` by `tests/uml/build-kernel.sh` with
//! `tests/uml/kernel.config`, everything built in: Debian's own `user-mode-linux` package has no
//! nf_tables for ip, ip6 or inet, which our nftables mode and IPVS mode's helper rules need.
//! [`Uml::find`] runs that script (once per test binary; it returns at once when the build for
//! these inputs is cached, and builds it, which takes minutes, when not).
//!
//! [`Uml::run`] writes an init script to a scratch directory, boots the kernel on it and
//! returns what the guest printed and the command's exit status. Its [`Limit`] is a total time
//! for short runs, or for long ones a time without a line of output, so work that reports its
//! progress is never cut short by a slow machine. The init script mounts
//! `/proc`, `/sys` and a tmpfs on `/run` (and on `/tmp` when the checkout is not under it),
//! copies the kernel's `modules.builtin` into a module tree on that tmpfs (the host may have no
//! `/lib/modules`, and nothing is written on the host) and points the kernel's module loader at
//! a `modprobe -d` wrapper, "loads" the modules asked for (each is built in; the call checks
//! that the build has it), runs the command, prints `UML-EXIT=<status>` and powers off.
//!
//! A long run (the scale harness's `--uml`) can have the console copied to stderr as it arrives
//! ([`Uml::with_live_output`]) and be ended early by a flag ([`Uml::with_stop`]).
//!
//! What it guarantees: the kernel runs in a process group of its own, killed (by its id) when
//! the run ends, times out, is stopped or the test panics; the scratch directory (script, the kernel's
//! `uml_dir`) is removed in every case. Nothing is written on the host: the guest writes only
//! to its own tmpfs mounts, and a failed mount powers the guest off before anything else runs
//! (under hostfs every other path is the host's own file).
//!
//! On a host whose XSAVE area is larger than UML 6.1 knows (AVX-512, AMX) the kernel refuses
//! UML's register writes and the guest's init dies at once ("ptrace set fp regs failed,
//! errno = 14"); the kernel then runs with `uml_xstate_shim.c` preloaded, built here with the
//! host's C compiler, which pads those writes to the host's size. The guest's glibc and Go
//! programs are told not to use AVX-512 (`GLIBC_TUNABLES`, `GODEBUG`), whose registers UML does
//! not switch between threads (seen: kube-apiserver dying in its `init` with a corrupted map).
//! The guest is named `uml`: the API server puts the host name in a label, and `(none)` is not
//! a valid one.
//!
//! Needs what the build needs (`.ci/run` installs it and builds the kernel up front), `cc`, and
//! room in `/dev/shm`, which backs the guest's memory. When the kernel cannot be had
//! [`Uml::find`] says why and the caller skips, unless [`REQUIRE_VAR`] is set (as `.ci/run`
//! does): then it fails.
//! Re-exports `host.rs` (as `uml::host`) for the helper process a test starts in the guest.

pub use crate::host;

use std::io::{BufRead as _, Read};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Builds (or finds, cached) the kernel and prints its path.
const BUILD: &str = "tests/uml/build-kernel.sh";
/// The guest's memory, in MiB, unless a caller asks for more ([`Uml::with_memory`]).
const MEMORY_MIB: u64 = 512;
/// What the init script prints after the command, with its exit status.
const EXIT_MARKER: &str = "UML-EXIT=";
/// Set (to anything) where the tests must run, not skip, without a kernel: `.ci/run`.
pub const REQUIRE_VAR: &str = "KPRS_REQUIRE_UML";

/// When [`Uml::run`] kills the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// After this long, whatever the guest is doing: a short, fixed amount of work.
    Total(Duration),
    /// Once the guest has printed no line for this long: long work that reports its progress
    /// (a suite printing a line per scenario), so a busy machine slows it without killing it,
    /// while a guest that hangs is still killed.
    Silent(Duration),
}

impl From<Duration> for Limit {
    fn from(total: Duration) -> Limit {
        Limit::Total(total)
    }
}

/// Boots the guest once and re-runs the test binary in it as `helper` in `role`, which runs
/// `cases` in order and prints `<case> ok` after each; fails unless the guest exited 0 and every
/// case reported so, in order. Returns the guest's other result lines (timings, captures), or
/// `None` when the test is skipped (no kernel, see [`Uml::find`]).
pub fn run_cases(
    modules: &[&str],
    helper: &host::helper_process::HelperProcess,
    role: &str,
    cases: &[&str],
    limit: Duration,
) -> Option<Vec<String>> {
    let uml = Uml::find()?;
    let run = uml.run(
        modules,
        crate::layout::repo_root(),
        &helper.shell_line(role),
        limit,
    );
    Some(host::helper_process::expect_cases(
        "UML",
        &run.output,
        run.exit_code,
        run.took,
        cases,
    ))
}

/// The UML kernel, found.
pub struct Uml {
    kernel: PathBuf,
    /// `lib/modules/<release>` of the build: `modules.builtin` and what depmod made of it.
    modules: PathBuf,
    memory_mib: u64,
    /// Echo the guest's console to stderr line by line as it arrives ([`Uml::with_live_output`]).
    live: bool,
    /// Set by the caller to end the run early ([`Uml::with_stop`]).
    stop: Option<Arc<AtomicBool>>,
}

/// What one boot printed, and the command's exit status when it got that far.
#[derive(Debug)]
pub struct UmlRun {
    pub output: String,
    /// `None`: the guest never finished the command (a setup step failed, the kernel stopped,
    /// or the run timed out).
    pub exit_code: Option<i32>,
    pub took: Duration,
}

impl Uml {
    /// The kernel, or `None` after saying why the caller skips. Fails instead when
    /// [`REQUIRE_VAR`] is set, or when the build is there but broken. Builds it on first use
    /// (see the module doc); one build at a time, however many test binaries ask.
    pub fn find() -> Option<Uml> {
        static FOUND: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
        let found = FOUND.get_or_init(|| {
            let script = crate::layout::repo_root().join(BUILD);
            let out = Command::new(&script)
                .stdin(Stdio::null())
                .stderr(Stdio::inherit())
                .output()
                .map_err(|e| format!("run {}: {e}", script.display()))?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            match stdout.lines().last() {
                Some(path) if out.status.success() => Ok(PathBuf::from(path.trim())),
                _ => Err(format!(
                    "{} failed ({}): the UML kernel could not be built (it needs apt-get, \
                     make, gcc, flex, bison and bc; .ci/run installs them)",
                    script.display(),
                    out.status
                )),
            }
        });
        let kernel = match found {
            Ok(kernel) => kernel.clone(),
            Err(why) => {
                assert!(
                    std::env::var_os(REQUIRE_VAR).is_none(),
                    "{why} ({REQUIRE_VAR} is set)"
                );
                eprintln!("SKIPPED: {why}");
                return None;
            }
        };
        let dir = kernel.parent().expect("the kernel's folder");
        let stamp = std::fs::read_to_string(dir.join("stamp"))
            .unwrap_or_else(|e| panic!("{}: no stamp: {e}", dir.display()));
        let release = stamp
            .lines()
            .find_map(|l| l.strip_prefix("release="))
            .unwrap_or_else(|| panic!("{}/stamp names no release", dir.display()));
        let modules = dir.join("modroot/lib/modules").join(release);
        assert!(
            modules.join("modules.builtin").is_file(),
            "{} has no modules.builtin",
            modules.display()
        );
        Some(Uml {
            kernel,
            modules,
            memory_mib: MEMORY_MIB,
            live: false,
            stop: None,
        })
    }

    /// The same kernel, booted with `mib` MiB of memory (a whole lab needs about 3 GiB).
    pub fn with_memory(mut self, mib: u64) -> Uml {
        self.memory_mib = mib;
        self
    }

    /// The same kernel, whose console is also copied to this process's stderr line by line as
    /// the guest prints it (a long run's progress), besides being returned.
    pub fn with_live_output(mut self) -> Uml {
        self.live = true;
        self
    }

    /// The same kernel, whose run ends (the guest killed, as on a time-out) once `stop` is set:
    /// a caller that handles SIGINT sets it, so an interrupted run leaves no guest behind.
    pub fn with_stop(mut self, stop: Arc<AtomicBool>) -> Uml {
        self.stop = Some(stop);
        self
    }

    /// Boots the kernel, loads `modules`, runs `command` (a shell line) as the guest's root
    /// in `cwd`, and returns what the guest printed. The guest is killed at `limit`: a
    /// [`Duration`] is a [`Limit::Total`].
    pub fn run(
        &self,
        modules: &[&str],
        cwd: &Path,
        command: &str,
        limit: impl Into<Limit>,
    ) -> UmlRun {
        let limit = limit.into();
        require_shm_room(self.memory_mib);
        let scratch = Scratch::new();
        let init = scratch.dir.join("init.sh");
        std::fs::write(&init, self.init_script(modules, cwd, command)).expect("write init script");
        std::fs::set_permissions(&init, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("make init script executable");
        let started = Instant::now();
        let mut child = Command::new(&self.kernel);
        child
            .env("LD_PRELOAD", xstate_shim(&scratch.dir))
            .arg(format!("mem={}M", self.memory_mib))
            .args(["root=/dev/root", "rootfstype=hostfs", "rootflags=/", "rw"])
            .arg(format!("init={}", init.display()))
            .args(["con=null", "con0=null,fd:1", "quiet"])
            // Its mconsole socket and pid file go to the scratch directory, not ~/.uml.
            .arg(format!("umid={}", scratch.name))
            .arg(format!("uml_dir={}", scratch.dir.display()))
            .env("TMPDIR", "/dev/shm")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut guest = Guest(
            child
                .spawn()
                .unwrap_or_else(|e| panic!("start {}: {e}", self.kernel.display())),
        );
        let heard = Heard::new(started);
        let out = collect(
            guest.0.stdout.take().expect("piped stdout"),
            self.live,
            &heard,
        );
        let err = collect(
            guest.0.stderr.take().expect("piped stderr"),
            self.live,
            &heard,
        );
        let mut timed_out = false;
        let mut stopped = false;
        while guest.0.try_wait().ok().flatten().is_none() {
            let over = match limit {
                Limit::Total(total) => started.elapsed() > total,
                Limit::Silent(quiet) => heard.silent_for() > quiet,
            };
            if over {
                timed_out = true;
                break;
            }
            if self.stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst)) {
                stopped = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Also ends what the kernel started beside it (its helper threads and processes),
        // which keep the pipes open.
        drop(guest);
        let mut output = String::from_utf8_lossy(&out.join().unwrap_or_default()).into_owned();
        output.push_str(&String::from_utf8_lossy(&err.join().unwrap_or_default()));
        match limit {
            _ if !timed_out => {}
            Limit::Total(total) => output.push_str(&format!("\n(UML killed after {total:?})")),
            Limit::Silent(quiet) => output.push_str(&format!(
                "\n(UML killed after {:?}: it printed no line for {quiet:?})",
                started.elapsed()
            )),
        }
        if stopped {
            output.push_str("\n(UML killed: the run was interrupted)");
        }
        let exit_code = output
            .lines()
            .filter_map(|l| l.trim().strip_prefix(EXIT_MARKER))
            .next_back()
            .and_then(|c| c.trim().parse().ok());
        UmlRun {
            output,
            exit_code,
            took: started.elapsed(),
        }
    }

    fn init_script(&self, modules: &[&str], cwd: &Path, command: &str) -> String {
        let release = self
            .modules
            .file_name()
            .expect("a release")
            .to_string_lossy();
        // A tmpfs over /tmp would hide a checkout (or a test binary) that lives there.
        let under_tmp =
            cwd.starts_with("/tmp") || std::env::current_exe().is_ok_and(|e| e.starts_with("/tmp"));
        let tmp = if under_tmp {
            ""
        } else {
            "mount -t tmpfs tmp /tmp || fail 'tmpfs on /tmp'\n"
        };
        format!(
            r#"#!/bin/sh
# PID 1 of a test's UML guest, written by tests/support/uml.rs.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD
export GODEBUG=cpu.avx512f=off,cpu.avx512bw=off,cpu.avx512vl=off
fail() {{ echo "UML-SETUP-FAILED: $1"; poweroff -f; exit 1; }}
mount -t proc proc /proc || fail proc
mount -t sysfs sys /sys || fail sysfs
mount -t tmpfs run /run || fail 'tmpfs on /run'
{tmp}export HOME=/run TMPDIR=/run
mkdir -p /run/netns /run/modroot/lib/modules
cp -r {modules_dir} /run/modroot/lib/modules/{release} || fail 'module tree'
printf '#!/bin/sh\nexec /sbin/modprobe -d /run/modroot "$@"\n' > /run/modprobe
chmod +x /run/modprobe
echo /run/modprobe > /proc/sys/kernel/modprobe
for m in {modules}; do /run/modprobe "$m" || fail "modprobe $m"; done
ip link set lo up
hostname uml
cd {cwd} || fail 'cd {cwd}'
{command}
echo "{EXIT_MARKER}$?"
poweroff -f
"#,
            modules = modules.join(" "),
            modules_dir = self.modules.display(),
            cwd = cwd.display(),
        )
    }
}

/// When the guest last printed anything, on either pipe.
#[derive(Clone)]
struct Heard {
    started: Instant,
    /// Milliseconds after `started`.
    last_ms: Arc<AtomicU64>,
}

impl Heard {
    fn new(started: Instant) -> Heard {
        Heard {
            started,
            last_ms: Arc::new(AtomicU64::new(0)),
        }
    }

    fn now(&self) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    fn silent_for(&self) -> Duration {
        self.started
            .elapsed()
            .saturating_sub(Duration::from_millis(self.last_ms.load(Ordering::Relaxed)))
    }
}

/// Reads `from` to its end on a thread of its own, noting in `heard` when it last read
/// something; with `live`, also copies each line to stderr as it arrives.
fn collect(
    from: impl Read + Send + 'static,
    live: bool,
    heard: &Heard,
) -> std::thread::JoinHandle<Vec<u8>> {
    let heard = heard.clone();
    std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut reader = std::io::BufReader::new(from);
        let mut line = Vec::new();
        while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            heard.now();
            if live {
                let text = String::from_utf8_lossy(&line);
                eprintln!("{}", text.trim_end_matches(['\r', '\n']));
            }
            all.extend_from_slice(&line);
            line.clear();
        }
        all
    })
}

/// Fails the test when `/dev/shm`, where the guest's memory lives, has too little room.
fn require_shm_room(memory_mib: u64) {
    let out = host::stdout_of(Command::new("df").args(["-Pk", "/dev/shm"]));
    let free_kib: u64 = out
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let need_kib = (memory_mib + 64) * 1024;
    assert!(
        free_kib >= need_kib,
        "/dev/shm has {free_kib} KiB free; a UML guest needs {need_kib} KiB"
    );
}

/// The running kernel: its whole process group is killed (SIGKILL, by the group's id) and
/// the kernel reaped on drop.
struct Guest(Child);

impl Drop for Guest {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A run's scratch directory, removed on drop.
/// Builds the XSAVE shim (see the module doc) into `dir` and returns its path.
fn xstate_shim(dir: &Path) -> PathBuf {
    let source = crate::layout::repo_root().join("tests/support/uml_xstate_shim.c");
    let out = dir.join("uml_xstate_shim.so");
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-o"])
        .arg(&out)
        .arg(&source)
        .arg("-ldl")
        .output()
        .unwrap_or_else(|e| panic!("run cc to build {}: {e}", source.display()));
    assert!(
        built.status.success(),
        "cc {}: {}",
        source.display(),
        String::from_utf8_lossy(&built.stderr)
    );
    out
}

struct Scratch {
    dir: PathBuf,
    /// The kernel's `umid`, unique per run.
    name: String,
}

impl Scratch {
    fn new() -> Scratch {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "kprs-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let dir = crate::layout::target_tmp().join("uml").join(&name);
        std::fs::create_dir_all(&dir).expect("create UML scratch dir");
        Scratch { dir, name }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("uml: cleanup: remove {}: {e}", self.dir.display());
        }
    }
}
