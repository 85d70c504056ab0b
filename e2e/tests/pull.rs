//! Pull mode, the hub side (docs/user-guide.md "Push or pull"): `hubfedctl join --mode pull`
//! against real API servers, and what the API server itself allows an agent's hub
//! credentials — the ones join hands to the member — to do. Then a pull member's health from
//! its agent's heartbeat, read by a running controller.
//!
//! Own environment (a hub and two members, with kube-controller-manager for the token
//! Secrets) and its own controller process: the pull clusters joined here must not meet the
//! shared federation's tests.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use hubfed_api::kubefedcluster::{KubeFedCluster, SyncMode};
use hubfed_api::work::{
    AGENT_KUBERNETES_VERSION_ANNOTATION, AGENT_LEASE_NAME, Work, WorkSource, WorkSpec, WorkStatus,
    WorkTarget,
};
use hubfed_core::pull::cluster_namespace;
use hubfed_e2e::controller::{ControllerOptions, ControllerProcess};
use hubfed_e2e::{
    KUBEFED_NAMESPACE, PrivateFederation, TIMEOUT, Wait, hubfedctl, pull_health_checks, report,
    wait_for,
};
use hubfed_testenv::TestEnv;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

const MEMBER_SECRET: &str = "hubfed-agent-hub";

/// The agent's hub client, built from the kubeconfig join put in the member — nothing else.
async fn agent_client(env: &TestEnv, member: &str) -> anyhow::Result<(Client, String)> {
    let member_client = env
        .cluster(member)
        .context(member.to_owned())?
        .client()
        .await?;
    let secrets: Api<Secret> = Api::namespaced(member_client, KUBEFED_NAMESPACE);
    let secret = secrets
        .get(MEMBER_SECRET)
        .await
        .with_context(|| format!("{member}: secret {KUBEFED_NAMESPACE}/{MEMBER_SECRET}"))?;
    let data = secret.data.unwrap_or_default();
    let text = data
        .get("kubeconfig")
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .context("no kubeconfig in the agent's secret")?;
    let cluster = data
        .get("cluster")
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .context("no cluster name in the agent's secret")?;
    let kubeconfig = Kubeconfig::from_yaml(&text)?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok((Client::try_from(config)?, cluster))
}

fn work(name: &str, namespace: &str, object: serde_json::Value) -> Work {
    let mut work = Work::new(
        name,
        WorkSpec {
            target: WorkTarget {
                api_version: "v1".to_owned(),
                kind: "Secret".to_owned(),
                plural: "secrets".to_owned(),
                namespaced: true,
            },
            source: WorkSource {
                kind: "FederatedSecret".to_owned(),
                namespace: Some("default".to_owned()),
                name: "db".to_owned(),
                uid: String::new(),
            },
            action: "Apply".to_owned(),
            name: "db".to_owned(),
            namespace: Some("default".to_owned()),
            object: Some(object),
            desired_hash: String::new(),
            creates: true,
            create_only: false,
            adopts: false,
            released_fields: Vec::new(),
            basis: String::new(),
            delete_options: None,
            uid: None,
            annotations: std::collections::BTreeMap::new(),
            collect_status: false,
        },
    );
    work.metadata.namespace = Some(namespace.to_owned());
    work
}

fn is_forbidden<T>(result: &Result<T, kube::Error>) -> bool {
    matches!(result, Err(kube::Error::Api(e)) if e.code == 403)
}

/// Both pull joins, the hub's admin client and the environment; one controller process.
struct PullEnv {
    env: TestEnv,
    controller: ControllerProcess,
}

/// `hubfedctl join <cluster> --mode pull --cluster-context <context> <more>`: exit code,
/// stdout, stderr.
async fn join_pull(
    env: &TestEnv,
    cluster: &str,
    context: &str,
    more: &[&str],
) -> (i32, String, String) {
    let mut args = vec![
        "join",
        cluster,
        "--mode",
        "pull",
        "--cluster-context",
        context,
    ];
    args.extend_from_slice(more);
    hubfedctl(env.kubeconfig_path(), &args).await
}

