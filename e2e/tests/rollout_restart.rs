//! A staged rollout survives its controller being killed: the rollout waits in its canary's
//! soak, the controller gets SIGKILL, a new one starts — and the other clusters still do not
//! get the change until the soak is over, then get it in order. Own clusters and controller
//! process (the harness's runs in this process and cannot be killed).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hubfed_e2e::controller::{ControllerOptions, ControllerProcess};
use hubfed_e2e::rollout::{create_rollout_strategy, follow_strategy};
use hubfed_e2e::{
    PrivateFederation, TIMEOUT, Wait, create_federated, create_federated_namespace, dynamic_api,
    federated, report, target, wait_clusters_ready, wait_for,
};
use hubfed_testenv::{Scheduling, TestEnv};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

const CLUSTERS: [&str; 3] = ["member1", "member2", "member3"];

fn spec(image: &str) -> Value {
    json!({
        "template": {"spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": image}]},
            },
        }},
        "placement": {"clusters": CLUSTERS.iter().map(|c| json!({"name": c})).collect::<Vec<_>>()},
    })
}

async fn images(env: &TestEnv, namespace: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut found = BTreeMap::new();
    for cluster in CLUSTERS {
        let client = env.cluster(cluster).context("a member")?.client().await?;
        let api = dynamic_api(client, &target("Deployment"), Some(namespace));
        if let Some(object) = api.get_opt("web").await? {
            let object = serde_json::to_value(object)?;
            let image = object["spec"]["template"]["spec"]["containers"][0]["image"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let ready = object["status"]["readyReplicas"].as_i64().unwrap_or(0);
            found.insert(cluster.to_owned(), format!("{image}/{ready}"));
        }
    }
    Ok(found)
}

async fn wait_images(env: &TestEnv, namespace: &str, want: &[(&str, &str)]) -> anyhow::Result<()> {
    let want: BTreeMap<String, String> = want
        .iter()
        .map(|(c, i)| ((*c).to_owned(), (*i).to_owned()))
        .collect();
    wait_for(&format!("images {want:?}"), TIMEOUT, async || {
        let found = images(env, namespace).await?;
        Ok(if found == want {
            Wait::Done(())
        } else {
            Wait::Pending(format!("{found:?}"))
        })
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_controller_resumes_at_the_same_stage() -> anyhow::Result<()> {
    let env = PrivateFederation::new()
        .members(3)
        .scheduling(Scheduling::default())
        .start()
        .await?;
    let hub = env.hub().client().await?;
    let mut members = Vec::new();
    for name in CLUSTERS {
        let cluster = env.cluster(name).context("a member")?;
        members.push((name, cluster.client().await?));
    }
    let stages = json!({
        "stages": [{"name": "canary", "clusters": ["member1"]}, {"name": "rest"}],
        "soakSeconds": 25,
    });
    create_rollout_strategy(&hub, "slow", stages).await?;
    let first = ControllerProcess::start(&env, &ControllerOptions::single("rollout-1"))?;
    wait_clusters_ready(&hub, &CLUSTERS).await?;
    let namespace = "rollout-restart";
    create_federated_namespace(&hub, &members, namespace).await?;
    let api = create_federated(&hub, "Deployment", Some(namespace), "web", spec("app:v1")).await?;
    follow_strategy(&api, "web", "slow").await?;
    wait_images(
        &env,
        namespace,
        &[
            ("member1", "app:v1/1"),
            ("member2", "app:v1/1"),
            ("member3", "app:v1/1"),
        ],
    )
    .await?;

    // v2 reaches the canary and soaks 25 s; the controller dies in the middle of it.
    let hub_api = dynamic_api(hub.clone(), &federated("Deployment"), Some(namespace));
    hub_api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": spec("app:v2")})),
        )
        .await?;
    wait_images(
        &env,
        namespace,
        &[
            ("member1", "app:v2/1"),
            ("member2", "app:v1/1"),
            ("member3", "app:v1/1"),
        ],
    )
    .await?;
    let canary_ready = Instant::now();
    first.kill().await?;
    let second = ControllerProcess::start(&env, &ControllerOptions::single("rollout-2"))?;
    // The new controller holds the rest back until the soak (counted from before the kill) is
    // over: nothing decided from memory, nothing forgotten.
    let mut reached = None;
    wait_for(
        "the rest reached after the soak",
        Duration::from_secs(90),
        async || {
            let found = images(&env, namespace).await?;
            let rest_updated =
                found["member2"].starts_with("app:v2") || found["member3"].starts_with("app:v2");
            if rest_updated && reached.is_none() {
                reached = Some(canary_ready.elapsed());
            }
            Ok(if found.values().all(|i| i == "app:v2/1") {
                Wait::Done(())
            } else {
                Wait::Pending(format!("{found:?}"))
            })
        },
    )
    .await?;
    let reached = reached.context("the rest was never seen on v2")?;
    anyhow::ensure!(
        reached >= Duration::from_secs(20),
        "the rest got v2 {reached:?} after the canary was Ready: the soak (25 s) was not kept across the restart\n{}",
        second.log_tail(30)
    );
    report(format_args!(
        "rollout across a controller kill: the rest reached {:.1}s after the canary was Ready (soak 25 s)",
        reached.as_secs_f64()
    ));
    Ok(())
}
