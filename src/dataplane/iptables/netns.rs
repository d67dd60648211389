//! Test-only: the namespace the iptables mode's tests restore into, `kprs-ipt-<pid>-<n>`: the
//! shared [`NetNs`] guard (removed on drop, even when the test fails), with the tools run inside
//! it reporting instead of panicking, since a refusal is what some tests look for.

use crate::testing::netns::{NetNs, output_with_stdin};

/// A fresh network namespace for one iptables test.
pub struct Netns(NetNs);

impl Netns {
    /// Creates it; panics (the test fails, never skips) when that is not possible, e.g.
    /// without root.
    pub fn new() -> Netns {
        Netns(NetNs::new("kprs-ipt"))
    }

    /// Runs `program args` inside, feeding `input`; (success, stdout, stderr).
    pub fn run(&self, program: &str, args: &[&str], input: Option<&str>) -> (bool, String, String) {
        let mut cmd = self.0.command(program);
        cmd.args(args);
        let out = output_with_stdin(&mut cmd, input.unwrap_or(""));
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}
