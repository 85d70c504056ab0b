//! The chart's aggregated roles on a real hub: after `helm install`, a user bound to the
//! built-in `admin` ClusterRole in a namespace creates FederatedDeployments there, and one
//! bound to `view` reads them and their status but creates none and reads no
//! FederatedSecret — what KubeFed's `kubefed-admin/edit/view` roles gave application teams.
//!
//! Aggregation is done by kube-controller-manager's clusterrole-aggregation controller, which
//! the harness's trimmed controller manager does not run: this test starts one with only that
//! controller against its own hub. Needs `helm` (see `chart.rs`).

use anyhow::{Context as _, ensure};
use hubfed_e2e::helm::{chart_dir, helm_on_hub, start_hub_only};
use hubfed_e2e::{
    FIELD_MANAGER, KUBEFED_NAMESPACE, TIMEOUT, Wait, dynamic_api, federated, wait_for,
};
use hubfed_testenv::process::{GuardedProcess, Spawn};
use hubfed_testenv::{Binaries, TestEnv};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::KubeConfigOptions;
use kube::{Client, ResourceExt as _};
use serde_json::json;

/// kube-controller-manager with only the clusterrole-aggregation controller, on the hub.
fn start_aggregation_controller(env: &TestEnv) -> anyhow::Result<GuardedProcess> {
    let bins = Binaries::locate()?;
    Ok(GuardedProcess::spawn(Spawn {
        name: "hub-clusterrole-aggregation",
        program: &bins.kube_controller_manager,
        args: vec![
            format!("--kubeconfig={}", env.kubeconfig_path().display()),
            "--controllers=clusterrole-aggregation-controller".into(),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
        ],
        env: Vec::new(),
        pid_dir: &env.dir().join("pids"),
        log_file: env.dir().join("logs/hub-clusterrole-aggregation.log"),
        grace_seconds: 5,
        outlive_others: false,
        remove_dir_after: None,
    })?)
}

/// A hub client that acts as `user` (impersonated by the hub's admin).
async fn client_as(env: &TestEnv, user: &str) -> anyhow::Result<Client> {
    let mut kubeconfig = env.hub().kubeconfig()?;
    for named in &mut kubeconfig.auth_infos {
        if let Some(auth) = named.auth_info.as_mut() {
            auth.impersonate = Some(user.to_owned());
        }
    }
    let options = KubeConfigOptions {
        context: Some(env.hub().name().to_owned()),
        ..Default::default()
    };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?;
    Ok(Client::try_from(config)?)
}

/// A RoleBinding of `user` to the built-in ClusterRole `role` in `namespace`.
async fn bind(admin: &Client, namespace: &str, user: &str, role: &str) -> anyhow::Result<()> {
    let binding = RoleBinding {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{user}-{role}")),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: role.into(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "User".into(),
            name: user.into(),
            ..Default::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &binding)
        .await?;
    Ok(())
}

/// Whether `client` may `verb` the `types.kubefed.io` `resource` in `namespace`.
async fn may(client: &Client, verb: &str, resource: &str, namespace: &str) -> anyhow::Result<bool> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some("types.kubefed.io".into()),
                resource: Some(resource.into()),
                namespace: Some(namespace.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answer.status.is_some_and(|status| status.allowed))
}

fn is_forbidden(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 403)
}

fn deployment(name: &str) -> anyhow::Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "types.kubefed.io/v1beta1",
        "kind": "FederatedDeployment",
        "metadata": {"name": name},
        "spec": {
            "template": {"spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1"}]},
                },
            }},
            "placement": {"clusters": [{"name": "member1"}]},
        },
    }))?)
}

