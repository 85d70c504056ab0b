//! `hubfedctl` in process against a federation of the test binary's own, as the CLI tests
//! run it: the federation ([`cli_federation`]), one run's outcome ([`HubfedctlRun`]), a join
//! that must end Ready ([`join_ready`]).

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::{Federation, PrivateFederation, fast_health_checks, report, unique_name};
use anyhow::{Context as _, ensure};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Client;
use kube::api::{Api, PostParams};
use kube::config::{
    AuthInfo, Context as KubeContext, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};
use kube::discovery::ApiResource;
use serde_json::json;

/// A private hub + 2 members with the CRDs, the default FTCs, a KubeFedConfig probing health
/// every second (so joins are Ready quickly) and a running controller, and nothing joined.
pub fn cli_federation() -> &'static Federation {
    PrivateFederation::new()
        .config(fast_health_checks())
        .unjoined()
        .shared()
}

/// What one hubfedctl run printed and returned.
#[derive(Debug)]
pub struct HubfedctlRun {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl HubfedctlRun {
    /// Exit 0, or fail with everything it printed.
    pub fn ok(self) -> anyhow::Result<Self> {
        ensure!(self.code == 0, "hubfedctl failed: {self:#?}");
        Ok(self)
    }

    /// Exit `code` with exactly one stderr line, `error: ...` containing `expected`.
    pub fn fails_with(&self, code: i32, expected: &str) -> anyhow::Result<()> {
        let lines: Vec<&str> = self.stderr.lines().collect();
        ensure!(
            self.code == code,
            "exit code {} instead of {code}: {self:#?}",
            self.code
        );
        ensure!(
            lines.len() == 1 && lines[0].starts_with("error: "),
            "stderr is not one error line: {self:#?}"
        );
        ensure!(
            lines[0].contains(expected),
            "the error does not say {expected:?}: {self:#?}"
        );
        ensure!(
            !self.stderr.contains("panicked") && !self.stderr.contains("backtrace"),
            "{self:#?}"
        );
        Ok(())
    }
}

/// Runs `hubfedctl --kubeconfig <kubeconfig> --host-cluster-context hub <args>`.
pub async fn run_hubfedctl(kubeconfig: &Path, args: &[&str]) -> HubfedctlRun {
    let (code, stdout, stderr) = crate::hubfedctl(kubeconfig, args).await;
    HubfedctlRun {
        code,
        stdout,
        stderr,
    }
}

/// The type `kind` (plural `plural`) of API group `group` (the core group when empty).
pub fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
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

/// Creates ConfigMap `namespace/name` in the hub holding `data`, annotated `team: storefront`
/// and with a stale `last-applied-configuration` (what `federate` must drop).
pub async fn create_configmap(
    hub: &Client,
    namespace: &str,
    name: &str,
    data: &[(&str, &str)],
) -> anyhow::Result<()> {
    let object: ConfigMap = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "annotations": {
                "team": "storefront",
                "kubectl.kubernetes.io/last-applied-configuration": "{\"stale\":true}",
            },
        },
        "data": data.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect::<serde_json::Map<_, _>>(),
    }))?;
    Api::<ConfigMap>::namespaced(hub.clone(), namespace)
        .create(&PostParams::default(), &object)
        .await
        .with_context(|| format!("creating configmap {namespace}/{name}"))?;
    Ok(())
}

