//! A live KubeFed v0.10.0 hub taken over by hubfed, then given back to KubeFed, on a hub and
//! two members: KubeFed's own chart (installed by helm) and controller-manager (a process,
//! built from KubeFed's Go module: the chart's Deployment cannot pull its image here), the
//! steps of docs/migrating-from-kubefed.md with `hubfedctl migrate`, then hubfed's chart
//! (without its webhooks) and controller (a process authenticated as the chart's
//! ServiceAccount, for the same reason).
//!
//! What must hold: no member copy deleted or recreated (UIDs kept), each rewritten at most
//! once by the takeover, nothing written at rest after it, versions and statuses carried on,
//! a change, a placement move and a deletion carried out right after; then the way back:
//! hubfed's chart uninstalled, `hubfedctl migrate rollback`, KubeFed's chart installed again
//! over the kept objects, and KubeFed carrying a change out.
//!
//! The chart is KubeFed's with one file left out: its webhook configurations call a Service
//! that no Pod serves here, and with `failurePolicy: Fail` they would refuse every write of
//! KubeFed's own objects. Skips, saying why, when Go is missing.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt as _;
use hubfed_api::propagatedversion::PropagatedVersion;
use hubfed_e2e::cli::resource;
use hubfed_e2e::controller::{ControllerOptions, ControllerProcess, token_kubeconfig};
use hubfed_e2e::helm::helm_on_hub;
use hubfed_e2e::kubefed::{self, KubefedProcess};
use hubfed_e2e::{
    ExampleType, KUBEFED_NAMESPACE, TIMEOUT, Wait, hubfedctl, install_crds, placement,
    register_cluster, report, wait_for,
};
use hubfed_testenv::{TestEnv, TestEnvConfig};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt as _};
use serde_json::{Value, json};

const NS: &str = "takeover";
const MEMBERS: [&str; 2] = ["member1", "member2"];
/// Member kinds the federated objects below make: (group, version, kind, plural, namespaced).
const KINDS: [(&str, &str, &str, &str, bool); 5] = [
    ("", "v1", "Namespace", "namespaces", false),
    ("", "v1", "ConfigMap", "configmaps", true),
    ("apps", "v1", "Deployment", "deployments", true),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
    ),
    ("example.hubfed.io", "v1", "Widget", "widgets", true),
];

fn federated(kind: &str) -> ApiResource {
    resource(
        "types.kubefed.io",
        "v1beta1",
        &format!("Federated{kind}"),
        &format!("federated{}s", kind.to_lowercase()),
    )
}

fn api(client: &Client, resource: &ApiResource, namespaced: bool) -> Api<DynamicObject> {
    if namespaced {
        Api::namespaced_with(client.clone(), NS, resource)
    } else {
        Api::all_with(client.clone(), resource)
    }
}

/// The federated objects: (kind, namespaced, name, spec).
fn workload(kubefedctl: bool) -> Vec<(&'static str, bool, String, Value)> {
    let mut objects = vec![
        (
            "Namespace",
            true,
            NS.to_owned(),
            json!({"placement": placement(&MEMBERS)}),
        ),
        (
            "ConfigMap",
            true,
            "settings".to_owned(),
            json!({
                "template": {"data": {"region": "any"}},
                "placement": placement(&MEMBERS),
                "overrides": [{"clusterName": "member2",
                    "clusterOverrides": [{"path": "/data/region", "value": "two"}]}],
            }),
        ),
        (
            "ConfigMap",
            true,
            "moving".to_owned(),
            json!({
            "template": {"data": {"a": "1"}}, "placement": placement(&MEMBERS)}),
        ),
        (
            "ConfigMap",
            true,
            "doomed".to_owned(),
            json!({
            "template": {"data": {"a": "1"}}, "placement": placement(&MEMBERS)}),
        ),
        (
            "Deployment",
            true,
            "web".to_owned(),
            json!({
                "template": {"spec": {"replicas": 1,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{"name": "web", "image": "registry.invalid/web:1"}]}}}},
                "placement": placement(&MEMBERS),
            }),
        ),
        (
            "ClusterRole",
            false,
            format!("{NS}-reader"),
            json!({
                "template": {"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
                "placement": placement(&MEMBERS),
            }),
        ),
    ];
    if kubefedctl {
        objects.push((
            "Widget",
            true,
            "gadget".to_owned(),
            json!({"template": {"spec": {"size": 3}}, "placement": placement(&MEMBERS)}),
        ));
    }
    objects
}

