//! The end state of the kill test: node 1's proxy has converged on the final objects. Its model
//! (`/debug/services`) equals `kube-proxy-rs plan` of the objects in the API server, no change
//! is pending, and the kernel's rules read back (`/debug/status`) hold that plan.

use serde_json::Value;

use crate::lab::client::{From, request};
use crate::lab::{Lab, Proto};
use crate::testenv::TestEnv;

/// `Ok` when node 1's proxy has converged on the final objects: its model equals
/// `kube-proxy-rs plan` of the objects in the API server (the lab's namespace), no change is
/// pending, and the kernel's rules read back hold that plan (no drift, node-wide or on any
/// frontend).
pub async fn final_state_matches(lab: &Lab) -> Result<(), String> {
    let ns = format!("{}/", lab.cluster.ns.name);
    let ours = |report: &Value, key: &str| -> Vec<Value> {
        report[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["name"].as_str().is_some_and(|n| n.starts_with(&ns)))
            .cloned()
            .collect()
    };
    let planned = plan_of_objects(lab).await?;
    let model = debug_json(lab, "/debug/services?output=json").await?;
    for key in ["servicePorts", "ignoredServices"] {
        let (want, got) = (ours(&planned, key), ours(&model, key));
        if want != got {
            return Err(format!(
                "the proxy's model differs from the plan of the final objects ({key}):\n\
                 plan:  {}\nmodel: {}",
                Value::Array(want),
                Value::Array(got)
            ));
        }
    }
    if ours(&planned, "servicePorts").is_empty() {
        return Err("the plan has no Service port of the lab".to_owned());
    }
    let status = debug_json(lab, "/debug/status?output=json").await?;
    if !status["sync"]["pendingForSeconds"].is_null() || status["sync"]["ready"] != true {
        return Err(format!("a sync is pending: {}", status["sync"]));
    }
    let drift = status["drift"].as_array().cloned().unwrap_or_default();
    if !drift.is_empty() {
        return Err(format!("the kernel differs from the plan: {drift:?}"));
    }
    for port in ours(&status, "servicePorts") {
        for f in port["frontends"].as_array().into_iter().flatten() {
            if !f["drift"].is_null() {
                return Err(format!(
                    "{} {} {}: {}",
                    port["name"], f["kind"], f["address"], f["drift"]
                ));
            }
        }
        if !port["programmed"].is_null() && port["programmed"] != port["endpoints"] {
            return Err(format!(
                "{}: {} endpoints programmed, {} in the model",
                port["name"], port["programmed"], port["endpoints"]
            ));
        }
    }
    Ok(())
}

/// `kube-proxy-rs plan --output json` for node 1, with the lab's flags, from the objects in
/// the API server.
async fn plan_of_objects(lab: &Lab) -> Result<Value, String> {
    let node = &lab.topo.nodes[0];
    let mut cmd = node.ns.command(crate::layout::kube_proxy_rs_binary());
    cmd.arg("plan")
        .arg(format!(
            "--kubeconfig={}",
            TestEnv::shared().kube_proxy_kubeconfig.display()
        ))
        .args(lab.proxy.lab_flags(&lab.cluster.node_names[0]))
        .args(["--output", "json"]);
    let out = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("running plan: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "plan exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("plan's JSON: {e}"))
}

/// The JSON body of node 1's proxy's answer to `GET path` on its metrics address.
async fn debug_json(lab: &Lab, path: &str) -> Result<Value, String> {
    let mut ask = request(Proto::Tcp, "127.0.0.1:10249".parse().unwrap(), 1);
    ask.send = Some(format!("GET {path} HTTP/1.0\r\n\r\n"));
    ask.timeout_ms = 60_000;
    let text = lab
        .probe_with(From::Node(0), ask)
        .await
        .remove(0)
        .map_err(|e| format!("GET {path}: {e}"))?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("GET {path}: not HTTP: {text:?}"))?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        return Err(format!("GET {path}: {head}: {body}"));
    }
    serde_json::from_str(body).map_err(|e| format!("GET {path}: {e}: {body}"))
}
