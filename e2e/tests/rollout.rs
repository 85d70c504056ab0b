//! Staged rollouts on three members that schedule pods: a bad revision (a CPU request no node
//! fits: its pods stay Unschedulable, never Ready) stops after the first stage, the other
//! clusters keep the previous revision and say so (`RolloutPending`), and the fixed template
//! goes stage by stage — order and soaks measured from watches on the members; an apply the
//! member refuses halts its revision only, not the fix; pause freezes everything, abort sends
//! the changed clusters back and the next revision rolls out although the abort was never
//! lifted; a cluster-scoped object with a 240-character name has its state stored and deleted
//! with it.
//!
//! The tests run one at a time (they share the members' capacity and the strategy).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use hubfed_e2e::{
    Federation, KUBEFED_NAMESPACE, TIMEOUT, Wait, cluster_status, create_federated, dynamic_api,
    federated, get_value, report, target, unique_name, unique_ns, wait_event, wait_for,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::{Value, json};
use tokio::sync::{Mutex, OnceCell};

const CLUSTERS: [&str; 3] = ["member1", "member2", "member3"];
const STRATEGY: &str = "one-by-one";
const SOAK: Duration = Duration::from_secs(2);
/// How much later our own watch may see a copy Ready than the controller's watch did.
const WATCH_SLACK: Duration = Duration::from_millis(250);
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
                    "soakSeconds": SOAK.as_secs(),
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
    spec_on(app, image, cpu, &CLUSTERS)
}

