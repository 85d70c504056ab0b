//! A member joined by KubeFed's `kubefedctl join` (every right in the member) narrowed to
//! hubfed's least-privilege grant by `hubfedctl migrate least-privilege` while hubfed's
//! controller runs, on a hub and two members.
//!
//! What must hold: the member's ServiceAccount loses what only cluster-admin could do, and
//! what a namespaced control plane's join had left under join's names is gone; the
//! KubeFedCluster never leaves Ready; no member copy is deleted, recreated or rewritten; a
//! change propagates right after; the other member keeps its grant; a second run changes
//! nothing. Skips, saying why, when Go is missing (kubefedctl is built from KubeFed's module).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt as _;
use hubfed_api::federatedtypeconfig::ResourceScope;
use hubfed_api::kubefedcluster::KubeFedCluster;
use hubfed_api::kubefedconfig::KubeFedConfigSpec;
use hubfed_e2e::controller::{ControllerOptions, ControllerProcess};
use hubfed_e2e::kubefed;
use hubfed_e2e::{
    Expected, KUBEFED_NAMESPACE, MEMBERS, create_federated, federate_settings, hubfedctl,
    install_control_plane, placement, report, wait_clusters_ready, wait_copies,
};
use hubfed_testenv::{TestEnv, TestEnvConfig};
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt as _};
use serde_json::{Value, json};

const NS: &str = "credentials-swap";
/// kubefedctl's names for member1 joined to the hub `hub`.
const ACCOUNT: &str = "member1-hub";
const ROLE: &str = "kubefed-controller-manager:member1-hub";
const HEALTH_ROLE: &str =
    "kubefed-controller-manager:kube-federation-system:healthcheck-member1-hub";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubefedctl_grant_is_narrowed_without_a_gap() -> anyhow::Result<()> {
    let Some(binary) = kubefed::controller_manager()? else {
        eprintln!("skipped: Go is missing, kubefedctl cannot be built");
        return Ok(());
    };
    let fixture = Fixture::set_up(&binary.with_file_name("kubefedctl")).await?;
    let not_ready = watch_readiness(&fixture.hub);
    let before = copies(&fixture.member_apis).await?;

    let dry = swap(&fixture.env, &["--dry-run"]).await?;
    anyhow::ensure!(dry.contains("(dry run)"), "{dry}");
    anyhow::ensure!(
        can(&fixture.member1, "create", "clusterrolebindings").await?,
        "--dry-run narrowed the grant"
    );
    let out = swap(&fixture.env, &[]).await?;
    let swapped = Instant::now();
    modify_settings(&fixture.configmaps, "2").await?;
    let want = json!("2");
    let fields = [("/data/v", Some(&want))];
    let member1_copy = Expected::copy("member1", &fixture.member_apis[0].1).with(&fields);
    wait_copies("the change in member1", "settings", &[member1_copy]).await?;
    let propagated = swapped.elapsed();
    let changed = changed_lines(&out);
    report(format_args!(
        "credentials swap: {} objects changed:\n{out}",
        changed.len()
    ));
    anyhow::ensure!(
        changed
            == [
                format!("member1: clusterrole {ROLE} configured"),
                format!("member1: clusterrolebinding {HEALTH_ROLE} deleted"),
                format!("member1: rolebinding {KUBEFED_NAMESPACE}/{ROLE} deleted"),
                format!("member1: clusterrole {HEALTH_ROLE} deleted"),
                format!("member1: role {KUBEFED_NAMESPACE}/{ROLE} deleted"),
            ],
        "unexpected changes:\n{out}"
    );
    refuse_another_account(&fixture.env).await?;
    check_grants(&fixture.member1, &fixture.member2).await?;
    check_leftovers_gone(&fixture.member1).await?;

    // Long enough for health probes and the controller's member watches to run under the
    // new grant.
    tokio::time::sleep(Duration::from_secs(15)).await;
    wait_clusters_ready(&fixture.hub, &MEMBERS).await?;
    let seen = not_ready.0.lock().expect("not ready").clone();
    not_ready.1.abort();
    anyhow::ensure!(seen.is_empty(), "a KubeFedCluster left Ready: {seen:?}");
    check_copies_kept(&before, &copies(&fixture.member_apis).await?)?;
    fixture.check_controller_never_refused()?;

    let again = swap(&fixture.env, &[]).await?;
    anyhow::ensure!(
        changed_lines(&again).is_empty() && again.contains("nothing changed"),
        "a second run changed something:\n{again}"
    );
    report(format_args!(
        "credentials swap: {} objects changed, both clusters Ready throughout, {} copies kept (same UID, only the changed one rewritten), the next change in member1 {:.2}s after the swap",
        changed.len(),
        before.len(),
        propagated.as_secs_f64()
    ));
    Ok(())
}

