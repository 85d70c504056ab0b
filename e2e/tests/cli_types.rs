//! `hubfedctl` on types and objects, in process against its own clusters and controller
//! (nothing joined but what a test joins): `enable` of a CRD type and `federate` of its
//! objects, `enable` of a built-in type with its OpenAPI schema, `federate --contents`,
//! offline `federate -f`.

use anyhow::{Context as _, bail, ensure};
use hubfed_api::federatedtypeconfig::FederatedTypeConfig;
use hubfed_e2e::cli::{
    cli_federation, create_configmap, resource, run_hubfedctl, troubled_kubeconfig,
};
use hubfed_e2e::{
    KUBEFED_NAMESPACE, TIMEOUT, Wait, create_hub_namespace, dynamic_api, federated, get_value,
    install_crds, unique_name, unique_ns, wait_for,
};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

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
    let fixture = cli_federation();
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
    let printed = run_hubfedctl(kubeconfig, &["enable", "widget", "-o", "json"])
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

    let run = run_hubfedctl(kubeconfig, &["enable", "widget"])
        .await
        .ok()?;
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

    let run = run_hubfedctl(kubeconfig, &["federate", "wdg", "gear", "-n", &ns])
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
    run_hubfedctl(kubeconfig, &["federate", "widget", "gear", "-n", &ns])
        .await
        .fails_with(1, "already exists")?;

    run_hubfedctl(kubeconfig, &["disable", "widgets", "--delete-crd"])
        .await
        .fails_with(1, "cannot delete CRD federatedwidgets.types.kubefed.io")?;
    ensure!(ftcs.get(&ftc_name).await?.spec.propagation.is_enabled());
    // A user who may delete the CRD but not list its objects: a refused list is no proof
    // that none exists (it was taken for one, and the CRD deleted with its objects).
    let restricted = troubled_kubeconfig(fixture, &hub).await?;
    run_hubfedctl(
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

    let run = run_hubfedctl(kubeconfig, &["disable", &ftc_name])
        .await
        .ok()?;
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
    let fixture = cli_federation();
    let kubeconfig = fixture.kubeconfig();
    let hub = fixture.client("hub").await?;

    let printed = run_hubfedctl(kubeconfig, &["enable", "deployments.apps", "-o", "json"])
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

    let run = run_hubfedctl(kubeconfig, &["enable", "statefulsets.apps"])
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

    let run = run_hubfedctl(
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
    let fixture = cli_federation();
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

    let printed = run_hubfedctl(
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

    run_hubfedctl(kubeconfig, &["federate", "namespace", &ns, "--contents"])
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
    let yaml = run_hubfedctl(&missing, &["federate", "-f", &file_arg])
        .await
        .ok()?;
    ensure!(
        yaml.stdout
            .starts_with("apiVersion: types.kubefed.io/v1beta1\nkind: FederatedDeployment\n")
            && yaml.stdout.matches("\n---\n").count() == 2,
        "YAML is the default output: {yaml:#?}"
    );
    let run = run_hubfedctl(
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

    run_hubfedctl(&missing, &["federate", "-f", &file_arg])
        .await
        .fails_with(1, &format!("cannot read {file_arg}: "))
}
