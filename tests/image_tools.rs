//! The image holds what the operations guide has an operator run: every tool a command in
//! `docs/operations.md` starts with (in a code span, a `$ ` line, or after `kubectl exec … --`)
//! comes from a Debian package the Dockerfile's run-time stage installs, and the binary is on
//! the `PATH`. No container engine runs here, so the Dockerfile is read, not built.

#![allow(
    clippy::disallowed_methods,
    reason = "reads the guide and the Dockerfile"
)]

/// The tools the guide may name, and the Debian package each comes from.
const PACKAGES: &[(&str, &str)] = &[
    ("curl", "curl"),
    ("nft", "nftables"),
    ("iptables", "iptables"),
    ("iptables-save", "iptables"),
    ("iptables-restore", "iptables"),
    ("iptables-nft", "iptables"),
    ("iptables-legacy", "iptables"),
    ("ip6tables", "iptables"),
    ("ip6tables-save", "iptables"),
    ("ipset", "ipset"),
    ("conntrack", "conntrack"),
    ("ipvsadm", "ipvsadm"),
    ("modprobe", "kmod"),
    ("lsmod", "kmod"),
];

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// Every command the guide shows: code spans, `$ ` lines of code blocks, and what follows
/// `kubectl exec … --` in either.
fn commands(guide: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, span) in guide.split('`').enumerate() {
        if i % 2 == 1 && !span.contains('\n') {
            out.push(span.to_string());
        }
    }
    for line in guide.lines() {
        if let Some(command) = line.trim_start().strip_prefix("$ ") {
            out.push(command.to_string());
        }
    }
    let inner: Vec<String> = out
        .iter()
        .filter_map(|c| c.split_once(" -- ").map(|(_, rest)| rest.to_string()))
        .collect();
    out.extend(inner);
    out
}

#[test]
fn every_tool_the_guide_runs_is_in_the_image() {
    let dockerfile = read("Dockerfile");
    let run_stage = dockerfile
        .rsplit("\nFROM ")
        .next()
        .expect("a run-time stage");
    let installed: Vec<&str> = run_stage
        .lines()
        .filter(|l| l.contains("apt-get install"))
        .flat_map(str::split_whitespace)
        .collect();
    let mut missing = Vec::new();
    let mut named = 0;
    for command in commands(&read("docs/operations.md")) {
        let Some(tool) = command.split_whitespace().next() else {
            continue;
        };
        let Some((_, package)) = PACKAGES.iter().find(|(t, _)| *t == tool) else {
            continue;
        };
        named += 1;
        if !installed.contains(package) {
            missing.push(format!("{tool} ({package}): `{command}`"));
        }
    }
    assert!(named > 5, "the guide names tools: {named}");
    assert!(
        missing.is_empty(),
        "the guide runs these, the image lacks them:\n{}",
        missing.join("\n")
    );
    assert!(
        run_stage.contains("/usr/local/bin/kube-proxy-rs"),
        "the binary is on the PATH"
    );
}
