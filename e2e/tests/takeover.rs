//! A live KubeFed v0.10.0 hub taken over by hubfed, then given back to KubeFed, on a hub and
//! two members: KubeFed's own chart (installed by helm) and controller-manager (a process,
//! built from KubeFed's Go module: the chart's Deployment cannot pull its image here), the
//! steps of docs/migrating-from-kubefed.md with `hubfedctl migrate`, then hubfed's controller.
//!
//! What must hold: no member copy deleted or recreated (UIDs kept), each rewritten at most
//! once by the takeover, nothing written at rest after it, versions and statuses carried on,
//! a change, a placement move and a deletion carried out right after; then KubeFed, started
//! again, carries a change out.
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
use hubfed_e2e::controller::{ControllerOptions, ControllerProcess};
use hubfed_e2e::helm::helm_on_hub;
use hubfed_e2e::kubefed::{self, KubefedProcess};
use hubfed_e2e::{KUBEFED_NAMESPACE, TIMEOUT, Wait, hubfedctl, register_cluster, report, wait_for};
use hubfed_testenv::{TestEnv, TestEnvConfig};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt as _};
use serde_json::{Value, json};

const NS: &str = "takeover";
const MEMBERS: [&str; 2] = ["member1", "member2"];
/// Member kinds the federated objects below make: (group, version, kind, plural, namespaced).
const KINDS: [(&str, &str, &str, &str, bool); 4] = [
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
];

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.to_owned(),
        version: version.to_owned(),
        api_version: if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.to_owned(),
        plural: plural.to_owned(),
    }
}

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

fn placement(clusters: &[&str]) -> Value {
    json!({"clusters": clusters.iter().map(|name| json!({"name": name})).collect::<Vec<_>>()})
}

/// The federated objects: (kind, namespaced, name, spec).
fn workload() -> Vec<(&'static str, bool, String, Value)> {
    vec![
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
    ]
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

/// Counts the writes to managed copies in the members from now on, per copy, from watches.
async fn count_writes(
    env: &TestEnv,
    counts: Arc<Mutex<BTreeMap<String, u32>>>,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let mut tasks = Vec::new();
    for member in MEMBERS {
        let client = env.cluster(member).context("member")?.client().await?;
        for (group, version, kind, plural, namespaced) in KINDS {
            let counts = counts.clone();
            let client = client.clone();
            tasks.push(tokio::spawn(async move {
                let api = api(&client, &resource(group, version, kind, plural), namespaced);
                let config = watcher::Config::default().labels("kubefed.io/managed=true");
                let mut listed = false;
                let mut stream = watcher::watcher(api, config).boxed();
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(watcher::Event::InitDone) => listed = true,
                        Ok(watcher::Event::Apply(object) | watcher::Event::Delete(object))
                            if listed =>
                        {
                            let key = format!(
                                "{member}/{kind}/{}/{}",
                                object.namespace().unwrap_or_default(),
                                object.name_any()
                            );
                            *counts.lock().expect("counts").entry(key).or_default() += 1;
                        }
                        _ => {}
                    }
                }
            }));
        }
    }
    Ok(tasks)
}

async fn create_workload(hub: &Client) -> anyhow::Result<()> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(hub.clone());
    let namespace = serde_json::from_value(json!({"metadata": {"name": NS}}))?;
    namespaces
        .create(&PostParams::default(), &namespace)
        .await?;
    for (kind, namespaced, name, spec) in workload() {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubefed_hub_is_taken_over_and_given_back() -> anyhow::Result<()> {
    let (Some(module), Some(binary)) = (kubefed::module_dir()?, kubefed::controller_manager()?)
    else {
        eprintln!("skipped: Go is missing, KubeFed's chart and controller-manager cannot be built");
        return Ok(());
    };
    // No kube-controller-manager: member Deployments get no status, so every write counted
    // below is a controller's.
    let env = tokio::task::spawn_blocking(|| {
        TestEnv::start(TestEnvConfig {
            members: 2,
            controller_manager: false,
            ..TestEnvConfig::default()
        })
    })
    .await??;
    let hub = env.hub().client().await?;

    // KubeFed's chart, without its webhook configurations (see the module doc).
    let chart = env.dir().join("kubefed-chart");
    copy_dir(&module.join("charts/kubefed"), &chart)?;
    std::fs::remove_file(chart.join("charts/controllermanager/templates/webhook.yaml"))?;
    let chart_path = chart.to_str().context("chart path")?;
    helm_on_hub(
        &env,
        &[
            "install",
            "kubefed",
            chart_path,
            "-n",
            KUBEFED_NAMESPACE,
            "--create-namespace",
            "--no-hooks",
            // The feature gates the chart's post-install hook job would write (a null list
            // otherwise, which helm's server-side apply refuses).
            "--set",
            "controllermanager.featureGates.PushReconciler=Enabled,controllermanager.featureGates.SchedulerPreferences=Enabled",
        ],
    )?;
    for member in MEMBERS {
        register_cluster(&hub, member, env.cluster(member).context("member")?).await?;
    }
    let kubefed = KubefedProcess::start(&env, &binary, "before").await?;
    create_workload(&hub).await?;
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
    hubfedctl_ok(&env, &["migrate", "upgrade", "--dry-run"], 0).await?;
    let ftcs: Api<hubfed_api::federatedtypeconfig::FederatedTypeConfig> =
        Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    anyhow::ensure!(
        ftcs.list(&Default::default()).await?.items.is_empty(),
        "upgrade --dry-run restored FederatedTypeConfigs"
    );
    let upgraded = hubfedctl_ok(&env, &["migrate", "upgrade"], 0).await?;
    report(format_args!("takeover: migrate upgrade:\n{upgraded}"));
    anyhow::ensure!(
        writes.lock().expect("counts").is_empty(),
        "member copies written before hubfed started: {:?}",
        writes.lock().expect("counts")
    );

    // hubfed.
    let started = Instant::now();
    let controller = ControllerProcess::start(&env, &ControllerOptions::single("takeover"))?;
    let settled = wait_for(
        "hubfed's status on every federated object",
        TIMEOUT * 2,
        async || {
            let mut pending = Vec::new();
            for (kind, namespaced, name, _) in workload() {
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

    // The way back: hubfed stopped, KubeFed started again on the same hub.
    drop(controller);
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
    for task in watches {
        task.abort();
    }
    kubefed.stop();
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
