//! The `/configz` body: the effective configuration as JSON, under the config group's name,
//! as upstream's configz handler nests it.
//!
//! Pure. Built from the same document `--write-config-to` writes ([`config::render`]), so the
//! two never disagree; keys are KubeProxyConfiguration v1alpha1's.

use crate::config::{self, Config};

/// The key upstream registers its configuration under.
pub const GROUP: &str = "kubeproxy.config.k8s.io";

/// `{"kubeproxy.config.k8s.io": {…KubeProxyConfiguration…}}`.
pub fn configz(config: &Config) -> serde_json::Value {
    let yaml = config::render(config);
    // `render` writes plain mappings, strings, numbers and booleans, which always read back.
    let document = serde_saphyr::from_str::<serde_json::Value>(&yaml).unwrap_or_default();
    serde_json::json!({ GROUP: document })
}