/// Every managed copy in the members: `cluster/kind/namespace/name` → (UID, resourceVersion).
async fn copies(env: &TestEnv) -> anyhow::Result<BTreeMap<String, (String, String)>> {
    let mut out = BTreeMap::new();
    for member in MEMBERS {
        let client = env.cluster(member).context("member")?.client().await?;
        for (group, version, kind, plural, namespaced) in KINDS {
            let api = api(&client, &resource(group, version, kind, plural), namespaced);
            let params = kube::api::ListParams::default().labels("kubefed.io/managed=true");
            for object in api.list(&params).await? {
                let key = format!(
                    "{member}/{kind}/{}/{}",
                    object.namespace().unwrap_or_default(),
                    object.name_any()
                );
                out.insert(
                    key,
                    (
                        object.uid().unwrap_or_default(),
                        object.resource_version().unwrap_or_default(),
                    ),
                );
            }
        }
    }
    Ok(out)
}

/// Tasks aborted when dropped, on every way out of the test.
struct Aborting(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Aborting {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Counts the writes to managed copies in the members from now on, per copy, from watches.
/// Writes of a status subresource alone (kube-controller-manager's to Deployments) are not
/// counted: a copy's write is a change of anything but its status and resourceVersion,
/// including its field ownership (a rewrite that changes nothing else).
async fn count_writes(
    env: &TestEnv,
    counts: Arc<Mutex<BTreeMap<String, u32>>>,
) -> anyhow::Result<Aborting> {
    let mut tasks = Vec::new();
    for member in MEMBERS {
        let client = env.cluster(member).context("member")?.client().await?;
        for (group, version, kind, plural, namespaced) in KINDS {
            let counts = counts.clone();
            let client = client.clone();
            tasks.push(tokio::spawn(async move {
                let api = api(&client, &resource(group, version, kind, plural), namespaced);
                let config = watcher::Config::default().labels("kubefed.io/managed=true");
                let mut seen: BTreeMap<String, Value> = BTreeMap::new();
                // Backoff: once the clusters are gone (a failed test tearing down), an
                // error at once on every poll would never yield, and the runtime could not stop.
                let mut stream = watcher::watcher(api, config).default_backoff().boxed();
                while let Some(event) = stream.next().await {
                    let (object, deleted, counted) = match event {
                        Ok(watcher::Event::InitApply(object)) => (object, false, false),
                        Ok(watcher::Event::Apply(object)) => (object, false, true),
                        Ok(watcher::Event::Delete(object)) => (object, true, true),
                        _ => continue,
                    };
                    let key = format!(
                        "{member}/{kind}/{}/{}",
                        object.namespace().unwrap_or_default(),
                        object.name_any()
                    );
                    let now = written_part(&object);
                    let changed = deleted || seen.get(&key) != Some(&now);
                    seen.insert(key.clone(), now);
                    if counted && changed {
                        *counts.lock().expect("counts").entry(key).or_default() += 1;
                    }
                }
            }));
        }
    }
    Ok(Aborting(tasks))
}

/// What a write of the copy (not of its status) changes: the object without its status and
/// resourceVersion, its field owners without the times and without status owners.
fn written_part(object: &DynamicObject) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or_default();
    if let Some(map) = value.as_object_mut() {
        map.remove("status");
    }
    if let Some(metadata) = value["metadata"].as_object_mut() {
        metadata.remove("resourceVersion");
        if let Some(Value::Array(fields)) = metadata.get_mut("managedFields") {
            fields.retain(|entry| entry["subresource"] != "status");
            for entry in fields.iter_mut() {
                if let Some(entry) = entry.as_object_mut() {
                    entry.remove("time");
                }
            }
        }
    }
    value
}

async fn create_workload(hub: &Client, kubefedctl: bool) -> anyhow::Result<()> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(hub.clone());
    let namespace = serde_json::from_value(json!({"metadata": {"name": NS}}))?;
    namespaces
        .create(&PostParams::default(), &namespace)
        .await?;
    for (kind, namespaced, name, spec) in workload(kubefedctl) {
        let api = api(hub, &federated(kind), namespaced);
        let mut object = DynamicObject::new(&name, &federated(kind)).data(json!({"spec": spec}));
        if namespaced {
            object.metadata.namespace = Some(NS.to_owned());
        }
        api.create(&PostParams::default(), &object)
            .await
            .with_context(|| format!("creating Federated{kind} {name}"))?;
    }
    let rsp: Api<DynamicObject> = Api::namespaced_with(
        hub.clone(),
        NS,
        &resource(
            "scheduling.kubefed.io",
            "v1alpha1",
            "ReplicaSchedulingPreference",
            "replicaschedulingpreferences",
        ),
    );
    let mut object = DynamicObject::new(
        "web",
        &resource(
            "scheduling.kubefed.io",
            "v1alpha1",
            "ReplicaSchedulingPreference",
            "replicaschedulingpreferences",
        ),
    )
    .data(
        json!({"spec": {"targetKind": "FederatedDeployment", "totalReplicas": 4,
            "clusters": {"member1": {"weight": 3}, "member2": {"weight": 1}}}}),
    );
    object.metadata.namespace = Some(NS.to_owned());
    rsp.create(&PostParams::default(), &object)
        .await
        .context("creating the RSP")?;
    Ok(())
}