fn spec_on(app: &str, image: &str, cpu: &str, clusters: &[&str]) -> Value {
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

fn everywhere(image: &str) -> [(&'static str, &str, i64); 3] {
    CLUSTERS.map(|c| (c, image, 1))
}

/// When each member's Deployment first held an image, and first was Ready on it, as seen by a
/// watch per member (started before the change, so nothing is missed between polls).
#[derive(Default, Debug)]
struct Timeline {
    first: BTreeMap<(String, String), Instant>,
    ready: BTreeMap<(String, String), Instant>,
    deleted: BTreeMap<String, Instant>,
}

struct Watches {
    timeline: Arc<StdMutex<Timeline>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    started: Instant,
}

impl Drop for Watches {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Watches {
    async fn start(fed: &Federation, namespace: &str, name: &str) -> anyhow::Result<Self> {
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
    fn times(&self, cluster: &str, image: &str) -> (Option<Instant>, Option<Instant>) {
        let timeline = self.timeline.lock().unwrap_or_else(|e| e.into_inner());
        let key = (cluster.to_owned(), image.to_owned());
        (
            timeline.first.get(&key).copied(),
            timeline.ready.get(&key).copied(),
        )
    }

    /// When `cluster`'s Deployment was deleted.
    fn deleted(&self, cluster: &str) -> Option<Instant> {
        let timeline = self.timeline.lock().unwrap_or_else(|e| e.into_inner());
        timeline.deleted.get(cluster).copied()
    }

    /// Which clusters ever held `image`.
    fn holders(&self, image: &str) -> Vec<String> {
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
    fn assert_in_order(&self, image: &str) -> anyhow::Result<String> {
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

async fn change(fed: &Federation, namespace: &str, name: &str, spec: Value) -> anyhow::Result<()> {
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
const ABSENT: &str = "<no status.clusters entry>";

/// The federated object's `status.clusters[]` entry of each member: `(status, message)`
/// (`status` empty: Ok; [`ABSENT`]: no entry).
async fn statuses(
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

async fn wait_statuses(
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

async fn rollout_status(namespace: &str, name: &str) -> String {
    let target = format!("deployments/{name}");
    let (code, out, err) = hubfedctl(&["rollout", "status", &target, "-n", namespace]).await;
    assert_eq!(code, 0, "{err}");
    out
}

async fn wait_phase(namespace: &str, name: &str, phase: &str) -> anyhow::Result<()> {
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
    wait_images(fed, namespace, name, &everywhere("app:v1"), TIMEOUT).await
}

async fn control(namespace: &str, name: &str, verb: &str) -> String {
    let target = format!("deployments/{name}");
    let (code, out, err) = hubfedctl(&["rollout", verb, &target, "-n", namespace]).await;
    assert_eq!(code, 0, "{err}");
    out
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
    change(fed, &namespace, &name, spec(&name, "app:v2", "100")).await?;
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
    // The clusters held back say so; they were reported Ok.
    wait_statuses(
        fed,
        &namespace,
        &name,
        "held clusters RolloutPending",
        |s| {
            ["member2", "member3"].iter().all(|c| {
                s[*c].0 == "RolloutPending" && s[*c].1.contains("halted (member1: not Ready")
            })
        },
    )
    .await?;
    let status = rollout_status(&namespace, &name).await;
    assert!(
        status.contains("(Halted)") && status.contains("halted: member1: not Ready"),
        "{status}"
    );

    // The fix goes stage by stage; the members' watches say when each got it and was Ready.
    let watches = Watches::start(fed, &namespace, &name).await?;
    change(fed, &namespace, &name, spec(&name, "app:v3", "10m")).await?;
    wait_images(
        fed,
        &namespace,
        &name,
        &everywhere("app:v3"),
        Duration::from_secs(120),
    )
    .await?;
    let order = watches.assert_in_order("app:v3")?;
    report(format_args!("rollout of the fix: {order}"));
    wait_event(&hub, &namespace, "RolloutCompleted", &[]).await?;
    wait_statuses(fed, &namespace, &name, "every cluster Ok", |s| {
        s.values().all(|(status, _)| status.is_empty())
    })
    .await?;
    Ok(())
}

/// A revision the canary's API server refuses halts at once; the fix is not halted by that
/// failure (it was: the failure was read from the status the bad revision left).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_apply_halts_its_revision_but_not_the_fix() -> anyhow::Result<()> {
    let fed = fed().await?;
    let _one = ONE_AT_A_TIME.lock().await;
    let hub = fed.hub().await?;
    let namespace = unique_ns("rollout-refused");
    let name = unique_name("web");
    setup(fed, &namespace, &name).await?;

    // A container name the member's API server refuses (not a DNS label).
    let mut refused = spec(&name, "app:v2", "10m");
    refused["template"]["spec"]["template"]["spec"]["containers"][0]["name"] = json!("Bad_Name");
    change(fed, &namespace, &name, refused).await?;
    wait_event(
        &hub,
        &namespace,
        "RolloutHalted",
        &["stage canary", "member1: apply failed: UpdateFailed"],
    )
    .await?;
    wait_statuses(
        fed,
        &namespace,
        &name,
        "member1 UpdateFailed, the rest pending",
        |s| {
            s["member1"].0 == "UpdateFailed"
                && s["member2"].0 == "RolloutPending"
                && s["member3"].0 == "RolloutPending"
        },
    )
    .await?;
    assert_eq!(
        images(fed, &namespace, &name).await?,
        everywhere("app:v1")
            .iter()
            .map(|(c, i, r)| ((*c).to_owned(), ((*i).to_owned(), *r)))
            .collect::<BTreeMap<_, _>>()
    );

    let watches = Watches::start(fed, &namespace, &name).await?;
    change(fed, &namespace, &name, spec(&name, "app:v3", "10m")).await?;
    wait_images(fed, &namespace, &name, &everywhere("app:v3"), TIMEOUT).await?;
    let order = watches.assert_in_order("app:v3")?;
    report(format_args!(
        "rollout of the fix after a refused apply: {order}"
    ));
    wait_phase(&namespace, &name, "Completed").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_freezes_abort_goes_back_and_the_next_revision_rolls_out() -> anyhow::Result<()> {
    let fed = fed().await?;
    let _one = ONE_AT_A_TIME.lock().await;
    let namespace = unique_ns("rollout-control");
    let name = unique_name("web");
    setup(fed, &namespace, &name).await?;

    // Paused: a new revision reaches no cluster at all, well past a soak.
    let watches = Watches::start(fed, &namespace, &name).await?;
    let out = control(&namespace, &name, "pause").await;
    assert!(out.contains("rollout paused"), "{out}");
    change(fed, &namespace, &name, spec(&name, "app:v2", "10m")).await?;
    wait_statuses(
        fed,
        &namespace,
        &name,
        "every cluster pending: paused",
        |s| {
            s.values()
                .all(|(status, message)| status == "RolloutPending" && message.contains("paused"))
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        watches.holders("app:v2"),
        Vec::<String>::new(),
        "given while paused"
    );
    control(&namespace, &name, "resume").await;
    wait_images(fed, &namespace, &name, &everywhere("app:v2"), TIMEOUT).await?;
    let order = watches.assert_in_order("app:v2")?;
    report(format_args!("rollout after resume: {order}"));
    wait_phase(&namespace, &name, "Completed").await?;

    // A bad revision reaches the canary; abort sends it back to v2, the stable revision.
    change(fed, &namespace, &name, spec(&name, "app:v3", "100")).await?;
    wait_for("the canary on v3", TIMEOUT, async || {
        let found = images(fed, &namespace, &name).await?;
        Ok(if found["member1"].0 == "app:v3" {
            Wait::Done(())
        } else {
            Wait::Pending(format!("{found:?}"))
        })
    })
    .await?;
    let out = control(&namespace, &name, "abort").await;
    assert!(out.contains("rollout aborted"), "{out}");
    // The abort names the revision it belongs to (v3's).
    let api = dynamic_api(fed.hub().await?, &federated("Deployment"), Some(&namespace));
    let object = get_value(&api, &name).await?.unwrap_or_default();
    let aborted = object["metadata"]["annotations"]["hubfed.io/rollout-aborted-revision"].clone();
    assert!(
        rollout_status(&namespace, &name).await.contains(&format!(
            "revision {} (",
            aborted.as_str().unwrap_or("<none>")
        )),
        "{aborted}"
    );
    wait_images(fed, &namespace, &name, &everywhere("app:v2"), TIMEOUT).await?;
    assert!(
        rollout_status(&namespace, &name)
            .await
            .contains("(Aborted)")
    );

    // The fix, with the abort still asked for: a fresh rollout, stage by stage; the abort
    // that belonged to v3 is removed.
    let watches = Watches::start(fed, &namespace, &name).await?;
    change(fed, &namespace, &name, spec(&name, "app:v4", "10m")).await?;
    wait_images(fed, &namespace, &name, &everywhere("app:v4"), TIMEOUT).await?;
    let order = watches.assert_in_order("app:v4")?;
    report(format_args!("rollout of the fix after an abort: {order}"));
    wait_phase(&namespace, &name, "Completed").await?;
    let object = get_value(&api, &name).await?.unwrap_or_default();
    let annotations = &object["metadata"]["annotations"];
    assert!(
        annotations["hubfed.io/rollout"].is_null()
            && annotations["hubfed.io/rollout-aborted-revision"].is_null(),
        "{annotations}"
    );
    Ok(())
}

/// A cluster-scoped object (no namespace: its state's name had an invalid `-` label) with a
/// name too long to be part of a ConfigMap name: its rollout state is stored (under a valid
/// name, the full key in an annotation, owned by the object) and goes with the object; the
/// same name created again starts afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_scoped_object_stores_its_state_and_takes_it_along() -> anyhow::Result<()> {
    let fed = fed().await?;
    let _one = ONE_AT_A_TIME.lock().await;
    let hub = fed.hub().await?;
    // 240 characters: with the kind and namespace around it, too long for a ConfigMap name.
    let name = format!("{}.{}", unique_name("reader"), "a".repeat(200));
    let name = format!("{name}{}", "b".repeat(240 - name.len()));
    let rules = |verbs: &[&str]| {
        json!({
            "template": {"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": verbs}]},
            "placement": {"clusters": CLUSTERS.iter().map(|c| json!({"name": c})).collect::<Vec<_>>()},
        })
    };
    let create = async |verbs: &[&str]| -> anyhow::Result<Api<DynamicObject>> {
        let api = create_federated(&hub, "ClusterRole", None, &name, rules(verbs)).await?;
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"hubfed.io/rollout-strategy": STRATEGY}}}),
            ),
        )
        .await?;
        Ok(api)
    };
    let wait_verbs = async |verbs: &[&str]| {
        wait_for(&format!("{name} with {verbs:?}"), TIMEOUT, async || {
            let mut pending = Vec::new();
            for cluster in CLUSTERS {
                let role = fed
                    .member_object(cluster, &target("ClusterRole"), None, &name)
                    .await?;
                let found = role.map(|r| r["rules"][0]["verbs"].clone());
                if found != Some(json!(verbs)) {
                    pending.push(format!("{cluster}: {found:?}"));
                }
            }
            Ok(Wait::all_or_pending(pending))
        })
        .await
    };
    let api = create(&["get"]).await?;
    wait_verbs(&["get"]).await?;
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": rules(&["get", "list"])})),
    )
    .await?;
    wait_verbs(&["get", "list"]).await?;
    let target = format!("clusterroles/{name}");
    wait_for("the rollout completed", TIMEOUT, async || {
        let (_, out, err) = hubfedctl(&["rollout", "status", &target]).await;
        Ok(if out.contains("(Completed)") {
            Wait::Done(())
        } else {
            Wait::Pending(format!("{out}{err}"))
        })
    })
    .await?;

    let state_name = hubfed_core::rollout::state_name("FederatedClusterRole", None, &name);
    let maps: Api<ConfigMap> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let map = maps.get(&state_name).await?;
    let uid = api.get(&name).await?.metadata.uid.unwrap_or_default();
    let annotations = map.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get("hubfed.io/rollout-object")
            .map(String::as_str),
        Some(format!("FederatedClusterRole/{name}").as_str())
    );
    assert_eq!(annotations.get("hubfed.io/rollout-object-uid"), Some(&uid));
    let owners = map.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(owners[0].uid, uid);

    // Deleted with its object.
    api.delete(&name, &DeleteParams::default()).await?;
    wait_for("the rollout state gone", TIMEOUT, async || {
        Ok(match maps.get_opt(&state_name).await? {
            None => Wait::Done(()),
            Some(_) => Wait::Pending("still there".into()),
        })
    })
    .await?;
    wait_for("the federated object gone", TIMEOUT, async || {
        Ok(match api.get_opt(&name).await? {
            None => Wait::Done(()),
            Some(_) => Wait::Pending("still there".into()),
        })
    })
    .await?;

    // The same name again, a state of an earlier object still there (another UID; halted
    // with a stable revision): a new object, a new state — its first revision goes
    // everywhere, nothing of the earlier state taken over.
    let earlier: ConfigMap = serde_json::from_value(json!({
        "metadata": {
            "name": state_name,
            "annotations": {
                "hubfed.io/rollout-object": format!("FederatedClusterRole/{name}"),
                "hubfed.io/rollout-object-uid": "an-earlier-object",
            },
        },
        "data": {
            "state": json!({
                "revision": "earlier", "stable": "older", "batch": 0, "batchStarted": 0,
                "phase": "Halted", "halted": "member1: not Ready",
                "batches": [{"stage": "canary", "clusters": ["member1"]},
                            {"stage": "rest", "clusters": ["member2", "member3"]}],
                "reached": ["member1"],
            }).to_string(),
            "current": "", "stable": "",
        },
    }))?;
    maps.create(&PostParams::default(), &earlier).await?;
    let api = create(&["watch"]).await?;
    wait_verbs(&["watch"]).await?;
    let uid = api.get(&name).await?.metadata.uid.unwrap_or_default();
    wait_for("the new object's state", TIMEOUT, async || {
        let map = maps.get_opt(&state_name).await?;
        let stored_uid = map
            .as_ref()
            .and_then(|m| m.metadata.annotations.as_ref())
            .and_then(|a| a.get("hubfed.io/rollout-object-uid").cloned());
        Ok(if stored_uid.as_ref() == Some(&uid) {
            Wait::Done(map)
        } else {
            Wait::Pending(format!("{stored_uid:?}"))
        })
    })
    .await?;
    let state: Value = serde_json::from_str(
        maps.get(&state_name)
            .await?
            .data
            .unwrap_or_default()
            .get("state")
            .map_or("null", String::as_str),
    )?;
    anyhow::ensure!(
        state["phase"] == "Completed" && state.get("stable").is_none(),
        "the earlier object's state was taken over: {state}"
    );
    api.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}

