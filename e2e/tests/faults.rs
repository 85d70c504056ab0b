//! Fault injection (issue 9): whatever fails and in whatever order, once things recover every
//! member holds exactly the objects the hub places on it, each as its template and overrides
//! say, and nothing is ever deleted that the hub did not ask to delete.
//!
//! Each test has its own hub and two members and runs `hubfed-controller` as a process
//! ([`hubfed_e2e::controller`]), so that it can be killed. A seeded workload of federated
//! ConfigMaps (creations, updates, placement changes, deletions, re-creations under the same
//! name) runs while the fault happens; the test keeps its own model of what the hub asks for
//! and ends with a full audit against it:
//!
//! - every member holds exactly the ConfigMaps placed on it: none missing, none extra, none
//!   left unlabelled; each with the template's data and the member's override;
//! - the hub holds exactly the model's federated objects (deleted ones are gone: no
//!   finalizer left behind), each with a current, successful status;
//! - once converged, the controller writes nothing more to the members for 10 s and the
//!   copies' resourceVersions do not move (no duplicate writes).
//!
//! The seed is printed; `HUBFED_E2E_SEED=<n>` replays a run's workload and fault times.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::{StreamExt as _, TryStreamExt as _, stream};
use hubfed_api::names::{MANAGED_LABEL, SYNC_CONTROLLER_FINALIZER};
use hubfed_e2e::controller::{ControllerOptions, ControllerProcess, MEMBER_WRITES, sample};
use hubfed_e2e::{
    MEMBERS, PrivateFederation, TIMEOUT, Wait, create_federated_namespace, dynamic_api, federated,
    federated_object, placement, propagated_ok, report, wait_for,
};
use hubfed_testenv::TestEnv;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt as _};
use rand::rngs::StdRng;
use rand::seq::SliceRandom as _;
use rand::{RngExt as _, SeedableRng as _};
use serde_json::{Value, json};

/// Federated ConfigMaps of the SIGKILL loop's cold start.
const OBJECTS: usize = 240;
/// SIGKILLs of the controller during the workload.
const KILLS: usize = 10;
/// Deadline of convergence once the last fault is over: generous, the machine has 2 cores.
const CONVERGENCE: Duration = Duration::from_secs(180);
/// Quiet period after convergence during which no member write may happen.
const SETTLE: Duration = Duration::from_secs(10);
/// Parallel hub requests of the workload.
const HUB_CONCURRENCY: usize = 8;

/// What the hub asks for one federated ConfigMap.
#[derive(Clone, Debug, PartialEq)]
struct Desired {
    value: u32,
    clusters: BTreeSet<&'static str>,
    /// member2's override of data key `o`.
    member2_override: Option<u32>,
}

impl Desired {
    fn random(rng: &mut StdRng) -> Self {
        Self {
            value: rng.random_range(0..1000),
            clusters: random_clusters(rng),
            member2_override: rng.random_bool(0.4).then(|| rng.random_range(0..1000)),
        }
    }

    fn spec(&self) -> Value {
        let clusters: Vec<&str> = self.clusters.iter().copied().collect();
        let overrides = match self.member2_override {
            Some(o) => json!([{
                "clusterName": "member2",
                "clusterOverrides": [{"op": "add", "path": "/data/o", "value": o.to_string()}],
            }]),
            None => json!([]),
        };
        json!({
            "template": {"data": {"v": self.value.to_string()}},
            "placement": placement(&clusters),
            "overrides": overrides,
        })
    }

    /// The data of the copy in `cluster`.
    fn data(&self, cluster: &str) -> Value {
        let mut data = json!({"v": self.value.to_string()});
        if let (Some(o), "member2") = (self.member2_override, cluster) {
            data["o"] = json!(o.to_string());
        }
        data
    }
}

/// One or both members, never none (an empty placement is tested elsewhere).
fn random_clusters(rng: &mut StdRng) -> BTreeSet<&'static str> {
    match rng.random_range(0..3) {
        0 => BTreeSet::from(["member1"]),
        1 => BTreeSet::from(["member2"]),
        _ => BTreeSet::from(MEMBERS),
    }
}

/// What the hub asks for, by federated object name.
type Model = BTreeMap<String, Desired>;

/// The seed of this run: `HUBFED_E2E_SEED` or the clock; printed either way.
fn seed(test: &str) -> u64 {
    let seed = std::env::var("HUBFED_E2E_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0)
        });
    report(format_args!(
        "{test}: seed {seed} (HUBFED_E2E_SEED={seed} replays it)"
    ));
    seed
}

