//! `hubfedctl` against real clusters, run in process through `hubfedctl::run_async` (the code
//! the binary runs): join with least privilege and propagation through those credentials,
//! idempotent re-join, unjoin with `--remove-managed-resources`, the hub joined to itself,
//! `enable` of a CRD type and `federate` of its objects, `enable` of a built-in type with its
//! OpenAPI schema, `federate --contents`, offline `federate -f`, and the one-line error of
//! each bad input.
//!
//! Not the shared harness federation: that one joins member1/member2 itself with admin-bound
//! accounts. This binary has its own clusters and controller with nothing joined, so the joins
//! made here are the only credentials the controller has.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, bail, ensure};
use hubfed_api::federatedtypeconfig::FederatedTypeConfig;
use hubfed_api::kubefedcluster::KubeFedCluster;
use hubfed_api::names::MANAGED_LABEL;
use hubfed_e2e::{
    Federation, KUBEFED_NAMESPACE, PrivateFederation, TIMEOUT, Wait, create_hub_namespace,
    dynamic_api, fast_health_checks, federated, get_value, install_crds, is_managed,
    member_mismatch, propagated_ok, report, target, unique_name, unique_ns, wait_for,
};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::{
    AuthInfo, Context as KubeContext, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

/// A private hub + 2 members with the CRDs, the default FTCs, a KubeFedConfig probing health
/// every second (so joins are Ready quickly) and a running controller, and nothing joined.
fn cli_env() -> &'static Federation {
    PrivateFederation::new()
        .config(fast_health_checks())
        .unjoined()
        .shared()
}