/// A placement change is rolled out stage by stage like a template change: the canary loses
/// its copy first, the member of the last stage gets its copy only after the stages before
/// were done and soaked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placement_change_goes_stage_by_stage() -> anyhow::Result<()> {
    let fed = fed().await?;
    let _one = ONE_AT_A_TIME.lock().await;
    let namespace = unique_ns("rollout-placement");
    let name = unique_name("web");
    fed.create_federated_namespace(&namespace, &CLUSTERS)
        .await?;
    let hub = fed.hub().await?;
    let api = create_federated(
        &hub,
        "Deployment",
        Some(&namespace),
        &name,
        spec_on(&name, "app:v1", "10m", &["member1", "member2"]),
    )
    .await?;
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"hubfed.io/rollout-strategy": STRATEGY}}}),
        ),
    )
    .await?;
    let two = [("member1", "app:v1", 1), ("member2", "app:v1", 1)];
    wait_images(fed, &namespace, &name, &two, TIMEOUT).await?;

    // From member1 + member2 to member2 + member3.
    let watches = Watches::start(fed, &namespace, &name).await?;
    change(
        fed,
        &namespace,
        &name,
        spec_on(&name, "app:v1", "10m", &["member2", "member3"]),
    )
    .await?;
    let moved = [("member2", "app:v1", 1), ("member3", "app:v1", 1)];
    wait_images(fed, &namespace, &name, &moved, TIMEOUT).await?;
    let removed = watches.deleted("member1");
    let (added, _) = watches.times("member3", "app:v1");
    let (Some(removed), Some(added)) = (removed, added) else {
        anyhow::bail!("member1 deleted at {removed:?}, member3 created at {added:?}");
    };
    // canary (member1 removed), soak, second (member2, unchanged), soak, rest (member3).
    anyhow::ensure!(
        added + WATCH_SLACK >= removed + SOAK * 2,
        "member3 got its copy {:?} after member1 lost its copy",
        added.saturating_duration_since(removed)
    );
    report(format_args!(
        "placement change: member1 removed at {:.2}s, member3 created at {:.2}s",
        removed.duration_since(watches.started).as_secs_f64(),
        added.duration_since(watches.started).as_secs_f64()
    ));
    wait_phase(&namespace, &name, "Completed").await?;
    Ok(())
}

