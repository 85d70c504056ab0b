//! Staged rollouts on three members that schedule pods: a bad revision (a CPU request no node
//! fits: its pods stay Unschedulable, never Ready) stops after the first stage and the other
//! clusters keep the previous revision; the fixed template goes stage by stage in order;
//! pause holds, resume continues, abort sends the changed clusters back.
//!
//! The tests run one at a time (they share the members' capacity and the strategy).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hubfed_e2e::{
    Federation, KUBEFED_NAMESPACE, TIMEOUT, Wait, create_federated, dynamic_api, federated, report,
    target, unique_name, unique_ns, wait_event, wait_for,
};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::{Mutex, OnceCell};

const CLUSTERS: [&str; 3] = ["member1", "member2", "member3"];
const STRATEGY: &str = "one-by-one";
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());
static SETUP: OnceCell<()> = OnceCell::const_new();

async fn fed() -> anyhow::Result<&'static Federation> {
    let fed = Federation::shared_on(3);
    SETUP
        .get_or_try_init(|| async {
            fed.join("member3", fed.cluster("member3")?).await?;
            let resource = ApiResource {
                group: "scheduling.hubfed.io".into(),
                version: "v1alpha1".into(),
                api_version: "scheduling.hubfed.io/v1alpha1".into(),
                kind: "RolloutStrategy".into(),
                plural: "rolloutstrategies".into(),
            };
            let api: Api<DynamicObject> =
                Api::namespaced_with(fed.hub().await?, KUBEFED_NAMESPACE, &resource);
            let strategy: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "scheduling.hubfed.io/v1alpha1",
                "kind": "RolloutStrategy",
                "metadata": {"name": STRATEGY, "namespace": KUBEFED_NAMESPACE},
                "spec": {
                    "stages": [
                        {"name": "canary", "clusters": ["member1"]},
                        {"name": "second", "clusters": ["member2"]},
                        {"name": "rest"},
                    ],
                    "soakSeconds": 2,
                    "readyDeadlineSeconds": 20,
                },
            }))?;
            api.create(&PostParams::default(), &strategy).await?;
            anyhow::Ok(())
        })
        .await?;
    Ok(fed)
}

async fn hubfedctl(args: &[&str]) -> (i32, String, String) {
    hubfed_e2e::hubfedctl(Federation::shared_on(3).env().kubeconfig_path(), args).await
}

fn spec(app: &str, image: &str, cpu: &str) -> Value {
    json!({
        "template": {"spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"containers": [{
                    "name": app,
                    "image": image,
                    "resources": {"requests": {"cpu": cpu}},
                }]},
            },
        }},
        "placement": {"clusters": CLUSTERS.iter().map(|c| json!({"name": c})).collect::<Vec<_>>()},
    })
}

/// `{cluster: (image, readyReplicas)}` of the member Deployments.
async fn images(
    fed: &Federation,
    namespace: &str,
    name: &str,
) -> anyhow::Result<BTreeMap<String, (String, i64)>> {
    let mut found = BTreeMap::new();
    for cluster in CLUSTERS {
        if let Some(object) = fed
            .member_object(cluster, &target("Deployment"), Some(namespace), name)
            .await?
        {
            let image = object["spec"]["template"]["spec"]["containers"][0]["image"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let ready = object["status"]["readyReplicas"].as_i64().unwrap_or(0);
            found.insert(cluster.to_owned(), (image, ready));
        }
    }
    Ok(found)
}

async fn wait_images(
    fed: &Federation,
    namespace: &str,
    name: &str,
    want: &[(&str, &str, i64)],
    timeout: Duration,
) -> anyhow::Result<()> {
    let want: BTreeMap<String, (String, i64)> = want
        .iter()
        .map(|(c, i, r)| ((*c).to_owned(), ((*i).to_owned(), *r)))
        .collect();
    wait_for(&format!("member images {want:?}"), timeout, async || {
        let found = images(fed, namespace, name).await?;
        Ok(if found == want {
            Wait::Done(())
        } else {
            Wait::Pending(format!("(image, ready): {found:?}"))
        })
    })
    .await
}

async fn change(
    fed: &Federation,
    namespace: &str,
    name: &str,
    image: &str,
    cpu: &str,
) -> anyhow::Result<()> {
    let api = dynamic_api(fed.hub().await?, &federated("Deployment"), Some(namespace));
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": spec(name, image, cpu)})),
    )
    .await?;
    Ok(())
}