/// Waits until the member copy `kind ns/name` of `member` has `field` (a JSON pointer) equal
/// to `want` (`None`: until the copy is gone).
async fn wait_copy(
    env: &TestEnv,
    member: &str,
    kind: &str,
    name: &str,
    field: &str,
    want: Option<Value>,
) -> anyhow::Result<()> {
    let (group, version, _, plural, namespaced) = KINDS
        .iter()
        .copied()
        .find(|k| k.2 == kind)
        .context("kind")?;
    let client = env.cluster(member).context("member")?.client().await?;
    let api = api(&client, &resource(group, version, kind, plural), namespaced);
    wait_for(
        &format!("{member}: {kind} {name} {field} = {want:?}"),
        TIMEOUT * 2,
        async || {
            let found = api.get_opt(name).await?;
            let value = found.as_ref().map(|o| {
                serde_json::to_value(o)
                    .unwrap_or_default()
                    .pointer(field)
                    .cloned()
                    .unwrap_or(Value::Null)
            });
            Ok(match (&want, value) {
                (None, None) => Wait::Done(()),
                (Some(want), Some(value)) if &value == want => Wait::Done(()),
                (_, value) => Wait::Pending(format!("{value:?}")),
            })
        },
    )
    .await
}

async fn patch_spec(hub: &Client, kind: &str, name: &str, patch: Value) -> anyhow::Result<()> {
    api(hub, &federated(kind), true)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": patch})),
        )
        .await
        .with_context(|| format!("changing Federated{kind} {name}"))?;
    Ok(())
}

/// The template version KubeFed's version manager (or hubfed) recorded for ConfigMap `name`.
async fn recorded_template(hub: &Client, name: &str) -> anyhow::Result<Option<String>> {
    let api: Api<PropagatedVersion> = Api::namespaced(hub.clone(), NS);
    Ok(api
        .get_opt(&format!("configmap-{name}"))
        .await?
        .and_then(|pv| pv.status)
        .map(|status| status.template_version))
}

async fn hubfedctl_ok(env: &TestEnv, args: &[&str], want: i32) -> anyhow::Result<String> {
    let (code, out, err) = hubfedctl(env.kubeconfig_path(), args).await;
    anyhow::ensure!(
        code == want,
        "hubfedctl {args:?} exited {code}, not {want}:\n{out}{err}"
    );
    Ok(out)
}

/// The two tests run one after the other: each starts three clusters and two controllers.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubefed_hub_is_taken_over_and_given_back() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    take_over(false).await
}

/// The same from a hub whose members were joined and whose custom type was enabled with
/// kubefedctl: the type's federated CRD is KubeFed's (no `federated` category, a schema that
/// drops hubfed's status fields) until `migrate upgrade` replaces it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_set_up_with_kubefedctl_is_taken_over_and_given_back() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    take_over(true).await
}

