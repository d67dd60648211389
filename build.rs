//! Compiles the eBPF mode's programs (`bpf/*.c`) for the BPF target with Debian's clang, and
//! turns the layout assertions of `bpf/kp_maps.h` into Rust tests, so the C structs and their
//! Rust mirrors (`src/dataplane/ebpf/layout.rs`) are checked against the same numbers.
//!
//! Needs `clang` (the `clang` package; `$CLANG` overrides the command), `llvm-strip` (`llvm`;
//! `$LLVM_STRIP`), the UAPI headers (`linux-libc-dev`) and libbpf's `bpf_helpers.h`
//! (`libbpf-dev`). A missing one fails the build with one line naming the package.
//!
//! Also records what `--version=raw` and the start-up line report ([`build_info`]): the git
//! commit and tree state, the build date and the compiler.
#![allow(clippy::disallowed_methods)] // a build script runs tools and reads its environment

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const PROGRAMS: &[&str] = &["kp_sock", "kp_tc"];
const HEADER: &str = "bpf/kp_maps.h";

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rerun-if-env-changed=LLVM_STRIP");
    println!("cargo:rerun-if-changed={HEADER}");
    println!("cargo:rerun-if-changed=bpf/kp_shared_maps.h");

    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    let strip = env::var("LLVM_STRIP").unwrap_or_else(|_| "llvm-strip".to_string());
    require(&clang, "clang", "CLANG");
    require(&strip, "llvm", "LLVM_STRIP");
    for (header, package) in [
        ("/usr/include/bpf/bpf_helpers.h", "libbpf-dev"),
        ("/usr/include/linux/bpf.h", "linux-libc-dev"),
    ] {
        if !Path::new(header).exists() {
            fail(&format!(
                "{header} is missing: install the Debian package {package} (apt-get install {package})"
            ));
        }
    }
    let multiarch = match env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("aarch64") => "aarch64-linux-gnu",
        _ => "x86_64-linux-gnu",
    };

    for name in PROGRAMS {
        let source = root.join("bpf").join(format!("{name}.c"));
        println!("cargo:rerun-if-changed={}", source.display());
        let object = out.join(format!("{name}.o"));
        run(Command::new(&clang)
            .args([
                "-O2", "-g", "-target", "bpf", "-mcpu=v3", "-Wall", "-Werror",
            ])
            .arg(format!("-I/usr/include/{multiarch}"))
            .arg(format!("-ffile-prefix-map={}=.", root.display()))
            .arg("-c")
            .arg(&source)
            .arg("-o")
            .arg(&object));
        // Drops DWARF, keeps .BTF (aya reads the maps' definitions from it).
        run(Command::new(&strip).arg("-g").arg(&object));
    }

    build_info(&root);

    let header = fs::read_to_string(root.join(HEADER)).expect("bpf/kp_maps.h is readable");
    fs::write(out.join("layout_tests.rs"), layout_tests(&header)).expect("OUT_DIR is writable");
    fs::write(out.join("bounds.rs"), bounds(&header)).expect("OUT_DIR is writable");
}

