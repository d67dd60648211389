//! A [`Status`] as a table for people (within 100 columns) and as JSON for scripts.
//!
//! Names come from the tracker (checked, but long and possibly odd in a manifest): the text
//! escapes control characters, and a name wider than its column gets a line of its own above
//! its row instead of being cut, so every name is shown whole and no row is misaligned.

use std::fmt::Write as _;

use super::{PortStatus, Status, SyncSummary};
use crate::cli::explain::RulesFrom;
use crate::cli::explain::render::{clean, line};

/// The widest name kept in its column.
const NAME: usize = 27;

/// The status as pretty JSON, with a final newline.
pub fn json(s: &Status) -> String {
    let mut text = serde_json::to_string_pretty(s).expect("a status serializes");
    text.push('\n');
    text
}

/// The status for people; `detail` adds every frontend with its outcome (for one Service).
pub fn text(s: &Status, detail: bool) -> String {
    let mut out = String::new();
    let what = s.noun;
    let from = match s.rules_from {
        RulesFrom::Kernel => format!("{what} read from the kernel"),
        RulesFrom::Planned => format!("{what} as planned (not read from the kernel)"),
    };
    line(
        &mut out,
        &format!("node {}, {} mode, {from}", clean(&s.node), s.mode),
    );
    line(&mut out, &sync_line(&s.sync));
    if s.rules_from == RulesFrom::Kernel {
        if s.drift.is_empty() && s.service_ports.iter().all(|p| p.drifted() == 0) {
            line(&mut out, "kernel: matches the plan");
        } else {
            line(&mut out, "kernel: DIFFERS from the plan");
            for d in &s.drift {
                line(&mut out, &format!("  - {}", clean(d)));
            }
        }
    }
    out.push('\n');
    if s.service_ports.is_empty() {
        line(&mut out, "no service ports");
        return out;
    }
    let _ = writeln!(
        out,
        "{:<NAME$}  {:<5}  {:<9}  {:<9}  {:<15}  {:<18}  DRIFT",
        "SERVICE PORT", "PROTO", "FRONTENDS", "ENDPOINTS", "POLICY", "HEALTH CHECK"
    );
    for p in &s.service_ports {
        row(&mut out, p);
    }
    let drifted: Vec<&PortStatus> = s.service_ports.iter().filter(|p| p.drifted() > 0).collect();
    if !drifted.is_empty() {
        line(
            &mut out,
            "\nwhere a new connection meets other rules than planned:",
        );
        for p in drifted {
            for f in p.frontends.iter().filter(|f| f.drift.is_some()) {
                let d = f.drift.as_deref().unwrap_or_default();
                line(
                    &mut out,
                    &format!(
                        "  - {} {} {}: {}",
                        clean(&p.name),
                        f.kind,
                        f.address,
                        clean(d)
                    ),
                );
            }
        }
    }
    if detail {
        for p in &s.service_ports {
            line(&mut out, &format!("\n{} frontends:", clean(&p.name)));
            for f in &p.frontends {
                line(
                    &mut out,
                    &format!(
                        "  - {} {}: {}",
                        f.kind,
                        f.address,
                        clean(f.outcome.as_deref().unwrap_or("not traced"))
                    ),
                );
            }
        }
    }
    out
}

fn sync_line(s: &SyncSummary) -> String {
    let mut text = match (&s.last_success, s.seconds_since_success) {
        (Some(at), Some(ago)) => format!("last sync: {at} ({ago} s ago)"),
        (Some(at), None) => format!("last sync: {at}"),
        _ if !s.ready => "last sync: none yet (waiting for the initial lists)".into(),
        _ => "last sync: none succeeded yet".into(),
    };
    let _ = write!(text, ", {} ok, {} failed", s.syncs_ok, s.syncs_failed);
    if let Some(f) = s.failing_for_seconds {
        let _ = write!(text, "; FAILING for {f} s");
    }
    if let Some(p) = s.pending_for_seconds {
        let _ = write!(text, "; a change waits for {p} s");
    }
    text
}

fn row(out: &mut String, p: &PortStatus) {
    let name = clean(&p.name);
    let name = if name.chars().count() > NAME {
        line(out, &name);
        String::new()
    } else {
        name
    };
    let endpoints = match p.programmed {
        Some(n) => format!("{n}/{}", p.endpoints),
        None => format!("-/{}", p.endpoints),
    };
    let policy = format!(
        "{:?}/{:?}",
        p.internal_traffic_policy, p.external_traffic_policy
    );
    let health = match &p.health_check {
        None => "-".to_string(),
        Some(h) => {
            let state = match h.state {
                "serving" => "serving",
                "bindFailing" => "failed",
                _ => "not open",
            };
            format!("{} {state} ({})", h.port, h.local_endpoints)
        }
    };
    let drift = match p.drifted() {
        0 => "-".to_string(),
        n => n.to_string(),
    };
    let _ = writeln!(
        out,
        "{name:<NAME$}  {:<5}  {:<9}  {endpoints:<9}  {policy:<15}  {health:<18}  {drift}",
        p.protocol,
        p.frontends.len()
    );
}
