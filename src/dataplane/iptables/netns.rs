//! Test-only: a fresh network namespace, removed on drop (even when the test fails), and the
//! tools run inside it. iptables state in it is the namespace's own; nothing outside is touched.

#![allow(clippy::disallowed_methods)] // test-only seam: runs ip and the iptables tools

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A network namespace named `kprs-ipt-<pid>-<n>`.
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// Creates it; panics (the test fails, never skips) when that is not possible, e.g.
    /// without root.
    pub fn new() -> Netns {
        let name = format!(
            "kprs-ipt-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let out = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .expect("ip runs");
        assert!(
            out.status.success(),
            "ip netns add {name} (needs root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Netns { name }
    }

    /// Runs `program args` inside, feeding `input`; (success, stdout, stderr).
    pub fn run(&self, program: &str, args: &[&str], input: Option<&str>) -> (bool, String, String) {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.name, program])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ip netns exec runs");
        let mut stdin = child.stdin.take().expect("piped");
        let text = input.unwrap_or("").to_string();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(text.as_bytes());
        });
        let out = child.wait_with_output().expect("waits");
        let _ = writer.join();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}
