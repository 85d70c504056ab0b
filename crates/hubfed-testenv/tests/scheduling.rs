//! A member that schedules pods, end to end: the real kube-scheduler places a Deployment's
//! pods on the member's node up to its pod capacity and reports the rest unschedulable; the
//! fake kubelet makes the placed ones ready and finishes deletions on scale-down; raising
//! the capacity makes room.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use hubfed_testenv::{Scheduling, TestEnv, TestEnvConfig};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const MEMBER: &str = "member1";
const NAMESPACE: &str = "scheduling";
const DEPLOYMENT: &str = "web";
const WAIT: Duration = Duration::from_secs(90);

/// What the member holds, counted the way the test expects it.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    /// Running, Ready=True, on the node, not being deleted.
    ready: usize,
    /// Pending, unbound, PodScheduled=False with reason Unschedulable.
    unschedulable: usize,
    /// Any other pod, terminating ones included.
    other: usize,
    /// The Deployment's `status.readyReplicas`.
    ready_replicas: i32,
}

fn condition<'a>(pod: &'a Pod, kind: &str) -> Option<(&'a str, Option<&'a str>)> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let c = conditions.iter().find(|c| c.type_ == kind)?;
    Some((c.status.as_str(), c.reason.as_deref()))
}

async fn seen(client: &kube::Client, node: &str) -> anyhow::Result<Seen> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let mut seen = Seen {
        ready: 0,
        unschedulable: 0,
        other: 0,
        ready_replicas: 0,
    };
    for pod in pods.list(&ListParams::default()).await? {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let bound_to = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let live = pod.metadata.deletion_timestamp.is_none();
        if live && phase == Some("Running") && bound_to == Some(node) {
            if condition(&pod, "Ready").is_some_and(|(s, _)| s == "True") {
                seen.ready += 1;
                continue;
            }
        } else if live
            && phase == Some("Pending")
            && bound_to.is_none()
            && condition(&pod, "PodScheduled") == Some(("False", Some("Unschedulable")))
        {
            seen.unschedulable += 1;
            continue;
        }
        seen.other += 1;
    }
    let deployment = deployments.get(DEPLOYMENT).await?;
    seen.ready_replicas = deployment
        .status
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    Ok(seen)
}

/// Polls until the member holds exactly `want`; fails with what it held last.
async fn wait_for(client: &kube::Client, node: &str, want: Seen) -> anyhow::Result<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        let last = seen(client, node).await;
        if last.as_ref().is_ok_and(|s| *s == want) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "after {WAIT:?} wanted {want:?}, the member holds {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn scale(client: &kube::Client, replicas: i32) -> anyhow::Result<()> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let patch = Patch::Merge(json!({"spec": {"replicas": replicas}}));
    deployments
        .patch_scale(DEPLOYMENT, &PatchParams::default(), &patch)
        .await?;
    Ok(())
}

fn deployment(replicas: i32) -> anyhow::Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": DEPLOYMENT}},
            "template": {
                "metadata": {"labels": {"app": DEPLOYMENT}},
                // Never pulled: no container runs.
                "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]},
            },
        },
    }))?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_scheduled_up_to_the_node_capacity() -> anyhow::Result<()> {
    let env = tokio::task::spawn_blocking(|| {
        TestEnv::start(TestEnvConfig {
            members: 1,
            controller_manager: true,
            scheduling: Some(Scheduling {
                nodes_per_member: 1,
                pods_per_node: 3,
                ..Scheduling::default()
            }),
            ..TestEnvConfig::default()
        })
    })
    .await??;
    let member = env.cluster(MEMBER).context("no member1")?;
    assert_eq!(member.nodes(), ["member1-node-1"]);
    assert!(env.hub().nodes().is_empty(), "the hub has no nodes");
    let node = member.nodes()[0].clone();
    let client = member.client().await?;

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    namespaces
        .create(&PostParams::default(), &namespace)
        .await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    deployments
        .create(&PostParams::default(), &deployment(5)?)
        .await?;

    let began = Instant::now();
    let want = |ready, unschedulable| Seen {
        ready,
        unschedulable,
        other: 0,
        ready_replicas: i32::try_from(ready).unwrap_or(i32::MAX),
    };
    wait_for(&client, &node, want(3, 2)).await?;
    let full = began.elapsed();

    scale(&client, 1).await?;
    wait_for(&client, &node, want(1, 0)).await?;

    env.set_pods_per_node(MEMBER, 10).await?;
    scale(&client, 4).await?;
    wait_for(&client, &node, want(4, 0)).await?;
    eprintln!(
        "hub + member with scheduling ready in {:.1}s; 3 of 5 pods ready in {:.1}s, \
         everything in {:.1}s after start-up",
        env.startup_time().as_secs_f64(),
        full.as_secs_f64(),
        began.elapsed().as_secs_f64()
    );

    tokio::task::spawn_blocking(move || env.shutdown()).await?;
    Ok(())
}
