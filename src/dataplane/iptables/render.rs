//! Typed rules → `iptables-restore` text. Pure; the only place rule text is made.
//!
//! Every word comes from a typed value: addresses and ports print as numbers, chain names are
//! [`ChainName`](super::names::ChainName)s (`[A-Z0-9-]`), interface names are checked
//! [`IfName`](super::ruleset::IfName)s, and comments are [`Comment`]s quoted with `"` and holding
//! no `"`, `\` or line break. So no Service or endpoint can add a word outside its comment.
//! Matches print in the order iptables-save prints them for the jump rules, so the applier can
//! recognise the jumps it finds in the kernel.

use std::fmt::Write as _;
use std::net::IpAddr;

use super::names::protocol_word;
use super::ruleset::{Comment, Match, Rule, Ruleset, Table, Target};
use crate::cluster::IpFamily;

/// One rule's words after `-A CHAIN`, starting with a space.
pub fn rule_words(out: &mut String, rule: &Rule, family: IpFamily) {
    for m in &rule.matches {
        match_words(out, m, family);
    }
    target_words(out, &rule.target);
}

/// `-A chain <rule>` as one line, with its newline.
pub fn append_line(out: &mut String, chain: &str, rule: &Rule, family: IpFamily) {
    out.push_str("-A ");
    out.push_str(chain);
    rule_words(out, rule, family);
    out.push('\n');
}

fn not(out: &mut String, negate: bool) {
    if negate {
        out.push_str(" !");
    }
}

fn comment(out: &mut String, c: &Comment) {
    // Comment holds [A-Za-z0-9 ./:_>-] only: nothing to escape inside the quotes.
    let _ = write!(out, " -m comment --comment \"{}\"", c.as_str());
}

fn match_words(out: &mut String, m: &Match, family: IpFamily) {
    match m {
        Match::Source { net, negate } => {
            not(out, *negate);
            let _ = write!(out, " -s {net}");
        }
        Match::Destination { net, negate } => {
            not(out, *negate);
            let _ = write!(out, " -d {net}");
        }
        Match::InInterface { name, negate } => {
            not(out, *negate);
            let _ = write!(out, " -i {}", name.as_str());
            if name.is_prefix() {
                out.push('+');
            }
        }
        Match::Protocol(p) => {
            let _ = write!(out, " -p {}", protocol_word(*p));
        }
        Match::DestinationPort(p, port) => {
            let w = protocol_word(*p);
            let _ = write!(out, " -m {w} --dport {port}");
        }
        Match::Comment(c) => comment(out, c),
        Match::AddrTypeLocal { source, negate } => {
            out.push_str(" -m addrtype");
            not(out, *negate);
            out.push_str(if *source {
                " --src-type LOCAL"
            } else {
                " --dst-type LOCAL"
            });
        }
        Match::CtState { states, negate } => {
            out.push_str(" -m conntrack");
            not(out, *negate);
            let _ = write!(out, " --ctstate {states}");
        }
        Match::Mark { mark, negate } => {
            out.push_str(" -m mark");
            not(out, *negate);
            let _ = write!(out, " --mark {mark:#x}/{mark:#x}");
        }
        Match::Probability { remaining } => {
            let p = 1.0 / f64::from(*remaining);
            let _ = write!(out, " -m statistic --mode random --probability {p:.10}");
        }
        Match::RecentCheck { name, seconds } => {
            let _ = write!(
                out,
                " -m recent --name {name} --mask {} --rsource --rcheck --seconds {seconds} --reap",
                mask(family)
            );
        }
        Match::RecentSet { name } => {
            let _ = write!(
                out,
                " -m recent --name {name} --mask {} --rsource --set",
                mask(family)
            );
        }
    }
}

/// The `recent` mask that keys on the whole source address.
fn mask(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "255.255.255.255",
        IpFamily::V6 => "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
    }
}

fn target_words(out: &mut String, t: &Target) {
    match t {
        Target::Jump(c) => {
            let _ = write!(out, " -j {c}");
        }
        Target::None => {}
        Target::Return => out.push_str(" -j RETURN"),
        Target::Accept => out.push_str(" -j ACCEPT"),
        Target::Drop => out.push_str(" -j DROP"),
        Target::Reject => out.push_str(" -j REJECT"),
        Target::RejectTcpReset => out.push_str(" -j REJECT --reject-with tcp-reset"),
        Target::Dnat { ip, port } => {
            let _ = match ip {
                IpAddr::V4(a) => write!(out, " -j DNAT --to-destination {a}:{port}"),
                IpAddr::V6(a) => write!(out, " -j DNAT --to-destination [{a}]:{port}"),
            };
        }
        Target::OrMark(m) => {
            let _ = write!(out, " -j MARK --or-mark {m:#x}");
        }
        Target::XorMark(m) => {
            let _ = write!(out, " -j MARK --xor-mark {m:#x}");
        }
        Target::Masquerade => out.push_str(" -j MASQUERADE --random-fully"),
    }
}

/// The `iptables-restore --noflush` input that creates `want` on a node holding nothing of
/// ours: what `plan --proxy-mode iptables` prints and the goldens hold.
pub fn from_scratch(want: &Ruleset) -> String {
    let mut out = String::new();
    for table in Table::ALL {
        let _ = writeln!(out, "*{}", table.as_str());
        for (name, _) in want.chains(table) {
            let _ = writeln!(out, ":{name} - [0:0]");
        }
        for (name, rules) in want.chains(table) {
            for r in rules {
                append_line(&mut out, name.as_str(), r, want.family);
            }
        }
        jumps(&mut out, want, table, |_| true);
        out.push_str("COMMIT\n");
    }
    out
}

/// Inserts the jumps of `table` that `missing` selects at the head of their built-in chains,
/// so that, when all are missing, they end up in the planned order.
pub fn jumps(out: &mut String, want: &Ruleset, table: Table, missing: impl Fn(&str) -> bool) {
    let list = &want.table(table).jumps;
    for (builtin, rule) in list.iter().rev() {
        let line = jump_line(builtin.as_str(), rule, want.family);
        if missing(&line) {
            let _ = writeln!(
                out,
                "-I {} 1{}",
                builtin.as_str(),
                &line[3 + builtin.as_str().len()..]
            );
        }
    }
}

/// A jump rule as `iptables-save` prints it (`-A CHAIN ...`), without newline.
pub fn jump_line(chain: &str, rule: &Rule, family: IpFamily) -> String {
    let mut s = String::new();
    append_line(&mut s, chain, rule, family);
    s.pop();
    s
}
