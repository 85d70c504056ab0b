//! `get clusters` and `version`.

use hubfed_api::kubefedcluster::{ClusterConditionType, KubeFedCluster};
use kube::api::{Api, ListParams};

use crate::cli::{GetClustersArgs, OutputFormat, VersionArgs};
use crate::control_plane::ensure_kubefed_installed;
use crate::error::{Error, Result};
use crate::kubeconfig::Target;
use crate::ops;
use crate::session::Session;

/// The version of this build.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub async fn clusters(session: &mut Session<'_>, args: GetClustersArgs) -> Result<()> {
    let ns = session.kubefed_namespace().to_owned();
    let hub = session.hub().await?;
    ensure_kubefed_installed(&hub, &ns).await?;
    let clusters = joined_clusters(&hub, &ns, &args.names).await?;
    if let Some(format) = args.output {
        let values = clusters
            .iter()
            .map(ops::to_value)
            .collect::<Result<Vec<_>>>()?;
        let text = if args.names.len() == 1 {
            ops::render(&values, format)?
        } else {
            ops::render(&[ops::list(values)], format)?
        };
        return session.print(&text);
    }
    if clusters.is_empty() {
        return session.note(format_args!("no clusters are joined (namespace {ns})"));
    }
    let now = k8s_openapi::jiff::Timestamp::now();
    let rows: Vec<[String; 4]> = clusters.iter().map(|c| cluster_row(c, now)).collect();
    session.print(&table(&["NAME", "READY", "VERSION", "AGE"], &rows))
}

/// The KubeFedClusters of the hub sorted by name: those `names` asks for (each must be
/// joined), or all.
pub(crate) async fn joined_clusters(
    hub: &Target,
    ns: &str,
    names: &[String],
) -> Result<Vec<KubeFedCluster>> {
    let api: Api<KubeFedCluster> = Api::namespaced(hub.client.clone(), ns);
    let mut clusters = api
        .list(&ListParams::default())
        .await
        .map_err(|e| hub.err(e))?
        .items;
    if !names.is_empty() {
        for name in names {
            if !clusters
                .iter()
                .any(|c| c.metadata.name.as_ref() == Some(name))
            {
                return Err(Error::NotFound(format!(
                    "cluster {name:?} is not joined: no KubeFedCluster {ns}/{name} in the hub"
                )));
            }
        }
        clusters.retain(|c| c.metadata.name.as_ref().is_some_and(|n| names.contains(n)));
    }
    clusters.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    Ok(clusters)
}

/// One cluster's NAME, READY (else the condition that is true), VERSION and AGE.
fn cluster_row(cluster: &KubeFedCluster, now: k8s_openapi::jiff::Timestamp) -> [String; 4] {
    let status = cluster.status.as_ref();
    let ready = status
        .and_then(|s| s.condition(ClusterConditionType::Ready))
        .map(|c| c.status.clone())
        .or_else(|| {
            status
                .and_then(|s| s.conditions.iter().find(|c| c.status == "True"))
                .map(|c| format!("False ({})", c.type_))
        })
        .unwrap_or_else(|| "Unknown".to_owned());
    let version = status
        .and_then(|s| s.kubernetes_version.clone())
        .unwrap_or_else(|| "<none>".to_owned());
    let age = cluster
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| {
            let seconds = now.duration_since(t.0).as_secs().max(0);
            ops::age(std::time::Duration::from_secs(seconds.unsigned_abs()))
        })
        .unwrap_or_else(|| "<unknown>".to_owned());
    [
        cluster.metadata.name.clone().unwrap_or_default(),
        ready,
        version,
        age,
    ]
}

/// A kubectl-style table: columns left-aligned, three spaces apart.
pub fn table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(str::len);
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut out = String::new();
    let mut line = |cells: [&str; N]| {
        let mut text = String::new();
        for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}   "));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(*header);
    for row in rows {
        line(std::array::from_fn(|i| row[i].as_str()));
    }
    out
}

pub fn version(session: &mut Session<'_>, args: VersionArgs) -> Result<()> {
    match args.output {
        None => session.say(format_args!("hubfedctl version: v{VERSION}")),
        Some(format) => {
            let value =
                serde_json::json!({ "clientVersion": { "gitVersion": format!("v{VERSION}") } });
            let text = match format {
                OutputFormat::Yaml | OutputFormat::Json => ops::render(&[value], format)?,
            };
            session.print(&text)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let rows = [
            [
                "member1".to_owned(),
                "True".to_owned(),
                "v1.36.3".to_owned(),
                "5m".to_owned(),
            ],
            [
                "m2".to_owned(),
                "Unknown".to_owned(),
                "<none>".to_owned(),
                "10s".to_owned(),
            ],
        ];
        assert_eq!(
            table(&["NAME", "READY", "VERSION", "AGE"], &rows),
            "NAME      READY     VERSION   AGE\n\
             member1   True      v1.36.3   5m\n\
             m2        Unknown   <none>    10s\n"
        );
    }
}