/// A hub and two members, the control plane installed, both joined, the controller running
/// as a process, and namespace `ns` federated to both members.
struct Lab {
    env: TestEnv,
    hub: Client,
    members: Vec<(&'static str, Client)>,
    ns: String,
    /// Controllers started so far: numbers the next one's identity (and log file).
    incarnations: usize,
}

impl Lab {
    async fn start(ns: &str) -> anyhow::Result<(Self, ControllerProcess)> {
        let env = PrivateFederation::new()
            .without_controller_manager()
            .start()
            .await?;
        let hub = env.hub().client().await?;
        let mut members = Vec::new();
        for name in MEMBERS {
            let cluster = env.cluster(name).context("a member of the environment")?;
            members.push((name, cluster.client().await?));
        }
        let mut lab = Self {
            env,
            hub,
            members,
            ns: ns.to_owned(),
            incarnations: 0,
        };
        let controller = lab.start_controller()?;
        create_federated_namespace(&lab.hub, &lab.members, ns).await?;
        Ok((lab, controller))
    }

    fn start_controller(&mut self) -> anyhow::Result<ControllerProcess> {
        self.incarnations += 1;
        let identity = format!("faults-{}", self.incarnations);
        ControllerProcess::start(&self.env, &ControllerOptions::single(&identity))
    }

    fn federated_api(&self) -> Api<DynamicObject> {
        dynamic_api(self.hub.clone(), &federated("ConfigMap"), Some(&self.ns))
    }

    /// The last lines of every controller log of this lab, for a failure's message.
    fn controller_logs(&self) -> String {
        let mut out = String::new();
        for n in 1..=self.incarnations {
            let path = self
                .env
                .dir()
                .join(format!("logs/controller-faults-{n}.log"));
            let log = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(15)..];
            out.push_str(&format!(
                "--- {} ---\n{}\n",
                path.display(),
                tail.join("\n")
            ));
        }
        out
    }
}

// ---------------------------------------------------------------------------------------
// The workload: hub writes the model follows.

async fn create(api: &Api<DynamicObject>, name: &str, desired: &Desired) -> anyhow::Result<()> {
    let object = federated_object(&federated("ConfigMap"), None, name, desired.spec());
    api.create(&PostParams::default(), &object)
        .await
        .with_context(|| format!("creating {name}"))?;
    Ok(())
}

/// Creates `name` once its previous incarnation, deleted, is gone (its finalizer waits for
/// the controller, which may be dead right now).
async fn recreate(api: &Api<DynamicObject>, name: &str, desired: &Desired) -> anyhow::Result<()> {
    let began = Instant::now();
    loop {
        let object = federated_object(&federated("ConfigMap"), None, name, desired.spec());
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                if began.elapsed() > CONVERGENCE {
                    bail!(
                        "{name} still exists {}s after its deletion",
                        CONVERGENCE.as_secs()
                    );
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => return Err(e).with_context(|| format!("re-creating {name}")),
        }
    }
}

async fn update(api: &Api<DynamicObject>, name: &str, desired: &Desired) -> anyhow::Result<()> {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": desired.spec()})),
    )
    .await
    .with_context(|| format!("updating {name}"))?;
    Ok(())
}

async fn delete(api: &Api<DynamicObject>, name: &str) -> anyhow::Result<()> {
    api.delete(name, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting {name}"))?;
    Ok(())
}

/// Runs `write` for each `(name, desired)` with [`HUB_CONCURRENCY`] requests in flight.
async fn each<'a, F>(
    items: Vec<(String, Desired)>,
    write: impl Fn(String, Desired) -> F,
) -> anyhow::Result<()>
where
    F: Future<Output = anyhow::Result<()>> + 'a,
{
    stream::iter(
        items
            .into_iter()
            .map(|(name, desired)| write(name, desired)),
    )
    .buffer_unordered(HUB_CONCURRENCY)
    .try_collect::<Vec<()>>()
    .await
    .map(|_| ())
}

/// Counts of what a workload did.
#[derive(Debug, Default)]
struct Done {
    created: usize,
    updated: usize,
    moved: usize,
    deleted: usize,
    recreated: usize,
}