/// A hub whose members kubefedctl joined, hubfed's controller running, ConfigMaps
/// `settings` and `steady` propagated to both members.
struct Fixture {
    env: TestEnv,
    hub: Client,
    member1: Client,
    member2: Client,
    controller: ControllerProcess,
    /// The hub's FederatedConfigMaps in [`NS`].
    configmaps: Api<DynamicObject>,
    /// Each member's ConfigMaps in [`NS`].
    member_apis: Vec<(&'static str, Api<DynamicObject>)>,
}

impl Fixture {
    async fn set_up(kubefedctl: &std::path::Path) -> anyhow::Result<Self> {
        // kube-controller-manager fills kubefedctl join's token Secrets.
        let env = tokio::task::spawn_blocking(|| {
            TestEnv::start(TestEnvConfig {
                members: 2,
                ..TestEnvConfig::default()
            })
        })
        .await??;
        let hub = env.hub().client().await?;
        let spec = KubeFedConfigSpec::with_defaults(ResourceScope::Cluster);
        install_control_plane(&hub, Some(spec)).await?;
        join_with_kubefedctl(&env, kubefedctl)?;
        let member1 = env.cluster("member1").context("member1")?.client().await?;
        let member2 = env.cluster("member2").context("member2")?.client().await?;
        plant_namespaced_leftovers(&member1).await?;
        let controller = ControllerProcess::start(&env, &ControllerOptions::single("swap"))?;
        wait_clusters_ready(&hub, &MEMBERS).await?;
        let (configmaps, member_apis) =
            federate_settings(&hub, &env, NS, json!({"v": "1"})).await?;
        let spec = json!({"template": {"data": {"v": "steady"}}, "placement": placement(&MEMBERS)});
        create_federated(&hub, "ConfigMap", Some(NS), "steady", spec).await?;
        for name in ["settings", "steady"] {
            let copies = Expected::each(member_apis.iter().map(|(n, a)| (*n, a)), &[]);
            wait_copies(&format!("{name} in both members"), name, &copies).await?;
        }
        for (verb, resource) in ADMIN_ONLY {
            anyhow::ensure!(
                can(&member1, verb, resource).await?,
                "kubefedctl's grant does not allow {verb} {resource}"
            );
        }
        Ok(Self {
            env,
            hub,
            member1,
            member2,
            controller,
            configmaps,
            member_apis,
        })
    }

    /// No request of the controller was refused (a grant too narrow shows as `forbidden`).
    fn check_controller_never_refused(&self) -> anyhow::Result<()> {
        let log = std::fs::read_to_string(self.controller.log_file())?;
        let refused: Vec<&str> = log
            .lines()
            .filter(|l| l.to_lowercase().contains("forbidden"))
            .collect();
        anyhow::ensure!(
            refused.is_empty(),
            "the controller was refused:\n{}",
            refused.join("\n")
        );
        Ok(())
    }
}

/// What kubefedctl's grant allows and hubfed's does not: (verb, resource), cluster-wide.
/// Nodes are read-only in hubfed's grant (region and zones come from their labels).
const ADMIN_ONLY: [(&str, &str); 3] = [
    ("create", "clusterrolebindings"),
    ("delete", "nodes"),
    ("list", "persistentvolumes"),
];

/// `kubefedctl join` of both members, as KubeFed's docs run it.
fn join_with_kubefedctl(env: &TestEnv, tool: &std::path::Path) -> anyhow::Result<()> {
    let config = env.kubeconfig_path().to_str().context("kubeconfig path")?;
    for member in MEMBERS {
        let args = [
            "join",
            member,
            "--cluster-context",
            member,
            "--host-cluster-context",
            "hub",
            "--kubefed-namespace",
            KUBEFED_NAMESPACE,
            "--kubeconfig",
            config,
        ];
        let output = std::process::Command::new(tool)
            .args(args)
            .output()
            .with_context(|| format!("running {}", tool.display()))?;
        anyhow::ensure!(
            output.status.success(),
            "kubefedctl {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// What `kubefedctl join` for a namespaced control plane writes besides the main
/// ClusterRole: a Role with every right in the namespace and the health-check ClusterRole,
/// each bound to the account (a member joined once before the control plane's scope changed).
async fn plant_namespaced_leftovers(member: &Client) -> anyhow::Result<()> {
    let subjects =
        json!([{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": KUBEFED_NAMESPACE}]);
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": ROLE, "namespace": KUBEFED_NAMESPACE},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
    }))?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": ROLE, "namespace": KUBEFED_NAMESPACE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE},
        "subjects": subjects,
    }))?;
    let health: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": HEALTH_ROLE},
        "rules": [{"nonResourceURLs": ["/healthz"], "verbs": ["Get"]},
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}],
    }))?;
    let health_binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": HEALTH_ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": HEALTH_ROLE},
        "subjects": subjects,
    }))?;
    let params = PostParams::default();
    Api::<Role>::namespaced(member.clone(), KUBEFED_NAMESPACE)
        .create(&params, &role)
        .await?;
    Api::<RoleBinding>::namespaced(member.clone(), KUBEFED_NAMESPACE)
        .create(&params, &binding)
        .await?;
    Api::<ClusterRole>::all(member.clone())
        .create(&params, &health)
        .await?;
    Api::<ClusterRoleBinding>::all(member.clone())
        .create(&params, &health_binding)
        .await?;
    Ok(())
}

