//! How a scenario ended, judged against what was expected of the proxy, and the summary printed
//! for a whole suite.
//!
//! The summary and per-scenario progress are written straight to the process's stderr, which
//! libtest does not capture, so they show in `cargo test` output even when the suite passes.

use std::io::Write;
use std::time::Duration;

/// What a proxy is expected to do in a scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    Pass,
    /// Fails, for this reason.
    Fail(&'static str),
    /// Passes on some runs and fails on others, for this reason.
    Either(&'static str),
    /// Does not apply to this proxy or mode, for this reason: not run.
    NotApplicable(&'static str),
}

/// The verdict on one scenario for one proxy.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// Expected to pass, and did.
    Pass,
    /// Expected to pass, and did not: a regression (or a broken lab). Fails the suite.
    Fail(String),
    /// Expected to fail for `reason`, and did.
    XFail { reason: String, error: String },
    /// Expected to fail for `reason`, but passed: the expectation is stale. Fails the suite, so
    /// the one line that declares it gets flipped.
    XPass { reason: String },
    /// Known to pass on some runs and fail on others for `reason` (a kernel behaviour the lab
    /// cannot pin down): reported with what it did this time, never bad.
    Either {
        reason: String,
        error: Option<String>,
    },
    /// Not run in this invocation (filtered by `LAB_SCENARIOS`) or not built in the lab yet.
    NotRun(String),
}

impl Verdict {
    pub fn judge(result: Result<(), String>, expected: Expect) -> Verdict {
        match (result, expected) {
            (Ok(()), Expect::Pass) => Verdict::Pass,
            (Err(e), Expect::Pass) => Verdict::Fail(e),
            (Err(error), Expect::Fail(reason)) => Verdict::XFail {
                reason: reason.to_owned(),
                error,
            },
            (Ok(()), Expect::Fail(reason)) => Verdict::XPass {
                reason: reason.to_owned(),
            },
            (result, Expect::Either(reason)) => Verdict::Either {
                reason: reason.to_owned(),
                error: result.err(),
            },
            (_, Expect::NotApplicable(reason)) => Verdict::NotRun(format!("n/a: {reason}")),
        }
    }

    pub fn tag(&self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail(_) => "FAIL",
            Verdict::XFail { .. } => "xfail",
            Verdict::XPass { .. } => "XPASS",
            Verdict::Either { error: None, .. } => "either+",
            Verdict::Either { .. } => "either-",
            Verdict::NotRun(_) => "not run",
        }
    }

    /// Whether the suite fails because of this verdict.
    pub fn is_bad(&self) -> bool {
        matches!(self, Verdict::Fail(_) | Verdict::XPass { .. })
    }

    fn detail(&self) -> String {
        match self {
            Verdict::Pass => String::new(),
            Verdict::Fail(e) => e.clone(),
            Verdict::XFail { reason, error } => format!("{reason} (saw: {})", first_line(error)),
            Verdict::XPass { reason } => {
                format!("expected to fail ({reason}) but passed: update the expectation")
            }
            Verdict::Either { reason, error } => match error {
                None => format!("passed this time; may fail: {reason}"),
                Some(e) => format!("{reason} (saw: {})", first_line(e)),
            },
            Verdict::NotRun(why) => why.clone(),
        }
    }
}

/// One row of the summary.
pub struct Row {
    pub id: u8,
    pub title: &'static str,
    pub verdict: Verdict,
    pub took: Duration,
}

/// Writes one line to the unbuffered, uncaptured stderr.
pub fn say(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

pub fn progress(label: &str, row: &Row) {
    say(&format!(
        "lab {label}: {:>2} {:<48} {:<7} {:>5.1}s {}",
        row.id,
        row.title,
        row.verdict.tag(),
        row.took.as_secs_f64(),
        first_line(&row.verdict.detail())
    ));
}

/// The table of every scenario and the counts, as printed after a suite.
pub fn summary(label: &str, rows: &[Row], took: Duration) -> String {
    let mut s = format!(
        "\n=== lab scenarios for {label} ({:.0}s) ===\n",
        took.as_secs_f64()
    );
    for row in rows {
        s.push_str(&format!(
            "{:>2} {:<48} {:<7} {}\n",
            row.id,
            row.title,
            row.verdict.tag(),
            first_line(&row.verdict.detail())
        ));
    }
    let count = |f: fn(&Verdict) -> bool| rows.iter().filter(|r| f(&r.verdict)).count();
    s.push_str(&format!(
        "{label}: {} passed, {} failed, {} expected failures, {} unexpectedly passed, {} either way, {} not run, of {}\n",
        count(|v| matches!(v, Verdict::Pass)),
        count(|v| matches!(v, Verdict::Fail(_))),
        count(|v| matches!(v, Verdict::XFail { .. })),
        count(|v| matches!(v, Verdict::XPass { .. })),
        count(|v| matches!(v, Verdict::Either { .. })),
        count(|v| matches!(v, Verdict::NotRun(_))),
        rows.len()
    ));
    s
}

fn first_line(s: &str) -> &str {
    let line = s.lines().next().unwrap_or("");
    match line.char_indices().nth(160) {
        Some((i, _)) => &line[..i],
        None => line,
    }
}
