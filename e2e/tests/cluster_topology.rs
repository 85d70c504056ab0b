//! A member's region and zones in `KubeFedCluster.status` from its nodes' labels, on a hub and
//! two members whose Node objects the test writes (no kubelet): labelled nodes give the
//! region and zones (current labels first, then the deprecated ones), relabelled nodes update
//! them, a node change that leaves the labels alone writes nothing, unlabelled nodes keep what
//! the status holds, including what a person set, and a member without nodes gets nothing
//! invented.
//!
//! Its own binary: health probes run every second, so that "no write at rest" is watched over
//! several probe periods in a few seconds.

use std::collections::BTreeMap;
use std::time::Duration;

use hubfed_api::kubefedcluster::{KubeFedCluster, KubeFedClusterStatus};
use hubfed_core::dns::{DEPRECATED_REGION_LABEL, DEPRECATED_ZONE_LABEL, REGION_LABEL, ZONE_LABEL};
use hubfed_e2e::{
    Federation, KUBEFED_NAMESPACE, PrivateFederation, TIMEOUT, Wait, fast_health_checks, wait_for,
};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// Several probe periods of [`fast_health_checks`].
const AT_REST: Duration = Duration::from_secs(6);

fn federation() -> &'static Federation {
    PrivateFederation::new()
        .config(fast_health_checks())
        .shared()
}

/// `(region, zones)` of a KubeFedCluster's status.
fn topology(status: Option<&KubeFedClusterStatus>) -> (Option<String>, Vec<String>) {
    status.map_or((None, Vec::new()), |status| {
        (
            status.region.clone().filter(|r| !r.is_empty()),
            status.zones.clone(),
        )
    })
}

/// Waits until `cluster`'s status holds `region` and `zones`.
async fn wait_topology(
    clusters: &Api<KubeFedCluster>,
    cluster: &str,
    region: Option<&str>,
    zones: &[&str],
) -> anyhow::Result<KubeFedCluster> {
    let want = (
        region.map(str::to_owned),
        zones.iter().map(|z| (*z).to_owned()).collect::<Vec<_>>(),
    );
    wait_for(
        &format!("{cluster}'s region and zones to be {want:?}"),
        TIMEOUT,
        async || {
            let object = clusters.get(cluster).await?;
            let have = topology(object.status.as_ref());
            Ok(if have == want {
                Wait::Done(object)
            } else {
                Wait::Pending(format!("{have:?}"))
            })
        },
    )
    .await
}

/// Watches `cluster` for [`AT_REST`]: its object must not be written (resourceVersion) and
/// must still hold `region` and `zones`.
async fn stays(
    clusters: &Api<KubeFedCluster>,
    cluster: &str,
    region: Option<&str>,
    zones: &[&str],
) -> anyhow::Result<()> {
    let before = wait_topology(clusters, cluster, region, zones).await?;
    tokio::time::sleep(AT_REST).await;
    let after = clusters.get(cluster).await?;
    anyhow::ensure!(
        after.resource_version() == before.resource_version(),
        "{cluster} was written at rest: {:?} -> {:?}",
        before.status,
        after.status
    );
    Ok(())
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

async fn create_node(
    nodes: &Api<Node>,
    name: &str,
    labels: BTreeMap<String, String>,
) -> anyhow::Result<()> {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
    }))?;
    nodes.create(&PostParams::default(), &node).await?;
    Ok(())
}

/// Sets (or with `None` removes) labels of node `name`.
async fn label_node(
    nodes: &Api<Node>,
    name: &str,
    changes: &[(&str, Option<&str>)],
) -> anyhow::Result<()> {
    let labels: serde_json::Map<String, serde_json::Value> = changes
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    let patch = json!({"metadata": {"labels": labels}});
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

#[tokio::test]
async fn region_and_zones_follow_the_members_node_labels() -> anyhow::Result<()> {
    let federation = federation();
    let hub = federation.hub().await?;
    let clusters: Api<KubeFedCluster> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let nodes: Api<Node> = Api::all(federation.client("member1").await?);

    // A member without nodes: nothing invented, nothing written.
    stays(&clusters, "member2", None, &[]).await?;

    // Current labels, deprecated ones, and a node without any.
    create_node(
        &nodes,
        "node-a",
        labels(&[(REGION_LABEL, "eu-west"), (ZONE_LABEL, "eu-west-a")]),
    )
    .await?;
    create_node(
        &nodes,
        "node-b",
        labels(&[
            (DEPRECATED_REGION_LABEL, "eu-west"),
            (DEPRECATED_ZONE_LABEL, "eu-west-b"),
        ]),
    )
    .await?;
    create_node(&nodes, "node-c", BTreeMap::new()).await?;
    wait_topology(
        &clusters,
        "member1",
        Some("eu-west"),
        &["eu-west-a", "eu-west-b"],
    )
    .await?;

    // The current label wins over the deprecated one of the same node.
    label_node(&nodes, "node-b", &[(ZONE_LABEL, Some("eu-west-c"))]).await?;
    wait_topology(
        &clusters,
        "member1",
        Some("eu-west"),
        &["eu-west-a", "eu-west-c"],
    )
    .await?;

    // Relabelled into another region.
    for (node, zone) in [("node-a", "us-east-a"), ("node-b", "us-east-b")] {
        label_node(
            &nodes,
            node,
            &[
                (REGION_LABEL, Some("us-east")),
                (ZONE_LABEL, Some(zone)),
                (DEPRECATED_REGION_LABEL, None),
                (DEPRECATED_ZONE_LABEL, None),
            ],
        )
        .await?;
    }
    let zones = ["us-east-a", "us-east-b"];
    wait_topology(&clusters, "member1", Some("us-east"), &zones).await?;

    // A node change beside the topology labels writes nothing.
    label_node(&nodes, "node-c", &[("example.com/rack", Some("r7"))]).await?;
    stays(&clusters, "member1", Some("us-east"), &zones).await?;

    // Unlabelled: one node first (the other's zone is what is left), then the last; with no
    // labelled node left, nothing is erased.
    label_node(
        &nodes,
        "node-a",
        &[(REGION_LABEL, None), (ZONE_LABEL, None)],
    )
    .await?;
    let zones = ["us-east-b"];
    wait_topology(&clusters, "member1", Some("us-east"), &zones).await?;
    label_node(
        &nodes,
        "node-b",
        &[(REGION_LABEL, None), (ZONE_LABEL, None)],
    )
    .await?;
    stays(&clusters, "member1", Some("us-east"), &zones).await?;

    // What a person sets on unlabelled nodes (and on a member without nodes) stays.
    for cluster in ["member1", "member2"] {
        let patch = json!({"status": {"region": "person-region", "zones": ["person-zone"]}});
        clusters
            .patch_status(cluster, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    for cluster in ["member1", "member2"] {
        stays(&clusters, cluster, Some("person-region"), &["person-zone"]).await?;
    }

    // Labelled again: the nodes win over the person's values.
    label_node(
        &nodes,
        "node-c",
        &[
            (REGION_LABEL, Some("ap-south")),
            (ZONE_LABEL, Some("ap-south-1")),
        ],
    )
    .await?;
    wait_topology(&clusters, "member1", Some("ap-south"), &["ap-south-1"]).await?;

    for node in ["node-a", "node-b", "node-c"] {
        nodes.delete(node, &DeleteParams::default()).await?;
    }
    stays(&clusters, "member1", Some("ap-south"), &["ap-south-1"]).await?;
    Ok(())
}