async fn take_over(kubefedctl: bool) -> anyhow::Result<()> {
    let (Some(module), Some(binary)) = (kubefed::module_dir()?, kubefed::controller_manager()?)
    else {
        eprintln!("skipped: Go is missing, KubeFed's chart and controller-manager cannot be built");
        return Ok(());
    };
    // kube-controller-manager fills kubefedctl join's token Secret; its status writes to the
    // member Deployments are told apart from the copies' writes (count_writes).
    let env = tokio::task::spawn_blocking(|| {
        TestEnv::start(TestEnvConfig {
            members: 2,
            ..TestEnvConfig::default()
        })
    })
    .await??;
    let hub = env.hub().client().await?;

    // KubeFed's chart, without its webhook configurations (see the module doc).
    let chart = env.dir().join("kubefed-chart");
    copy_dir(&module.join("charts/kubefed"), &chart)?;
    std::fs::remove_file(chart.join("charts/controllermanager/templates/webhook.yaml"))?;
    install_kubefed_chart(&env, &chart, &[])?;
    let widget = ExampleType::new("Widget", "widgets")?;
    for cluster in env.clusters() {
        install_crds(&cluster.client().await?, std::slice::from_ref(&widget.crd)).await?;
    }
    if kubefedctl {
        let tool = binary.with_file_name("kubefedctl");
        let config = env.kubeconfig_path().to_str().context("kubeconfig path")?;
        let common = [
            "--host-cluster-context",
            "hub",
            "--kubefed-namespace",
            KUBEFED_NAMESPACE,
            "--kubeconfig",
            config,
        ];
        for member in MEMBERS {
            run_tool(
                &tool,
                &[
                    &["join", member, "--cluster-context", member, "--v=2"],
                    &common[..],
                ]
                .concat(),
            )?;
        }
        run_tool(
            &tool,
            &[&["enable", "widgets.example.hubfed.io"], &common[..]].concat(),
        )?;
    } else {
        for member in MEMBERS {
            register_cluster(&hub, member, env.cluster(member).context("member")?).await?;
        }
    }
    let kubefed = KubefedProcess::start(&env, &binary, "before").await?;
    create_workload(&hub, kubefedctl).await?;
    if kubefedctl {
        for member in MEMBERS {
            wait_copy(
                &env,
                member,
                "Widget",
                "gadget",
                "/spec/size",
                Some(json!(3)),
            )
            .await?;
        }
    }
    for member in MEMBERS {
        wait_copy(
            &env,
            member,
            "ConfigMap",
            "settings",
            "/data/region",
            Some(json!(if member == "member2" { "two" } else { "any" })),
        )
        .await?;
        wait_copy(
            &env,
            member,
            "Deployment",
            "web",
            "/spec/replicas",
            Some(json!(if member == "member1" { 3 } else { 1 })),
        )
        .await?;
        wait_copy(
            &env,
            member,
            "ClusterRole",
            &format!("{NS}-reader"),
            "/metadata/labels/kubefed.io~1managed",
            Some(json!("true")),
        )
        .await?;
    }
    let kubefed_version = wait_for(
        "KubeFed's PropagatedVersion of settings",
        TIMEOUT,
        async || {
            Ok(match recorded_template(&hub, "settings").await? {
                Some(version) => Wait::Done(version),
                None => Wait::Pending("none".to_owned()),
            })
        },
    )
    .await?;
    let before = copies(&env).await?;
    report(format_args!(
        "takeover: KubeFed propagated {} copies",
        before.len()
    ));

    // The pre-flight check sees KubeFed running and the objects helm would delete.
    let check = hubfedctl_ok(&env, &["migrate", "check"], 3).await?;
    report(format_args!(
        "takeover: migrate check with KubeFed running:\n{check}"
    ));
    anyhow::ensure!(
        check.contains("KubeFed's controller-manager runs")
            && check.contains("run `hubfedctl migrate backup` first"),
        "{check}"
    );
    hubfedctl_ok(&env, &["migrate", "backup"], 0).await?;
    let writes = Arc::new(Mutex::new(BTreeMap::new()));
    let watches = count_writes(&env, writes.clone()).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;

    // helm uninstall while KubeFed runs (it releases its FTCs' finalizer), then KubeFed stops.
    helm_on_hub(&env, &["uninstall", "kubefed", "-n", KUBEFED_NAMESPACE])?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    kubefed.stop();
    kubefed::release_lock(&hub).await?;
    let check = hubfedctl_ok(&env, &["migrate", "check"], 0).await?;
    report(format_args!(
        "takeover: migrate check after the uninstall:\n{check}"
    ));
    for line in [
        "restored from ConfigMap",
        "FederatedTypeConfig configmaps",
        "KubeFedConfig kubefed",
        "CRD federatedconfigmaps.types.kubefed.io: will be updated",
        "CRD works.pull.hubfed.io: missing: will be created",
    ] {
        anyhow::ensure!(
            check.contains(line),
            "migrate check does not say {line:?}:\n{check}"
        );
    }
    if kubefedctl {
        // Enabled by kubefedctl, not by the chart: kept by the uninstall, its CRD KubeFed's.
        let line = "CRD federatedwidgets.types.kubefed.io: will be updated (names, v1beta1 schema";
        anyhow::ensure!(
            check.contains(line),
            "migrate check does not say {line:?}:\n{check}"
        );
    }
    let ftcs: Api<hubfed_api::federatedtypeconfig::FederatedTypeConfig> =
        Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let kept = ftcs.list(&Default::default()).await?.items.len();
    hubfedctl_ok(&env, &["migrate", "upgrade", "--dry-run"], 0).await?;
    anyhow::ensure!(
        ftcs.list(&Default::default()).await?.items.len() == kept,
        "upgrade --dry-run restored FederatedTypeConfigs"
    );
    let upgraded = hubfedctl_ok(&env, &["migrate", "upgrade"], 0).await?;
    report(format_args!("takeover: migrate upgrade:\n{upgraded}"));
    let again = hubfedctl_ok(&env, &["migrate", "upgrade"], 0).await?;
    anyhow::ensure!(
        !again.contains(" created")
            && !again.contains(" configured")
            && !again.contains("released"),
        "migrate upgrade run again changed the hub:\n{again}"
    );
    anyhow::ensure!(
        writes.lock().expect("counts").is_empty(),
        "member copies written before hubfed started: {:?}",
        writes.lock().expect("counts")
    );

    // hubfed: its chart, and its controller as the chart's ServiceAccount, with leader
    // election as deployed (the chart's Deployment cannot pull its image here).
    let account = install_hubfed_chart(&env, &hub).await?;
    let started = Instant::now();
    let controller = ControllerProcess::start(
        &env,
        &ControllerOptions {
            kubeconfig: Some(account),
            ..ControllerOptions::replica("takeover")
        },
    )?;
    let settled = wait_for(
        "hubfed's status on every federated object",
        TIMEOUT * 2,
        async || {
            let mut pending = Vec::new();
            for (kind, namespaced, name, _) in workload(kubefedctl) {
                let object = api(&hub, &federated(kind), namespaced).get(&name).await?;
                if object.data.pointer("/status/ready").is_none() {
                    pending.push(format!("{kind} {name}"));
                }
            }
            Ok(if pending.is_empty() {
                Wait::Done(())
            } else {
                Wait::Pending(pending.join(", "))
            })
        },
    )
    .await;
    if let Err(e) = settled {
        anyhow::bail!("{e}\ncontroller log:\n{}", controller.log_tail(40));
    }
    let settled_after = started.elapsed();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after = copies(&env).await?;
    let counted = writes.lock().expect("counts").clone();
    let mut recreated = Vec::new();
    let mut rewritten = 0;
    for (key, (uid, version)) in &before {
        match after.get(key) {
            Some((new_uid, _)) if new_uid != uid => recreated.push(key.clone()),
            None => recreated.push(key.clone()),
            Some((_, new_version)) => rewritten += usize::from(new_version != version),
        }
    }
    anyhow::ensure!(
        recreated.is_empty(),
        "copies deleted or recreated: {recreated:?}"
    );
    let twice: Vec<_> = counted.iter().filter(|(_, n)| **n > 1).collect();
    anyhow::ensure!(
        twice.is_empty(),
        "copies written more than once by the takeover: {twice:?}"
    );
    let at_rest = counted.values().sum::<u32>();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let rest_writes = writes.lock().expect("counts").values().sum::<u32>() - at_rest;
    anyhow::ensure!(
        rest_writes == 0,
        "{rest_writes} member writes at rest after the takeover"
    );
    report(format_args!(
        "takeover: {} copies kept (same UID), {rewritten} rewritten once, 0 written at rest; settled {:.1}s after hubfed started",
        before.len(),
        settled_after.as_secs_f64()
    ));
    // KubeFed's version record is carried on: hubfed reads it, the template unchanged.
    anyhow::ensure!(
        recorded_template(&hub, "settings").await?.as_deref() == Some(kubefed_version.as_str()),
        "the recorded template version changed"
    );

    // A change, a move and a deletion right after.
    let began = Instant::now();
    patch_spec(
        &hub,
        "ConfigMap",
        "settings",
        json!({"template": {"data": {"region": "changed"}}}),
    )
    .await?;
    patch_spec(
        &hub,
        "ConfigMap",
        "moving",
        json!({"placement": placement(&["member2"])}),
    )
    .await?;
    api(&hub, &federated("ConfigMap"), true)
        .delete("doomed", &Default::default())
        .await?;
    wait_copy(
        &env,
        "member1",
        "ConfigMap",
        "settings",
        "/data/region",
        Some(json!("changed")),
    )
    .await?;
    let first_change = began.elapsed();
    wait_copy(
        &env,
        "member2",
        "ConfigMap",
        "settings",
        "/data/region",
        Some(json!("two")),
    )
    .await?;
    wait_copy(&env, "member1", "ConfigMap", "moving", "/data/a", None).await?;
    wait_copy(
        &env,
        "member2",
        "ConfigMap",
        "moving",
        "/data/a",
        Some(json!("1")),
    )
    .await?;
    for member in MEMBERS {
        wait_copy(&env, member, "ConfigMap", "doomed", "/data/a", None).await?;
    }
    report(format_args!(
        "takeover: the first change after it carried out in {:.2}s; the move and the deletion too",
        first_change.as_secs_f64()
    ));

    // The way back: hubfed stopped, KubeFed's chart and controller-manager again.
    drop(controller);
    give_back(&env, &chart).await?;
    let kubefed = KubefedProcess::start(&env, &binary, "after").await?;
    patch_spec(
        &hub,
        "ConfigMap",
        "settings",
        json!({"template": {"data": {"region": "back"}}}),
    )
    .await?;
    let back = wait_copy(
        &env,
        "member1",
        "ConfigMap",
        "settings",
        "/data/region",
        Some(json!("back")),
    )
    .await;
    if let Err(e) = back {
        anyhow::bail!("{e}\nKubeFed's log:\n{}", kubefed.log_tail(40));
    }
    let want = hubfed_core::version::template_version(Some(&json!({"data": {"region": "back"}})));
    wait_for(
        "KubeFed's version record of the change",
        TIMEOUT,
        async || {
            Ok(match recorded_template(&hub, "settings").await? {
                Some(version) if version == want => Wait::Done(()),
                other => Wait::Pending(format!("{other:?}")),
            })
        },
    )
    .await?;
    drop(watches);
    kubefed.stop();
    Ok(())
}

