//! Watching the dataplane through real connections: a harness process in the node namespace
//! connects to a ClusterIP again and again until the pod address it is waiting for answers, and
//! reports when (see `helper::Spec::Watch`).

use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncBufReadExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

use super::helper::{Aim, RESULT_PREFIX, SelfExec, Spec};

/// How a watch ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The wanted address answered at this time.
    Seen(SystemTime),
    /// The limit passed; the last attempt got this.
    Timeout(String),
    /// The watcher itself failed.
    Failed(String),
}

/// A running watcher; killed (by pid) when dropped.
pub struct Watcher {
    _child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Watcher {
    /// Starts watching `aim` from `netns`, every `interval`.
    pub fn start(
        exec: &SelfExec,
        netns: &str,
        aim: Aim,
        interval: Duration,
        limit: Duration,
    ) -> Result<Watcher, String> {
        let spec = Spec::Watch {
            aim,
            interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
            attempt_timeout_ms: 500,
            limit_ms: u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
        };
        let mut child = tokio::process::Command::from(exec.command(netns, &spec))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("start watcher: {e}"))?;
        let stdout = child.stdout.take().expect("piped stdout");
        Ok(Watcher {
            _child: child,
            lines: BufReader::new(stdout).lines(),
        })
    }

    /// The next result line (without the prefix); `None` once the watcher is gone.
    async fn next(&mut self) -> Option<String> {
        while let Ok(Some(line)) = self.lines.next_line().await {
            // Anywhere in the line: libtest may have printed "test … ... " before it.
            if let Some((_, rest)) = line.split_once(RESULT_PREFIX) {
                return Some(rest.to_owned());
            }
        }
        None
    }

    /// Waits until the first attempt is done (so the watcher is running); what it got.
    pub async fn armed(&mut self) -> Result<String, String> {
        match self.next().await {
            Some(line) => line
                .strip_prefix("armed ")
                .map(str::to_owned)
                .ok_or_else(|| format!("watcher said {line:?}")),
            None => Err("watcher exited before its first attempt".to_owned()),
        }
    }

    /// Waits for the end of the watch.
    pub async fn outcome(&mut self) -> Outcome {
        let Some(line) = self.next().await else {
            return Outcome::Failed("watcher exited without a result".to_owned());
        };
        if let Some(ns) = line.strip_prefix("seen ") {
            return match ns.parse::<u64>() {
                Ok(ns) => Outcome::Seen(UNIX_EPOCH + Duration::from_nanos(ns)),
                Err(e) => Outcome::Failed(format!("watcher time {ns:?}: {e}")),
            };
        }
        match line.strip_prefix("timeout ") {
            Some(last) => Outcome::Timeout(last.to_owned()),
            None => Outcome::Failed(format!("watcher said {line:?}")),
        }
    }
}

/// Seconds from `from` to `to` (negative if `to` is earlier).
pub fn seconds_between(from: SystemTime, to: SystemTime) -> f64 {
    match to.duration_since(from) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}