/// What one hubfedctl run printed and returned.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Exit 0, or fail with everything it printed.
    fn ok(self) -> anyhow::Result<Self> {
        ensure!(self.code == 0, "hubfedctl failed: {self:#?}");
        Ok(self)
    }

    /// Exit `code` with exactly one stderr line, `error: ...` containing `expected`.
    fn fails_with(&self, code: i32, expected: &str) -> anyhow::Result<()> {
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
async fn hubfedctl(kubeconfig: &Path, args: &[&str]) -> Run {
    let (code, stdout, stderr) = hubfed_e2e::hubfedctl(kubeconfig, args).await;
    Run {
        code,
        stdout,
        stderr,
    }
}

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

async fn create_configmap(
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
async fn join(kubeconfig: &Path, cluster: &str) -> anyhow::Result<()> {
    let began = Instant::now();
    let run = hubfedctl(kubeconfig, &["join", cluster]).await.ok()?;
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

/// The member's join artifacts that exist: (kind, name).
async fn join_artifacts(member: &Client, sa: &str) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    let role = format!("kubefed-controller-manager:{sa}");
    if Api::<ServiceAccount>::namespaced(member.clone(), KUBEFED_NAMESPACE)
        .get_opt(sa)
        .await?
        .is_some()
    {
        found.push(format!("serviceaccount {sa}"));
    }
    if Api::<Secret>::namespaced(member.clone(), KUBEFED_NAMESPACE)
        .get_opt(sa)
        .await?
        .is_some()
    {
        found.push(format!("secret {sa}"));
    }
    if Api::<ClusterRole>::all(member.clone())
        .get_opt(&role)
        .await?
        .is_some()
    {
        found.push(format!("clusterrole {role}"));
    }
    if Api::<ClusterRoleBinding>::all(member.clone())
        .get_opt(&role)
        .await?
        .is_some()
    {
        found.push(format!("clusterrolebinding {role}"));
    }
    Ok(found)
}

/// A client of `cluster` that authenticates with the token join stored in the hub.
async fn client_with_joined_token(
    fixture: &Federation,
    hub: &Client,
    cluster: &str,
) -> anyhow::Result<Client> {
    let registered = Api::<KubeFedCluster>::namespaced(hub.clone(), KUBEFED_NAMESPACE)
        .get(cluster)
        .await?;
    let secret = Api::<Secret>::namespaced(hub.clone(), KUBEFED_NAMESPACE)
        .get(&registered.spec.secret_ref.name)
        .await?;
    let token = secret
        .data
        .and_then(|d| d.get("token").cloned())
        .context("the hub secret has no token")?;
    let token = String::from_utf8(token.0)?;
    let member = fixture.cluster(cluster)?;
    let ca = registered.spec.ca_bundle.context("no caBundle")?;
    ensure!(
        ca.0 == member.ca_pem().as_bytes(),
        "caBundle is not {cluster}'s CA"
    );
    ensure!(registered.spec.api_endpoint == member.server_url());
    let mut config = kube::Config::new(member.server_url().parse()?);
    config.root_cert = Some(pem_to_der(member.ca_pem())?);
    config.auth_info = AuthInfo {
        token: Some(token.into()),
        ..AuthInfo::default()
    };
    Ok(Client::try_from(config)?)
}

fn pem_to_der(pem: &str) -> anyhow::Result<Vec<Vec<u8>>> {
    use base64::Engine as _;
    let mut certificates = Vec::new();
    let mut body = String::new();
    for line in pem.lines() {
        if line.starts_with("-----BEGIN") {
            body.clear();
        } else if line.starts_with("-----END") {
            certificates.push(base64::engine::general_purpose::STANDARD.decode(&body)?);
        } else {
            body.push_str(line.trim());
        }
    }
    Ok(certificates)
}

/// Objects of `resource` labelled managed in `member`, as `ns/name`.
async fn managed_objects(member: &Client, resource: &ApiResource) -> anyhow::Result<Vec<String>> {
    let api: Api<DynamicObject> = Api::all_with(member.clone(), resource);
    let list = api
        .list_metadata(&ListParams::default().labels(&format!("{MANAGED_LABEL}=true")))
        .await?;
    Ok(list
        .items
        .into_iter()
        .map(|o| {
            format!(
                "{}/{}",
                o.metadata.namespace.unwrap_or_default(),
                o.metadata.name.unwrap_or_default()
            )
        })
        .collect())
}

/// Join both members with least privilege; a namespace and its ConfigMap federated with
/// `federate --contents` reach both through the joined credentials; re-join; `get clusters`;
/// `unjoin --remove-managed-resources` leaves nothing behind in member2; the hub joins itself
/// and unjoins without losing its own namespaces or objects.
#[tokio::test]
async fn join_least_privilege_propagate_and_unjoin() -> anyhow::Result<()> {
    let fixture = cli_env();
    let kubeconfig = fixture.kubeconfig();
    let hub = fixture.client("hub").await?;
    join(kubeconfig, "member1").await?;
    join(kubeconfig, "member2").await?;

    // What join granted: exactly the federated types, and the controller holds only that.
    let member1 = fixture.client("member1").await?;
    let role = Api::<ClusterRole>::all(member1.clone())
        .get("kubefed-controller-manager:member1-hub")
        .await?;
    let rules = serde_json::to_value(&role.rules)?;
    ensure!(
        !rules.to_string().contains("\"*\""),
        "least-privilege rules contain a wildcard: {rules}"
    );
    ensure!(
        rules.to_string().contains("configmaps") && rules.to_string().contains("/healthz"),
        "rules lack configmaps or /healthz: {rules}"
    );
    let joined = client_with_joined_token(fixture, &hub, "member1").await?;
    // Not a federated type, and not read by hubfed (pods are: the RSP scheduler counts the
    // pods of federated Deployments, read-only).
    let pvcs: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> = Api::all(joined.clone());
    match pvcs.list_metadata(&ListParams::default().limit(1)).await {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        other => bail!(
            "the joined token may list persistentvolumeclaims (not a federated type): {other:?}"
        ),
    }
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::all(joined.clone());
    let pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "probe", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "pause"}]},
    }))?;
    match Api::<k8s_openapi::api::core::v1::Pod>::namespaced(joined.clone(), "default")
        .create(
            &kube::api::PostParams {
                dry_run: true,
                ..Default::default()
            },
            &pod,
        )
        .await
    {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        other => bail!("the joined token may create pods (it may only read them): {other:?}"),
    }
    pods.list_metadata(&ListParams::default().limit(1))
        .await
        .context("the joined token reads pods (Deployments are federated)")?;
    Api::<ConfigMap>::all(joined)
        .list_metadata(&ListParams::default().limit(1))
        .await
        .context("the joined token cannot list configmaps")?;

    // Propagation through those credentials.
    let ns = unique_ns("cli");
    create_hub_namespace(&hub, &ns).await?;
    create_configmap(&hub, &ns, "settings", &[("color", "blue")]).await?;
    let run = hubfedctl(kubeconfig, &["federate", "namespace", &ns, "--contents"])
        .await
        .ok()?;
    ensure!(
        run.stdout
            .contains(&format!("federatedconfigmap {ns}/settings created")),
        "{run:#?}"
    );
    let fcm = dynamic_api(hub.clone(), &federated("ConfigMap"), Some(&ns));
    let configmaps = target("ConfigMap");
    let members = [
        ("member1", fixture.client("member1").await?),
        ("member2", fixture.client("member2").await?),
    ];
    wait_for(
        "the ConfigMap in both members through the joined credentials",
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            for (name, client) in &members {
                let api = dynamic_api(client.clone(), &configmaps, Some(&ns));
                let found = get_value(&api, "settings").await?;
                problems.extend(member_mismatch(
                    name,
                    found.as_ref(),
                    &[
                        ("/data/color", Some(&json!("blue"))),
                        ("/metadata/annotations/team", Some(&json!("storefront"))),
                    ],
                ));
            }
            let object = get_value(&fcm, "settings")
                .await?
                .context("FederatedConfigMap gone")?;
            if let Wait::Pending(p) = propagated_ok(&object, &["member1", "member2"]) {
                problems.push(p);
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;

    // Re-join: refused by default, an update with --error-on-existing=false.
    hubfedctl(kubeconfig, &["join", "member1"])
        .await
        .fails_with(1, "cluster \"member1\" is already joined")?;
    let run = hubfedctl(
        kubeconfig,
        &["join", "member1", "--error-on-existing=false"],
    )
    .await
    .ok()?;
    ensure!(run.stdout.contains("joined and Ready"), "{run:#?}");
    // Not the ClusterRole: another test may enable a type meanwhile, which widens it.
    ensure!(
        run.stdout
            .contains("member1: serviceaccount kube-federation-system/member1-hub unchanged"),
        "{run:#?}"
    );

    let table = hubfedctl(kubeconfig, &["get", "clusters"]).await.ok()?;
    let rows: Vec<Vec<&str>> = table
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    ensure!(
        rows.first() == Some(&vec!["NAME", "READY", "VERSION", "AGE"]),
        "{table:#?}"
    );
    for name in ["member1", "member2"] {
        ensure!(
            rows.iter()
                .any(|r| r.first() == Some(&name) && r.get(1) == Some(&"True")),
            "{name} is not listed Ready: {table:#?}"
        );
    }
    let json_out = hubfedctl(kubeconfig, &["get", "clusters", "member1", "-o", "json"])
        .await
        .ok()?;
    let parsed: Value = serde_json::from_str(&json_out.stdout)?;
    ensure!(
        parsed["kind"] == "KubeFedCluster" && parsed["metadata"]["name"] == "member1",
        "{json_out:#?}"
    );
    ensure!(parsed["metadata"].get("managedFields").is_none());

    // Another control plane's copy in member2 (the managed label is shared; its proof of
    // ownership is not this control plane's): unjoin must leave it (issue 9).
    let member2 = fixture.client("member2").await?;
    let foreign_ns = "other-control-plane";
    Api::<Namespace>::all(member2.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": foreign_ns}}))?,
        )
        .await?;
    let foreign: ConfigMap = serde_json::from_value(json!({"metadata": {
        "name": "theirs",
        "labels": {MANAGED_LABEL: "true"},
        "annotations": {hubfed_api::names::OWNER_ANNOTATION: "another-plane/some-uid"},
    }}))?;
    let foreign_api: Api<ConfigMap> = Api::namespaced(member2.clone(), foreign_ns);
    foreign_api.create(&PostParams::default(), &foreign).await?;

    // Unjoin member2 with everything hubfed put there.
    let run = hubfedctl(
        kubeconfig,
        &["unjoin", "member2", "--remove-managed-resources"],
    )
    .await
    .ok()?;
    ensure!(
        run.stdout.contains("cluster \"member2\" unjoined"),
        "{run:#?}"
    );
    ensure!(
        run.stderr
            .contains("1 objects in member2 labelled kubefed.io/managed=true were left")
            || run
                .stdout
                .contains("1 objects in member2 labelled kubefed.io/managed=true were left"),
        "{run:#?}"
    );
    let namespaces_resource = resource("", "v1", "Namespace", "namespaces");
    wait_for(
        "no managed object and no join artifact left in member2",
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            for resource in [&configmaps, &namespaces_resource] {
                let mut left = managed_objects(&member2, resource).await?;
                left.retain(|name| name != "other-control-plane/theirs");
                if !left.is_empty() {
                    problems.push(format!("managed {}: {left:?}", resource.plural));
                }
            }
            let artifacts = join_artifacts(&member2, "member2-hub").await?;
            if !artifacts.is_empty() {
                problems.push(format!("join artifacts {artifacts:?}"));
            }
            if Api::<Namespace>::all(member2.clone())
                .get_opt(KUBEFED_NAMESPACE)
                .await?
                .is_some()
            {
                problems.push(format!("namespace {KUBEFED_NAMESPACE} still exists"));
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;
    ensure!(
        Api::<KubeFedCluster>::namespaced(hub.clone(), KUBEFED_NAMESPACE)
            .get_opt("member2")
            .await?
            .is_none(),
        "the KubeFedCluster member2 is still in the hub"
    );
    ensure!(
        foreign_api.get_opt("theirs").await?.is_some(),
        "unjoin deleted another control plane's copy"
    );
    // member1 is untouched.
    ensure!(
        !join_artifacts(&member1, "member1-hub").await?.is_empty(),
        "member1 lost its join artifacts"
    );
    let member1_copy = get_value(
        &dynamic_api(member1.clone(), &configmaps, Some(&ns)),
        "settings",
    )
    .await?;
    ensure!(
        member1_copy.as_ref().is_some_and(is_managed),
        "member1's copy is gone: {member1_copy:?}"
    );

    hub_joins_itself(kubeconfig, &hub, &ns).await
}

/// The hub joined as a member of itself, then unjoined with --remove-managed-resources: its
/// own namespace and objects stay (only unlabelled), and so does its control-plane namespace.
async fn hub_joins_itself(kubeconfig: &Path, hub: &Client, ns: &str) -> anyhow::Result<()> {
    let run = hubfedctl(kubeconfig, &["join", "hub", "--cluster-context", "hub"])
        .await
        .ok()?;
    ensure!(run.stdout.contains("joined and Ready"), "{run:#?}");
    let namespaces: Api<Namespace> = Api::all(hub.clone());
    let configmaps: Api<ConfigMap> = Api::namespaced(hub.clone(), ns);
    wait_for(
        "the hub's own namespace and ConfigMap adopted (labelled managed)",
        TIMEOUT,
        async || {
            let ns_managed = namespaces
                .get_opt(ns)
                .await?
                .map(serde_json::to_value)
                .transpose()?
                .is_some_and(|v| is_managed(&v));
            let cm_managed = configmaps
                .get_opt("settings")
                .await?
                .map(serde_json::to_value)
                .transpose()?
                .is_some_and(|v| is_managed(&v));
            Ok(if ns_managed && cm_managed {
                Wait::Done(())
            } else {
                Wait::Pending(format!(
                    "namespace managed {ns_managed}, configmap managed {cm_managed}"
                ))
            })
        },
    )
    .await?;
    let run = hubfedctl(kubeconfig, &["unjoin", "hub", "--remove-managed-resources"])
        .await
        .ok()?;
    ensure!(run.stdout.contains("cluster \"hub\" unjoined"), "{run:#?}");
    let own = namespaces
        .get(ns)
        .await
        .context("the hub's namespace was deleted")?;
    ensure!(
        own.metadata.deletion_timestamp.is_none(),
        "the hub's namespace is terminating"
    );
    ensure!(
        !is_managed(&serde_json::to_value(&own)?),
        "still labelled: {own:?}"
    );
    let cm = configmaps
        .get("settings")
        .await
        .context("the hub's own ConfigMap was deleted")?;
    ensure!(
        !is_managed(&serde_json::to_value(&cm)?),
        "still labelled: {cm:?}"
    );
    let control_plane = namespaces.get(KUBEFED_NAMESPACE).await?;
    ensure!(
        control_plane.metadata.deletion_timestamp.is_none(),
        "unjoining the hub deleted its control-plane namespace"
    );
    ensure!(
        join_artifacts(hub, "hub-hub").await?.is_empty(),
        "the hub's join artifacts are left"
    );
    Ok(())
}

const WIDGET_CRD_GROUP: &str = "example.hubfed.io";

fn widget_crd() -> anyhow::Result<CustomResourceDefinition> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{WIDGET_CRD_GROUP}")},
        "spec": {
            "group": WIDGET_CRD_GROUP,
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "shortNames": ["wdg"]},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["size"],
                            "properties": {
                                "size": {"type": "string"},
                                "replicas": {"type": "integer", "format": "int32"},
                            },
                        },
                        "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
                    },
                }},
            }],
        },
    }))?)
}

