//! The running proxy's `/debug/services`, `/debug/explain` and `/debug/status` (root), and
//! the `status` command that asks for the last: the binary follows a manifest directory in
//! nftables mode (and, once, iptables mode) inside a fresh network namespace, and is asked
//! over loopback in that namespace, as `kubectl exec` would. Bad and hostile parameters get
//! one line and 400; the answers come from the proxy's model, its rules in the kernel and its
//! own state. With the metrics server on a wildcard address, `/debug` answers over loopback
//! only, and no endpoint of the proxy takes a method that asks for a change.

#![allow(
    clippy::disallowed_methods,
    reason = "runs the built binary and python in a namespace, writes a manifest file"
)]

use support::host;
use support::web_cluster;

use std::time::Duration;

use host::{ChildGuard, NetNs};

/// Asks `http://ADDR:PORT` + `PATH` with `METHOD` (argv 1-3; GET and 127.0.0.1:10249 when
/// only the path is given); prints the status code, a newline, then the body.
const GET: &str = r#"
import sys, urllib.request, urllib.error
path = sys.argv[1]
method = sys.argv[2] if len(sys.argv) > 2 else "GET"
at = sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1:10249"
data = b"" if method in ("POST", "PUT", "PATCH") else None
try:
    q = urllib.request.Request("http://" + at + path, data=data, method=method)
    r = urllib.request.urlopen(q, timeout=5)
    print(r.status); print(r.read().decode(), end="")
except urllib.error.HTTPError as e:
    print(e.code); print(e.read().decode(), end="")
except Exception as e:
    print(0); print(e)
"#;

fn get(ns: &NetNs, path: &str) -> (u16, String) {
    ask(ns, "GET", "127.0.0.1:10249", path)
}

/// Waits until the proxy answers `path` with 200 and a body containing `want`; returns that
/// body.
fn wait_for_answer(ns: &NetNs, proxy: &mut ChildGuard, path: &str, want: &str) -> String {
    let mut body = String::new();
    let what = format!("{path} answers 200 with {want:?}");
    proxy.wait_until(&what, Duration::from_secs(30), || {
        let (code, answer) = get(ns, path);
        body = answer;
        code == 200 && body.contains(want)
    });
    body
}