/// `KUBE_PROXY_RS_GIT_COMMIT`, `_GIT_TREE_STATE`, `_BUILD_DATE` and `_RUSTC` for the crate.
///
/// The commit is `$GIT_COMMIT` when set (an image build, whose context has no `.git`), else
/// `git rev-parse HEAD`, else empty, as upstream leaves it when unknown. The tree state is
/// `clean` or `dirty` as `git status` saw it when this script ran (it reruns when HEAD moves,
/// not on every edit); the build date is `$SOURCE_DATE_EPOCH` when set, else the time this
/// script ran, in UTC.
fn build_info(root: &Path) {
    println!("cargo:rerun-if-env-changed=GIT_COMMIT");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    // Rerun when HEAD or the branch it points at moves.
    for path in [git(&["rev-parse", "--git-path", "HEAD"]), {
        git(&["symbolic-ref", "-q", "HEAD"]).and_then(|r| git(&["rev-parse", "--git-path", &r]))
    }]
    .into_iter()
    .flatten()
    {
        let path = root.join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    let commit = env::var("GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "HEAD"]))
        .unwrap_or_default();
    let tree_state = match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(changes) if changes.is_empty() => "clean",
        Some(_) => "dirty",
        None => "",
    };
    let epoch = env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        });
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let compiler = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    println!("cargo:rustc-env=KUBE_PROXY_RS_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=KUBE_PROXY_RS_GIT_TREE_STATE={tree_state}");
    println!(
        "cargo:rustc-env=KUBE_PROXY_RS_BUILD_DATE={}",
        rfc3339(epoch)
    );
    println!("cargo:rustc-env=KUBE_PROXY_RS_RUSTC={compiler}");
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (upstream's build date format), by the
/// civil-from-days algorithm: a build script has no date library.
fn rfc3339(epoch: u64) -> String {
    let (days, rest) = (epoch / 86_400, epoch % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// The header's `#define KP_MAX_* N` as Rust constants, so the proxy checks pinned maps and
/// reports fill levels against the numbers the programs were built with.
fn bounds(header: &str) -> String {
    let mut out = String::from("// Generated by build.rs from bpf/kp_maps.h.\n");
    for line in header.lines() {
        let mut words = line.split_whitespace();
        if let (Some("#define"), Some(name), Some(value)) =
            (words.next(), words.next(), words.next())
            && name.starts_with("KP_MAX_")
            && value.parse::<u32>().is_ok()
        {
            out.push_str(&format!(
                "/// `{name}` in `bpf/kp_maps.h`.\npub const {name}: u32 = {value};\n"
            ));
        }
    }
    out
}

/// Rust tests asserting every `KP_ASSERT_LAYOUT`/`KP_ASSERT_OFFSET` of the header on the
/// mirrors: clang checks the same numbers against the C structs.
fn layout_tests(header: &str) -> String {
    let mut body = String::new();
    let mut count = 0;
    for line in header.lines() {
        let line = line.trim();
        let args = |prefix: &str| {
            line.strip_prefix(prefix)
                .and_then(|rest| rest.strip_suffix(");"))
                .map(|a| {
                    a.split(',')
                        .map(str::trim)
                        .map(String::from)
                        .collect::<Vec<_>>()
                })
        };
        if let Some(a) = args("KP_ASSERT_LAYOUT(") {
            body.push_str(&format!(
                "    assert_eq!(core::mem::size_of::<{}>(), {}, \"size of {}\");\n",
                rust_type(&a[0]),
                a[1],
                a[0]
            ));
            count += 1;
        } else if let Some(a) = args("KP_ASSERT_OFFSET(") {
            body.push_str(&format!(
                "    assert_eq!(core::mem::offset_of!({}, {}), {}, \"offset of {}.{}\");\n",
                rust_type(&a[0]),
                a[1],
                a[2],
                a[0],
                a[1]
            ));
            count += 1;
        }
    }
    format!(
        "/// Generated by build.rs from bpf/kp_maps.h ({count} assertions).\n\
         #[test]\nfn layouts_match_the_c_header() {{\n{body}}}\n"
    )
}

/// `kp_svc_key` → `SvcKey`.
fn rust_type(c: &str) -> String {
    c.trim_start_matches("kp_")
        .split('_')
        .map(|w| {
            let mut cs = w.chars();
            cs.next()
                .map(|f| f.to_ascii_uppercase().to_string() + cs.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn require(command: &str, package: &str, var: &str) {
    if Command::new(command).arg("--version").output().is_err() {
        fail(&format!(
            "`{command}` not found: the eBPF programs need it; install the Debian package {package} \
             (apt-get install clang llvm libbpf-dev) or set ${var}"
        ));
    }
}

fn run(command: &mut Command) {
    match command.output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => fail(&format!(
            "{command:?} failed:\n{}",
            String::from_utf8_lossy(&o.stderr)
        )),
        Err(e) => fail(&format!("cannot run {command:?}: {e}")),
    }
}

fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    panic!("{message}");
}