/// Joins `cluster` (context of the same name) and checks it is reported Ready.
pub async fn join_ready(kubeconfig: &Path, cluster: &str) -> anyhow::Result<()> {
    let began = Instant::now();
    let run = run_hubfedctl(kubeconfig, &["join", cluster]).await.ok()?;
    ensure!(
        run.stdout
            .contains(&format!("cluster \"{cluster}\" joined and Ready")),
        "join did not report Ready: {run:#?}"
    );
    report(format_args!(
        "hubfedctl join {cluster}: Ready in {:.1}s",
        began.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// Waits until the hub's authorizer grants `user` the list of KubeFedClusters: a new
/// binding takes effect once the API server's RBAC cache has seen it, a moment after its
/// creation, and a command run before would be refused for a reason the test does not test.
async fn rights_in_effect(hub: &Client, user: &str) -> anyhow::Result<()> {
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {
            "user": user,
            "resourceAttributes": {
                "group": "core.kubefed.io", "resource": "kubefedclusters", "verb": "list",
                "namespace": "kube-federation-system",
            },
        },
    }))?;
    let reviews: Api<SubjectAccessReview> = Api::all(hub.clone());
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let answer = reviews.create(&PostParams::default(), &review).await?;
        if answer.status.is_some_and(|s| s.allowed) {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "{user}'s binding not in effect after 30s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A kubeconfig with the test clusters plus broken contexts: `dead` (nothing listens),
/// `nobody` (a token without rights on the hub), `bogus` (a token the hub rejects), and
/// `no-list` (may change FederatedTypeConfigs and delete CRDs, but not list federated
/// objects).
pub async fn troubled_kubeconfig(fixture: &Federation, hub: &Client) -> anyhow::Result<PathBuf> {
    let name = unique_name("nobody");
    let token = hub_token(hub, &name).await?;
    let no_list = unique_name("no-list");
    let no_list_token = hub_token(hub, &no_list).await?;
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": no_list},
        "rules": [
            {"apiGroups": ["core.kubefed.io"], "resources": ["federatedtypeconfigs"],
             "verbs": ["get", "list", "watch", "patch", "update", "delete"]},
            {"apiGroups": ["core.kubefed.io"], "resources": ["kubefedclusters", "kubefedconfigs"],
             "verbs": ["get", "list"]},
            {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
             "verbs": ["get", "list", "delete"]},
        ],
    }))?;
    Api::<ClusterRole>::all(hub.clone())
        .create(&PostParams::default(), &role)
        .await?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": no_list},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": no_list},
        "subjects": [{"kind": "ServiceAccount", "name": no_list, "namespace": "default"}],
    }))?;
    Api::<ClusterRoleBinding>::all(hub.clone())
        .create(&PostParams::default(), &binding)
        .await?;
    rights_in_effect(hub, &format!("system:serviceaccount:default:{no_list}")).await?;
    let mut config = Kubeconfig::read_from(fixture.kubeconfig())?;
    let free_port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    config.clusters.push(NamedCluster {
        name: "dead".to_owned(),
        cluster: Some(kube::config::Cluster {
            server: Some(format!("https://127.0.0.1:{free_port}")),
            insecure_skip_tls_verify: Some(true),
            ..Default::default()
        }),
        other: Default::default(),
    });
    for (user, token) in [
        ("nobody", token),
        ("bogus", "not-a-token".to_owned()),
        ("no-list", no_list_token),
    ] {
        config.auth_infos.push(NamedAuthInfo {
            name: user.to_owned(),
            auth_info: Some(AuthInfo {
                token: Some(token.into()),
                ..Default::default()
            }),
            other: Default::default(),
        });
    }
    for (context, cluster, user) in [
        ("dead", "dead", "hub-admin"),
        ("nobody", "hub", "nobody"),
        ("bogus", "hub", "bogus"),
        ("no-list", "hub", "no-list"),
    ] {
        config.contexts.push(NamedContext {
            name: context.to_owned(),
            context: Some(KubeContext {
                cluster: cluster.to_owned(),
                user: Some(user.to_owned()),
                ..Default::default()
            }),
            other: Default::default(),
        });
    }
    let path = fixture.env().dir().join(format!("{name}.kubeconfig"));
    std::fs::write(&path, serde_json::to_string(&config)?)?;
    Ok(path)
}

/// A token of a new ServiceAccount `name` in the hub's `default` namespace.
async fn hub_token(hub: &Client, name: &str) -> anyhow::Result<String> {
    let accounts: Api<ServiceAccount> = Api::namespaced(hub.clone(), "default");
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}}))?,
        )
        .await?;
    accounts
        .create_token_request(
            name,
            &PostParams::default(),
            &TokenRequest {
                spec: Some(TokenRequestSpec {
                    expiration_seconds: Some(3600),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await?
        .status
        .and_then(|status| status.token)
        .context("no token")
}