/// A cold start of `objects` federated ConfigMaps, then rounds of updates and placement
/// changes, deletions, and re-creations of half the deleted names; short random pauses
/// between steps spread it over the faults.
async fn workload(
    api: &Api<DynamicObject>,
    rng: &mut StdRng,
    model: &mut Model,
    objects: usize,
) -> anyhow::Result<Done> {
    let mut done = Done::default();
    create_many(api, rng, model, objects, &mut done).await?;
    for _round in 0..3 {
        update_some(api, rng, model, objects / 4, &mut done).await?;
        pause(rng, 1500).await;
    }
    let doomed = delete_some(api, rng, model, objects / 5, &mut done).await?;
    pause(rng, 1500).await;
    let again: Vec<(String, Desired)> = doomed
        .iter()
        .step_by(2)
        .map(|name| (name.clone(), Desired::random(rng)))
        .collect();
    done.recreated = again.len();
    each(again.clone(), |name, d| async move {
        recreate(api, &name, &d).await
    })
    .await?;
    model.extend(again);
    Ok(done)
}

/// Creates `objects` federated ConfigMaps `obj-NNNN` (numbered after those of `model`), 40
/// at a time with short pauses.
async fn create_many(
    api: &Api<DynamicObject>,
    rng: &mut StdRng,
    model: &mut Model,
    objects: usize,
    done: &mut Done,
) -> anyhow::Result<()> {
    let first = done.created;
    let fresh: Vec<(String, Desired)> = (first..first + objects)
        .map(|i| (format!("obj-{i:04}"), Desired::random(rng)))
        .collect();
    for chunk in fresh.chunks(40) {
        each(chunk.to_vec(), |name, d| async move {
            create(api, &name, &d).await
        })
        .await?;
        model.extend(chunk.iter().cloned());
        done.created += chunk.len();
        pause(rng, 400).await;
    }
    Ok(())
}

/// Changes `count` random objects: each a new value, some a new override, some a new
/// placement.
async fn update_some(
    api: &Api<DynamicObject>,
    rng: &mut StdRng,
    model: &mut Model,
    count: usize,
    done: &mut Done,
) -> anyhow::Result<()> {
    let mut names: Vec<String> = model.keys().cloned().collect();
    names.shuffle(rng);
    let mut changes = Vec::new();
    for name in names.iter().take(count) {
        let mut desired = model[name].clone();
        desired.value += 1;
        if rng.random_bool(0.3) {
            desired.member2_override = rng.random_bool(0.5).then(|| rng.random_range(0..1000));
        }
        done.updated += 1;
        if rng.random_bool(0.3) {
            desired.clusters = random_clusters(rng);
            done.moved += 1;
        }
        changes.push((name.clone(), desired));
    }
    each(changes.clone(), |name, d| async move {
        update(api, &name, &d).await
    })
    .await?;
    model.extend(changes);
    Ok(())
}

/// Deletes `count` random objects; returns their names.
async fn delete_some(
    api: &Api<DynamicObject>,
    rng: &mut StdRng,
    model: &mut Model,
    count: usize,
    done: &mut Done,
) -> anyhow::Result<Vec<String>> {
    let mut names: Vec<String> = model.keys().cloned().collect();
    names.shuffle(rng);
    names.truncate(count);
    let gone: Vec<(String, Desired)> = names
        .iter()
        .filter_map(|name| Some((name.clone(), model.remove(name)?)))
        .collect();
    each(gone, |name, _| async move { delete(api, &name).await }).await?;
    done.deleted += names.len();
    Ok(names)
}

async fn pause(rng: &mut StdRng, max_millis: u64) {
    tokio::time::sleep(Duration::from_millis(rng.random_range(0..=max_millis))).await;
}

// ---------------------------------------------------------------------------------------
// The audit.

/// What a converged federation looks like, for the report.
#[derive(Debug)]
struct Converged {
    copies: usize,
    /// resourceVersion of each member copy, by (cluster, name).
    versions: BTreeMap<(String, String), String>,
}