/// Deleting the federated object deletes its copies stage by stage, then the object and its
/// rollout state go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_goes_stage_by_stage() -> anyhow::Result<()> {
    let fed = fed().await?;
    let _one = ONE_AT_A_TIME.lock().await;
    let namespace = unique_ns("rollout-delete");
    let name = unique_name("web");
    setup(fed, &namespace, &name).await?;
    let hub = fed.hub().await?;
    let state_name =
        hubfed_core::rollout::state_name("FederatedDeployment", Some(&namespace), &name);
    let maps: Api<ConfigMap> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    anyhow::ensure!(
        maps.get_opt(&state_name).await?.is_some(),
        "no state stored"
    );

    let watches = Watches::start(fed, &namespace, &name).await?;
    let api = dynamic_api(hub.clone(), &federated("Deployment"), Some(&namespace));
    api.delete(&name, &DeleteParams::default()).await?;
    wait_for("the federated object gone", TIMEOUT, async || {
        Ok(match api.get_opt(&name).await? {
            None => Wait::Done(()),
            Some(_) => Wait::Pending(format!("{:?}", watches.timeline)),
        })
    })
    .await?;
    let mut line = Vec::new();
    for pair in CLUSTERS.windows(2) {
        let (Some(before), Some(after)) = (watches.deleted(pair[0]), watches.deleted(pair[1]))
        else {
            anyhow::bail!("deletions: {:?}", watches.timeline);
        };
        anyhow::ensure!(
            after + WATCH_SLACK >= before + SOAK,
            "{} deleted {:?} after {}",
            pair[1],
            after.saturating_duration_since(before),
            pair[0]
        );
        line.push(format!(
            "{} at {:.2}s",
            pair[1],
            after.duration_since(watches.started).as_secs_f64()
        ));
    }
    report(format_args!(
        "staged deletion: member1 at {:.2}s, {}",
        watches
            .deleted("member1")
            .map_or(0.0, |t| t.duration_since(watches.started).as_secs_f64()),
        line.join(", ")
    ));
    anyhow::ensure!(maps.get_opt(&state_name).await?.is_none(), "state left");
    Ok(())
}

