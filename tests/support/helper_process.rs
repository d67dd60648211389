//! A kernel test's helper process: the test binary re-run as one of its own entry tests, so that
//! work which must happen inside a network namespace (or inside a guest) runs there with the
//! library in hand, and reports back in result lines the test picks out of libtest's output.
//!
//! The entry test does nothing unless [`VAR`] is set, so an ordinary `cargo test` run passes
//! over it; the test starts it with the variable set to the work it should do, under
//! `ip netns exec` or in a guest's shell. Part of `host.rs` (`host::helper_process`).

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The environment variable that names a helper's work. One name serves every test binary: the
/// libtest filter already picks the entry, and each binary re-runs only itself.
pub const VAR: &str = "KPRS_TEST_HELPER";

/// What starts every line a helper reports (libtest prints lines of its own).
pub const RESULT: &str = "RESULT ";

/// The libtest arguments that run one entry alone, quietly, with its output shown.
const ALONE: [&str; 4] = ["--exact", "--nocapture", "--test-threads=1", "-q"];

/// The entry test of this binary named `entry`, as a helper.
pub struct HelperProcess {
    entry: &'static str,
}

impl HelperProcess {
    pub const fn new(entry: &'static str) -> HelperProcess {
        HelperProcess { entry }
    }

    /// Runs `work` with what this process was started to do; in an ordinary test run, where
    /// nothing was asked, it does nothing.
    pub fn when_requested(&self, work: impl FnOnce(&str)) {
        if let Some(asked) = std::env::var_os(VAR) {
            work(&asked.to_string_lossy());
        }
    }

    /// The helper doing `work` inside the network namespace `netns`.
    pub fn in_netns(&self, netns: &str, work: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", netns])
            .arg(exe())
            .arg(self.entry)
            .args(ALONE)
            .env(VAR, work)
            .stdin(Stdio::null());
        cmd
    }

    /// The helper doing `work`, as a shell command line (for a guest's console).
    pub fn shell_line(&self, work: &str) -> String {
        format!(
            "{VAR}={work} {} {} {}",
            exe().display(),
            self.entry,
            ALONE.join(" ")
        )
    }

    /// Runs the helper doing `work` inside `netns` to the end and returns its result lines; a
    /// failed helper fails the test with everything it printed.
    pub fn results_in(&self, netns: &str, work: &str) -> Vec<String> {
        let out = self.in_netns(netns, work).output().expect("run helper");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "helper {work} failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        results(&stdout).into_iter().map(str::to_owned).collect()
    }
}

/// The result lines in `output`, without the prefix (a guest's console may indent them).
pub fn results(output: &str) -> Vec<&str> {
    output
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix(RESULT).map(str::trim_end))
        .collect()
}

/// Checks a guest's run of a helper that runs `cases` in order and prints `<case> ok` after
/// each: the guest's command exited 0 and every case reported so, in order. Returns the other
/// result lines (timings, captures). `kernel` names the guest in messages.
pub fn expect_cases(
    kernel: &str,
    output: &str,
    exit_code: Option<i32>,
    took: std::time::Duration,
    cases: &[&str],
) -> Vec<String> {
    assert_eq!(
        exit_code,
        Some(0),
        "the {kernel} guest's cases failed (after {took:?}):\n{output}"
    );
    let results = results(output);
    let passed: Vec<String> = cases.iter().map(|c| format!("{c} ok")).collect();
    let reported: Vec<&str> = results
        .iter()
        .copied()
        .filter(|r| r.ends_with(" ok"))
        .collect();
    assert_eq!(reported, passed, "{output}");
    println!("one {kernel} boot ran every case in {took:?}");
    results
        .into_iter()
        .filter(|r| !r.ends_with(" ok"))
        .map(str::to_owned)
        .collect()
}

fn exe() -> PathBuf {
    std::env::current_exe().expect("test binary path")
}