fn ask(ns: &NetNs, method: &str, at: &str, path: &str) -> (u16, String) {
    let out = ns.output("python3", &["-c", GET, path, method, at]);
    let (code, body) = out.split_once('\n').unwrap_or((&out, ""));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

#[test]
fn the_running_proxy_answers_what_it_knows_and_refuses_bad_questions() {
    let ns = NetNs::new("dbg");
    ns.output("ip", &["link", "set", "lo", "up"]);
    let dir = tempfile::tempdir().expect("tempdir");
    web_cluster::write(dir.path(), true);
    let manifests = dir.path().display().to_string();
    let mut proxy = ChildGuard::spawn(
        &format!("{}-proxy", ns.name),
        ns.command(env!("CARGO_BIN_EXE_kube-proxy-rs")).args([
            "--proxy-mode=nftables",
            "--manifests",
            &manifests,
            "--hostname-override=node-a",
            "--cluster-cidr=10.244.0.0/16",
            "--metrics-bind-address=127.0.0.1:10249",
            "--healthz-bind-address=127.0.0.1:10256",
        ]),
    );
    // Synced once the table holds the web Service's endpoint.
    wait_for_answer(
        &ns,
        &mut proxy,
        "/debug/explain?to=10.96.1.10:80",
        "10.244.1.10:8080",
    );

    let (code, text) = get(&ns, "/debug/explain?to=10.96.1.10:80");
    assert_eq!(code, 200);
    assert!(
        text.contains("(nftables mode, rules read from the kernel)"),
        "{text}"
    );
    assert!(
        text.contains("service port: default/web:http (ClusterIP"),
        "{text}"
    );
    assert!(
        text.contains("outcome: forwarded to an endpoint, source kept"),
        "{text}"
    );
    assert!(!text.contains("kernel differs"), "synced: no drift\n{text}");

    let (code, json) = get(&ns, "/debug/explain?to=10.96.1.20:80&from=node&output=json");
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(v["outcome"]["verdict"], "rejected", "{json}");
    assert_eq!(v["packet"]["origin"], "node");

    let (code, json) = get(&ns, "/debug/services?output=json&service=default/empty");
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let names: Vec<&str> = v["servicePorts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default/empty:http"]);
    let (code, table) = get(&ns, "/debug/services");
    assert_eq!(code, 200);
    assert!(
        table.contains("default/web:http") && table.contains("10.244.1.10"),
        "{table}"
    );

    let (code, table) = get(&ns, "/debug/status");
    assert_eq!(code, 200, "{table}");
    for want in [
        "node node-a, nftables mode, rules read from the kernel",
        "kernel: matches the plan",
        " ok, 0 failed",
    ] {
        assert!(table.contains(want), "{want:?} in\n{table}");
    }
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} in\n{table}"))
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    // SERVICE PORT, PROTO, FRONTENDS, ENDPOINTS (programmed/model), POLICY, HEALTH, DRIFT.
    assert_eq!(
        row("default/web:http")[1..4],
        ["TCP", "1", "1/1"],
        "{table}"
    );
    assert_eq!(row("default/empty:http")[3], "0/0", "{table}");

    // `status` asks the same proxy, as an operator would with kubectl exec.
    let status = |args: &[&str]| {
        ns.command(env!("CARGO_BIN_EXE_kube-proxy-rs"))
            .arg("status")
            .arg("--metrics-bind-address=0.0.0.0:10249")
            .args(args)
            .output()
            .expect("run status")
    };
    let out = status(&["--service=default/web"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("  - ClusterIP 10.96.1.10:80: forwards to 1 endpoint (10.244.1.10:8080)"),
        "{text}"
    );
    assert!(!text.contains("default/empty"), "{text}");
    let out = status(&["--output=json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let web = v["servicePorts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "default/web:http")
        .expect("web");
    assert_eq!(
        (&web["endpoints"], &web["programmed"]),
        (&1.into(), &1.into()),
        "{v}"
    );
    assert!(v["sync"]["syncsOk"].as_u64().unwrap() >= 1, "{v}");
    let out = status(&["--service=web\nforged"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: --service: expected"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let out = ns
        .command(env!("CARGO_BIN_EXE_kube-proxy-rs"))
        .args(["status", "--metrics-bind-address=127.0.0.1:10999"])
        .output()
        .expect("run status");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: cannot reach the proxy's metrics address 127.0.0.1:10999"),
        "{err}"
    );

    // `explain` without --manifests or a kubeconfig asks the running proxy, as `status` does.
    let out = ns
        .command(env!("CARGO_BIN_EXE_kube-proxy-rs"))
        .args([
            "explain",
            "--to=10.96.1.10:80",
            "--hostname-override=node-a",
            "--metrics-bind-address=0.0.0.0:10249",
        ])
        .output()
        .expect("run explain");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The two answers are asked at different moments: a change queued between them (the node's
    // addresses, say) adds a "sync pending" note that only one of them carries, or carries with
    // another age. Everything above that note must be the same.
    let settled = |answer: &str| {
        answer
            .split("sync pending:")
            .next()
            .unwrap_or("")
            .to_string()
    };
    assert_eq!(
        settled(&text),
        settled(&get(&ns, "/debug/explain?to=10.96.1.10:80").1),
        "the proxy's own answer"
    );
    assert!(
        text.contains("(nftables mode, rules read from the kernel)"),
        "{text}"
    );

    // `/debug/` names what it serves.
    let (code, index) = get(&ns, "/debug/");
    assert_eq!(code, 200, "{index}");
    for path in [
        "/debug/services",
        "/debug/explain?to=",
        "/debug/status",
        "/metrics",
    ] {
        assert!(index.contains(path), "{path} in\n{index}");
    }
    assert_eq!(get(&ns, "/debug").1, index);

    for (path, starts) in [
        ("/debug/status?service=web%0Aforged", "service: "),
        ("/debug/status?output=yaml", "output: "),
        ("/debug/explain", "to: required"),
        ("/debug/explain?to=10.96.1.10", "--to "),
        (
            "/debug/explain?to=10.96.1.10:80&from=%0Aforged%20line",
            "--from ",
        ),
        (
            "/debug/explain?to=10.96.1.10:80&in_interface=eth0%3Bdrop",
            "--in-interface ",
        ),
        ("/debug/explain?to=10.96.1.10:80&output=yaml", "output: "),
    ] {
        let (code, body) = get(&ns, path);
        assert_eq!(code, 400, "{path}: {body}");
        assert!(body.starts_with(starts), "{path}: {body}");
        assert_eq!(body.lines().count(), 1, "{path}: one line: {body:?}");
    }
    let long = format!("/debug/explain?to={}", "9".repeat(4096));
    let (code, body) = get(&ns, &long);
    assert_eq!(code, 400, "{body}");
    assert!(body.len() < 200, "{body}");
}

#[test]
fn in_iptables_mode_the_running_proxy_explains_over_the_chains_it_programmed() {
    let ns = NetNs::new("dbg-ipt");
    ns.output("ip", &["link", "set", "lo", "up"]);
    let dir = tempfile::tempdir().expect("tempdir");
    web_cluster::write(dir.path(), true);
    let manifests = dir.path().display().to_string();
    let mut proxy = ChildGuard::spawn(
        &format!("{}-proxy", ns.name),
        ns.command(env!("CARGO_BIN_EXE_kube-proxy-rs")).args([
            "--proxy-mode=iptables",
            "--manifests",
            &manifests,
            "--hostname-override=node-a",
            "--cluster-cidr=10.244.0.0/16",
            "--metrics-bind-address=127.0.0.1:10249",
            "--healthz-bind-address=127.0.0.1:10256",
        ]),
    );
    // Synced once the kernel's chains send the web Service to its endpoint.
    let text = wait_for_answer(
        &ns,
        &mut proxy,
        "/debug/explain?to=10.96.1.10:80",
        "→ 10.244.1.10:8080",
    );
    assert!(
        text.contains("(iptables mode, rules read from the kernel)"),
        "{text}"
    );
    assert!(!text.contains("kernel differs"), "synced: no drift\n{text}");

    let (code, table) = get(&ns, "/debug/status");
    assert_eq!(code, 200, "{table}");
    for want in [
        "node node-a, iptables mode, rules read from the kernel",
        "kernel: matches the plan",
    ] {
        assert!(table.contains(want), "{want:?} in\n{table}");
    }
    // The whole node's table is not traced in iptables mode (see status::port_status); one
    // Service is, through the kernel's chains.
    let (code, table) = get(&ns, "/debug/status?service=default/web");
    assert_eq!(code, 200, "{table}");
    assert!(
        table.contains("  - ClusterIP 10.96.1.10:80: forwards to 1 endpoint (10.244.1.10:8080)"),
        "{table}"
    );
    let web = table
        .lines()
        .find(|l| l.starts_with("default/web:http"))
        .unwrap_or_else(|| panic!("default/web:http in\n{table}"));
    assert!(
        web.contains(" 1/1 "),
        "programmed/model from the kernel: {web}"
    );
}

#[test]
fn on_a_wildcard_address_debug_answers_over_loopback_only_and_nothing_takes_a_change() {
    let ns = NetNs::new("dbg-lo");
    ns.output("ip", &["link", "set", "lo", "up"]);
    // The node's own address: not a loopback one, though it sits on `lo`.
    ns.output("ip", &["addr", "add", "10.0.0.11/32", "dev", "lo"]);
    let dir = tempfile::tempdir().expect("tempdir");
    web_cluster::write(dir.path(), true);
    let manifests = dir.path().display().to_string();
    let mut proxy = ChildGuard::spawn(
        &format!("{}-proxy", ns.name),
        ns.command(env!("CARGO_BIN_EXE_kube-proxy-rs")).args([
            "--proxy-mode=nftables",
            "--manifests",
            &manifests,
            "--hostname-override=node-a",
            "--cluster-cidr=10.244.0.0/16",
            "--metrics-bind-address=0.0.0.0:10249",
            "--healthz-bind-address=0.0.0.0:10256",
        ]),
    );
    wait_for_answer(&ns, &mut proxy, "/debug/status", "kernel: matches the plan");
    let node = "10.0.0.11:10249";
    for path in ["/debug/", "/debug", "/debug/status", "/debug/services"] {
        let (code, body) = ask(&ns, "GET", node, path);
        assert_eq!(code, 403, "{path} at the node's address: {body}");
        assert!(body.contains("only over loopback"), "{path}: {body}");
        assert_eq!(ask(&ns, "GET", "127.0.0.1:10249", path).0, 200, "{path}");
    }
    // What a scraper on another host reads is still served there.
    assert_eq!(ask(&ns, "GET", node, "/metrics").0, 200);
    assert_eq!(ask(&ns, "GET", "10.0.0.11:10256", "/healthz").0, 200);

    for (at, path) in [
        ("127.0.0.1:10249", "/debug/status"),
        ("127.0.0.1:10249", "/debug/explain?to=10.96.1.10:80"),
        ("127.0.0.1:10249", "/metrics"),
        ("127.0.0.1:10249", "/configz"),
        ("127.0.0.1:10249", "/proxyMode"),
        ("127.0.0.1:10249", "/healthz"),
        ("127.0.0.1:10256", "/healthz"),
        ("127.0.0.1:10256", "/livez"),
    ] {
        for method in ["POST", "PUT", "PATCH", "DELETE"] {
            let (code, body) = ask(&ns, method, at, path);
            assert_eq!(code, 405, "{method} {at}{path}: {body}");
        }
    }
}
