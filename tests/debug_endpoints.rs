//! The running proxy's `/debug/services` and `/debug/explain` (root): the binary follows a
//! manifest directory in nftables mode inside a fresh network namespace, and is asked over
//! loopback in that namespace, as `kubectl exec` would. Bad and hostile parameters get one
//! line and 400; the answers come from the proxy's model and from its table in the kernel.

#![allow(
    clippy::disallowed_methods,
    reason = "runs the built binary and python in a namespace, writes a manifest file"
)]

#[path = "support/host.rs"]
mod host;

use std::time::{Duration, Instant};

use host::{ChildGuard, NetNs};

const MANIFESTS: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: node-a}
spec: {podCIDRs: [10.244.1.0/24]}
status: {addresses: [{type: InternalIP, address: 10.0.0.11}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  type: ClusterIP
  clusterIP: 10.96.1.10
  clusterIPs: [10.96.1.10]
  ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: default
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: 8080}]
endpoints:
  - addresses: [10.244.1.10]
    conditions: {ready: true, serving: true, terminating: false}
    nodeName: node-a
---
apiVersion: v1
kind: Service
metadata: {name: empty, namespace: default}
spec:
  type: ClusterIP
  clusterIP: 10.96.1.20
  clusterIPs: [10.96.1.20]
  ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]
"#;

/// GETs `path` from the metrics address; prints the status code, a newline, then the body.
const GET: &str = r#"
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen("http://127.0.0.1:10249" + sys.argv[1], timeout=5)
    print(r.status); print(r.read().decode(), end="")
except urllib.error.HTTPError as e:
    print(e.code); print(e.read().decode(), end="")
except Exception as e:
    print(0); print(e)
"#;

fn get(ns: &NetNs, path: &str) -> (u16, String) {
    let out = ns.output("python3", &["-c", GET, path]);
    let (code, body) = out.split_once('\n').unwrap_or((&out, ""));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

#[test]
fn the_running_proxy_answers_what_it_knows_and_refuses_bad_questions() {
    let ns = NetNs::new("dbg");
    ns.output("ip", &["link", "set", "lo", "up"]);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("cluster.yaml"), MANIFESTS).expect("write manifests");
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
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, body) = get(&ns, "/debug/explain?to=10.96.1.10:80");
        if code == 200 && body.contains("10.244.1.10:8080") {
            break;
        }
        assert!(
            proxy.exited().is_none(),
            "the proxy exited:\n{}",
            proxy.log_tail(20)
        );
        assert!(
            Instant::now() < deadline,
            "no answer: {code} {body}\n{}",
            proxy.log_tail(20)
        );
        std::thread::sleep(Duration::from_millis(200));
    }

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

    for (path, starts) in [
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
