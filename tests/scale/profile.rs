//! A CPU profile of our proxy's cold start (`--perf-cold`): `perf record` attached to the proxy
//! from just after its spawn until its ClusterIP works, with DWARF call graphs (release builds
//! carry line tables, and no frame pointers), written beside the report as
//! `perf-<proxy>-<scale>.data` for `perf report -i`. What the cold start spends its CPU on,
//! per part (list decoding, tracker, planner, encoder), is what the cold-start breakdown in
//! docs/benchmarks-history.md ("Cold start") is read from.
//!
//! perf misses the proxy's first milliseconds (it attaches after the spawn); those are argument
//! parsing and the API client's set-up, not the lists.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long `perf` may take to write its file after SIGINT.
const FLUSH_LIMIT: Duration = Duration::from_secs(60);

/// A running `perf record`; killed on drop if not [stopped](CpuProfile::stop).
pub struct CpuProfile {
    child: Option<Child>,
    pub path: PathBuf,
}

impl CpuProfile {
    /// Starts `perf record` on `pid` into `path`, or says why not (no `perf` installed).
    pub fn start(pid: u32, path: &Path) -> Result<CpuProfile, String> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let child = Command::new("perf")
            .args([
                "record",
                "--quiet",
                "-F",
                "499",
                "--call-graph",
                "dwarf,16384",
            ])
            .arg("-p")
            .arg(pid.to_string())
            .arg("-o")
            .arg(path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("perf record: {e} (install linux-perf)"))?;
        Ok(CpuProfile {
            child: Some(child),
            path: path.to_owned(),
        })
    }

    /// Stops recording (SIGINT, so perf writes its file) and waits for it.
    pub fn stop(mut self) -> Result<PathBuf, String> {
        let Some(mut child) = self.child.take() else {
            return Err("perf already stopped".into());
        };
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .output();
        let deadline = Instant::now() + FLUSH_LIMIT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                // perf may end by the SIGINT itself rather than exit 0: its file is written.
                use std::os::unix::process::ExitStatusExt as _;
                return if status.success() || status.signal() == Some(2) {
                    Ok(self.path.clone())
                } else {
                    Err(format!("perf record exited with {status}"))
                };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        Err(format!(
            "perf record did not finish writing within {FLUSH_LIMIT:?}"
        ))
    }
}

impl Drop for CpuProfile {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
