//! `--memory-max`: our proxy in a memory cgroup of its own with a hard limit, as a DaemonSet's
//! `resources.limits.memory` puts it, to show that it runs the whole measurement (cold start,
//! changes, churn) inside a limit just above its measured peak without being OOM-killed.
//!
//! cgroup v2 where `/sys/fs/cgroup` is the unified hierarchy (`memory.max`, `memory.peak`,
//! `memory.events`' `oom_kill`), else the v1 memory controller at `/sys/fs/cgroup/memory`
//! (`memory.limit_in_bytes`, `memory.max_usage_in_bytes`, `memory.oom_control`'s `oom_kill`).
//! The proxy is moved in right after it is spawned, before it has read anything; memory it
//! touched before that stays charged to the harness's cgroup, which is a few pages. The group
//! is removed on drop, after the proxy is gone.

use std::path::{Path, PathBuf};

const V2_ROOT: &str = "/sys/fs/cgroup";
const V1_ROOT: &str = "/sys/fs/cgroup/memory";

/// A memory cgroup with a limit; removed on drop.
pub struct MemoryCgroup {
    dir: PathBuf,
    v2: bool,
    limit: u64,
}

/// What the cgroup saw: its limit, the peak charged, and the OOM kills in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub limit: u64,
    pub peak: Option<u64>,
    pub oom_kills: Option<u64>,
}

impl MemoryCgroup {
    /// A new group limited to `limit` bytes, named after this process and `label`.
    pub fn create(label: &str, limit: u64) -> Result<MemoryCgroup, String> {
        let v2 = Path::new(V2_ROOT).join("cgroup.controllers").exists();
        let root = if v2 { V2_ROOT } else { V1_ROOT };
        if !Path::new(root).exists() {
            return Err(format!("no memory cgroup hierarchy at {root}"));
        }
        let dir = Path::new(root).join(format!("kprs-scale-{}-{label}", std::process::id()));
        if v2 {
            // The memory controller must be enabled for the root's children.
            let _ = std::fs::write(Path::new(V2_ROOT).join("cgroup.subtree_control"), "+memory");
        }
        std::fs::create_dir(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let group = MemoryCgroup { dir, v2, limit };
        let file = if v2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        group.write(file, &limit.to_string())?;
        Ok(group)
    }

    /// Moves process `pid` (and the children it starts later) into the group.
    pub fn adopt(&self, pid: u32) -> Result<(), String> {
        self.write("cgroup.procs", &pid.to_string())
    }

    /// The limit, the peak charged so far, and the OOM kills so far.
    pub fn outcome(&self) -> Outcome {
        let (peak_file, events_file) = if self.v2 {
            ("memory.peak", "memory.events")
        } else {
            ("memory.max_usage_in_bytes", "memory.oom_control")
        };
        Outcome {
            limit: self.limit,
            peak: self.read(peak_file).and_then(|t| t.trim().parse().ok()),
            oom_kills: self.read(events_file).and_then(|t| oom_kills(&t)),
        }
    }

    fn write(&self, file: &str, value: &str) -> Result<(), String> {
        let path = self.dir.join(file);
        std::fs::write(&path, value)
            .map_err(|e| format!("write {value} to {}: {e}", path.display()))
    }

    fn read(&self, file: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.join(file)).ok()
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // The proxy was killed with its node; a group is removable once its last task has
        // exited, which the kernel may finish a moment after the kill.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        eprintln!("scale: cannot remove {}", self.dir.display());
    }
}

/// The `oom_kill N` line of `memory.events` (v2) or `memory.oom_control` (v1).
fn oom_kills(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

/// One line for the report's notes.
pub fn summary(o: &Outcome) -> String {
    let mib = |b: u64| b as f64 / 1024.0 / 1024.0;
    format!(
        "memory cgroup: limit {:.0} MiB, peak charged {}, OOM kills {}",
        mib(o.limit),
        o.peak
            .map_or("unknown".to_owned(), |p| format!("{:.1} MiB", mib(p))),
        o.oom_kills.map_or("unknown".to_owned(), |n| n.to_string()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_kills_are_read_from_either_version() {
        let v2 = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n";
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n";
        assert_eq!(oom_kills(v2), Some(1));
        assert_eq!(oom_kills(v1), Some(0));
        assert_eq!(oom_kills("under_oom 0\n"), None);
    }
}