async fn start() -> anyhow::Result<PullEnv> {
    let env = PrivateFederation::new()
        .config(pull_health_checks())
        .unjoined()
        .start()
        .await?;
    let controller = ControllerProcess::start(&env, &ControllerOptions::single("pull"))?;
    for (cluster, context) in [("pull-a", "member1"), ("pull-b", "member2")] {
        let (code, out, err) = join_pull(&env, cluster, context, &[]).await;
        ensure!(
            code == 0,
            "join {cluster} --mode pull: exit {code}\n{out}\n{err}"
        );
        ensure!(out.contains("joined in pull mode"), "{out}");
    }
    Ok(PullEnv { env, controller })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_mode_join_and_agent_credentials() -> anyhow::Result<()> {
    let mut pull = start().await?;
    let env = &pull.env;
    let hub = env.hub().client().await?;

    // The hub side: a KubeFedCluster in pull mode that holds no member credentials.
    let clusters: Api<KubeFedCluster> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let a = clusters.get("pull-a").await?;
    ensure!(a.spec.sync_mode == SyncMode::Pull, "{:?}", a.spec);
    ensure!(
        a.spec.secret_ref.name.is_empty(),
        "a pull cluster references no token"
    );
    ensure!(a.spec.ca_bundle.is_none());
    let hub_secrets: Api<Secret> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let names: Vec<String> = hub_secrets
        .list_metadata(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    ensure!(
        !names.iter().any(|n| n.starts_with("pull-")),
        "the hub holds no member token for a pull cluster: {names:?}"
    );

    // Join is idempotent with --error-on-existing=false, and refuses a second join without.
    let (code, _, err) = join_pull(env, "pull-a", "member1", &[]).await;
    ensure!(
        code != 0 && err.contains("already joined"),
        "exit {code}: {err}"
    );
    let (code, out, err) =
        join_pull(env, "pull-a", "member1", &["--error-on-existing=false"]).await;
    ensure!(code == 0, "re-join: exit {code}\n{out}\n{err}");

    // One Work holding a Secret in each cluster's namespace, written by the hub's admin (as
    // the controller will).
    let (ns_a, ns_b) = (cluster_namespace("pull-a"), cluster_namespace("pull-b"));
    for (ns, value) in [(&ns_a, "c2VjcmV0LWE="), (&ns_b, "c2VjcmV0LWI=")] {
        let works: Api<Work> = Api::namespaced(hub.clone(), ns);
        let object = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "namespace": "default"}, "data": {"password": value}});
        works
            .create(
                &PostParams::default(),
                &work("secret.default.db", ns, object),
            )
            .await
            .with_context(|| format!("creating a work in {ns}"))?;
    }

    let (agent_a, cluster_a) = agent_client(env, "member1").await?;
    ensure!(cluster_a == "pull-a", "{cluster_a}");
    let (agent_b, _) = agent_client(env, "member2").await?;

    // Its own work: readable, and its status writable.
    let own: Api<Work> = Api::namespaced(agent_a.clone(), &ns_a);
    let listed = own.list(&ListParams::default()).await?;
    ensure!(listed.items.len() == 1, "{} works", listed.items.len());
    let status = json!({"status": WorkStatus {
        observed_generation: Some(1),
        result: "Ok".to_owned(),
        applied_version: Some("rv:1".to_owned()),
        ..WorkStatus::default()
    }});
    own.patch_status(
        "secret.default.db",
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .context("the agent writes its own work's status")?;

    // Another cluster's work: neither readable nor writable — a Secret placed only on
    // pull-b stays pull-b's.
    let other: Api<Work> = Api::namespaced(agent_a.clone(), &ns_b);
    let mut refusals = Vec::new();
    refusals.push((
        "list pull-b's works",
        is_forbidden(&other.list(&ListParams::default()).await),
    ));
    refusals.push((
        "get pull-b's work",
        is_forbidden(&other.get("secret.default.db").await),
    ));
    refusals.push((
        "write pull-b's work status",
        is_forbidden(
            &other
                .patch_status(
                    "secret.default.db",
                    &PatchParams::default(),
                    &Patch::Merge(&status),
                )
                .await,
        ),
    ));
    let everywhere: Api<Work> = Api::all(agent_a.clone());
    refusals.push((
        "list works cluster-wide",
        is_forbidden(&everywhere.list(&ListParams::default()).await),
    ));
    // Its own works: read only (the hub writes them).
    let mut changed = own.get("secret.default.db").await?;
    changed.spec.action = "Delete".to_owned();
    refusals.push((
        "rewrite its own work",
        is_forbidden(
            &own.replace("secret.default.db", &PostParams::default(), &changed)
                .await,
        ),
    ));
    refusals.push((
        "create a work",
        is_forbidden(
            &own.create(
                &PostParams::default(),
                &work("x", &ns_a, json!({"apiVersion": "v1", "kind": "ConfigMap"})),
            )
            .await,
        ),
    ));
    // No federated object, no Secret, nothing of the control plane.
    let federated = kube::discovery::ApiResource {
        group: "types.kubefed.io".to_owned(),
        version: "v1beta1".to_owned(),
        api_version: "types.kubefed.io/v1beta1".to_owned(),
        kind: "FederatedSecret".to_owned(),
        plural: "federatedsecrets".to_owned(),
    };
    let fed: Api<DynamicObject> = Api::all_with(agent_a.clone(), &federated);
    refusals.push((
        "list federated secrets",
        is_forbidden(&fed.list(&ListParams::default()).await),
    ));
    let fed_default: Api<DynamicObject> =
        Api::namespaced_with(agent_a.clone(), "default", &federated);
    let mut object = DynamicObject::new("sneaky", &federated);
    object.data = json!({"spec": {"template": {}, "placement": {"clusters": []}}});
    refusals.push((
        "create a federated object",
        is_forbidden(&fed_default.create(&PostParams::default(), &object).await),
    ));
    let secrets: Api<Secret> = Api::namespaced(agent_a.clone(), &ns_a);
    refusals.push((
        "read secrets of its own namespace",
        is_forbidden(&secrets.list(&ListParams::default()).await),
    ));
    let control: Api<Secret> = Api::namespaced(agent_a.clone(), KUBEFED_NAMESPACE);
    refusals.push((
        "read the control plane's secrets",
        is_forbidden(&control.list(&ListParams::default()).await),
    ));
    let kfcs: Api<KubeFedCluster> = Api::namespaced(agent_a.clone(), KUBEFED_NAMESPACE);
    refusals.push((
        "list KubeFedClusters",
        is_forbidden(&kfcs.list(&ListParams::default()).await),
    ));
    let other_leases: Api<Lease> = Api::namespaced(agent_a.clone(), &ns_b);
    refusals.push((
        "write pull-b's heartbeat",
        is_forbidden(
            &other_leases
                .create(&PostParams::default(), &heartbeat(&ns_b, "x"))
                .await,
        ),
    ));
    let config_maps: Api<ConfigMap> = Api::namespaced(agent_a.clone(), &ns_a);
    refusals.push((
        "create config maps",
        is_forbidden(
            &config_maps
                .create(
                    &PostParams::default(),
                    &ConfigMap {
                        metadata: ObjectMeta {
                            name: Some("x".to_owned()),
                            ..ObjectMeta::default()
                        },
                        ..ConfigMap::default()
                    },
                )
                .await,
        ),
    ));
    let allowed: Vec<&str> = refusals
        .iter()
        .filter(|(_, refused)| !refused)
        .map(|(what, _)| *what)
        .collect();
    ensure!(
        allowed.is_empty(),
        "pull-a's agent credentials were not refused (403) to: {allowed:?}"
    );
    report(format_args!(
        "pull: {} requests refused with 403 to pull-a's agent",
        refusals.len()
    ));

    // pull-b's agent reads its own work, not pull-a's, and the Secret it holds is its own.
    let b_own: Api<Work> = Api::namespaced(agent_b.clone(), &ns_b);
    let b_work = b_own.get("secret.default.db").await?;
    ensure!(
        b_work
            .spec
            .object
            .as_ref()
            .and_then(|o| o.pointer("/data/password"))
            == Some(&json!("c2VjcmV0LWI=")),
        "{:?}",
        b_work.spec.object
    );
    let b_other: Api<Work> = Api::namespaced(agent_b, &ns_a);
    ensure!(
        is_forbidden(&b_other.get("secret.default.db").await),
        "pull-b reads pull-a's work"
    );

    // Health from the heartbeat: none yet → not Ready; the agent's credentials keep a Lease
    // → Ready with the version it reports; silent → Offline; renewed → Ready again.
    wait_cluster(&hub, "pull-a", Health::Offline).await?;
    let leases: Api<Lease> = Api::namespaced(agent_a.clone(), &ns_a);
    leases
        .create(&PostParams::default(), &heartbeat(&ns_a, "agent-a"))
        .await?;
    let beating = tokio_util::sync::CancellationToken::new();
    let beat = tokio::spawn(renew_until(leases.clone(), beating.clone()));
    let ready_after = wait_cluster(&hub, "pull-a", Health::Ready).await?;
    let version = clusters
        .get("pull-a")
        .await?
        .status
        .and_then(|s| s.kubernetes_version);
    ensure!(version.as_deref() == Some("v1.36.3-agent"), "{version:?}");
    beating.cancel();
    beat.await??;
    let silent = Instant::now();
    wait_cluster(&hub, "pull-a", Health::Offline).await?;
    let offline_after = silent.elapsed();
    // The Offline condition does not change while the silence lasts (no status write, no
    // repeated warning per probe).
    let condition = offline_condition(&clusters, "pull-a").await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    ensure!(
        offline_condition(&clusters, "pull-a").await? == condition,
        "the Offline condition was rewritten while the agent stayed silent"
    );
    // A restarted controller finds the dead agent's Lease: it must not take it for a
    // heartbeat (it did: first sight counted as a renewal).
    pull.controller.kill().await?;
    pull.controller = ControllerProcess::start(&pull.env, &ControllerOptions::single("pull-2"))?;
    let restarted = Instant::now();
    while restarted.elapsed() < Duration::from_secs(10) {
        let ready = clusters
            .get("pull-a")
            .await?
            .status
            .map(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        ensure!(
            !ready,
            "a restarted controller took a dead agent's Lease for a heartbeat"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let beating = tokio_util::sync::CancellationToken::new();
    let beat = tokio::spawn(renew_until(leases, beating.clone()));
    let back = Instant::now();
    wait_cluster(&hub, "pull-a", Health::Ready).await?;
    let back_after = back.elapsed();
    beating.cancel();
    beat.await??;
    report(format_args!(
        "pull: heartbeat → Ready in {:.1}s; silent → Offline in {:.1}s (lease 4s, probe 1s, threshold 2); renewed → Ready in {:.1}s",
        ready_after.as_secs_f64(),
        offline_after.as_secs_f64(),
        back_after.as_secs_f64()
    ));
    // An object placed on a pull member whose agent is silent says so; its deletion does not
    // wait on it.
    object_on_pull_member(&hub).await?;

    // pull-b never had an agent: still Offline, with the reason.
    let b = clusters.get("pull-b").await?;
    let offline = b
        .status
        .map(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Offline")
        .context("pull-b has no Offline condition")?;
    ensure!(
        offline.status == "True"
            && offline
                .message
                .as_deref()
                .unwrap_or_default()
                .contains("no heartbeat"),
        "{offline:?}"
    );

    // A push join of a pull member is refused, not a silent switch that would put a member
    // token in the hub.
    let (code, _, err) = hubfedctl(
        env.kubeconfig_path(),
        &[
            "join",
            "pull-a",
            "--cluster-context",
            "member1",
            "--error-on-existing=false",
        ],
    )
    .await;
    ensure!(code != 0 && err.contains("pull mode"), "exit {code}: {err}");

    // Unjoin removes both sides; the agent's credentials stop working.
    let (code, out, err) = hubfedctl(
        env.kubeconfig_path(),
        &["unjoin", "pull-b", "--cluster-context", "member2"],
    )
    .await;
    ensure!(code == 0, "unjoin pull-b: exit {code}\n{out}\n{err}");
    ensure!(
        clusters.get_opt("pull-b").await?.is_none(),
        "KubeFedCluster pull-b is left"
    );
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(hub.clone());
    let work_ns = namespaces.get_opt(&ns_b).await?;
    ensure!(
        work_ns.is_none_or(|ns| ns.metadata.deletion_timestamp.is_some()),
        "{ns_b} is left in the hub"
    );
    let member2 = env.cluster("member2").context("member2")?.client().await?;
    let member2_secrets: Api<Secret> = Api::namespaced(member2, KUBEFED_NAMESPACE);
    ensure!(
        member2_secrets.get_opt(MEMBER_SECRET).await?.is_none(),
        "member2 keeps the agent's hub credentials"
    );
    wait_for(
        "pull-b's agent credentials to stop working",
        TIMEOUT,
        async || {
            Ok(match b_own.list(&ListParams::default()).await {
                Err(kube::Error::Api(e)) if [401, 403, 404].contains(&e.code) => Wait::Done(()),
                other => Wait::Pending(format!("{:?}", other.map(|l| l.items.len()))),
            })
        },
    )
    .await?;

    // -o yaml: the member side as manifests, nothing written to the member.
    let (code, out, err) = join_pull(env, "pull-b", "member2", &["-o", "yaml"]).await;
    ensure!(code == 0, "join -o yaml: exit {code}\n{out}\n{err}");
    for expected in [
        "kind: ServiceAccount",
        "kind: ClusterRole",
        "kind: Secret",
        MEMBER_SECRET,
        "kubeconfig:",
    ] {
        ensure!(out.contains(expected), "no {expected:?} in\n{out}");
    }
    ensure!(
        member2_secrets.get_opt(MEMBER_SECRET).await?.is_none(),
        "join -o yaml wrote to the member"
    );
    ensure!(
        clusters.get_opt("pull-b").await?.is_some(),
        "the hub side is written"
    );
    Ok(())
}

fn heartbeat(ns: &str, holder: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(AGENT_LEASE_NAME.to_owned()),
            namespace: Some(ns.to_owned()),
            annotations: Some(
                [(
                    AGENT_KUBERNETES_VERSION_ANNOTATION.to_owned(),
                    "v1.36.3-agent".to_owned(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(4),
            renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            ..LeaseSpec::default()
        }),
    }
}

/// Renews the heartbeat every second, as the agent will, until cancelled.
async fn renew_until(
    leases: Api<Lease>,
    stop: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    while !stop.is_cancelled() {
        let patch = json!({"spec": {"renewTime": MicroTime(k8s_openapi::jiff::Timestamp::now())}});
        leases
            .patch(
                AGENT_LEASE_NAME,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .context("renewing the heartbeat with the agent's credentials")?;
        tokio::select! {
            () = stop.cancelled() => {}
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Health {
    Ready,
    Offline,
}

/// Waits until the cluster's conditions say `health`; returns how long it took.
async fn wait_cluster(hub: &Client, name: &str, health: Health) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let clusters: Api<KubeFedCluster> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    wait_for(&format!("{name} {health:?}"), TIMEOUT, async || {
        let Some(cluster) = clusters.get_opt(name).await? else {
            bail!("KubeFedCluster {name} is gone");
        };
        let conditions = cluster.status.map(|s| s.conditions).unwrap_or_default();
        let is = |t: &str| {
            conditions
                .iter()
                .any(|c| c.type_ == t && c.status == "True")
        };
        let reached = match health {
            Health::Ready => is("Ready"),
            Health::Offline => is("Offline"),
        };
        Ok(if reached {
            Wait::Done(())
        } else {
            Wait::Pending(format!("conditions {conditions:?}"))
        })
    })
    .await?;
    Ok(started.elapsed())
}

async fn offline_condition(
    clusters: &Api<KubeFedCluster>,
    name: &str,
) -> anyhow::Result<Option<hubfed_api::kubefedcluster::ClusterCondition>> {
    Ok(clusters
        .get(name)
        .await?
        .status
        .map(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Offline")
        .map(|mut c| {
            // lastProbeTime is not written again unless something else changes.
            c.last_probe_time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            );
            c
        }))
}

/// A FederatedClusterRole placed on pull-a, whose heartbeat has stopped (no agent runs here:
/// e2e/tests/pull_agent.rs runs one): its status says ClusterNotReady for pull-a once pull-a
/// is Offline; deleting it does not hang (its work becomes a tombstone for the agent).
async fn object_on_pull_member(hub: &Client) -> anyhow::Result<()> {
    let federated = hubfed_e2e::federated("ClusterRole");
    let api: Api<DynamicObject> = Api::all_with(hub.clone(), &federated);
    let name = hubfed_e2e::unique_name("pull-role");
    let object = hubfed_e2e::federated_object(
        &federated,
        None,
        &name,
        json!({
            "template": {"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]},
            "placement": {"clusters": [{"name": "pull-a"}]},
        }),
    );
    api.create(&PostParams::default(), &object).await?;
    wait_for(
        &format!("{name}'s status for pull-a"),
        TIMEOUT,
        async || {
            let Some(value) = hubfed_e2e::get_value(&api, &name).await? else {
                bail!("{name} is gone");
            };
            let status = hubfed_e2e::cluster_status(&value, "pull-a")
                .and_then(|c| c.get("status"))
                .and_then(|s| s.as_str())
                .map(str::to_owned);
            Ok(match status.as_deref() {
                Some("ClusterNotReady") => Wait::Done(()),
                other => Wait::Pending(format!("{other:?}")),
            })
        },
    )
    .await?;
    api.delete(&name, &Default::default()).await?;
    wait_for(&format!("{name} to be gone"), TIMEOUT, async || {
        Ok(match hubfed_e2e::get_value(&api, &name).await? {
            None => Wait::Done(()),
            Some(v) => Wait::Pending(format!("finalizers {}", v["metadata"]["finalizers"])),
        })
    })
    .await
}
