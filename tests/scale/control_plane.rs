//! A private control plane per scale: `testenv up` in a state directory of its own, torn down
//! (`testenv down`) when the guard drops, and by testenv's watchdog if this process dies first.
//!
//! Private, not the shared one of `TestEnv::shared`: tens of thousands of Services in a shared API
//! server would land in every other test's proxies, and every other test's objects in ours.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::testenv::{TestEnv, bin_dir, scratch_dir};

/// A running private control plane; `testenv down` on drop.
pub struct ControlPlane {
    pub env: TestEnv,
    state: PathBuf,
}

impl ControlPlane {
    /// Starts a fresh control plane named `name` (a directory under the scratch directory).
    pub fn start(name: &str) -> Result<ControlPlane, String> {
        let state = scratch_dir().join(name);
        let _ = std::fs::remove_dir_all(&state);
        let testenv = bin_dir().join("testenv");
        if !testenv.is_file() {
            return Err(format!(
                "{} is missing: run `testenv/build` first",
                testenv.display()
            ));
        }
        let out = Command::new(&testenv)
            .arg("up")
            .arg("--quiet")
            // testenv's 3 minutes are not enough inside a User-mode Linux guest on a slow
            // host (the RBAC bootstrap alone took longer); a bound, not a wait.
            .arg("--timeout=10m")
            // The EndpointSlice controller only: the harness writes its slices itself, for
            // Services without selectors, and the mirroring controller, which looks after such
            // Services, scans every slice of the namespace for each of them (it lists its
            // mirrored slices by label): at scale it keeps both CPUs busy for minutes after the
            // load, under both proxies' cold starts.
            .arg("--controllers=endpointslice-controller")
            .arg(format!("--state={}", state.display()))
            .arg(format!("--exit-with={}", std::process::id()))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run testenv up: {e}"))?;
        if !out.status.success() {
            // A half-started control plane is torn down too.
            down(&state);
            return Err(format!(
                "testenv up failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        match TestEnv::load(&state) {
            Ok(env) => Ok(ControlPlane { env, state }),
            Err(e) => {
                down(&state);
                Err(format!("{e:#}"))
            }
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        down(&self.state);
    }
}

/// `testenv down --state DIR`; idempotent.
fn down(state: &std::path::Path) {
    let out = Command::new(bin_dir().join("testenv"))
        .arg("down")
        .arg(format!("--state={}", state.display()))
        .stdin(Stdio::null())
        .output();
    if let Ok(o) = out
        && !o.status.success()
    {
        eprintln!(
            "scale: cleanup: testenv down --state {}: {}",
            state.display(),
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
}
