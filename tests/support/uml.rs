//! A User-mode Linux kernel for tests of what this host's kernel lacks (IPVS first): Debian's
//! `linux.uml` (6.1) runs as an ordinary process, no emulation and no KVM, with the host's `/`
//! as its root over hostfs, so the test binary and the host's tools run in it unchanged
//! (`notes/uml.md`). One boot takes about five seconds.
//!
//! [`Uml::run`] writes an init script to a scratch directory, boots the kernel on it and
//! returns what the guest printed and the command's exit status. The init script mounts
//! `/proc`, `/sys` and a tmpfs on `/run` (and on `/tmp` when the checkout is not under it),
//! links the package's modules into a tree on that tmpfs and points the kernel's module loader
//! at it (so the kernel's own `request_module`, e.g. for an IPVS scheduler, finds them too),
//! loads the modules asked for, runs the command, prints `UML-EXIT=<status>` and powers off.
//!
//! What it guarantees: the kernel runs in a process group of its own, killed (by its id) when
//! the run ends, times out or the test panics; the scratch directory (script, the kernel's
//! `uml_dir`) is removed in every case. Nothing is written on the host: the guest writes only
//! to its own tmpfs mounts, and a failed mount powers the guest off before anything else runs
//! (under hostfs every other path is the host's own file).
//!
//! On a host whose XSAVE area is larger than UML 6.1 knows (AVX-512, AMX) the kernel refuses
//! UML's register writes and the guest's init dies at once ("ptrace set fp regs failed,
//! errno = 14"); the kernel then runs with `uml_xstate_shim.c` preloaded, built here with the
//! host's C compiler, which pads those writes to the host's size. The guest's glibc is told
//! not to use AVX-512 (`GLIBC_TUNABLES`), whose registers UML does not switch between threads.
//!
//! Needs `linux.uml` (Debian's `user-mode-linux` package; `.ci/run` installs it), `cc`, and room in
//! `/dev/shm`, which backs the guest's memory. Without `linux.uml` [`Uml::find`] says so and
//! the caller skips, unless [`REQUIRE_VAR`] is set (as `.ci/run` does): then it fails.
//! Includes `host.rs` (as `uml::host`) for the helper process a test starts in the guest.

#[path = "host.rs"]
pub mod host;

use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Debian's UML kernel.
const KERNEL: &str = "/usr/bin/linux.uml";
/// Its modules, one folder per kernel version.
const MODULES: &str = "/usr/lib/uml/modules";
/// The guest's memory, in MiB.
const MEMORY_MIB: u64 = 512;
/// What the init script prints after the command, with its exit status.
const EXIT_MARKER: &str = "UML-EXIT=";
/// Set (to anything) where the tests must run, not skip, without `linux.uml`: `.ci/run`.
pub const REQUIRE_VAR: &str = "KPRS_REQUIRE_UML";

/// Boots the guest once and re-runs the test binary in it as `helper` in `role`, which runs
/// `cases` in order and prints `<case> ok` after each; fails unless the guest exited 0 and every
/// case reported so, in order. Returns the guest's other result lines (timings, captures), or
/// `None` when the test is skipped (no `linux.uml`, see [`Uml::find`]).
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
        Path::new(env!("CARGO_MANIFEST_DIR")),
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
    /// The module folder's version (`6.1.176`).
    version: String,
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
    /// [`REQUIRE_VAR`] is set, or when the package is there but broken.
    pub fn find() -> Option<Uml> {
        let kernel = PathBuf::from(KERNEL);
        if !kernel.is_file() {
            let why = format!(
                "{KERNEL} is missing: `apt-get install --no-install-recommends user-mode-linux` \
                 (as .ci/run does) to run this test"
            );
            assert!(
                std::env::var_os(REQUIRE_VAR).is_none(),
                "{why} ({REQUIRE_VAR} is set)"
            );
            eprintln!("SKIPPED: {why}");
            return None;
        }
        let version = std::fs::read_dir(MODULES)
            .unwrap_or_else(|e| panic!("{KERNEL} is installed but {MODULES} is not: {e}"))
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .max()
            .unwrap_or_else(|| panic!("no module folder in {MODULES}"));
        Some(Uml { kernel, version })
    }

    /// Boots the kernel, loads `modules`, runs `command` (a shell line) as the guest's root
    /// in `cwd`, and returns what the guest printed. The guest is killed after `limit`.
    pub fn run(&self, modules: &[&str], cwd: &Path, command: &str, limit: Duration) -> UmlRun {
        require_shm_room();
        let scratch = Scratch::new();
        let init = scratch.dir.join("init.sh");
        std::fs::write(&init, self.init_script(modules, cwd, command)).expect("write init script");
        std::fs::set_permissions(&init, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("make init script executable");
        let started = Instant::now();
        let mut child = Command::new(&self.kernel);
        child
            .env("LD_PRELOAD", xstate_shim(&scratch.dir))
            .arg(format!("mem={MEMORY_MIB}M"))
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
                .unwrap_or_else(|e| panic!("start {KERNEL}: {e}")),
        );
        let mut stdout = guest.0.stdout.take().expect("piped stdout");
        let mut stderr = guest.0.stderr.take().expect("piped stderr");
        let out = std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = stdout.read_to_end(&mut s);
            s
        });
        let err = std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = stderr.read_to_end(&mut s);
            s
        });
        let mut timed_out = false;
        while guest.0.try_wait().ok().flatten().is_none() {
            if started.elapsed() > limit {
                timed_out = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Also ends what the kernel started beside it (its helper threads and processes),
        // which keep the pipes open.
        drop(guest);
        let mut output = String::from_utf8_lossy(&out.join().unwrap_or_default()).into_owned();
        output.push_str(&String::from_utf8_lossy(&err.join().unwrap_or_default()));
        if timed_out {
            output.push_str(&format!("\n(UML killed after {limit:?})"));
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
        let v = &self.version;
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
fail() {{ echo "UML-SETUP-FAILED: $1"; poweroff -f; exit 1; }}
mount -t proc proc /proc || fail proc
mount -t sysfs sys /sys || fail sysfs
mount -t tmpfs run /run || fail 'tmpfs on /run'
{tmp}export HOME=/run TMPDIR=/run
mkdir -p /run/netns /run/modroot/lib/modules
cp -as {MODULES}/{v} /run/modroot/lib/modules/ || fail 'module tree'
depmod -b /run/modroot {v} || fail depmod
printf '#!/bin/sh\nexec /sbin/modprobe -d /run/modroot "$@"\n' > /run/modprobe
chmod +x /run/modprobe
echo /run/modprobe > /proc/sys/kernel/modprobe
for m in {modules}; do /run/modprobe "$m" || fail "modprobe $m"; done
ip link set lo up
cd {cwd} || fail 'cd {cwd}'
{command}
echo "{EXIT_MARKER}$?"
poweroff -f
"#,
            modules = modules.join(" "),
            cwd = cwd.display(),
        )
    }
}

/// Fails the test when `/dev/shm`, where the guest's memory lives, has too little room.
fn require_shm_room() {
    let out = host::stdout_of(Command::new("df").args(["-Pk", "/dev/shm"]));
    let free_kib: u64 = out
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let need_kib = (MEMORY_MIB + 64) * 1024;
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
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/uml_xstate_shim.c");
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
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("uml")
            .join(&name);
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