/// A federated Deployment under the strategy, first revision everywhere and Ready.
async fn setup(fed: &Federation, namespace: &str, name: &str) -> anyhow::Result<()> {
    fed.create_federated_namespace(namespace, &CLUSTERS).await?;
    let hub = fed.hub().await?;
    let api = create_federated(
        &hub,
        "Deployment",
        Some(namespace),
        name,
        spec(name, "app:v1", "10m"),
    )
    .await?;
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"hubfed.io/rollout-strategy": STRATEGY}}}),
        ),
    )
    .await?;
    wait_images(
        fed,
        namespace,
        name,
        &[
            ("member1", "app:v1", 1),
            ("member2", "app:v1", 1),
            ("member3", "app:v1", 1),
        ],
        TIMEOUT,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_revision_stops_after_the_first_stage_and_the_fix_goes_in_order() -> anyhow::Result<()>
{
    let fed = fed().await?;
    let _one = ONE_AT_A_TIME.lock().await;
    let hub = fed.hub().await?;
    let namespace = unique_ns("rollout-bad");
    let name = unique_name("web");
    setup(fed, &namespace, &name).await?;

    // 100 CPUs: no node fits, the canary's pod stays Unschedulable.
    change(fed, &namespace, &name, "app:v2", "100").await?;
    wait_event(
        &hub,
        &namespace,
        "RolloutHalted",
        &["stage canary", "member1", "not Ready"],
    )
    .await?;
    let found = images(fed, &namespace, &name).await?;
    assert_eq!(found["member1"].0, "app:v2", "{found:?}");
    assert_eq!(found["member2"], ("app:v1".to_owned(), 1), "{found:?}");
    assert_eq!(found["member3"], ("app:v1".to_owned(), 1), "{found:?}");
    let (code, status, err) = hubfedctl(&[
        "rollout",
        "status",
        &format!("deployments/{name}"),
        "-n",
        &namespace,
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(
        status.contains("(Halted)") && status.contains("halted: member1: not Ready"),
        "{status}"
    );

    // The fix goes stage by stage; record when each member first shows it.
    change(fed, &namespace, &name, "app:v3", "10m").await?;
    let began = Instant::now();
    let mut first_seen: BTreeMap<String, Duration> = BTreeMap::new();
    wait_for(
        "the fix everywhere, Ready",
        Duration::from_secs(120),
        async || {
            let found = images(fed, &namespace, &name).await?;
            for (cluster, (image, _)) in &found {
                if image == "app:v3" {
                    first_seen
                        .entry(cluster.clone())
                        .or_insert_with(|| began.elapsed());
                }
            }
            Ok(
                if found.values().all(|(i, r)| i == "app:v3" && *r == 1) && found.len() == 3 {
                    Wait::Done(())
                } else {
                    Wait::Pending(format!("(image, ready): {found:?}"))
                },
            )
        },
    )
    .await?;
    let order: Vec<&String> = {
        let mut by_time: Vec<(&String, &Duration)> = first_seen.iter().collect();
        by_time.sort_by_key(|(_, t)| **t);
        by_time.into_iter().map(|(c, _)| c).collect()
    };
    assert_eq!(order, ["member1", "member2", "member3"], "{first_seen:?}");
    // Each stage soaks 2 s after its cluster is Ready before the next starts.
    assert!(
        first_seen["member2"] >= first_seen["member1"] + Duration::from_secs(2),
        "{first_seen:?}"
    );
    assert!(
        first_seen["member3"] >= first_seen["member2"] + Duration::from_secs(2),
        "{first_seen:?}"
    );
    report(format_args!(
        "rollout of the fix: first seen {first_seen:?}"
    ));
    wait_event(&hub, &namespace, "RolloutCompleted", &[]).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_and_abort() -> anyhow::Result<()> {
    let fed = fed().await?;
    let _one = ONE_AT_A_TIME.lock().await;
    let namespace = unique_ns("rollout-control");
    let name = unique_name("web");
    setup(fed, &namespace, &name).await?;
    let target_arg = format!("deployments/{name}");

    let (code, out, err) = hubfedctl(&["rollout", "pause", &target_arg, "-n", &namespace]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("rollout paused"), "{out}");
    change(fed, &namespace, &name, "app:v2", "10m").await?;
    // Paused: the first stage has it, the others do not, well past the soak.
    wait_images(
        fed,
        &namespace,
        &name,
        &[
            ("member1", "app:v2", 1),
            ("member2", "app:v1", 1),
            ("member3", "app:v1", 1),
        ],
        TIMEOUT,
    )
    .await?;
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        let found = images(fed, &namespace, &name).await?;
        anyhow::ensure!(
            found["member2"].0 == "app:v1",
            "moved on while paused: {found:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let (code, _, err) = hubfedctl(&["rollout", "resume", &target_arg, "-n", &namespace]).await;
    assert_eq!(code, 0, "{err}");
    wait_images(
        fed,
        &namespace,
        &name,
        &[
            ("member1", "app:v2", 1),
            ("member2", "app:v2", 1),
            ("member3", "app:v2", 1),
        ],
        TIMEOUT,
    )
    .await?;
    wait_for("the v2 rollout completed", TIMEOUT, async || {
        let (_, status, _) = hubfedctl(&["rollout", "status", &target_arg, "-n", &namespace]).await;
        Ok(if status.contains("(Completed)") {
            Wait::Done(())
        } else {
            Wait::Pending(status)
        })
    })
    .await?;

    // Abort: (paused, so it stays there) a new revision reaches the canary; abort sends it
    // back to v2, the stable revision.
    let (code, _, err) = hubfedctl(&["rollout", "pause", &target_arg, "-n", &namespace]).await;
    assert_eq!(code, 0, "{err}");
    change(fed, &namespace, &name, "app:v3", "10m").await?;
    wait_images(
        fed,
        &namespace,
        &name,
        &[
            ("member1", "app:v3", 1),
            ("member2", "app:v2", 1),
            ("member3", "app:v2", 1),
        ],
        TIMEOUT,
    )
    .await?;
    let (code, out, err) = hubfedctl(&["rollout", "abort", &target_arg, "-n", &namespace]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("rollout aborted"), "{out}");
    wait_images(
        fed,
        &namespace,
        &name,
        &[
            ("member1", "app:v2", 1),
            ("member2", "app:v2", 1),
            ("member3", "app:v2", 1),
        ],
        TIMEOUT,
    )
    .await?;
    let (_, status, _) = hubfedctl(&["rollout", "status", &target_arg, "-n", &namespace]).await;
    assert!(status.contains("(Aborted)"), "{status}");
    Ok(())
}
