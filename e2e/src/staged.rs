//! The staged rollout tests' fixture: three members that schedule pods, the strategy
//! [`STRATEGY`] (member1, member2, the rest, [`SOAK`] between stages), one test at a time
//! ([`staged_federation`]); a FederatedDeployment under it ([`setup`]), what the members run
//! ([`images`]) and when ([`Watches`]), what the hub says ([`statuses`], `hubfedctl rollout`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::{Value, json};
use tokio::sync::MutexGuard;

use crate::rollout::{create_rollout_strategy, follow_strategy};
use crate::{
    Federation, TIMEOUT, Wait, cluster_status, dynamic_api, federated, get_value, target,
    three_members_one_at_a_time, wait_for,
};

/// The members of the staged rollouts, in the strategy's order.
pub const CLUSTERS: [&str; 3] = ["member1", "member2", "member3"];
/// The RolloutStrategy every staged object follows: member1, then member2, then the rest.
pub const STRATEGY: &str = "one-by-one";
/// The strategy's soak after each stage.
pub const SOAK: Duration = Duration::from_secs(2);
/// How much later our own watch may see a copy Ready than the controller's watch did.
pub const WATCH_SLACK: Duration = Duration::from_millis(250);
/// How long [`Watches::assert_in_order`] waits for its watches to catch up with reads.
pub const WATCH_CATCH_UP: Duration = Duration::from_secs(10);

/// The federation, with member3 joined and the strategy created, and this binary's
/// one-at-a-time lock, to hold for the whole test.
pub async fn staged_federation() -> anyhow::Result<(&'static Federation, MutexGuard<'static, ()>)> {
    three_members_one_at_a_time(|fed| async move {
        let spec = json!({
            "stages": [
                {"name": "canary", "clusters": ["member1"]},
                {"name": "second", "clusters": ["member2"]},
                {"name": "rest"},
            ],
            "soakSeconds": SOAK.as_secs(),
            "readyDeadlineSeconds": 20,
        });
        create_rollout_strategy(&fed.hub().await?, STRATEGY, spec).await
    })
    .await
}

/// `hubfedctl` against this binary's federation.
pub async fn hubfedctl(args: &[&str]) -> (i32, String, String) {
    crate::hubfedctl(Federation::shared_on(3).env().kubeconfig_path(), args).await
}

/// A FederatedDeployment spec: one pod of `image` requesting `cpu`, on every member.
pub fn spec(app: &str, image: &str, cpu: &str) -> Value {
    spec_on(app, image, cpu, &CLUSTERS)
}

/// [`spec`] placed on `clusters`.
pub fn spec_on(app: &str, image: &str, cpu: &str, clusters: &[&str]) -> Value {
    json!({
        "template": {"spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"containers": [{
                    "name": "app",
                    "image": image,
                    "resources": {"requests": {"cpu": cpu}},
                }]},
            },
        }},
        "placement": {"clusters": clusters.iter().map(|c| json!({"name": c})).collect::<Vec<_>>()},
    })
}