/// An object without a strategy makes no rollout request when it is deleted (the path
/// without rollouts): a ConfigMap at its state's name — left by an earlier object of that name
/// — is not touched, and the deletion completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_without_a_strategy_makes_no_rollout_request() -> anyhow::Result<()> {
    let fed = fed().await?;
    let _one = ONE_AT_A_TIME.lock().await;
    let namespace = unique_ns("rollout-none");
    let name = unique_name("web");
    fed.create_federated_namespace(&namespace, &CLUSTERS)
        .await?;
    let hub = fed.hub().await?;
    let state_name =
        hubfed_core::rollout::state_name("FederatedDeployment", Some(&namespace), &name);
    let maps: Api<ConfigMap> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let leftover: ConfigMap = serde_json::from_value(json!({
        "metadata": {
            "name": state_name,
            "annotations": {"hubfed.io/rollout-object-uid": "an-earlier-object"},
        },
    }))?;
    maps.create(&PostParams::default(), &leftover).await?;
    let api = create_federated(
        &hub,
        "Deployment",
        Some(&namespace),
        &name,
        spec(&name, "app:v1", "10m"),
    )
    .await?;
    wait_images(fed, &namespace, &name, &everywhere("app:v1"), TIMEOUT).await?;
    api.delete(&name, &DeleteParams::default()).await?;
    wait_for("the federated object gone", TIMEOUT, async || {
        Ok(match api.get_opt(&name).await? {
            None => Wait::Done(()),
            Some(_) => Wait::Pending("still there".into()),
        })
    })
    .await?;
    anyhow::ensure!(
        maps.get_opt(&state_name).await?.is_some(),
        "the deletion of an object without a strategy deleted the ConfigMap at its state's name"
    );
    maps.delete(&state_name, &DeleteParams::default()).await?;
    Ok(())
}