/// `enable` of a CRD type (by its singular name) creates the FTC and a Federated<Kind> CRD
/// whose template carries the target's schema; `federate` (by short name) turns an existing
/// object into a federated one; `disable --delete-crd` refuses while objects exist;
/// `disable` removes the FTC.
#[tokio::test]
async fn enable_a_crd_type_and_federate_an_object_of_it() -> anyhow::Result<()> {
    let fixture = cli_env();
    let kubeconfig = fixture.kubeconfig();
    let hub = fixture.client("hub").await?;
    install_crds(&hub, &[widget_crd()?]).await?;
    let ns = unique_ns("widgets");
    create_hub_namespace(&hub, &ns).await?;
    let widgets = dynamic_api(
        hub.clone(),
        &resource(WIDGET_CRD_GROUP, "v1", "Widget", "widgets"),
        Some(&ns),
    );
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{WIDGET_CRD_GROUP}/v1"),
        "kind": "Widget",
        "metadata": {
            "name": "gear",
            "labels": {"app": "shop"},
            "annotations": {"owner": "team-a", "kubectl.kubernetes.io/last-applied-configuration": "{}"},
        },
        "spec": {"size": "large", "replicas": 3},
    }))?;
    widgets.create(&PostParams::default(), &widget).await?;
    widgets
        .patch_status(
            "gear",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}})),
        )
        .await?;

    let ftc_name = format!("widgets.{WIDGET_CRD_GROUP}");
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let printed = hubfedctl(kubeconfig, &["enable", "widget", "-o", "json"])
        .await
        .ok()?;
    let printed: Value = serde_json::from_str(&printed.stdout)?;
    ensure!(
        printed["items"][0]["kind"] == "CustomResourceDefinition"
            && printed["items"][1]["kind"] == "FederatedTypeConfig",
        "{printed}"
    );
    ensure!(
        ftcs.get_opt(&ftc_name).await?.is_none(),
        "enable -o json wrote the FTC"
    );

    let run = hubfedctl(kubeconfig, &["enable", "widget"]).await.ok()?;
    ensure!(
        run.stdout.contains(&format!(
            "hub: federatedtypeconfig {KUBEFED_NAMESPACE}/{ftc_name} created"
        )),
        "{run:#?}"
    );
    let ftc = ftcs.get(&ftc_name).await?;
    ensure!(ftc.spec.federated_type.kind == "FederatedWidget");
    ensure!(ftc.spec.target_type.version == "v1" && ftc.spec.target_type.group == WIDGET_CRD_GROUP);
    let crd = Api::<CustomResourceDefinition>::all(hub.clone())
        .get("federatedwidgets.types.kubefed.io")
        .await?;
    let schema = serde_json::to_value(&crd.spec.versions[0].schema)?;
    let spec = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"];
    ensure!(
        spec["template"]["properties"]["spec"]["properties"]["size"]["type"] == "string",
        "the target schema is not in the template: {schema}"
    );
    ensure!(spec["retainReplicas"]["type"] == "boolean", "{schema}");
    ensure!(crd.spec.names.short_names == Some(vec!["fwdg".to_owned()]));

    let run = hubfedctl(kubeconfig, &["federate", "wdg", "gear", "-n", &ns])
        .await
        .ok()?;
    ensure!(
        run.stdout
            .contains(&format!("hub: federatedwidget {ns}/gear created")),
        "{run:#?}"
    );
    let fwidgets = dynamic_api(hub.clone(), &federated("Widget"), Some(&ns));
    let object = get_value(&fwidgets, "gear")
        .await?
        .context("no FederatedWidget")?;
    ensure!(
        object["spec"]["template"]
            == json!({
                "metadata": {"labels": {"app": "shop"}, "annotations": {"owner": "team-a"}},
                "spec": {"size": "large", "replicas": 3},
            }),
        "template: {}",
        object["spec"]["template"]
    );
    ensure!(
        object["spec"]["placement"] == json!({"clusterSelector": {"matchLabels": {}}}),
        "{object}"
    );
    hubfedctl(kubeconfig, &["federate", "widget", "gear", "-n", &ns])
        .await
        .fails_with(1, "already exists")?;

    hubfedctl(kubeconfig, &["disable", "widgets", "--delete-crd"])
        .await
        .fails_with(1, "cannot delete CRD federatedwidgets.types.kubefed.io")?;
    ensure!(ftcs.get(&ftc_name).await?.spec.propagation.is_enabled());
    // A user who may delete the CRD but not list its objects: a refused list is no proof
    // that none exists (it was taken for one, and the CRD deleted with its objects).
    let restricted = troubled_kubeconfig(fixture, &hub).await?;
    hubfedctl(
        &restricted,
        &[
            "disable",
            "widgets",
            "--delete-crd",
            "--host-cluster-context",
            "no-list",
        ],
    )
    .await
    .fails_with(1, "federatedwidgets.types.kubefed.io is forbidden")?;
    ensure!(ftcs.get(&ftc_name).await?.spec.propagation.is_enabled());
    Api::<CustomResourceDefinition>::all(hub.clone())
        .get("federatedwidgets.types.kubefed.io")
        .await
        .context("the federated CRD was deleted")?;

    let run = hubfedctl(kubeconfig, &["disable", &ftc_name]).await.ok()?;
    ensure!(run.stdout.contains("propagation disabled"), "{run:#?}");
    wait_for("the widgets FTC to be deleted", TIMEOUT, async || {
        Ok(match ftcs.get_opt(&ftc_name).await? {
            None => Wait::Done(()),
            Some(ftc) => Wait::Pending(format!("finalizers {:?}", ftc.metadata.finalizers)),
        })
    })
    .await
}

