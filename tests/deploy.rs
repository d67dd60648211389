//! The deployment manifests against the real API server from `testenv/`: every object of the
//! Kustomize base and overlays is accepted (server-side apply, dry run), the ServiceAccount can do
//! exactly what the proxy needs (SubjectAccessReview), and the ConfigMaps' configuration, like
//! kubeadm's, is accepted by `kube-proxy-rs --config`.
//!
//! What an operator migrating a kubeadm cluster relies on, read from the rendered manifests and
//! the binary's effective configuration (`deploy/migration.rs`): an overlay
//! changes the mode only, so kubeadm's `config.conf` is used as it is; the proxy resolves names
//! through the node's resolver; the opt-in component and upstream's patch never put both
//! proxies on one node; the probes ask paths only kube-proxy-rs answers. And the privileges
//! each overlay asks for (`deploy/privileges.rs`): the proxy's container exactly its mode's
//! capabilities, only the init container privileged.

#![allow(
    clippy::disallowed_methods,
    reason = "runs kubectl and the built binary, writes scratch files"
)]

use support::testenv;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use testenv::{TestEnv, output_with_stdin, repo_root, wait_for};

const OVERLAYS: [&str; 5] = [
    "deploy/base",
    "deploy/overlays/nftables",
    "deploy/overlays/iptables",
    "deploy/overlays/ipvs",
    "deploy/overlays/ebpf",
];
const SERVICE_ACCOUNT: &str = "system:serviceaccount:kube-system:kube-proxy-rs";

/// Runs kubectl against the test control plane as admin, feeding `stdin`; returns stdout.
fn kubectl(env: &TestEnv, args: &[&str], stdin: Option<&str>) -> String {
    let out = output_with_stdin(
        Command::new(env.bin("kubectl"))
            .arg(format!("--kubeconfig={}", env.kubeconfig.display()))
            .args(args)
            .current_dir(repo_root()),
        stdin.unwrap_or(""),
    );
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn render(env: &TestEnv, dir: &str) -> String {
    kubectl(env, &["kustomize", dir], None)
}

use support::capabilities;
#[path = "deploy/migration.rs"]
mod migration;
#[path = "deploy/privileges.rs"]
mod privileges;

#[test]
fn every_manifest_is_accepted_by_the_api_server() {
    let env = TestEnv::shared();
    for dir in OVERLAYS {
        let rendered = render(env, dir);
        let out = kubectl(
            env,
            &[
                "apply",
                "--server-side",
                "--dry-run=server",
                "--field-manager=kube-proxy-rs-test",
                "-f",
                "-",
            ],
            Some(&rendered),
        );
        for object in [
            "serviceaccount/kube-proxy-rs",
            "clusterrole.rbac.authorization.k8s.io/kube-proxy-rs",
            "clusterrolebinding.rbac.authorization.k8s.io/kube-proxy-rs",
            "configmap/kube-proxy-rs",
            "daemonset.apps/kube-proxy-rs",
        ] {
            assert!(
                out.contains(&format!("{object} serverside-applied (server dry run)")),
                "{dir}: {object} not accepted:\n{out}"
            );
        }
    }
}

/// Deletes what the RBAC test applied, also when it fails.
struct Applied<'a> {
    env: &'a TestEnv,
    manifests: String,
}