/// `hubfedctl migrate least-privilege member1 --cluster-context member1 <extra>`: stdout.
async fn swap(env: &TestEnv, extra: &[&str]) -> anyhow::Result<String> {
    let args = [
        &[
            "migrate",
            "least-privilege",
            "member1",
            "--cluster-context",
            "member1",
        ][..],
        extra,
    ]
    .concat();
    let (code, out, err) = hubfedctl(env.kubeconfig_path(), &args).await;
    anyhow::ensure!(code == 0, "hubfedctl {args:?} exited {code}:\n{out}{err}");
    anyhow::ensure!(err.is_empty(), "hubfedctl {args:?} warned:\n{err}");
    Ok(out)
}

/// A swap naming an account the hub's token is not refused in one line, before any write.
async fn refuse_another_account(env: &TestEnv) -> anyhow::Result<()> {
    let args = [
        "migrate",
        "least-privilege",
        "member2",
        "--host-cluster-name",
        "elsewhere",
    ];
    let (code, out, err) = hubfedctl(env.kubeconfig_path(), &args).await;
    let want =
        "error: cluster \"member2\": the hub's token (secret kube-federation-system/member2-";
    anyhow::ensure!(
        code == 1 && out.is_empty() && err.starts_with(want) && err.lines().count() == 1,
        "hubfedctl {args:?} exited {code}:\n{out}{err}"
    );
    anyhow::ensure!(
        err.contains("is \"system:serviceaccount:kube-federation-system:member2-hub\"'s, not ServiceAccount kube-federation-system/member2-elsewhere's"),
        "{err}"
    );
    Ok(())
}

/// The lines of a run that report a write.
fn changed_lines(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| {
            [" configured", " created", " deleted"]
                .iter()
                .any(|w| l.ends_with(w))
        })
        .map(str::to_owned)
        .collect()
}