/// A strategy that does not exist holds every change from the first one on: the first
/// revision goes everywhere (nothing to protect), the next is held (`RolloutPending`), the
/// Warning is published once however often the object is looked at, and once the strategy is
/// created the held change rolls out stage by stage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_strategy_holds_every_change_until_it_exists() -> anyhow::Result<()> {
    let fed = fed().await?;
    let _one = ONE_AT_A_TIME.lock().await;
    let namespace = unique_ns("rollout-missing");
    let name = unique_name("web");
    let strategy_name = unique_name("late");
    fed.create_federated_namespace(&namespace, &CLUSTERS)
        .await?;
    let hub = fed.hub().await?;
    let resource = federated("Deployment");
    let api = dynamic_api(hub.clone(), &resource, Some(&namespace));
    let mut object = hubfed_e2e::federated_object(
        &resource,
        Some(&namespace),
        &name,
        spec(&name, "app:v1", "10m"),
    );
    object.metadata.annotations = Some(BTreeMap::from([(
        "hubfed.io/rollout-strategy".to_owned(),
        strategy_name.clone(),
    )]));
    api.create(&PostParams::default(), &object).await?;
    wait_images(fed, &namespace, &name, &everywhere("app:v1"), TIMEOUT).await?;

    change(fed, &namespace, &name, spec(&name, "app:v2", "10m")).await?;
    wait_statuses(fed, &namespace, &name, "every cluster held", |s| {
        s.values()
            .all(|(status, message)| status == "RolloutPending" && message.contains("not found"))
    })
    .await?;
    // Past one recheck (30 s): still held, and said once.
    tokio::time::sleep(Duration::from_secs(35)).await;
    let found = images(fed, &namespace, &name).await?;
    anyhow::ensure!(
        found.values().all(|(image, _)| image == "app:v1"),
        "a change went out without its strategy: {found:?}"
    );
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(hub.clone(), &namespace);
    let warnings: Vec<_> = events
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("RolloutStrategyNotFound"))
        .filter(|e| e.involved_object.name.as_deref() == Some(name.as_str()))
        .collect();
    let counts: Vec<_> = warnings
        .iter()
        .map(|e| (e.count, e.series.as_ref().and_then(|s| s.count)))
        .collect();
    anyhow::ensure!(
        warnings.len() == 1 && counts[0].0.unwrap_or(1) <= 1 && counts[0].1.unwrap_or(1) <= 1,
        "RolloutStrategyNotFound said more than once: {counts:?}"
    );

    // The strategy appears: the held change rolls out, the canary first.
    let strategies = dynamic_api(
        hub.clone(),
        &ApiResource {
            group: "scheduling.hubfed.io".into(),
            version: "v1alpha1".into(),
            api_version: "scheduling.hubfed.io/v1alpha1".into(),
            kind: "RolloutStrategy".into(),
            plural: "rolloutstrategies".into(),
        },
        Some(KUBEFED_NAMESPACE),
    );
    let strategy: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "scheduling.hubfed.io/v1alpha1",
        "kind": "RolloutStrategy",
        "metadata": {"name": strategy_name, "namespace": KUBEFED_NAMESPACE},
        "spec": {"stages": [{"name": "canary", "clusters": ["member1"]}, {"name": "rest"}]},
    }))?;
    let watches = Watches::start(fed, &namespace, &name).await?;
    strategies.create(&PostParams::default(), &strategy).await?;
    wait_images(
        fed,
        &namespace,
        &name,
        &everywhere("app:v2"),
        Duration::from_secs(120),
    )
    .await?;
    let (canary, _) = watches.times("member1", "app:v2");
    for cluster in ["member2", "member3"] {
        let (given, _) = watches.times(cluster, "app:v2");
        anyhow::ensure!(
            canary.is_some() && given.is_some() && given >= canary,
            "{cluster} got app:v2 before the canary: {:?}",
            watches.timeline
        );
    }
    strategies
        .delete(&strategy_name, &DeleteParams::default())
        .await?;
    api.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}

