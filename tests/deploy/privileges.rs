//! The privileges each overlay asks for, read from the manifests as Kustomize renders them: the
//! proxy's container is not privileged, runs as root with `drop: [ALL]` and adds exactly its
//! mode's capabilities (`support/capabilities.rs`, the set `tests/least_privilege.rs` shows
//! each mode syncs and serves with, and needs); only the init container, which runs
//! `--init-only` and exits, is privileged, and only it may propagate a mount to the host.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::capabilities::needed;
use super::migration::{containers, rendered};
use super::testenv::repo_root;

const MODES: [&str; 4] = ["nftables", "iptables", "ipvs", "ebpf"];

fn strings(v: &Value) -> BTreeSet<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[test]
fn each_overlay_gives_the_proxy_exactly_its_mode_s_capabilities() {
    for mode in MODES {
        let objects = rendered(&repo_root().join("deploy/overlays").join(mode));
        let all = containers(&objects);
        let proxy = all
            .iter()
            .find(|c| c["name"] == "kube-proxy-rs")
            .expect("the proxy's container");
        let security = &proxy["securityContext"];
        assert!(
            security["privileged"].is_null() || security["privileged"] == json!(false),
            "{mode}: privileged"
        );
        assert_eq!(security["runAsUser"], json!(0), "{mode}");
        assert_eq!(
            strings(&security["capabilities"]["drop"]),
            BTreeSet::from(["ALL"]),
            "{mode}"
        );
        let want: BTreeSet<&str> = needed(mode).iter().map(|c| c.name).collect();
        assert_eq!(strings(&security["capabilities"]["add"]), want, "{mode}");

        for container in &all {
            let propagates = container["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| m["mountPropagation"] == "Bidirectional");
            if container["name"] == "init" {
                assert_eq!(container["securityContext"]["privileged"], json!(true));
                assert!(
                    strings(&container["command"]).contains("--init-only"),
                    "{mode}: the init container runs --init-only"
                );
            } else {
                assert!(
                    !propagates,
                    "{mode}: {} propagates mounts",
                    container["name"]
                );
            }
        }
    }
}