/// Whether member1's join account may `verb` `resource` (core or RBAC group) cluster-wide,
/// by a SubjectAccessReview made with the admin client.
async fn can(member: &Client, verb: &str, resource: &str) -> anyhow::Result<bool> {
    let group = if resource.starts_with("clusterrole") {
        "rbac.authorization.k8s.io"
    } else {
        ""
    };
    let review: SubjectAccessReview = serde_json::from_value(json!({"spec": {
        "user": format!("system:serviceaccount:{KUBEFED_NAMESPACE}:{ACCOUNT}"),
        "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{KUBEFED_NAMESPACE}"),
            "system:authenticated"],
        "resourceAttributes": {"verb": verb, "group": group, "resource": resource},
    }}))?;
    let api: Api<SubjectAccessReview> = Api::all(member.clone());
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// member1's account lost cluster-admin's rights and kept hubfed's; member2's kept all.
async fn check_grants(member1: &Client, member2: &Client) -> anyhow::Result<()> {
    for (verb, resource) in ADMIN_ONLY {
        anyhow::ensure!(
            !can(member1, verb, resource).await?,
            "member1's account may still {verb} {resource}"
        );
    }
    for (verb, resource) in [
        ("watch", "configmaps"),
        ("patch", "namespaces"),
        ("watch", "nodes"),
    ] {
        anyhow::ensure!(
            can(member1, verb, resource).await?,
            "member1's account may not {verb} {resource}"
        );
    }
    let member2_account = "member2-hub";
    let review: SubjectAccessReview = serde_json::from_value(json!({"spec": {
        "user": format!("system:serviceaccount:{KUBEFED_NAMESPACE}:{member2_account}"),
        "resourceAttributes": {"verb": "create", "group": "rbac.authorization.k8s.io",
            "resource": "clusterrolebindings"},
    }}))?;
    let api: Api<SubjectAccessReview> = Api::all(member2.clone());
    let answer = api.create(&PostParams::default(), &review).await?;
    anyhow::ensure!(
        answer.status.is_some_and(|s| s.allowed),
        "member2's grant changed too"
    );
    Ok(())
}

async fn check_leftovers_gone(member1: &Client) -> anyhow::Result<()> {
    let roles: Api<Role> = Api::namespaced(member1.clone(), KUBEFED_NAMESPACE);
    let bindings: Api<RoleBinding> = Api::namespaced(member1.clone(), KUBEFED_NAMESPACE);
    let health: Api<ClusterRole> = Api::all(member1.clone());
    let health_bindings: Api<ClusterRoleBinding> = Api::all(member1.clone());
    anyhow::ensure!(
        roles.get_opt(ROLE).await?.is_none()
            && bindings.get_opt(ROLE).await?.is_none()
            && health.get_opt(HEALTH_ROLE).await?.is_none()
            && health_bindings.get_opt(HEALTH_ROLE).await?.is_none(),
        "a namespaced join's leftovers are still there"
    );
    Ok(())
}

/// Records every state of a KubeFedCluster that is not Ready, from a watch of the hub.
fn watch_readiness(hub: &Client) -> (Arc<Mutex<Vec<String>>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let api: Api<KubeFedCluster> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let record = seen.clone();
    let task = tokio::spawn(async move {
        let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = stream.next().await {
            let (Ok(watcher::Event::Apply(cluster)) | Ok(watcher::Event::InitApply(cluster))) =
                event
            else {
                continue;
            };
            if !cluster.is_ready() {
                let status = serde_json::to_string(&cluster.status).unwrap_or_default();
                record
                    .lock()
                    .expect("not ready")
                    .push(format!("{}: {status}", cluster.name_any()));
            }
        }
    });
    (seen, task)
}

/// Every managed copy of the test's namespace and ConfigMaps: `cluster/name` → (UID,
/// resourceVersion).
async fn copies(
    member_apis: &[(&str, Api<DynamicObject>)],
) -> anyhow::Result<BTreeMap<String, (String, String)>> {
    let mut out = BTreeMap::new();
    for (cluster, api) in member_apis {
        let managed = ListParams::default().labels("kubefed.io/managed=true");
        for object in api.list(&managed).await? {
            let key = format!("{cluster}/configmap/{}", object.name_any());
            out.insert(
                key,
                (
                    object.uid().unwrap_or_default(),
                    object.resource_version().unwrap_or_default(),
                ),
            );
        }
    }
    Ok(out)
}

/// The same copies as `before`, none recreated; none rewritten but `settings` (changed on
/// purpose after the swap).
fn check_copies_kept(
    before: &BTreeMap<String, (String, String)>,
    after: &BTreeMap<String, (String, String)>,
) -> anyhow::Result<()> {
    for (key, (uid, version)) in before {
        let Some((new_uid, new_version)) = after.get(key) else {
            anyhow::bail!("{key} is gone");
        };
        anyhow::ensure!(new_uid == uid, "{key} was recreated");
        anyhow::ensure!(
            key.ends_with("/settings") || new_version == version,
            "{key} was rewritten ({version} → {new_version})"
        );
    }
    Ok(())
}

async fn modify_settings(configmaps: &Api<DynamicObject>, value: &str) -> anyhow::Result<()> {
    let patch: Value = json!({"spec": {"template": {"data": {"v": value}}}});
    configmaps
        .patch("settings", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}