/// `enable` of a built-in type that is not a default one embeds the kind's schema from the
/// hub's OpenAPI v3 document in the template: the API server accepts the CRD, refuses
/// templates with wrongly typed fields, and keeps a correct template as written (no defaults,
/// nothing pruned, nulls in pod template metadata kept). Deployments, printed only so the
/// shared default CRD stays as it is, still offer `retainReplicas`.
#[tokio::test]
async fn enable_a_built_in_type_with_its_openapi_schema() -> anyhow::Result<()> {
    let fixture = cli_env();
    let kubeconfig = fixture.kubeconfig();
    let hub = fixture.client("hub").await?;

    let printed = hubfedctl(kubeconfig, &["enable", "deployments.apps", "-o", "json"])
        .await
        .ok()?;
    ensure!(!printed.stderr.contains("warning"), "{printed:#?}");
    let printed: Value = serde_json::from_str(&printed.stdout)?;
    let spec = &printed["items"][0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
        ["spec"]["properties"];
    ensure!(spec["retainReplicas"]["type"] == "boolean", "{spec}");
    let template = &spec["template"]["properties"];
    ensure!(
        template["spec"]["properties"]["replicas"]["type"] == "integer"
            && template["spec"]["properties"]["template"]["properties"]["spec"]["properties"]["containers"]
                ["items"]["properties"]["image"]["type"]
                == "string",
        "the Deployment schema is not in the template: {template}"
    );
    ensure!(template.get("status").is_none(), "{template}");

    let run = hubfedctl(kubeconfig, &["enable", "statefulsets.apps"])
        .await
        .ok()?;
    ensure!(
        run.stdout
            .contains("hub: customresourcedefinition federatedstatefulsets.types.kubefed.io")
            && !run.stderr.contains("warning"),
        "{run:#?}"
    );
    let crd = Api::<CustomResourceDefinition>::all(hub.clone())
        .get("federatedstatefulsets.types.kubefed.io")
        .await?;
    let established = crd
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        });
    ensure!(established, "the CRD is not Established: {:?}", crd.status);
    let schema = serde_json::to_value(&crd.spec.versions[0].schema)?;
    let spec = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"];
    let template = &spec["template"]["properties"];
    ensure!(
        template["spec"]["properties"]["replicas"]["type"] == "integer",
        "the StatefulSet schema is not in the template: {schema}"
    );
    ensure!(spec["retainReplicas"]["type"] == "boolean", "{schema}");

    let ns = unique_ns("statefulsets");
    create_hub_namespace(&hub, &ns).await?;
    let fsts = dynamic_api(hub.clone(), &federated("StatefulSet"), Some(&ns));
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let federated_sts = |template: &Value| -> anyhow::Result<DynamicObject> {
        Ok(serde_json::from_value(json!({
            "apiVersion": "types.kubefed.io/v1beta1",
            "kind": "FederatedStatefulSet",
            "metadata": {"name": "db"},
            "spec": {"template": template, "placement": {"clusters": []}},
        }))?)
    };
    let pod_spec = |port: Value| {
        json!({"containers": [{
            "name": "db",
            "image": "db:1",
            "ports": [{"containerPort": port}],
            "resources": {"limits": {"cpu": 1, "memory": "64Mi"}},
        }]})
    };
    for (field, template) in [
        (
            "spec.template.spec.replicas",
            json!({"spec": {"replicas": "three"}}),
        ),
        (
            "spec.template.spec.template.spec.containers[0].ports[0].containerPort",
            json!({"spec": {"template": {"spec": pod_spec(json!("http"))}}}),
        ),
        (
            "spec.template.spec.updateStrategy.rollingUpdate.maxUnavailable",
            json!({"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": true}}}}),
        ),
    ] {
        match fsts.create(&dry_run, &federated_sts(&template)?).await {
            Err(kube::Error::Api(status)) if status.code == 422 => ensure!(
                status.message.contains(field),
                "the refusal does not name {field}: {}",
                status.message
            ),
            other => bail!("a wrongly typed {field} was not refused: {other:?}"),
        }
    }

    let template = json!({
        "metadata": {"labels": {"app": "db"}},
        "spec": {
            "replicas": 2,
            "serviceName": "db",
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "50%"}},
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}, "creationTimestamp": null},
                "spec": pod_spec(json!(5432)),
            },
            "notYetKnown": {"kept": true},
        },
    });
    let created = fsts.create(&dry_run, &federated_sts(&template)?).await?;
    let created = serde_json::to_value(created)?;
    ensure!(
        created["spec"]["template"] == template,
        "the stored template differs from the one sent: {}",
        created["spec"]["template"]
    );

    let run = hubfedctl(
        kubeconfig,
        &["disable", "statefulsets.apps", "--delete-crd"],
    )
    .await
    .ok()?;
    ensure!(run.stdout.contains("propagation disabled"), "{run:#?}");
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    wait_for("the statefulsets FTC to be deleted", TIMEOUT, async || {
        Ok(match ftcs.get_opt("statefulsets.apps").await? {
            None => Wait::Done(()),
            Some(ftc) => Wait::Pending(format!("finalizers {:?}", ftc.metadata.finalizers)),
        })
    })
    .await
}