/// The rollout strategy annotated on the FederatedTypeConfig takes effect without a restart
/// (an annotation leaves the FTC's generation as it is): a change of an object without its
/// own annotation is then staged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strategy_on_the_type_takes_effect_at_once() -> anyhow::Result<()> {
    let fed = fed().await?;
    let _one = ONE_AT_A_TIME.lock().await;
    let namespace = unique_ns("rollout-ftc");
    let name = unique_name("web");
    fed.create_federated_namespace(&namespace, &CLUSTERS)
        .await?;
    let hub = fed.hub().await?;
    let api = create_federated(
        &hub,
        "Deployment",
        Some(&namespace),
        &name,
        spec(&name, "app:v1", "10m"),
    )
    .await?;
    wait_images(fed, &namespace, &name, &everywhere("app:v1"), TIMEOUT).await?;
    let ftcs: Api<hubfed_api::federatedtypeconfig::FederatedTypeConfig> =
        Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let annotate = async |strategy: Option<&str>| {
        ftcs.patch(
            "deployments.apps",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"hubfed.io/rollout-strategy": strategy}}}),
            ),
        )
        .await
    };
    annotate(Some(STRATEGY)).await?;
    let outcome = async {
        // The state is stored once the type's controller, restarted, looks at the object.
        let state_name =
            hubfed_core::rollout::state_name("FederatedDeployment", Some(&namespace), &name);
        let maps: Api<ConfigMap> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
        wait_for("the object's rollout state", TIMEOUT, async || {
            Ok(match maps.get_opt(&state_name).await? {
                Some(_) => Wait::Done(()),
                None => Wait::Pending("no state yet".into()),
            })
        })
        .await?;
        // 100 CPUs: the canary never gets Ready, the others are held.
        change(fed, &namespace, &name, spec(&name, "app:v2", "100")).await?;
        wait_statuses(fed, &namespace, &name, "member2 and member3 held", |s| {
            ["member2", "member3"]
                .iter()
                .all(|c| s[*c].0 == "RolloutPending")
        })
        .await?;
        let found = images(fed, &namespace, &name).await?;
        anyhow::ensure!(
            found["member2"].0 == "app:v1" && found["member3"].0 == "app:v1",
            "{found:?}"
        );
        api.delete(&name, &DeleteParams::default()).await?;
        wait_for("the federated object gone", TIMEOUT, async || {
            Ok(match api.get_opt(&name).await? {
                None => Wait::Done(()),
                Some(_) => Wait::Pending("still there".into()),
            })
        })
        .await
    }
    .await;
    annotate(None).await?;
    outcome
}

