//! The kubeconfigs the environment writes: one admin context per cluster, its CA and client
//! certificate inline.

use base64::Engine as _;

use crate::Cluster;

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A kubeconfig with one admin context per cluster, named after it; `current` is the
/// current context.
pub(crate) fn kubeconfig_yaml(clusters: &[&Cluster], current: &str) -> String {
    let clusters_json: Vec<_> = clusters
        .iter()
        .map(|c| {
            serde_json::json!({
                "name": c.name,
                "cluster": {"server": c.server_url(), "certificate-authority-data": b64(&c.pki.ca_cert)},
            })
        })
        .collect();
    let users: Vec<_> = clusters
        .iter()
        .map(|c| {
            serde_json::json!({
                "name": format!("{}-admin", c.name),
                "user": {
                    "client-certificate-data": b64(&c.pki.admin_cert),
                    "client-key-data": b64(&c.pki.admin_key),
                },
            })
        })
        .collect();
    let contexts: Vec<_> = clusters
        .iter()
        .map(|c| {
            serde_json::json!({
                "name": c.name,
                "context": {"cluster": c.name, "user": format!("{}-admin", c.name)},
            })
        })
        .collect();
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": clusters_json,
        "users": users,
        "contexts": contexts,
        "current-context": current,
        "preferences": {},
    });
    serde_yaml_ng::to_string(&doc).unwrap_or_default()
}