/// `federate namespace --contents`: the namespace and its objects of enabled types, without
/// what Kubernetes creates in every namespace or what belongs to one live object; `-o json`
/// writes nothing.
#[tokio::test]
async fn federate_a_namespace_with_its_contents() -> anyhow::Result<()> {
    let fixture = cli_env();
    let kubeconfig = fixture.kubeconfig();
    let hub = fixture.client("hub").await?;
    let ns = unique_ns("contents");
    create_hub_namespace(&hub, &ns).await?;
    create_configmap(&hub, &ns, "settings", &[("mode", "fast")]).await?;
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"type": "NodePort", "selector": {"app": "web"}, "ports": [{"port": 80}]},
    }))?;
    Api::<Service>::namespaced(hub.clone(), &ns)
        .create(&PostParams::default(), &service)
        .await?;
    let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "robot"}}))?;
    Api::<ServiceAccount>::namespaced(hub.clone(), &ns)
        .create(&PostParams::default(), &account)
        .await?;
    // Kubernetes' own kube-root-ca.crt and default ServiceAccount must exist before the run.
    let root_ca: Api<ConfigMap> = Api::namespaced(hub.clone(), &ns);
    wait_for(
        "kube-root-ca.crt and the default ServiceAccount",
        TIMEOUT,
        async || {
            let ca = root_ca.get_opt("kube-root-ca.crt").await?.is_some();
            let sa = Api::<ServiceAccount>::namespaced(hub.clone(), &ns)
                .get_opt("default")
                .await?
                .is_some();
            Ok(if ca && sa {
                Wait::Done(())
            } else {
                Wait::Pending(format!("kube-root-ca.crt {ca}, default sa {sa}"))
            })
        },
    )
    .await?;

    let printed = hubfedctl(
        kubeconfig,
        &["federate", "ns", &ns, "--contents", "-o", "json"],
    )
    .await
    .ok()?;
    let list: Value = serde_json::from_str(&printed.stdout)?;
    let mut names: Vec<String> = list["items"]
        .as_array()
        .context("no items")?
        .iter()
        .map(|o| {
            format!(
                "{} {}",
                o["kind"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect();
    names.sort();
    ensure!(
        names
            == [
                "FederatedConfigMap settings",
                format!("FederatedNamespace {ns}").as_str(),
                "FederatedService web",
                "FederatedServiceAccount robot",
            ],
        "federated objects: {names:?}; {printed:#?}"
    );
    ensure!(
        printed.stderr.contains("skipped configmap") && printed.stderr.contains("kube-root-ca.crt"),
        "{printed:#?}"
    );
    let service = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|o| o["kind"] == "FederatedService")
        .context("no FederatedService")?;
    let spec = &service["spec"]["template"]["spec"];
    ensure!(
        spec.get("clusterIP").is_none()
            && spec.get("clusterIPs").is_none()
            && spec["ports"][0].get("nodePort").is_none(),
        "allocated fields kept: {spec}"
    );
    let fns = dynamic_api(hub.clone(), &federated("Namespace"), Some(&ns));
    ensure!(
        get_value(&fns, &ns).await?.is_none(),
        "-o json created the FederatedNamespace"
    );

    hubfedctl(kubeconfig, &["federate", "namespace", &ns, "--contents"])
        .await
        .ok()?;
    for (kind, name) in [
        ("Namespace", ns.as_str()),
        ("ConfigMap", "settings"),
        ("Service", "web"),
        ("ServiceAccount", "robot"),
    ] {
        let api = dynamic_api(hub.clone(), &federated(kind), Some(&ns));
        ensure!(
            get_value(&api, name).await?.is_some(),
            "no Federated{kind} {ns}/{name}"
        );
    }
    let fcm = dynamic_api(hub.clone(), &federated("ConfigMap"), Some(&ns));
    ensure!(
        get_value(&fcm, "kube-root-ca.crt").await?.is_none(),
        "kube-root-ca.crt was federated"
    );
    Ok(())
}

/// `federate -f` converts a file without any cluster (the kubeconfig does not even exist).
#[tokio::test]
async fn federate_a_file_offline() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(unique_name(&format!("hubfedctl-{}", std::process::id())));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("app.yaml");
    std::fs::write(
        &file,
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  uid: 1b2c
  resourceVersion: "42"
  generation: 3
  creationTimestamp: "2024-01-01T00:00:00Z"
  labels: {app: web}
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: "{}"
    deployment.kubernetes.io/revision: "3"
    owner: team-a
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: nginx}]
status:
  replicas: 2
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: other}
spec:
  clusterIP: 10.0.0.9
  clusterIPs: [10.0.0.9]
  ports: [{port: 80}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reader}
