//! The binary as an operator meets it: one error line and exit code 1 for bad input, `--help`
//! listing upstream's flags, and `plan` printing the same report as the library.

#![allow(clippy::disallowed_methods)] // runs the built binary and writes scratch files

use support::run_binary;

use std::path::Path;
use std::process::Command;

use run_binary::{CONFIG_HEAD, config_file, log_of_ignored_flag, run, stderr};

#[test]
fn a_bad_config_file_prints_one_line_naming_the_field_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let head = CONFIG_HEAD;
    let cases = [
        (
            "range.yaml",
            "iptables:\n  masqueradeBit: 40\n",
            "iptables.masqueradeBit",
        ),
        (
            // Read leniently past the unknown field, then refused for the wrong type.
            "unknown.yaml",
            "bogus: 1\nmode: [nftables]\n",
            "mode",
        ),
        ("type.yaml", "mode: [nftables]\n", "mode"),
        ("mode.yaml", "mode: xdp\n", "mode"),
        (
            "duration.yaml",
            "iptables:\n  syncPeriod: soon\n",
            "iptables.syncPeriod",
        ),
    ];
    for (name, body, field) in cases {
        let path = config_file(dir.path(), name, &format!("{head}{body}"));
        // Were a case accepted, the configuration would be written, not the proxy started.
        let out = run(&["--config", &path, "--write-config-to=/dev/null"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{name}: exactly one line: {err}");
        assert!(err.contains(field), "{name}: names {field}: {err}");
    }
    let out = run(&["--config", "/nonexistent/kube-proxy.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stderr(&out).lines().count(), 1);
}

#[test]
fn bad_flags_print_one_line_and_exit_1() {
    for args in [
        &["--no-such-flag"][..],
        &["--proxy-mode=fast"],
        &["--iptables-masquerade-bit=99"],
        &["--iptables-sync-period=later"],
        &["--feature-gates=NoSuchGate=true"],
        &["plan", "--output", "yaml"],
        &["explain", "--to", "10.96.1.10"],
        &["explain", "--to", "10.96.1.10:80/icmp"],
        &[
            "explain",
            "--to",
            "10.96.1.10:80",
            "--from",
            "a pod\nforged line",
        ],
        &[
            "explain",
            "--to",
            "10.96.1.10:80",
            "--in-interface",
            "eth0;drop",
        ],
    ] {
        let out = run(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn help_lists_upstream_flags() {
    let out = run(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--config",
        "--kubeconfig",
        "--master",
        "--hostname-override",
        "--bind-address",
        "--proxy-mode",
        "--cluster-cidr",
        "--nodeport-addresses",
        "--masquerade-all",
        "--detect-local-mode",
        "--pod-bridge-interface",
        "--pod-interface-name-prefix",
        "--healthz-bind-address",
        "--metrics-bind-address",
        "--iptables-sync-period",
        "--iptables-min-sync-period",
        "--iptables-masquerade-bit",
        "--iptables-localhost-nodeports",
        "--ipvs-scheduler",
        "--ipvs-sync-period",
        "--ipvs-min-sync-period",
        "--ipvs-strict-arp",
        "--ipvs-exclude-cidrs",
        "--conntrack-max-per-core",
        "--conntrack-min",
        "--conntrack-tcp-timeout-established",
        "--conntrack-tcp-timeout-close-wait",
        "--conntrack-udp-timeout",
        "--kube-api-qps",
        "--kube-api-burst",
        "--kube-api-content-type",
        "--config-sync-period",
        "--oom-score-adj",
        "--feature-gates",
        "--cleanup",
        "--write-config-to",
        "--version",
        "--logging-format",
        "--manifests",
        "-v",
    ] {
        assert!(help.contains(flag), "--help lists {flag}");
    }
}

#[test]
fn write_config_to_round_trips_through_config() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first.yaml").display().to_string();
    let second = dir.path().join("second.yaml").display().to_string();
    let out = run(&[
        "--proxy-mode=nftables",
        "--cluster-cidr=10.244.0.0/16",
        &format!("--write-config-to={first}"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run(&["--config", &first, "--write-config-to", &second]);
    assert!(out.status.success(), "{}", stderr(&out));
    let a = std::fs::read_to_string(&first).unwrap();
    assert!(a.contains("mode: nftables"), "{a}");
    assert_eq!(a, std::fs::read_to_string(&second).unwrap());
}

#[test]
fn plan_prints_the_golden_report() {
    let out = run(&[
        "plan",
        "--manifests",
        "examples/cluster",
        "--hostname-override=node-a",
        "--output=json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let want = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli/testdata/example.node-a.json"),
    )
    .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
}

#[test]
fn plan_in_ipvs_mode_lists_the_virtual_services_as_ipvsadm_does() {
    let out = run(&[
        "plan",
        "--manifests",
        "examples/cluster",
        "--hostname-override=node-a",
        "--proxy-mode=ipvs",
        "--ipvs-scheduler=sh",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let (_, ipvs) = text
        .split_once("# ipvs: the virtual services this node would program")
        .unwrap_or_else(|| panic!("no ipvs section in:\n{text}"));
    assert!(ipvs.contains("# IPv4 kube-ipvs0: "), "{ipvs}");
    let services: Vec<&str> = ipvs.lines().filter(|l| l.starts_with("-A ")).collect();
    let destinations = ipvs.lines().filter(|l| l.starts_with("-a ")).count();
    assert!(!services.is_empty() && destinations > 0, "{ipvs}");
    assert!(
        services.iter().all(|l| l.contains(" -s sh")),
        "the scheduler flag reaches every virtual service: {services:?}"
    );
    assert!(
        ipvs.lines()
            .filter(|l| l.starts_with("-a "))
            .all(|l| l.ends_with(" -m -w 1")),
        "NAT, weight 1: {ipvs}"
    );
}

#[test]
fn logs_to_a_pipe_are_klog_lines_without_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    // A flag beside --config is ignored with a warning: a log line, and nothing touches the host.
    let log = log_of_ignored_flag(dir.path(), "mode: nftables\n");
    assert!(log.contains("--masquerade-all is ignored"), "{log}");
    assert!(!log.contains('\u{1b}'), "escape sequences in {log:?}");
    // klog's shape, as upstream's: `W1202 04:36:03.547810   12375 main.rs:87] "..."`.
    let line = log.lines().find(|l| l.contains("is ignored")).unwrap();
    let (head, message) = line.split_once("] ").expect("klog header ends in `] `");
    let words: Vec<&str> = head.split_whitespace().collect();
    assert_eq!(words.len(), 4, "{line}");
    assert!(words[0].starts_with('W') && words[0].len() == 5, "{line}");
    assert!(
        words[1].len() == 15 && words[1].as_bytes()[2] == b':',
        "{line}"
    );
    assert!(
        words[2].parse::<u32>().is_ok() && words[3].contains(".rs:"),
        "{line}"
    );
    assert!(message.starts_with('"'), "{line}");
}

#[test]
fn plan_help_shows_what_to_plan_before_the_proxy_flags() {
    let out = run(&["plan", "--help"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let at = |flag: &str| {
        help.find(flag)
            .unwrap_or_else(|| panic!("{flag} missing:\n{help}"))
    };
    for first in [
        "--manifests",
        "--hostname-override",
        "--output",
        "--proxy-mode",
    ] {
        for later in [
            "--masquerade-all",
            "--cluster-cidr",
            "--healthz-bind-address",
        ] {
            assert!(
                at(first) < at(later),
                "{first} should come before {later}:\n{help}"
            );
        }
    }
}

#[test]
fn plan_into_a_closed_pipe_ends_quietly() {
    // `plan ... | head` closes the pipe early; here it is closed before plan writes at all.
    let mut child = Command::new(env!("CARGO_BIN_EXE_kube-proxy-rs"))
        .args([
            "plan",
            "--manifests",
            "examples/cluster",
            "--hostname-override=node-a",
            "--proxy-mode=nftables",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary runs");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("it ends");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
}

#[test]
fn plan_without_a_directory_fails_clearly() {
    let out = run(&[
        "plan",
        "--manifests",
        "/nonexistent/dir",
        "--hostname-override=n",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("/nonexistent/dir"));
}

#[test]
fn explain_names_the_service_the_endpoints_and_why_in_every_mode() {
    for mode in ["nftables", "iptables", "ipvs"] {
        let out = run(&[
            "explain",
            "--manifests",
            "examples/cluster",
            "--hostname-override=node-a",
            &format!("--proxy-mode={mode}"),
            "--cluster-cidr=10.244.0.0/16",
            "--to=10.0.0.11:30080",
            "--from=outside",
        ]);
        assert!(out.status.success(), "{mode}: {}", stderr(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!("({mode} mode, rules as planned)")),
            "{text}"
        );
        assert!(
            text.contains("service port: default/web-nodeport:http (NodePort"),
            "{text}"
        );
        assert!(
            text.contains("outcome: forwarded to an endpoint, masqueraded"),
            "{text}"
        );
        assert!(text.contains("externalTrafficPolicy Cluster"), "{text}");
        assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
        let out = run(&[
            "explain",
            "--manifests",
            "examples/cluster",
            "--hostname-override=node-a",
            &format!("--proxy-mode={mode}"),
            "--to=10.0.0.11:30080",
            "--output=json",
        ]);
        assert!(out.status.success(), "{mode}: {}", stderr(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
        assert_eq!(v["mode"], mode);
        assert_eq!(v["servicePort"]["frontend"], "NodePort");
        assert_eq!(v["outcome"]["verdict"], "forwarded");
    }
}

#[test]
fn upstream_flags_that_are_not_acted_on_start_with_a_warning_instead_of_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("out.yaml").display().to_string();
    let out = run(&[
        "--vmodule=proxier=4",
        "--log-flush-frequency=5s",
        "--log_text_split_stream",
        "--profiling",
        &format!("--write-config-to={out_file}"),
    ]);
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("--vmodule is accepted but not acted on: -v applies to every source file"),
        "{log}"
    );
    assert!(
        log.contains(
            "--profiling is accepted but not acted on: kube-proxy-rs serves no /debug/pprof"
        ),
        "{log}"
    );
    assert!(
        !log.contains("--log-flush-frequency"),
        "5s is the default: nothing to say\n{log}"
    );
    let written = std::fs::read_to_string(&out_file).unwrap();
    assert!(written.contains("filePattern: proxier"), "{written}");
}

#[test]
fn a_config_with_an_unknown_field_is_read_leniently_with_one_warning() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config_file(
        dir.path(),
        "newer.yaml",
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n\
         mode: nftables\nnftables:\n  someFutureField: true\n",
    );
    let written = dir.path().join("out.yaml").display().to_string();
    let out = run(&["--config", &cfg, "--write-config-to", &written]);
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    let warnings: Vec<&str> = log.lines().filter(|l| l.starts_with('W')).collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(
        warnings[0].contains("strict decoding failed (nftables.someFutureField: unknown field"),
        "{log}"
    );
    assert!(
        std::fs::read_to_string(&written)
            .unwrap()
            .contains("mode: nftables")
    );
}

#[test]
fn a_misspelled_flag_or_a_bad_number_says_what_to_give() {
    for (args, want) in [
        (
            &["--proxy-mod=ipvs"][..],
            "error: unknown flag --proxy-mod; did you mean --proxy-mode?",
        ),
        (
            &["--kube-api-qps=fast"],
            "error: --kube-api-qps: must be a number such as 5 or 0.5, got \"fast\"",
        ),
        (
            &["--conntrack-min", "lots"],
            "error: --conntrack-min: must be a whole number such as 10 or -999, got \"lots\"",
        ),
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(stderr(&out).trim_end(), want, "{args:?}");
    }
}

#[test]
fn subcommands_refuse_the_proxys_one_shot_flags() {
    let dir = tempfile::tempdir().unwrap();
    let written = dir.path().join("out.yaml").display().to_string();
    for flag in [
        "--cleanup".to_owned(),
        format!("--write-config-to={written}"),
    ] {
        let out = run(&[
            "plan",
            "--manifests",
            "examples/cluster",
            "--hostname-override=node-a",
            &flag,
        ]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{flag}: {err}");
        assert!(
            err.contains("`plan` does not take --") && out.stdout.is_empty(),
            "{flag}: {err}"
        );
    }
    assert!(!Path::new(&written).exists());
}

#[test]
fn help_says_what_is_not_acted_on_and_names_every_mode() {
    let out = run(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for want in [
        "[Not acted on: kube-proxy-rs serves no /debug/pprof]",
        "[Not acted on: the watches have no periodic resync]",
        "iptables, ipvs, nftables, userspace or ebpf",
    ] {
        assert!(help.contains(want), "{want}: {help}");
    }
    let out = run(&["explain", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(!help.contains("(nftables mode)"), "{help}");
}

/// Upstream kube-proxy 1.37's flags: `(name, hidden from its --help)`.
fn upstream_flags() -> Vec<(&'static str, bool)> {
    include_str!("fixtures/upstream-kube-proxy-flags.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| match l.split_once(' ') {
            Some((name, "hidden")) => (name, true),
            _ => (l.trim(), false),
        })
        .collect()
}

/// An operator's command line for upstream must not crash-loop ours: every flag upstream
/// accepts, we accept.
#[test]
fn every_flag_upstream_accepts_is_accepted() {
    let command = kube_proxy_rs::cli::parse::command();
    let ours: std::collections::BTreeSet<&str> = command
        .get_arguments()
        .filter_map(|a| a.get_long())
        .chain(["help"])
        .collect();
    let missing: Vec<&str> = upstream_flags()
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| !ours.contains(name))
        .collect();
    assert!(missing.is_empty(), "upstream flags we refuse: {missing:?}");
}

/// Set where testenv is always built (`.ci/run`): the upstream binary must be there.
const REQUIRE_TESTENV: &str = "KPRS_REQUIRE_TESTENV";

/// The list above is upstream's own: its binary's `--help` names exactly the visible ones, and
/// it takes the hidden ones.
#[test]
fn the_upstream_flag_list_is_what_upstreams_binary_takes() {
    let binary = Path::new(env!("CARGO_MANIFEST_DIR")).join("testenv/bin/kube-proxy");
    if !binary.exists() {
        assert!(
            std::env::var_os(REQUIRE_TESTENV).is_none(),
            "{} is missing ({REQUIRE_TESTENV} is set): run testenv/build",
            binary.display()
        );
        eprintln!(
            "SKIPPED: {} is missing; testenv/build builds it",
            binary.display()
        );
        return;
    }
    let out = Command::new(&binary).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let listed: Vec<&str> = help
        .lines()
        .map(str::trim_start)
        .filter_map(|l| {
            let l = l
                .split_once(", ")
                .filter(|(s, _)| s.len() == 2)
                .map_or(l, |(_, r)| r);
            l.strip_prefix("--")
        })
        .map(|l| l.split_whitespace().next().unwrap_or_default())
        .collect();
    let flags = upstream_flags();
    let visible: Vec<&str> = flags.iter().filter(|f| !f.1).map(|f| f.0).collect();
    assert_eq!(listed, visible, "upstream's --help");
    for (name, _) in flags.iter().filter(|f| f.1) {
        let out = Command::new(&binary)
            .args([&format!("--{name}=1"), "--version"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "upstream takes --{name}: {}",
            stderr(&out)
        );
    }
}
