//! An [`Explanation`] as text for people (within 100 columns) and as JSON for scripts.
//!
//! Every value printed comes from a parsed type (addresses, ports, names the tracker checked),
//! and the text escapes control characters anyway, so nothing can forge a line of output.

use std::fmt::Write as _;

use super::{Explanation, Verdict};
use crate::dataplane::inspect::TC_INGRESS;

/// Columns the text form stays within.
pub const WIDTH: usize = 100;

/// The explanation as pretty JSON, with a final newline.
pub fn json(e: &Explanation) -> String {
    let mut s = serde_json::to_string_pretty(e).expect("an explanation serializes");
    s.push('\n');
    s
}

/// The explanation for people.
pub fn text(e: &Explanation) -> String {
    let mut out = String::new();
    let p = &e.packet;
    let via = p
        .in_interface
        .as_deref()
        .map_or_else(String::new, |i| format!(" on {}", clean(i)));
    line(
        &mut out,
        &format!(
            "{} {} → {} from the {}{via} ({} mode, {} {})",
            p.protocol,
            p.source,
            p.destination,
            p.origin,
            e.mode,
            e.noun,
            match e.rules_from {
                super::RulesFrom::Planned => "as planned",
                super::RulesFrom::Kernel => "read from the kernel",
            }
        ),
    );
    match &e.service_port {
        Some(s) => line(
            &mut out,
            &format!(
                "service port: {} ({} frontend, {:?} policy)",
                clean(&s.name),
                s.frontend,
                s.policy
            ),
        ),
        None => line(&mut out, "service port: none"),
    }
    let tc = e.hooks == [TC_INGRESS];
    if tc {
        line(
            &mut out,
            "hook: tc ingress on the node's interfaces (a new flow's first packet picks the \
             backend; its later packets and replies are rewritten from kp_flow)",
        );
    } else if !e.hooks.is_empty() {
        line(
            &mut out,
            &format!(
                "hook{}: cgroup {} (the backend is chosen when the socket connects, not per \
                 packet)",
                if e.hooks.len() == 1 { "" } else { "s" },
                e.hooks.join(", ")
            ),
        );
    }
    let verdict = match e.outcome.verdict {
        Verdict::Forwarded => "forwarded to an endpoint",
        Verdict::Untouched => "not rewritten by our rules",
        Verdict::Rejected => "REJECTED (refused at once)",
        // Socket load balancing fails the call itself, at once.
        Verdict::Dropped if !e.hooks.is_empty() && !tc => {
            "DROPPED (the socket call fails at once with ETIMEDOUT, as after a dropped SYN)"
        }
        Verdict::Dropped => "DROPPED (the client times out)",
        Verdict::Mixed => "differs between paths",
    };
    let masq = match (e.outcome.verdict, e.outcome.masquerade) {
        (Verdict::Forwarded, Some(true)) => ", masqueraded",
        (Verdict::Forwarded, Some(false)) => ", source kept",
        _ => "",
    };
    line(&mut out, &format!("outcome: {verdict}{masq}"));
    for s in &e.outcome.endpoints {
        line(
            &mut out,
            &format!(
                "  → {} ({:.1}% of new connections)",
                s.endpoint,
                s.share * 100.0
            ),
        );
    }
    if let Some(a) = &e.affinity {
        let entry = match a.entry {
            Some(true) => " An entry for this client exists.",
            Some(false) => " No entry for this client yet.",
            None => "",
        };
        line(
            &mut out,
            &format!(
                "affinity: ClientIP, {} s: a client's later connections reach the endpoint its \
                 first one did.{entry}",
                a.timeout_seconds
            ),
        );
    }
    if !e.reasons.is_empty() {
        line(&mut out, "why:");
        for r in &e.reasons {
            line(&mut out, &format!("  - {}", clean(r)));
        }
    }
    if let Some(m) = &e.model {
        if !m.excluded.is_empty() {
            line(&mut out, "endpoints left out:");
        }
        for x in &m.excluded {
            let mut why = Vec::new();
            if let Some(c) = &x.cluster {
                why.push(format!("cluster: {}", clean(c)));
            }
            if let Some(l) = &x.local {
                why.push(format!("local: {}", clean(l)));
            }
            let node = x
                .node
                .as_deref()
                .map_or_else(String::new, |n| format!(" on {}", clean(n)));
            line(
                &mut out,
                &format!("  - {}{node}: {}", clean(&x.endpoint), why.join("; ")),
            );
        }
    }
    if let Some(pending) = &e.pending_sync {
        line(&mut out, &format!("sync pending: {}", clean(pending)));
    }
    if !e.drift.is_empty() {
        line(&mut out, "kernel differs from the plan:");
        for d in &e.drift {
            line(&mut out, &format!("  - {}", clean(d)));
        }
    }
    if !e.other_chains.is_empty() {
        line(
            &mut out,
            "other tables' chains on this path (they see the packet too; not traced):",
        );
        for c in &e.other_chains {
            line(&mut out, &format!("  - {}", clean(c)));
        }
    }
    out
}

/// Appends `text` wrapped at [`WIDTH`] columns: continuation lines are indented under the
/// text after a list marker, and a word longer than a line (a hostile name) is cut.
pub(crate) fn line(out: &mut String, text: &str) {
    let body = text.trim_start();
    let lead = text.len() - body.len();
    let marker = ["- ", "→ "]
        .iter()
        .find(|m| body.starts_with(**m))
        .map_or(0, |m| m.chars().count());
    let indent = " ".repeat(lead + marker);
    let room = WIDTH - indent.len();
    let mut current = text[..lead].to_string();
    let mut empty = true;
    for word in body.split(' ').filter(|w| !w.is_empty()) {
        let chars: Vec<char> = word.chars().collect();
        for piece in chars.chunks(room) {
            let piece: String = piece.iter().collect();
            let width = current.chars().count();
            if !empty && width + 1 + piece.chars().count() > WIDTH {
                let _ = writeln!(out, "{current}");
                current = indent.clone();
            } else if !empty {
                current.push(' ');
            }
            current.push_str(&piece);
            empty = false;
        }
    }
    let _ = writeln!(out, "{current}");
}

/// `s` with control characters escaped, so no value can start a line of its own.
pub(crate) fn clean(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}