rules: [{apiGroups: [""], resources: [pods], verbs: [get]}]
"#,
    )?;
    let missing = dir.join("no-kubeconfig");
    let file_arg = file.display().to_string();
    let yaml = hubfedctl(&missing, &["federate", "-f", &file_arg])
        .await
        .ok()?;
    ensure!(
        yaml.stdout
            .starts_with("apiVersion: types.kubefed.io/v1beta1\nkind: FederatedDeployment\n")
            && yaml.stdout.matches("\n---\n").count() == 2,
        "YAML is the default output: {yaml:#?}"
    );
    let run = hubfedctl(
        &missing,
        &["federate", "-f", &file_arg, "-n", "shop", "-o", "json"],
    )
    .await
    .ok()?;
    std::fs::remove_dir_all(&dir)?;
    let list: Value = serde_json::from_str(&run.stdout)?;
    let items = list["items"].as_array().context("no items")?;
    ensure!(items.len() == 3, "{run:#?}");
    ensure!(
        items[0]
            == json!({
                "apiVersion": "types.kubefed.io/v1beta1",
                "kind": "FederatedDeployment",
                "metadata": {"name": "web", "namespace": "shop"},
                "spec": {
                    "placement": {"clusterSelector": {"matchLabels": {}}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}, "annotations": {"owner": "team-a"}},
                        "spec": {
                            "replicas": 2,
                            "selector": {"matchLabels": {"app": "web"}},
                            "template": {
                                "metadata": {"labels": {"app": "web"}},
                                "spec": {"containers": [{"name": "web", "image": "nginx"}]},
                            },
                        },
                    },
                },
            }),
        "{}",
        items[0]
    );
    ensure!(items[1]["metadata"] == json!({"name": "web", "namespace": "other"}));
    ensure!(items[1]["spec"]["template"]["spec"] == json!({"ports": [{"port": 80}]}));
    ensure!(
        items[2]["kind"] == "FederatedClusterRole"
            && items[2]["metadata"] == json!({"name": "reader"}),
        "a cluster-scoped object got a namespace: {}",
        items[2]
    );

    hubfedctl(&missing, &["federate", "-f", &file_arg])
        .await
        .fails_with(1, &format!("cannot read {file_arg}: "))
}

