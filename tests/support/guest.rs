//! A qemu guest running Debian's kernel, for tests of what this host's kernel lacks (SCTP,
//! IPVS, the dummy device): the host kernel is monolithic and built without them.
//!
//! The recipe ("run host
//! binaries in the guest over virtio-9p"): software emulation (KVM here only runs PVM guests),
//! the host's root mounted read-only in the guest with a tmpfs overlay, so test binaries built on
//! the host run there unchanged, and the guest kernel's modules from a second share. The guest
//! has no network card: its traffic stays inside it.
//!
//! Needs root, `qemu-system-x86_64`, busybox-static, kmod and `apt-get download` (`.ci/run`
//! installs them). Re-exports `host.rs` (as `guest::host`) for the root check, the commands it
//! runs and the helper process a test starts in the guest. The kernel package is resolved through the `linux-image-amd64` metapackage,
//! because its ABI name changes with every Debian update, then unpacked once per target dir.

pub use crate::host;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;

use host::stdout_of;

/// The nf_tables modules our rules use (Debian builds them as modules). Tests load them up
/// front: in this guest, a first transaction that makes the kernel autoload many nf_tables
/// expression modules at once never completes (each rule alone autoloads fine; seen with
/// Debian's 6.1 kernel and nft 1.0.6, the modprobe forwarded into the chroot).
pub const NFT_MODULES: &[&str] = &[
    "nf_tables",
    "nft_chain_nat",
    "nft_nat",
    "nft_masq",
    "nft_ct",
    "nft_numgen",
    "nft_fib_ipv4",
    "nft_fib_ipv6",
    "nft_reject_ipv4",
    "nft_reject_ipv6",
    "nft_reject_inet",
];

/// A prepared guest: an unpacked kernel and the initramfs that boots it.
pub struct Guest {
    kroot: PathBuf,
    kver: String,
    initrd: PathBuf,
}

/// What one boot printed, and the command's exit code when it got that far.
pub struct GuestRun {
    pub output: String,
    pub exit_code: Option<i32>,
    pub took: Duration,
}

