//! What an operator migrating a kubeadm cluster relies on, read from the manifests as Kustomize
//! renders them (no API server): kubeadm's `config.conf` used as it is with the overlay changing
//! only the mode, the node's resolver, one proxy per node during a node-by-node migration, and
//! probes only kube-proxy-rs answers.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::testenv::{bin_dir, output_with_stdin, repo_root};

const MODES: [&str; 4] = ["nftables", "iptables", "ipvs", "ebpf"];
const OPT_IN: &str = "deploy/components/node-opt-in";
/// The node label the opt-in component selects on.
const LABEL: &str = "kube-proxy-rs.io/enabled";

fn fixture(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures/deploy").join(name)
}

/// `kubectl ARGS` (from `testenv/bin`) in the repository; its stdout.
fn kubectl(args: &[&str]) -> String {
    let out = output_with_stdin(
        Command::new(bin_dir().join("kubectl"))
            .args(args)
            .current_dir(repo_root()),
        "",
    );
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The objects `kubectl kustomize DIR` renders.
pub(super) fn rendered(dir: &Path) -> Vec<Value> {
    let text = kubectl(&["kustomize", &dir.display().to_string()]);
    text.split("\n---\n")
        .map(|doc| serde_saphyr::from_str(doc).expect("rendered YAML"))
        .collect()
}

fn one<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = objects.iter().filter(|o| o["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind} expected");
    found[0]
}

/// `to` relative to `from` (both absolute): Kustomize refuses absolute resource paths.
fn relative(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<Component> = from.components().collect();
    let to: Vec<Component> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..from.len() {
        out.push("..");
    }
    out.extend(&to[common..]);
    out
}

/// An operator's own kustomization over this repository's `overlay`, with `components`, and
/// kubeadm's `config.conf` (the fixture) merged into the ConfigMap as it is.
fn operators_kustomization(overlay: &str, components: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let root = repo_root().canonicalize().unwrap();
    let here = dir.path().canonicalize().unwrap();
    let path = |p: &str| relative(&here, &root.join(p)).display().to_string();
    let mut text = format!("resources:\n  - {}\n", path(overlay));
    if !components.is_empty() {
        text.push_str("components:\n");
        for c in components {
            text.push_str(&format!("  - {}\n", path(c)));
        }
    }
    text.push_str(
        "configMapGenerator:\n  - name: kube-proxy-rs\n    namespace: kube-system\n    \
         behavior: merge\n    files:\n      - config.conf\n",
    );
    std::fs::write(here.join("kustomization.yaml"), text).unwrap();
    std::fs::copy(
        fixture("kubeadm-kube-proxy-config.conf"),
        here.join("config.conf"),
    )
    .unwrap();
    dir
}

/// The configuration `container` of the rendered DaemonSet runs with on node `node-1`, as
/// `--write-config-to` writes it: its command and args with `$(VAR)` taken from its env (the
/// node's name, or a key of the rendered ConfigMap), the ConfigMap's keys written as files
/// where the container mounts them.
fn effective_config(objects: &[Value], container: &Value) -> Value {
    let configmap = one(objects, "ConfigMap");
    let pod = &one(objects, "DaemonSet")["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["configMap"]["name"] == configmap["metadata"]["name"])
        .expect("a volume of the ConfigMap");
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("the ConfigMap mounted")["mountPath"]
        .as_str()
        .unwrap();
    let files = tempfile::tempdir().unwrap();
    let data = configmap["data"].as_object().unwrap();
    for (key, text) in data {
        std::fs::write(files.path().join(key), text.as_str().unwrap()).unwrap();
    }
    let mut vars = BTreeMap::new();
    for e in container["env"].as_array().into_iter().flatten() {
        let value = if e["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName" {
            "node-1".to_owned()
        } else if let Some(key) = e["valueFrom"]["configMapKeyRef"]["key"].as_str() {
            assert_eq!(
                e["valueFrom"]["configMapKeyRef"]["name"],
                configmap["metadata"]["name"]
            );
            data[key]
                .as_str()
                .expect("the key is in the ConfigMap")
                .to_owned()
        } else {
            e["value"].as_str().expect("a plain value").to_owned()
        };
        vars.insert(format!("$({})", e["name"].as_str().unwrap()), value);
    }
    let words: Vec<String> = [&container["command"], &container["args"]]
        .into_iter()
        .filter_map(Value::as_array)
        .flatten()
        .map(|w| {
            let mut w = w.as_str().unwrap().to_owned();
            for (var, value) in &vars {
                w = w.replace(var, value);
            }
            w.replace(mount, &files.path().display().to_string())
        })
        .collect();
    assert_eq!(words[0], "/usr/local/bin/kube-proxy-rs");
    let written = files.path().join("effective.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_kube-proxy-rs"))
        .args(&words[1..])
        .arg(format!("--write-config-to={}", written.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{words:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_saphyr::from_str(&std::fs::read_to_string(written).unwrap()).unwrap()
}

pub(super) fn containers(objects: &[Value]) -> Vec<&Value> {
    let pod = &one(objects, "DaemonSet")["spec"]["template"]["spec"];
    ["initContainers", "containers"]
        .into_iter()
        .filter_map(|k| pod[k].as_array())
        .flatten()
        .collect()
}

#[test]
fn kubeadm_s_config_conf_is_used_as_it_is_and_the_overlay_sets_only_the_mode() {
    let kubeadm = std::fs::read_to_string(fixture("kubeadm-kube-proxy-config.conf")).unwrap();
    for mode in MODES {
        let dir = operators_kustomization(&format!("deploy/overlays/{mode}"), &[]);
        let objects = rendered(dir.path());
        let configmap = one(&objects, "ConfigMap");
        assert_eq!(
            configmap["data"]["config.conf"].as_str().map(str::trim_end),
            Some(kubeadm.trim_end()),
            "{mode}: config.conf as kubeadm wrote it"
        );
        for container in containers(&objects) {
            let name = &container["name"];
            let c = effective_config(&objects, container);
            assert_eq!(c["mode"], mode, "{mode}, container {name}");
            assert_eq!(
                c["clusterCIDR"], "10.244.0.0/16",
                "{mode}, container {name}"
            );
            // kubeadm's file names its kubeconfig where kubeadm mounts the ConfigMap.
            let kubeconfig = Path::new(c["clientConnection"]["kubeconfig"].as_str().unwrap());
            let mounted = container["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| {
                    Path::new(m["mountPath"].as_str().unwrap()) == kubeconfig.parent().unwrap()
                });
            let key = kubeconfig.file_name().unwrap().to_str().unwrap();
            assert!(
                mounted && configmap["data"][key].is_string(),
                "{mode}: {} is not a file of the mounted ConfigMap",
                kubeconfig.display()
            );
        }
    }
}

#[test]
fn an_overlay_changes_nothing_of_the_base_s_config_conf() {
    let base = rendered(&repo_root().join("deploy/base"));
    let base_conf = &one(&base, "ConfigMap")["data"]["config.conf"];
    for mode in MODES {
        let objects = rendered(&repo_root().join("deploy/overlays").join(mode));
        let configmap = one(&objects, "ConfigMap");
        assert_eq!(&configmap["data"]["config.conf"], base_conf, "{mode}");
        assert_eq!(configmap["data"]["mode"], mode);
        for container in containers(&objects) {
            assert_eq!(effective_config(&objects, container)["mode"], mode);
        }
    }
}

#[test]
fn the_proxy_resolves_names_through_the_node_s_resolver() {
    // A host-network pod resolves through the node's /etc/resolv.conf with the default
    // dnsPolicy (ClusterFirst falls back to it) and with Default; ClusterFirstWithHostNet would
    // ask the cluster DNS Service, which this proxy has to program first.
    for dir in [
        "deploy/base",
        "deploy/overlays/nftables",
        "deploy/overlays/ebpf",
    ] {
        let objects = rendered(&repo_root().join(dir));
        let pod = &one(&objects, "DaemonSet")["spec"]["template"]["spec"];
        assert_eq!(pod["hostNetwork"], true, "{dir}");
        assert!(
            matches!(
                pod["dnsPolicy"].as_str(),
                None | Some("ClusterFirst" | "Default")
            ),
            "{dir}: dnsPolicy {}",
            pod["dnsPolicy"]
        );
    }
}

#[test]
fn the_probes_ask_paths_only_kube_proxy_rs_answers() {
    use kube_proxy_rs::health::server::{
        HEALTHZ_PATH, LIVEZ_PATH, OURS_HEALTHZ_PATH, OURS_LIVEZ_PATH,
    };
    let objects = rendered(&repo_root().join("deploy/overlays/nftables"));
    let container = containers(&objects)
        .into_iter()
        .find(|c| c["name"] == "kube-proxy-rs")
        .unwrap();
    let path = |probe: &str| {
        container[probe]["httpGet"]["path"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    // Upstream's health server answers only these two; another proxy holding the port would.
    for upstreams in [HEALTHZ_PATH, LIVEZ_PATH] {
        assert_ne!(path("readinessProbe"), upstreams);
        assert_ne!(path("livenessProbe"), upstreams);
    }
    assert_eq!(path("readinessProbe"), OURS_HEALTHZ_PATH);
    assert_eq!(path("livenessProbe"), OURS_LIVEZ_PATH);
}

/// Whether a pod of `pod_spec` may run on a node with `labels`: its nodeSelector and its
/// required node affinity (the operators the migration uses).
fn schedulable(pod_spec: &Value, labels: &BTreeMap<&str, &str>) -> bool {
    let selected = pod_spec["nodeSelector"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k.as_str()).copied() == v.as_str());
    let terms = &pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    let Some(terms) = terms.as_array() else {
        return selected;
    };
    let term_holds = |term: &Value| {
        term["matchExpressions"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|e| {
                let value = labels.get(e["key"].as_str().unwrap()).copied();
                let values: Vec<&str> = e["values"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                match e["operator"].as_str().unwrap() {
                    "In" => value.is_some_and(|v| values.contains(&v)),
                    "NotIn" => value.is_none_or(|v| !values.contains(&v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    other => panic!("operator {other} not evaluated here"),
                }
            })
    };
    selected && terms.iter().any(term_holds)
}

#[test]
fn with_the_opt_in_component_a_node_runs_one_proxy_before_during_and_after_its_move() {
    let dir = operators_kustomization("deploy/overlays/nftables", &[OPT_IN]);
    let objects = rendered(dir.path());
    let ours = &one(&objects, "DaemonSet")["spec"]["template"]["spec"];
    let patched = kubectl(&[
        "patch",
        "--local",
        "-f",
        &fixture("kubeadm-kube-proxy-daemonset.yaml")
            .display()
            .to_string(),
        "--patch-file",
        &repo_root()
            .join(OPT_IN)
            .join("upstream-kube-proxy.yaml")
            .display()
            .to_string(),
        "-o",
        "json",
    ]);
    let upstream: Value = serde_json::from_str(&patched).unwrap();
    let upstream = &upstream["spec"]["template"]["spec"];
    let linux = [("kubernetes.io/os", "linux")];
    for (label, ours_runs) in [(None, false), (Some("true"), true), (Some("false"), false)] {
        let labels: BTreeMap<&str, &str> =
            linux.into_iter().chain(label.map(|v| (LABEL, v))).collect();
        assert_eq!(schedulable(ours, &labels), ours_runs, "ours, {labels:?}");
        assert_eq!(
            schedulable(upstream, &labels),
            !ours_runs,
            "upstream, {labels:?}"
        );
    }
    // Without the component, every Linux node runs ours (new nodes after the migration).
    let plain = rendered(&repo_root().join("deploy/overlays/nftables"));
    let plain = &one(&plain, "DaemonSet")["spec"]["template"]["spec"];
    assert!(schedulable(plain, &linux.into_iter().collect()));
}
