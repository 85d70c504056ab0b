//! `get serviceexports`: multi-cluster services as the members hold them — each member's
//! ServiceExports (with the conditions hubfed's MCS controller sets) and ServiceImports.
//!
//! The members are read through the kubeconfig's contexts, as `join` reaches them. A member
//! that cannot be read (no context, unreachable, no MCS CRDs, joined in pull mode) is named
//! in a warning and the command exits 3 after printing what it could read.

use std::collections::BTreeMap;

use hubfed_api::mcs::{ServiceExport, ServiceImport};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

use crate::cli::GetServiceExportsArgs;
use crate::error::{EXIT_NOT_READY, EXIT_OK, Error, Result};
use crate::get::{joined_clusters, table};
use crate::kubeconfig::Target;
use crate::ops;
use crate::session::Session;

/// One member's export and import of one `namespace/name`.
#[derive(Default)]
struct Row {
    export: Option<ServiceExport>,
    import: Option<ServiceImport>,
}

/// Rows keyed by (namespace, name, cluster).
type Rows = BTreeMap<(String, String, String), Row>;

pub async fn exports(session: &mut Session<'_>, args: GetServiceExportsArgs) -> Result<i32> {
    let hub = session.hub().await?;
    let ns = session.kubefed_namespace().to_owned();
    let contexts: BTreeMap<String, String> = args.cluster_contexts.iter().cloned().collect();
    let mut rows = Rows::new();
    let mut unread = 0;
    for cluster in joined_clusters(&hub, &ns, &[]).await? {
        let name = cluster.name_any();
        if cluster.spec.sync_mode == hubfed_api::kubefedcluster::SyncMode::Pull {
            session.warn(format_args!(
                "cluster {name:?} is joined in pull mode: read its exports in the cluster itself"
            ))?;
            unread += 1;
            continue;
        }
        let context = contexts.get(&name).cloned().unwrap_or_else(|| name.clone());
        let read = match session.member(&name, &context).await {
            Ok(member) => read_member(&member, &name, &args, &mut rows).await,
            Err(e) => Err(e),
        };
        if let Err(e) = read {
            session.warn(format_args!("{e}"))?;
            unread += 1;
        }
    }
    match args.output {
        Some(format) => {
            let items: Vec<Value> = rows.iter().map(row_value).collect::<Result<_>>()?;
            session.print(&ops::render(&[ops::list(items)], format)?)?;
        }
        None if rows.is_empty() => session.note("no ServiceExport or ServiceImport found")?,
        None => session.print(&render_table(&rows))?,
    }
    Ok(if unread > 0 { EXIT_NOT_READY } else { EXIT_OK })
}

/// Adds `cluster`'s exports and imports that `args` selects to `rows`.
async fn read_member(
    member: &Target,
    cluster: &str,
    args: &GetServiceExportsArgs,
    rows: &mut Rows,
) -> Result<()> {
    let (exports, imports): (Api<ServiceExport>, Api<ServiceImport>) = match &args.namespace {
        Some(ns) => (
            Api::namespaced(member.client.clone(), ns),
            Api::namespaced(member.client.clone(), ns),
        ),
        None => (
            Api::all(member.client.clone()),
            Api::all(member.client.clone()),
        ),
    };
    let wanted = |name: &str| args.names.is_empty() || args.names.iter().any(|n| n == name);
    let key = |meta: &kube::api::ObjectMeta| {
        let ns = meta.namespace.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        (ns, name, cluster.to_owned())
    };
    let params = ListParams::default();
    let read_error = |e: kube::Error| match e {
        kube::Error::Api(status) if status.code == 404 => Error::NotFound(format!(
            "{}: no MCS CRDs (serviceexports.multicluster.x-k8s.io); `hubfedctl join {cluster} --error-on-existing=false` installs them",
            member.subject
        )),
        e => member.err(e),
    };
    for export in exports.list(&params).await.map_err(read_error)? {
        if wanted(&export.name_any()) {
            let at = key(&export.metadata);
            rows.entry(at).or_default().export = Some(export);
        }
    }
    for import in imports.list(&params).await.map_err(read_error)? {
        if wanted(&import.name_any()) {
            let at = key(&import.metadata);
            rows.entry(at).or_default().import = Some(import);
        }
    }
    Ok(())
}

/// `True`, or `False (Reason)` / `True (Reason)` when the reason says more; `-` when absent.
fn condition(conditions: &[Condition], kind: &str, plain: &[&str]) -> String {
    match conditions.iter().find(|c| c.type_ == kind) {
        None => "-".to_owned(),
        Some(c) if plain.contains(&c.reason.as_str()) => c.status.clone(),
        Some(c) => format!("{} ({})", c.status, c.reason),
    }
}

fn render_table(rows: &Rows) -> String {
    let cells: Vec<[String; 9]> = rows
        .iter()
        .map(|((ns, name, cluster), row)| {
            let conditions = row
                .export
                .as_ref()
                .and_then(|e| e.status.as_ref())
                .map_or(&[][..], |s| s.conditions.as_slice());
            let import = row.import.as_ref();
            let dash = |text: String| {
                if text.is_empty() {
                    "-".to_owned()
                } else {
                    text
                }
            };
            [
                ns.clone(),
                name.clone(),
                cluster.clone(),
                condition(conditions, "Valid", &["Valid"]),
                condition(conditions, "Conflict", &["NoConflicts"]),
                condition(conditions, "Ready", &["Exported", "Ready"]),
                import.map_or("-".to_owned(), |i| i.properties().type_.clone()),
                dash(
                    import
                        .map(|i| i.properties().ips.join(","))
                        .unwrap_or_default(),
                ),
                dash(
                    import
                        .and_then(|i| i.status.as_ref())
                        .map(|s| {
                            let names: Vec<&str> =
                                s.clusters.iter().map(|c| c.cluster.as_str()).collect();
                            names.join(",")
                        })
                        .unwrap_or_default(),
                ),
            ]
        })
        .collect();
    table(
        &[
            "NAMESPACE",
            "NAME",
            "CLUSTER",
            "VALID",
            "CONFLICT",
            "READY",
            "IMPORT",
            "IPS",
            "EXPORTERS",
        ],
        &cells,
    )
}

fn row_value(((ns, name, cluster), row): (&(String, String, String), &Row)) -> Result<Value> {
    let part = |object: Option<Value>| object.unwrap_or(Value::Null);
    Ok(json!({
        "cluster": cluster,
        "namespace": ns,
        "name": name,
        "serviceExport": part(row.export.as_ref().map(ops::to_value).transpose()?),
        "serviceImport": part(row.import.as_ref().map(ops::to_value).transpose()?),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(kind: &str, status: &str, reason: &str) -> Condition {
        serde_json::from_value(json!({
            "type": kind, "status": status, "reason": reason, "message": "",
            "lastTransitionTime": "2026-12-02T00:00:00Z",
        }))
        .unwrap()
    }

    #[test]
    fn conditions_show_a_reason_only_when_it_says_more() {
        let conditions = [
            cond("Valid", "True", "Valid"),
            cond("Conflict", "True", "PortConflict"),
        ];
        assert_eq!(condition(&conditions, "Valid", &["Valid"]), "True");
        assert_eq!(
            condition(&conditions, "Conflict", &["NoConflicts"]),
            "True (PortConflict)"
        );
        assert_eq!(condition(&conditions, "Ready", &["Exported"]), "-");
    }
}