/// `helm install` of KubeFed's chart (a copy without its webhooks) as release `kubefed`,
/// with `extra` flags.
fn install_kubefed_chart(
    env: &TestEnv,
    chart: &std::path::Path,
    extra: &[&str],
) -> anyhow::Result<()> {
    let args = [
        &[
            "install",
            "kubefed",
            chart.to_str().context("chart path")?,
            "-n",
            KUBEFED_NAMESPACE,
            "--create-namespace",
            "--no-hooks",
            // The feature gates the chart's post-install hook job would write (a null list
            // otherwise, which helm's server-side apply refuses).
            "--set",
            "controllermanager.featureGates.PushReconciler=Enabled,controllermanager.featureGates.SchedulerPreferences=Enabled",
        ][..],
        extra,
    ]
    .concat();
    helm_on_hub(env, &args)?;
    Ok(())
}

/// Step 5 of the takeover: `helm install` of hubfed's chart, without its webhooks (no Pod
/// serves them here). Its seeds must leave the restored FTCs and KubeFedConfig alone. Returns
/// a kubeconfig authenticated as the chart's ServiceAccount, for the controller process.
async fn install_hubfed_chart(env: &TestEnv, hub: &Client) -> anyhow::Result<std::path::PathBuf> {
    let ftcs: Api<hubfed_api::federatedtypeconfig::FederatedTypeConfig> =
        Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let versions = |list: Vec<hubfed_api::federatedtypeconfig::FederatedTypeConfig>| {
        list.into_iter()
            .map(|ftc| (ftc.name_any(), ftc.resource_version()))
            .collect::<BTreeMap<_, _>>()
    };
    let before = versions(ftcs.list(&Default::default()).await?.items);
    let chart = hubfed_e2e::helm::chart_dir();
    helm_on_hub(
        env,
        &[
            "install",
            hubfed_e2e::helm::RELEASE,
            chart.to_str().context("chart path")?,
            "-n",
            KUBEFED_NAMESPACE,
            "--set",
            "webhook.enabled=false",
        ],
    )?;
    let after = versions(ftcs.list(&Default::default()).await?.items);
    anyhow::ensure!(
        before == after,
        "helm install of hubfed's chart changed the FederatedTypeConfigs: {before:?} -> {after:?}"
    );
    let accounts: Api<ServiceAccount> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = accounts
        .create_token_request(hubfed_e2e::helm::RELEASE, &PostParams::default(), &request)
        .await?
        .status
        .and_then(|status| status.token)
        .filter(|token| !token.is_empty())
        .context("no token for the chart's ServiceAccount")?;
    let kubeconfig = env.dir().join("chart-account.kubeconfig");
    let server = env.hub().server_url();
    token_kubeconfig(&kubeconfig, &server, env.hub().ca_pem(), "hubfed", &token)?;
    Ok(kubeconfig)
}