impl Guest {
    /// Downloads and unpacks the kernel and builds the initramfs, unless a previous run did.
    pub fn prepare() -> Guest {
        host::require_root();
        let cache = crate::layout::target_tmp().join("guest");
        std::fs::create_dir_all(&cache).expect("guest cache dir");
        let debs = cache.join("debs");
        std::fs::create_dir_all(&debs).expect("deb dir");
        // Stale package lists name a kernel the mirror no longer has: refresh them once.
        let kver = newest_kernel()
            .filter(|kver| unpacked(&cache, kver) || download(&debs, kver))
            .or_else(|| {
                stdout_of(Command::new("apt-get").args(["update", "-qq"]));
                newest_kernel().filter(|kver| download(&debs, kver))
            })
            .expect("apt-get download of linux-image-amd64's kernel package");
        let package = format!("linux-image-{kver}");
        let kroot = cache.join(&package);
        if !unpacked(&cache, &kver) {
            let deb = std::fs::read_dir(&debs)
                .expect("read deb dir")
                .filter_map(|e| e.ok().map(|e| e.path()))
                .find(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(&format!("{package}_")))
                })
                .expect("the downloaded kernel package");
            let _ = std::fs::remove_dir_all(&kroot);
            stdout_of(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&kroot));
            std::fs::write(kroot.join(".unpacked"), "").expect("stamp");
        }
        let initrd = cache.join(format!("initrd-{kver}.cpio.gz"));
        let script = crate::layout::repo_root().join("tests/guest/build-initramfs.sh");
        stdout_of(Command::new(script).arg(&kroot).arg(&kver).arg(&initrd));
        Guest {
            kroot,
            kver,
            initrd,
        }
    }

    /// Boots the guest, runs `command` as root in it (with the host's files visible at the same
    /// paths) and returns what it printed. The guest is killed after `limit`.
    pub fn run(&self, command: &str, limit: Duration) -> GuestRun {
        // The kernel command line must not carry spaces or quotes.
        let encoded = base64::engine::general_purpose::STANDARD.encode(command);
        let share = |id: &str, path: &Path, tag: &str, extra: &str| {
            [
                "-fsdev".to_owned(),
                format!(
                    "local,id={id},path={},security_model=none,readonly=on{extra}",
                    path.display()
                ),
                "-device".to_owned(),
                format!("virtio-9p-pci,fsdev={id},mount_tag={tag}"),
            ]
        };
        let started = Instant::now();
        let mut child = Command::new("qemu-system-x86_64")
            .args(["-accel", "tcg,thread=multi", "-cpu", "max", "-smp", "2"])
            .args(["-m", "1024", "-nic", "none", "-nographic", "-no-reboot"])
            .arg("-kernel")
            .arg(self.kroot.join(format!("boot/vmlinuz-{}", self.kver)))
            .arg("-initrd")
            .arg(&self.initrd)
            .arg("-append")
            .arg(format!("console=ttyS0 panic=-1 quiet kprs.cmd={encoded}"))
            .args(share("r", Path::new("/"), "hostroot", ",multidevs=remap"))
            .args(share("k", &self.kroot.join("lib/modules"), "kmods", ""))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start qemu-system-x86_64");
        let mut stdout = child.stdout.take().expect("qemu stdout");
        let reader = std::thread::spawn(move || {
            let mut out = Vec::new();
            let _ = stdout.read_to_end(&mut out);
            String::from_utf8_lossy(&out).into_owned()
        });
        let mut timed_out = false;
        loop {
            if child.try_wait().ok().flatten().is_some() {
                break;
            }
            if started.elapsed() > limit {
                timed_out = true;
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut stderr);
        }
        let mut output = reader.join().unwrap_or_default();
        if timed_out {
            output.push_str(&format!("\n(guest killed after {limit:?})"));
        }
        output.push_str(&stderr);
        let exit_code = output
            .lines()
            .find_map(|l| l.trim().strip_prefix("GUEST-EXIT="))
            .and_then(|c| c.trim().parse().ok());
        GuestRun {
            output,
            exit_code,
            took: started.elapsed(),
        }
    }
}

/// Boots the guest once, loads `modules`, and re-runs the test binary in it as `helper` in
/// `role`, which runs `cases` in order and prints `<case> ok` after each; fails unless the
/// guest exited 0 and every case reported so, in order. Returns the other result lines.
pub fn run_cases(
    modules: &[&str],
    helper: &host::helper_process::HelperProcess,
    role: &str,
    cases: &[&str],
    limit: Duration,
) -> Vec<String> {
    let guest = Guest::prepare();
    let command = format!(
        "for m in {}; do modprobe $m || exit 1; done; cd {} && {}",
        modules.join(" "),
        crate::layout::repo_root().display(),
        helper.shell_line(role)
    );
    let run = guest.run(&command, limit);
    host::helper_process::expect_cases("qemu", &run.output, run.exit_code, run.took, cases)
}

/// The kernel ABI name (`6.1.0-57-amd64`) the `linux-image-amd64` metapackage depends on.
fn newest_kernel() -> Option<String> {
    stdout_of(Command::new("apt-cache").args(["depends", "linux-image-amd64"]))
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Depends: linux-image-")
                .map(str::to_owned)
        })
}

fn unpacked(cache: &Path, kver: &str) -> bool {
    cache
        .join(format!("linux-image-{kver}"))
        .join(".unpacked")
        .exists()
}

/// `apt-get download` of the kernel package into `debs`; whether it worked.
fn download(debs: &Path, kver: &str) -> bool {
    Command::new("apt-get")
        .args(["download", &format!("linux-image-{kver}")])
        .current_dir(debs)
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success())
}