impl Drop for Applied<'_> {
    fn drop(&mut self) {
        let _ = Command::new(self.env.bin("kubectl"))
            .arg(format!("--kubeconfig={}", self.env.kubeconfig.display()))
            .args(["delete", "--ignore-not-found", "--wait=false", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .and_then(|mut c| {
                c.stdin
                    .take()
                    .unwrap()
                    .write_all(self.manifests.as_bytes())?;
                c.wait()
            });
    }
}

async fn allowed(
    reviews: &Api<SubjectAccessReview>,
    verb: &str,
    group: &str,
    resource: &str,
) -> bool {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(SERVICE_ACCOUNT.to_string()),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                "system:serviceaccounts:kube-system".into(),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                namespace: (resource != "nodes").then(|| "default".to_string()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let answer = reviews
        .create(&PostParams::default(), &review)
        .await
        .expect("SubjectAccessReview");
    answer.status.is_some_and(|s| s.allowed)
}

#[tokio::test]
async fn the_service_account_can_do_exactly_what_the_proxy_needs() {
    let env = TestEnv::shared();
    let manifests = render(env, "deploy/overlays/nftables");
    kubectl(
        env,
        &[
            "apply",
            "--server-side",
            "--field-manager=kube-proxy-rs-test",
            "-f",
            "-",
        ],
        Some(&manifests),
    );
    let _cleanup = Applied { env, manifests };
    let reviews: Api<SubjectAccessReview> = Api::all(env.client().await);

    // RBAC reaches the authorizer through its informers; wait for the first grant to show.
    wait_for(
        "the ClusterRoleBinding to take effect",
        Duration::from_secs(30),
        || async {
            if allowed(&reviews, "watch", "", "services").await {
                Ok(())
            } else {
                Err("watch services still denied".to_string())
            }
        },
    )
    .await;

    let needed = [
        ("get", "", "services"),
        ("list", "", "services"),
        ("watch", "", "services"),
        ("get", "", "nodes"),
        ("list", "", "nodes"),
        ("watch", "", "nodes"),
        ("list", "discovery.k8s.io", "endpointslices"),
        ("watch", "discovery.k8s.io", "endpointslices"),
        ("list", "networking.k8s.io", "servicecidrs"),
        ("watch", "networking.k8s.io", "servicecidrs"),
        ("create", "", "events"),
        ("patch", "", "events"),
        ("create", "events.k8s.io", "events"),
        ("patch", "events.k8s.io", "events"),
    ];
    for (verb, group, resource) in needed {
        assert!(
            allowed(&reviews, verb, group, resource).await,
            "{verb} {group}/{resource} must be allowed"
        );
    }
    let forbidden = [
        ("get", "", "secrets"),
        ("list", "", "secrets"),
        ("create", "", "services"),
        ("update", "", "services"),
        ("patch", "", "services"),
        ("delete", "", "services"),
        ("list", "", "pods"),
        ("patch", "", "nodes"),
        ("update", "discovery.k8s.io", "endpointslices"),
        ("delete", "", "events"),
        ("list", "", "configmaps"),
    ];
    for (verb, group, resource) in forbidden {
        assert!(
            !allowed(&reviews, verb, group, resource).await,
            "{verb} {group}/{resource} must be denied"
        );
    }
}

fn accepted_by_the_binary(config: &str, what: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.conf");
    std::fs::write(&path, config).unwrap();
    let effective = dir.path().join("effective.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_kube-proxy-rs"))
        .arg(format!("--config={}", path.display()))
        .arg(format!("--write-config-to={}", effective.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{what} refused: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::read_to_string(&effective)
            .unwrap()
            .contains("kind: KubeProxyConfiguration")
    );
}

#[test]
fn the_config_kubeadm_generates_is_accepted() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/deploy/kubeadm-kube-proxy-config.conf");
    accepted_by_the_binary(
        &std::fs::read_to_string(fixture).unwrap(),
        "kubeadm's config.conf",
    );
}

#[test]
fn every_configmap_config_is_accepted() {
    let env = TestEnv::shared();
    for dir in OVERLAYS {
        let rendered = render(env, dir);
        let config = rendered
            .split("\n---\n")
            .find(|doc| doc.contains("kind: ConfigMap"))
            .expect("a ConfigMap");
        let value: serde_json::Value = serde_saphyr::from_str(config).expect("ConfigMap YAML");
        let conf = value["data"]["config.conf"].as_str().expect("config.conf");
        accepted_by_the_binary(conf, dir);
    }
}