/// The way back, as documented: hubfed's chart uninstalled, `migrate rollback` (refused
/// while hubfed's release still holds KubeFed's names), KubeFed's chart installed again over
/// the kept objects.
async fn give_back(env: &TestEnv, chart: &std::path::Path) -> anyhow::Result<()> {
    let (code, _, err) = hubfedctl(env.kubeconfig_path(), &["migrate", "rollback"]).await;
    anyhow::ensure!(
        code != 0 && err.contains("hubfed"),
        "migrate rollback went ahead with hubfed's chart installed (exit {code}): {err}"
    );
    helm_on_hub(
        env,
        &[
            "uninstall",
            hubfed_e2e::helm::RELEASE,
            "-n",
            KUBEFED_NAMESPACE,
        ],
    )?;
    hubfedctl_ok(env, &["migrate", "rollback", "--dry-run"], 0).await?;
    let marked = hubfedctl_ok(env, &["migrate", "rollback"], 0).await?;
    report(format_args!("takeover: migrate rollback:\n{marked}"));
    anyhow::ensure!(
        marked.matches("marked for adoption").count() == 11,
        "migrate rollback did not mark the 10 chart FTCs and the KubeFedConfig:\n{marked}"
    );
    let again = hubfedctl_ok(env, &["migrate", "rollback"], 0).await?;
    anyhow::ensure!(
        !again.contains("marked for adoption"),
        "migrate rollback run again changed the hub:\n{again}"
    );
    // The CRDs exist, hubfed's a superset of KubeFed's; Helm 4 would server-side apply
    // KubeFed's over them (and conflict with `migrate upgrade`'s fields).
    install_kubefed_chart(env, chart, &["--skip-crds"])
}

fn run_tool(tool: &std::path::Path, args: &[&str]) -> anyhow::Result<()> {
    let output = std::process::Command::new(tool)
        .args(args)
        .output()
        .with_context(|| format!("running {}", tool.display()))?;
    anyhow::ensure!(
        output.status.success(),
        "{} {args:?} failed: {}{}",
        tool.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
            // The module cache is read-only; helm and the test only read the copy, but remove it.
            let mut permissions = std::fs::metadata(&target)?.permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            permissions.set_readonly(false);
            std::fs::set_permissions(&target, permissions)?;
        }
    }
    Ok(())
}