/// A kubeconfig with the test clusters plus broken contexts: `dead` (nothing listens),
/// `nobody` (a token without rights on the hub), `bogus` (a token the hub rejects), and
/// `no-list` (may change FederatedTypeConfigs and delete CRDs, but not list federated
/// objects).
async fn troubled_kubeconfig(fixture: &Federation, hub: &Client) -> anyhow::Result<PathBuf> {
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

/// Every bad input ends in one `error: ...` line on stderr and the documented exit code.
#[tokio::test]
async fn bad_input_is_one_error_line_and_an_exit_code() -> anyhow::Result<()> {
    let fixture = cli_env();
    let hub = fixture.client("hub").await?;
    let kubeconfig = troubled_kubeconfig(fixture, &hub).await?;
    let kc = kubeconfig.as_path();
    let path = kc.display().to_string();
    let cases: Vec<(Vec<&str>, i32, String)> = vec![
        (
            vec!["join", "member9"],
            1,
            format!("cluster \"member9\": context \"member9\" not found in kubeconfig {path}"),
        ),
        (
            vec!["get", "clusters", "--host-cluster-context", "nope"],
            1,
            "hub cluster \"nope\": context \"nope\" not found".to_owned(),
        ),
        (
            vec!["join", "dead"],
            1,
            "cluster \"dead\": cannot reach https://127.0.0.1:".to_owned(),
        ),
        (
            vec!["enable", "nosuchtype"],
            1,
            "unknown type \"nosuchtype\": the hub cluster serves no such resource".to_owned(),
        ),
        (
            vec!["federate", "statefulsets", "web"],
            1,
            "type \"statefulsets.apps\" is not enabled for federation; run: hubfedctl enable statefulsets.apps".to_owned(),
        ),
        (
            vec!["federate", "configmap", "nope", "-n", "default"],
            1,
            "hub cluster \"hub\": configmap default/nope not found".to_owned(),
        ),
        (
            vec!["orphaning-deletion", "status", "configmaps", "nope", "-n", "default"],
            1,
            "federatedconfigmap default/nope not found".to_owned(),
        ),
        (
            vec!["unjoin", "member7", "--cluster-context", "member1"],
            1,
            "cluster \"member7\" is not joined".to_owned(),
        ),
        (
            vec!["get", "clusters", "--host-cluster-context", "nobody"],
            1,
            "hub cluster \"nobody\": permission denied: kubefedclusters.core.kubefed.io is forbidden".to_owned(),
        ),
        (
            vec!["get", "clusters", "--host-cluster-context", "bogus"],
            1,
            "hub cluster \"bogus\": the credentials were rejected (401 Unauthorized)".to_owned(),
        ),
        (
            vec!["federate", "configmap", "settings", "--contents"],
            2,
            "--contents only applies to namespaces".to_owned(),
        ),
        (
            vec!["join", "Member_1"],
            2,
            "cluster name \"Member_1\" is not a valid name".to_owned(),
        ),
        (vec!["join"], 2, "required arguments were not provided: <CLUSTER>".to_owned()),
        (vec!["bogus"], 2, "unrecognized subcommand 'bogus'".to_owned()),
        (
            vec!["federate", "-f", "x.yaml", "configmap", "x"],
            2,
            "cannot be used with".to_owned(),
        ),
    ];
    let mut failures = Vec::new();
    for (args, code, expected) in &cases {
        let run = hubfedctl(kc, args).await;
        if let Err(e) = run.fails_with(*code, expected) {
            failures.push(format!("hubfedctl {}: {e:#}", args.join(" ")));
        }
    }
    let missing = hubfedctl(Path::new("/nonexistent/kubeconfig"), &["get", "clusters"]).await;
    if let Err(e) = missing.fails_with(
        1,
        "cannot read kubeconfig /nonexistent/kubeconfig: no such file",
    ) {
        failures.push(format!("missing kubeconfig: {e:#}"));
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}