/// `{cluster: (image, readyReplicas)}` of the member Deployments.
pub async fn images(
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

/// Waits (up to `timeout`) until the member Deployments hold exactly `want`: `(cluster,
/// image, readyReplicas)`.
pub async fn wait_images(
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

/// `image` Ready once in every member.
pub fn everywhere(image: &str) -> [(&'static str, &str, i64); 3] {
    CLUSTERS.map(|c| (c, image, 1))
}

/// When each member's Deployment first held an image, and first was Ready on it, as seen by a
/// watch per member (started before the change, so nothing is missed between polls).
#[derive(Default, Debug)]
pub struct Timeline {
    first: BTreeMap<(String, String), Instant>,
    ready: BTreeMap<(String, String), Instant>,
    deleted: BTreeMap<String, Instant>,
}

/// A watch of the Deployment in every member, recording its [`Timeline`].
pub struct Watches {
    pub timeline: Arc<StdMutex<Timeline>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    pub started: Instant,
}

impl Drop for Watches {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Watches {
    /// Starts the watches of `namespace/name` and returns once every one has listed.
    pub async fn start(fed: &Federation, namespace: &str, name: &str) -> anyhow::Result<Self> {
        let timeline = Arc::new(StdMutex::new(Timeline::default()));
        let mut tasks = Vec::new();
        let mut synced = Vec::new();
        for cluster in CLUSTERS {
            let api: Api<Deployment> = Api::namespaced(fed.client(cluster).await?, namespace);
            let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
            let timeline = timeline.clone();
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            synced.push(rx);
            tasks.push(tokio::spawn(async move {
                let mut tx = Some(tx);
                let mut events = watcher(api, config).default_backoff().boxed();
                while let Some(event) = events.next().await {
                    let seen = Instant::now();
                    let deployment = match event {
                        Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => d,
                        Ok(watcher::Event::Delete(_)) => {
                            let mut timeline = timeline.lock().unwrap_or_else(|e| e.into_inner());
                            timeline.deleted.entry(cluster.to_owned()).or_insert(seen);
                            continue;
                        }
                        Ok(watcher::Event::InitDone) => {
                            if let Some(tx) = tx.take() {
                                let _ = tx.send(());
                            }
                            continue;
                        }
                        _ => continue,
                    };
                    let image = deployment
                        .spec
                        .as_ref()
                        .and_then(|s| s.template.spec.as_ref())
                        .and_then(|s| s.containers.first())
                        .and_then(|c| c.image.clone())
                        .unwrap_or_default();
                    let status = deployment.status.clone().unwrap_or_default();
                    let ready = status.observed_generation == deployment.metadata.generation
                        && status.updated_replicas == Some(1)
                        && status.ready_replicas == Some(1)
                        && status.replicas == Some(1);
                    let key = (cluster.to_owned(), image);
                    let mut timeline = timeline.lock().unwrap_or_else(|e| e.into_inner());
                    timeline.first.entry(key.clone()).or_insert(seen);
                    if ready {
                        timeline.ready.entry(key).or_insert(seen);
                    }
                }
            }));
        }
        for rx in synced {
            tokio::time::timeout(TIMEOUT, rx).await??;
        }
        Ok(Self {
            timeline,
            tasks,
            started: Instant::now(),
        })
    }

    /// When `cluster` first held `image`, and first was Ready on it.
    pub fn times(&self, cluster: &str, image: &str) -> (Option<Instant>, Option<Instant>) {
        let timeline = self.timeline.lock().unwrap_or_else(|e| e.into_inner());
        let key = (cluster.to_owned(), image.to_owned());
        (
            timeline.first.get(&key).copied(),
            timeline.ready.get(&key).copied(),
        )
    }

    /// When `cluster`'s Deployment was deleted.
    pub fn deleted(&self, cluster: &str) -> Option<Instant> {
        let timeline = self.timeline.lock().unwrap_or_else(|e| e.into_inner());
        timeline.deleted.get(cluster).copied()
    }

    /// Whether the watches show `image` in every cluster, Ready in all but the last stage's.
    fn seen_everywhere(&self, image: &str) -> bool {
        CLUSTERS.iter().enumerate().all(|(i, cluster)| {
            let (first, ready) = self.times(cluster, image);
            first.is_some() && (ready.is_some() || i + 1 == CLUSTERS.len())
        })
    }

    /// Which clusters ever held `image`.
    pub fn holders(&self, image: &str) -> Vec<String> {
        let timeline = self.timeline.lock().unwrap_or_else(|e| e.into_inner());
        timeline
            .first
            .keys()
            .filter(|(_, i)| i == image)
            .map(|(c, _)| c.clone())
            .collect()
    }

    /// Asserts that `image` reached the members stage by stage: each one only after the one
    /// before was Ready on it and had stayed so for the soak. Returns a line for the report.
    ///
    /// Callers have seen `image` everywhere through reads; these watches may show the last
    /// events a moment later (under load, after the reads): they are given up to
    /// [`WATCH_CATCH_UP`] to show what is asserted on before the assertion.
    pub async fn assert_in_order(&self, image: &str) -> anyhow::Result<String> {
        let deadline = Instant::now() + WATCH_CATCH_UP;
        while Instant::now() < deadline && !self.seen_everywhere(image) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut line = Vec::new();
        for pair in CLUSTERS.windows(2) {
            let (_, ready) = self.times(pair[0], image);
            let (next, _) = self.times(pair[1], image);
            let (Some(ready), Some(next)) = (ready, next) else {
                anyhow::bail!(
                    "{image}: {} Ready at {ready:?}, {} first at {next:?}",
                    pair[0],
                    pair[1]
                );
            };
            anyhow::ensure!(
                next + WATCH_SLACK >= ready + SOAK,
                "{image}: {} got it {:?} after {} was Ready (soak {SOAK:?})",
                pair[1],
                next.saturating_duration_since(ready),
                pair[0]
            );
            line.push(format!(
                "{} Ready at {:.2}s, {} given it at {:.2}s",
                pair[0],
                ready.duration_since(self.started).as_secs_f64(),
                pair[1],
                next.duration_since(self.started).as_secs_f64()
            ));
        }
        Ok(line.join("; "))
    }
}

/// Replaces the spec of FederatedDeployment `namespace/name` with `spec`.
pub async fn change(
    fed: &Federation,
    namespace: &str,
    name: &str,
    spec: Value,
) -> anyhow::Result<()> {
    let api = dynamic_api(fed.hub().await?, &federated("Deployment"), Some(namespace));
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": spec })),
    )
    .await?;
    Ok(())
}

/// What [`statuses`] says of a cluster without a `status.clusters[]` entry.
pub const ABSENT: &str = "<no status.clusters entry>";

/// The federated object's `status.clusters[]` entry of each member: `(status, message)`
/// (`status` empty: Ok; [`ABSENT`]: no entry).
pub async fn statuses(
    fed: &Federation,
    namespace: &str,
    name: &str,
) -> anyhow::Result<BTreeMap<String, (String, String)>> {
    let api = dynamic_api(fed.hub().await?, &federated("Deployment"), Some(namespace));
    let object = get_value(&api, name).await?.unwrap_or_default();
    Ok(CLUSTERS
        .iter()
        .map(|c| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            // No entry is not Ok: the status must name every cluster.
            let found = match cluster_status(&object, c) {
                Some(entry) => (text(&entry["status"]), text(&entry["message"])),
                None => (ABSENT.to_owned(), String::new()),
            };
            ((*c).to_owned(), found)
        })
        .collect())
}

/// Waits until [`statuses`] satisfy `check`.
pub async fn wait_statuses(
    fed: &Federation,
    namespace: &str,
    name: &str,
    what: &str,
    check: impl Fn(&BTreeMap<String, (String, String)>) -> bool,
) -> anyhow::Result<()> {
    wait_for(what, TIMEOUT, async || {
        let found = statuses(fed, namespace, name).await?;
        Ok(if check(&found) {
            Wait::Done(())
        } else {
            Wait::Pending(format!("{found:?}"))
        })
    })
    .await
}

/// `hubfedctl rollout status` of Deployment `namespace/name`.
pub async fn rollout_status(namespace: &str, name: &str) -> String {
    let target = format!("deployments/{name}");
    let (code, out, err) = hubfedctl(&["rollout", "status", &target, "-n", namespace]).await;
    assert_eq!(code, 0, "{err}");
    out
}

/// Waits until `hubfedctl rollout status` says `phase`.
pub async fn wait_phase(namespace: &str, name: &str, phase: &str) -> anyhow::Result<()> {
    wait_for(&format!("rollout {phase}"), TIMEOUT, async || {
        let status = rollout_status(namespace, name).await;
        Ok(if status.contains(&format!("({phase})")) {
            Wait::Done(())
        } else {
            Wait::Pending(status)
        })
    })
    .await
}

/// Creates namespace `namespace`, federated to every cluster, and in it FederatedDeployment
/// `name` with `spec`; returns the API of the FederatedDeployments there.
pub async fn create_deployment(
    fed: &Federation,
    namespace: &str,
    name: &str,
    spec: Value,
) -> anyhow::Result<Api<DynamicObject>> {
    fed.create_federated_namespace(namespace, &CLUSTERS).await?;
    fed.create_federated("Deployment", Some(namespace), name, spec)
        .await
}

/// A federated Deployment under the strategy, first revision everywhere and Ready.
pub async fn setup(fed: &Federation, namespace: &str, name: &str) -> anyhow::Result<()> {
    let api = create_deployment(fed, namespace, name, spec(name, "app:v1", "10m")).await?;
    follow_strategy(&api, name, STRATEGY).await?;
    wait_images(fed, namespace, name, &everywhere("app:v1"), TIMEOUT).await
}

/// `hubfedctl rollout <verb>` of Deployment `namespace/name`: its output.
pub async fn control(namespace: &str, name: &str, verb: &str) -> String {
    let target = format!("deployments/{name}");
    let (code, out, err) = hubfedctl(&["rollout", verb, &target, "-n", namespace]).await;
    assert_eq!(code, 0, "{err}");
    out
}
