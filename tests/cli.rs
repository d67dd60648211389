//! The binary as an operator meets it: one error line and exit code 1 for bad input, `--help`
//! listing upstream's flags, and `plan` printing the same report as the library.

#![allow(clippy::disallowed_methods)] // runs the built binary and writes scratch files

use std::path::Path;
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kube-proxy-rs"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn config_file(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path.display().to_string()
}

#[test]
fn a_bad_config_file_prints_one_line_naming_the_field_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let head = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";
    let cases = [
        (
            "range.yaml",
            "iptables:\n  masqueradeBit: 40\n",
            "iptables.masqueradeBit",
        ),
        ("unknown.yaml", "bogus: 1\n", "bogus"),
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
        let out = run(&["--config", &path]);
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
    let cfg = config_file(
        dir.path(),
        "c.yaml",
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\n",
    );
    let written = dir.path().join("out.yaml").display().to_string();
    // A flag beside --config is ignored with a warning: a log line, and nothing touches the host.
    let out = run(&[
        "--config",
        &cfg,
        "--masquerade-all",
        "--write-config-to",
        &written,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let log = stderr(&out);
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
fn json_logs_have_upstreams_shape() {
    let dir = tempfile::tempdir().unwrap();
    let written = dir.path().join("out.yaml").display().to_string();
    // A flag beside --config is a warning line; --write-config-to touches nothing else.
    let cfg = config_file(
        dir.path(),
        "c.yaml",
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\nlogging:\n  format: json\n",
    );
    let out = run(&[
        "--config",
        &cfg,
        "--masquerade-all",
        "--write-config-to",
        &written,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let log = stderr(&out);
    let line = log.lines().find(|l| l.contains("is ignored")).expect(&log);
    let v: serde_json::Value = serde_json::from_str(line).expect(line);
    assert!(line.starts_with("{\"ts\":"), "{line}");
    let at = |key: &str| line.find(&format!("\"{key}\":")).expect(key);
    assert!(
        at("ts") < at("caller") && at("caller") < at("msg") && at("msg") < at("v"),
        "{line}"
    );
    assert!(
        v["ts"].as_f64().unwrap() > 1.7e12,
        "milliseconds since the epoch: {line}"
    );
    assert!(v["caller"].as_str().unwrap().contains(".rs:"), "{line}");
    assert_eq!(v["v"], 0);
}

#[test]
fn version_raw_prints_upstreams_fields() {
    let out = run(&["--version=raw"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("version.Info{Major:\"0\", Minor:\"1\", "),
        "{text}"
    );
    for field in [
        "GitVersion:\"v0.1.0\"",
        "GitCommit:\"",
        "GitTreeState:\"",
        "BuildDate:\"20",
        "GoVersion:\"\"",
        "Compiler:\"rustc ",
        "Platform:\"linux/",
    ] {
        assert!(text.contains(field), "{field} in {text}");
    }
    assert_eq!(text.lines().count(), 1, "{text}");
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