/// Compares the hub and both members with `model`: `Pending` lists what differs (the first
/// few of each kind, with counts), `Done` when nothing does.
async fn audit(lab: &Lab, model: &Model) -> anyhow::Result<Wait<Converged>> {
    let mut problems = Vec::new();
    let hub_objects = lab.federated_api().list(&ListParams::default()).await?;
    let mut on_hub = BTreeSet::new();
    for object in &hub_objects.items {
        let name = object.name_any();
        let value = serde_json::to_value(object)?;
        match model.get(&name) {
            None => problems.push(format!(
                "hub: {name} should be gone ({})",
                finalizers(&value)
            )),
            Some(desired) => {
                let clusters: Vec<&str> = desired.clusters.iter().copied().collect();
                if let Wait::Pending(p) = propagated_ok(&value, &clusters) {
                    problems.push(format!("hub: {name}: {p}"));
                }
            }
        }
        on_hub.insert(name);
    }
    for name in model.keys().filter(|n| !on_hub.contains(*n)) {
        problems.push(format!("hub: {name} missing"));
    }

    let mut copies = 0;
    let mut versions = BTreeMap::new();
    for (cluster, client) in &lab.members {
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &lab.ns);
        let listed = configmaps.list(&ListParams::default()).await?;
        let mut seen = BTreeSet::new();
        for copy in listed
            .items
            .iter()
            .filter(|c| c.name_any().starts_with("obj-"))
        {
            let name = copy.name_any();
            let managed = copy.labels().get(MANAGED_LABEL).map(String::as_str) == Some("true");
            match model.get(&name).filter(|d| d.clusters.contains(cluster)) {
                None if managed => problems.push(format!("{cluster}: extra copy {name}")),
                None => problems.push(format!("{cluster}: unlabelled leftover {name}")),
                Some(_) if !managed => problems.push(format!("{cluster}: {name} not managed")),
                Some(desired) => {
                    let data = serde_json::to_value(&copy.data)?;
                    if data != desired.data(cluster) {
                        problems.push(format!(
                            "{cluster}: {name} has {data}, want {}",
                            desired.data(cluster)
                        ));
                    }
                }
            }
            seen.insert(name.clone());
            versions.insert(
                (cluster.to_string(), name),
                copy.resource_version().unwrap_or_default(),
            );
            copies += 1;
        }
        for (name, _) in model
            .iter()
            .filter(|(n, d)| d.clusters.contains(cluster) && !seen.contains(*n))
        {
            problems.push(format!("{cluster}: {name} missing"));
        }
    }
    if problems.is_empty() {
        return Ok(Wait::Done(Converged { copies, versions }));
    }
    let count = problems.len();
    problems.truncate(12);
    Ok(Wait::Pending(format!(
        "{count} differences, first: {}",
        problems.join("; ")
    )))
}