/// A spec over half a MiB: the state's two specs would not fit in its ConfigMap; the stable
/// spec is dropped and the change is rolled out all the same (it was never updated again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_object_still_rolls_out() -> anyhow::Result<()> {
    let fed = fed().await?;
    let _one = ONE_AT_A_TIME.lock().await;
    let namespace = unique_ns("rollout-large");
    let name = unique_name("big");
    fed.create_federated_namespace(&namespace, &CLUSTERS)
        .await?;
    let hub = fed.hub().await?;
    let spec = |version: &str| {
        json!({
            "template": {"data": {"version": version, "filler": "x".repeat(600_000)}},
            "placement": {"clusters": CLUSTERS.iter().map(|c| json!({"name": c})).collect::<Vec<_>>()},
        })
    };
    let api = create_federated(&hub, "ConfigMap", Some(&namespace), &name, spec("v1")).await?;
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"hubfed.io/rollout-strategy": STRATEGY}}}),
        ),
    )
    .await?;
    let wait_version = async |version: &str| {
        wait_for(&format!("{version} everywhere"), TIMEOUT, async || {
            let mut pending = Vec::new();
            for cluster in CLUSTERS {
                let map = fed
                    .member_object(cluster, &target("ConfigMap"), Some(&namespace), &name)
                    .await?;
                let found = map.map(|m| m["data"]["version"].clone());
                if found != Some(json!(version)) {
                    pending.push(format!("{cluster}: {found:?}"));
                }
            }
            Ok(Wait::all_or_pending(pending))
        })
        .await
    };
    wait_version("v1").await?;
    let state_name =
        hubfed_core::rollout::state_name("FederatedConfigMap", Some(&namespace), &name);
    let maps: Api<ConfigMap> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    wait_for("the object's rollout state", TIMEOUT, async || {
        Ok(match maps.get_opt(&state_name).await? {
            Some(_) => Wait::Done(()),
            None => Wait::Pending("no state yet".into()),
        })
    })
    .await?;
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": spec("v2") })),
    )
    .await?;
    wait_version("v2").await?;
    api.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}

/// A stored state that cannot be read holds every change (it was taken for no state: the
/// next revision went everywhere at once), and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_state_holds_every_change() -> anyhow::Result<()> {
    let fed = fed().await?;
    let _one = ONE_AT_A_TIME.lock().await;
    let namespace = unique_ns("rollout-unreadable");
    let name = unique_name("web");
    setup(fed, &namespace, &name).await?;
    let hub = fed.hub().await?;
    let state_name =
        hubfed_core::rollout::state_name("FederatedDeployment", Some(&namespace), &name);
    let maps: Api<ConfigMap> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    wait_for("the object's rollout state", TIMEOUT, async || {
        Ok(match maps.get_opt(&state_name).await? {
            Some(_) => Wait::Done(()),
            None => Wait::Pending("no state yet".into()),
        })
    })
    .await?;
    maps.patch(
        &state_name,
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"state": "{not json"}})),
    )
    .await?;
    change(fed, &namespace, &name, spec(&name, "app:v2", "10m")).await?;
    wait_event(
        &hub,
        &namespace,
        "RolloutStateUnreadable",
        &[&state_name, "held back"],
    )
    .await?;
    wait_statuses(fed, &namespace, &name, "every cluster held", |s| {
        s.values().all(|(status, message)| {
            status == "RolloutPending" && message.contains("cannot be read")
        })
    })
    .await?;
    let found = images(fed, &namespace, &name).await?;
    anyhow::ensure!(
        found.values().all(|(image, _)| image == "app:v1"),
        "a change went out past an unreadable state: {found:?}"
    );
    let api = dynamic_api(hub.clone(), &federated("Deployment"), Some(&namespace));
    api.delete(&name, &DeleteParams::default()).await?;
    wait_for("the federated object gone", TIMEOUT, async || {
        Ok(match api.get_opt(&name).await? {
            None => Wait::Done(()),
            Some(_) => Wait::Pending("still there".into()),
        })
    })
    .await?;
    anyhow::ensure!(maps.get_opt(&state_name).await?.is_none(), "state left");
    Ok(())
}