#[tokio::test]
async fn admin_and_view_users_get_kubefeds_rights_on_federated_objects() -> anyhow::Result<()> {
    let env = start_hub_only()?;
    let _aggregation = start_aggregation_controller(&env)?;
    let admin = env.hub().client().await?;
    let chart = chart_dir();
    let chart = chart.to_str().context("chart path is UTF-8")?;
    // No pod serves the webhooks here: without them nothing waits on an answer.
    helm_on_hub(
        &env,
        &[
            "install",
            "hubfed",
            chart,
            "--namespace",
            KUBEFED_NAMESPACE,
            "--create-namespace",
            "--set",
            "webhook.enabled=false",
        ],
    )?;

    let namespace = "team-a";
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": namespace}}))?,
        )
        .await?;
    bind(&admin, namespace, "alice", "admin").await?;
    bind(&admin, namespace, "bob", "view").await?;
    let alice = client_as(&env, "alice").await?;
    let bob = client_as(&env, "bob").await?;

    // Aggregation runs asynchronously: wait until the built-in roles carry the chart's rules.
    wait_for(
        "admin and view to aggregate the chart's roles",
        TIMEOUT,
        async || {
            let alice_creates = may(&alice, "create", "federateddeployments", namespace).await?;
            let bob_reads = may(&bob, "get", "federateddeployments", namespace).await?;
            Ok(if alice_creates && bob_reads {
                Wait::Done(())
            } else {
                Wait::Pending(format!(
                    "alice may create: {alice_creates}, bob may get: {bob_reads}"
                ))
            })
        },
    )
    .await?;

    let resource = federated("Deployment");
    let as_alice = dynamic_api(alice.clone(), &resource, Some(namespace));
    as_alice
        .create(&PostParams::default(), &deployment("web")?)
        .await
        .context("admin creates a FederatedDeployment in its namespace")?;
    // The controller would write this; the hub's admin stands in for it.
    let as_cluster_admin = dynamic_api(admin.clone(), &resource, Some(namespace));
    as_cluster_admin
        .patch_status(
            "web",
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(json!({
                "apiVersion": "types.kubefed.io/v1beta1",
                "kind": "FederatedDeployment",
                "status": {"conditions": [{
                    "type": "Propagation",
                    "status": "True",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }]},
            })),
        )
        .await?;

    let as_bob = dynamic_api(bob.clone(), &resource, Some(namespace));
    let seen = as_bob.get("web").await.context("view gets the object")?;
    assert_eq!(seen.name_any(), "web");
    assert_eq!(
        seen.data["status"]["conditions"][0]["type"], "Propagation",
        "view reads the status in the object"
    );
    let status = as_bob
        .get_status("web")
        .await
        .context("view gets the status subresource")?;
    assert_eq!(status.data["status"]["conditions"][0]["status"], "True");
    ensure!(
        !as_bob.list(&Default::default()).await?.items.is_empty(),
        "view lists FederatedDeployments"
    );
    let refused = as_bob
        .create(&PostParams::default(), &deployment("bobs")?)
        .await
        .expect_err("view must not create a FederatedDeployment");
    assert!(is_forbidden(&refused), "403 for view's create: {refused}");
    let refused = as_bob
        .delete("web", &Default::default())
        .await
        .expect_err("view must not delete a FederatedDeployment");
    assert!(is_forbidden(&refused), "403 for view's delete: {refused}");

    // FederatedSecrets hold Secret data: admin reads them as it reads Secrets, view does not.
    assert!(may(&alice, "list", "federatedsecrets", namespace).await?);
    let secrets = dynamic_api(bob.clone(), &federated("Secret"), Some(namespace));
    let refused = secrets
        .list(&Default::default())
        .await
        .expect_err("view must not list FederatedSecrets");
    assert!(
        is_forbidden(&refused),
        "403 for view's FederatedSecrets: {refused}"
    );

    // The control plane's objects are read-only, even for a namespace's admin.
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        alice.clone(),
        namespace,
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("core.kubefed.io", "v1beta1", "KubeFedCluster"),
            "kubefedclusters",
        ),
    );
    clusters
        .list(&Default::default())
        .await
        .context("admin lists KubeFedClusters")?;
    let cluster = serde_json::from_value(json!({
        "apiVersion": "core.kubefed.io/v1beta1",
        "kind": "KubeFedCluster",
        "metadata": {"name": "rogue"},
        "spec": {"apiEndpoint": "https://127.0.0.1:1", "secretRef": {"name": "rogue"}},
    }))?;
    let refused = clusters
        .create(&PostParams::default(), &cluster)
        .await
        .expect_err("a namespace admin must not join clusters");
    assert!(
        is_forbidden(&refused),
        "403 for admin's KubeFedCluster: {refused}"
    );

    // Turned off, the roles go and the built-in roles lose the rights.
    helm_on_hub(
        &env,
        &[
            "upgrade",
            "hubfed",
            chart,
            "--namespace",
            KUBEFED_NAMESPACE,
            "--set",
            "webhook.enabled=false",
            "--set",
            "rbac.aggregatedRoles.enabled=false",
        ],
    )?;
    wait_for("admin to lose the federated types", TIMEOUT, async || {
        let alice_creates = may(&alice, "create", "federateddeployments", namespace).await?;
        Ok(if alice_creates {
            Wait::Pending("alice may still create".into())
        } else {
            Wait::Done(())
        })
    })
    .await?;
    Ok(())
}