fn finalizers(object: &Value) -> String {
    let held = object["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|f| f == SYNC_CONTROLLER_FINALIZER));
    if held {
        "finalizer held".to_owned()
    } else {
        format!("finalizers {}", object["metadata"]["finalizers"])
    }
}

/// Waits for the audit to pass, then for [`SETTLE`]: no member write and no copy changed.
/// Returns the number of member copies.
async fn converge_and_settle(
    lab: &Lab,
    controller: &ControllerProcess,
    model: &Model,
    what: &str,
) -> anyhow::Result<usize> {
    let began = Instant::now();
    let converged = wait_for(what, CONVERGENCE, async || audit(lab, model).await)
        .await
        .with_context(|| lab.controller_logs())?;
    report(format_args!(
        "{what}: converged {:.1}s after the last change: {} federated objects, {} member copies",
        began.elapsed().as_secs_f64(),
        model.len(),
        converged.copies
    ));
    // Status writes and watch echoes of the last member writes finish first.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let writes_before = member_writes(controller).await?;
    tokio::time::sleep(SETTLE).await;
    let writes_after = member_writes(controller).await?;
    let Wait::Done(settled) = audit(lab, model).await? else {
        bail!("{what}: the federation diverged again after it converged");
    };
    let moved: Vec<_> = settled
        .versions
        .iter()
        .filter(|(key, rv)| converged.versions.get(*key) != Some(*rv))
        .map(|((cluster, name), _)| format!("{cluster}/{name}"))
        .collect();
    if writes_after != writes_before || !moved.is_empty() {
        bail!(
            "{what}: {} member writes and {} changed copies ({}) in the {}s after convergence",
            writes_after - writes_before,
            moved.len(),
            moved
                .iter()
                .take(10)
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
            SETTLE.as_secs()
        );
    }
    Ok(converged.copies)
}

async fn member_writes(controller: &ControllerProcess) -> anyhow::Result<f64> {
    controller
        .member_operations(&MEMBER_WRITES)
        .await
        .with_context(|| {
            format!(
                "{} does not serve /metrics; last log lines:\n{}",
                controller.identity(),
                controller.log_tail(30)
            )
        })
}

// ---------------------------------------------------------------------------------------
// The tests.

/// SIGKILL loop: [`KILLS`] kills of the controller at random moments of a cold start of
/// [`OBJECTS`] federated objects, update bursts, placement changes, deletions and
/// re-creations; each kill is followed by a restart after a random pause. Then the
/// controller is killed once more, objects are deleted and "renamed" (deleted with their
/// finalizer taken off by hand, as an operator unsticking a deletion would, and re-created
/// under a new name) and placements shrunk while it is down: the leftovers are collected
/// after it starts.
#[tokio::test]
async fn sigkill_loop_converges_exactly() -> anyhow::Result<()> {
    let seed = seed("sigkill loop");
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut lab, controller) = Lab::start("faults-kill").await?;
    let api = lab.federated_api();
    let mut model = Model::new();
    let kill_rng = StdRng::seed_from_u64(seed ^ 0x5eed);

    let began = Instant::now();
    let (done, killed) = tokio::join!(
        workload(&api, &mut rng, &mut model, OBJECTS),
        kill_loop(&mut lab, controller, kill_rng, KILLS),
    );
    let done = done?;
    let (controller, kill_times) = killed?;
    report(format_args!(
        "sigkill loop: {done:?} in {:.1}s; {KILLS} kills at {} s",
        began.elapsed().as_secs_f64(),
        kill_times
            .iter()
            .map(|t| format!("{:.1}", t.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    converge_and_settle(&lab, &controller, &model, "sigkill loop").await?;

    // Controller down while objects are deleted, renamed and moved, and a ConfigMap is
    // labelled managed by hand in member1 without any federated object.
    controller.kill().await?;
    let leftovers = down_while_deleted_and_renamed(&lab, &mut rng, &mut model).await?;
    let stray = labelled_by_hand(&lab).await?;
    let controller = lab.start_controller()?;
    converge_and_settle(&lab, &controller, &model, "controller down").await?;
    wait_for(
        "the hand-labelled ConfigMap unlabelled, not deleted",
        TIMEOUT,
        async || {
            Ok(match stray.get_opt(STRAY).await? {
                None => bail!("{STRAY} was deleted: it carried no proof that hubfed made it"),
                Some(cm) if cm.labels().contains_key(MANAGED_LABEL) => {
                    Wait::Pending(format!("labels {:?}", cm.labels()))
                }
                Some(_) => Wait::Done(()),
            })
        },
    )
    .await?;
    let metrics = controller.metrics().await.unwrap_or_default();
    let collected = sample(&metrics, "hubfed_gc_collected_total", &[]).unwrap_or(0.0);
    report(format_args!(
        "controller down: {leftovers} copies left by forced deletions, {collected} collected by GC"
    ));
    if collected < leftovers as f64 {
        bail!("{leftovers} leftovers but hubfed_gc_collected_total is {collected}");
    }
    Ok(())
}

/// A ConfigMap labelled managed by hand in member1, with no federated object of its name.
const STRAY: &str = "stray-by-hand";

/// Creates [`STRAY`] in member1: KubeFed's rule (and hubfed's) is to remove its managed
/// label — and never to delete it, since nothing proves hubfed made it.
async fn labelled_by_hand(lab: &Lab) -> anyhow::Result<Api<ConfigMap>> {
    let member1 = &lab.members[0].1;
    let api: Api<ConfigMap> = Api::namespaced(member1.clone(), &lab.ns);
    let stray: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": STRAY, "labels": {MANAGED_LABEL: "true"}},
        "data": {"mine": "yes"},
    }))?;
    api.create(&PostParams::default(), &stray).await?;
    Ok(api)
}

/// Kills the controller `kills` times, each after a random 0.5–3.5 s of work, and starts a
/// new one after a random 0–1.5 s; returns the last one and the kill times.
async fn kill_loop(
    lab: &mut Lab,
    mut controller: ControllerProcess,
    mut rng: StdRng,
    kills: usize,
) -> anyhow::Result<(ControllerProcess, Vec<Duration>)> {
    let began = Instant::now();
    let mut times = Vec::new();
    for _ in 0..kills {
        tokio::time::sleep(Duration::from_millis(rng.random_range(500..3500))).await;
        if !controller.is_alive() {
            bail!(
                "{} died on its own; last log lines:\n{}",
                controller.identity(),
                controller.log_tail(40)
            );
        }
        controller.kill().await?;
        times.push(began.elapsed());
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..1500))).await;
        controller = lab.start_controller()?;
    }
    Ok((controller, times))
}

