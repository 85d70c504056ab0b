//! `hubfedctl join` and `unjoin` against real clusters, run in process through
//! `hubfedctl::run_async` (the code the binary runs): join with least privilege and
//! propagation through those credentials, idempotent re-join, unjoin with
//! `--remove-managed-resources`, the hub joined to itself.
//!
//! Not the shared harness federation: that one joins member1/member2 itself with admin-bound
//! accounts. This binary has its own clusters and controller with nothing joined, so the joins
//! made here are the only credentials the controller has. The other commands are in
//! `cli_types.rs` and `cli_errors.rs`.

use std::path::Path;

use anyhow::{Context as _, bail, ensure};
use hubfed_api::kubefedcluster::KubeFedCluster;
use hubfed_api::mcs::{ServiceExport, ServiceImport};
use hubfed_api::names::MANAGED_LABEL;
use hubfed_e2e::cli::{cli_federation, create_configmap, join_ready, resource, run_hubfedctl};
use hubfed_e2e::{
    Expected, Federation, KUBEFED_NAMESPACE, TIMEOUT, Wait, create_hub_namespace, dynamic_api,
    federated, get_value, is_managed, target, unique_ns, wait_for, wait_propagated,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::config::AuthInfo;
use kube::discovery::ApiResource;
use serde_json::{Value, json};

/// Multi-cluster services through the least-privilege join grant alone: a Service exported
/// in member1 is imported in member2, its ClusterSet IP allocated there.
async fn mcs_through_joined_credentials(fixture: &Federation, ns: &str) -> anyhow::Result<()> {
    let member1 = fixture.client("member1").await?;
    let service: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
        "metadata": {"name": "api", "namespace": ns},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
    }))?;
    Api::namespaced(member1.clone(), ns)
        .create(&PostParams::default(), &service)
        .await?;
    let export: ServiceExport =
        serde_json::from_value(json!({"metadata": {"name": "api", "namespace": ns}}))?;
    Api::namespaced(member1, ns)
        .create(&PostParams::default(), &export)
        .await?;
    let imports: Api<ServiceImport> = Api::namespaced(fixture.client("member2").await?, ns);
    wait_for(
        "member2's ServiceImport of member1's export, with an IP",
        TIMEOUT,
        async || {
            Ok(match imports.get_opt("api").await? {
                Some(import) if !import.properties().ips.is_empty() => Wait::Done(()),
                other => Wait::Pending(format!("{other:?}")),
            })
        },
    )
    .await
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
    let fixture = cli_federation();
    let kubeconfig = fixture.kubeconfig();
    let hub = fixture.client("hub").await?;
    join_ready(kubeconfig, "member1").await?;
    join_ready(kubeconfig, "member2").await?;

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
    let run = run_hubfedctl(kubeconfig, &["federate", "namespace", &ns, "--contents"])
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
    let apis = members.map(|(name, client)| (name, dynamic_api(client, &configmaps, Some(&ns))));
    let (blue, storefront) = (json!("blue"), json!("storefront"));
    let copies = Expected::each(
        apis.iter().map(|(name, api)| (*name, api)),
        &[
            ("/data/color", Some(&blue)),
            ("/metadata/annotations/team", Some(&storefront)),
        ],
    );
    wait_propagated(
        "the ConfigMap in both members through the joined credentials",
        &fcm,
        "settings",
        &["member1", "member2"],
        &copies,
    )
    .await?;

    // Re-join: refused by default, an update with --error-on-existing=false.
    run_hubfedctl(kubeconfig, &["join", "member1"])
        .await
        .fails_with(1, "cluster \"member1\" is already joined")?;
    let run = run_hubfedctl(
        kubeconfig,
        &["join", "member1", "--error-on-existing=false"],
    )
    .await
    .ok()?;
    ensure!(run.stdout.contains("joined and Ready"), "{run:#?}");
    // The MCS and About CRDs, installed by the first join, are hubfed's own: applied again.
    let crds: Api<CustomResourceDefinition> = Api::all(fixture.client("member1").await?);
    for crd in [
        "serviceexports.multicluster.x-k8s.io",
        "serviceimports.multicluster.x-k8s.io",
        "clusterproperties.about.k8s.io",
    ] {
        ensure!(
            crds.get_opt(crd).await?.is_some(),
            "join did not install {crd}"
        );
        ensure!(
            run.stdout.contains(&format!(
                "member1: customresourcedefinition {crd} unchanged"
            )),
            "{run:#?}"
        );
    }
    // Not the ClusterRole: another test may enable a type meanwhile, which widens it.
    ensure!(
        run.stdout
            .contains("member1: serviceaccount kube-federation-system/member1-hub unchanged"),
        "{run:#?}"
    );

    mcs_through_joined_credentials(fixture, &ns).await?;

    let table = run_hubfedctl(kubeconfig, &["get", "clusters"]).await.ok()?;
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
    let json_out = run_hubfedctl(kubeconfig, &["get", "clusters", "member1", "-o", "json"])
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
    let run = run_hubfedctl(
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
    let run = run_hubfedctl(kubeconfig, &["join", "hub", "--cluster-context", "hub"])
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
    let run = run_hubfedctl(kubeconfig, &["unjoin", "hub", "--remove-managed-resources"])
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