/// With the controller down: a tenth of the objects deleted with their finalizer removed by
/// hand (their copies stay behind), half of those re-created under a new name ("renamed"),
/// and a tenth of the two-member objects shrunk to one member. Returns the number of copies
/// left behind by the forced deletions.
async fn down_while_deleted_and_renamed(
    lab: &Lab,
    rng: &mut StdRng,
    model: &mut Model,
) -> anyhow::Result<usize> {
    let api = lab.federated_api();
    let mut names: Vec<String> = model.keys().cloned().collect();
    names.shuffle(rng);
    let mut leftovers = 0;
    for (i, name) in names.iter().take(model.len() / 10).enumerate() {
        delete(&api, name).await?;
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .with_context(|| format!("removing {name}'s finalizer"))?;
        let Some(desired) = model.remove(name) else {
            continue;
        };
        leftovers += desired.clusters.len();
        if i % 2 == 0 {
            let renamed = format!("{name}-renamed");
            create(&api, &renamed, &desired).await?;
            model.insert(renamed, desired);
        }
    }
    let shrinkable: Vec<String> = model
        .iter()
        .filter(|(_, d)| d.clusters.len() == 2)
        .map(|(n, _)| n.clone())
        .take(model.len() / 10)
        .collect();
    for name in shrinkable {
        let mut desired = model[&name].clone();
        let keep = if rng.random_bool(0.5) {
            "member1"
        } else {
            "member2"
        };
        desired.clusters = BTreeSet::from([keep]);
        update(&api, &name, &desired).await?;
        model.insert(name, desired);
    }
    Ok(leftovers)
}

/// Objects of the restart test.
const RESTART_OBJECTS: usize = 120;

/// API server and etcd restarts while the controller propagates: member1's API server right
/// after a cold start, the hub's right after a burst of updates, etcd (killed: every API
/// server loses its storage) right after another. The same controller process converges
/// exactly, without a restart of its own. Then, at rest, member2's API server and etcd
/// restart again: the controller's watches resume without a single member write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_mid_propagation_converge_without_a_controller_restart() -> anyhow::Result<()> {
    let seed = seed("restarts");
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut lab, controller) = Lab::start("faults-restart").await?;
    let api = lab.federated_api();
    let mut model = Model::new();
    let mut done = Done::default();

    create_many(&api, &mut rng, &mut model, RESTART_OBJECTS, &mut done).await?;
    restart(&mut lab, "member1 API server", |env| {
        env.restart_apiserver("member1")
    })?;
    update_some(&api, &mut rng, &mut model, RESTART_OBJECTS / 2, &mut done).await?;
    restart(&mut lab, "hub API server", |env| {
        env.restart_apiserver("hub")
    })?;
    // The test's own hub client reconnects like any other.
    update_some(&api, &mut rng, &mut model, RESTART_OBJECTS / 2, &mut done).await?;
    delete_some(&api, &mut rng, &mut model, RESTART_OBJECTS / 6, &mut done).await?;
    restart(&mut lab, "etcd (SIGKILL)", |env| env.restart_etcd("KILL"))?;
    report(format_args!("restarts: {done:?}"));
    converge_and_settle(&lab, &controller, &model, "restarts mid-propagation").await?;

    let writes_before = member_writes(&controller).await?;
    restart(&mut lab, "member2 API server at rest", |env| {
        env.restart_apiserver("member2")
    })?;
    restart(&mut lab, "etcd (SIGTERM) at rest", |env| {
        env.restart_etcd("TERM")
    })?;
    // Long enough for the watches to notice and resume, and for a periodic resync.
    converge_and_settle(&lab, &controller, &model, "restarts at rest").await?;
    let writes_after = member_writes(&controller).await?;
    if writes_after != writes_before {
        bail!(
            "{} member writes after restarts of member2's API server and etcd at rest",
            writes_after - writes_before
        );
    }
    if !controller.is_alive() {
        bail!("the controller exited:\n{}", controller.log_tail(40));
    }
    Ok(())
}

/// Runs one blocking restart of the lab's environment and reports how long it took.
fn restart(
    lab: &mut Lab,
    what: &str,
    action: impl FnOnce(&mut TestEnv) -> Result<Duration, hubfed_testenv::Error>,
) -> anyhow::Result<()> {
    let took = tokio::task::block_in_place(|| action(&mut lab.env))
        .with_context(|| format!("restarting the {what}"))?;
    report(format_args!(
        "restarts: {what} back after {:.1}s",
        took.as_secs_f64()
    ));
    Ok(())
}
