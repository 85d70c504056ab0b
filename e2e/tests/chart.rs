//! The Helm chart `charts/hubfed`: it lints and renders with every option, ships exactly the
//! generated CRDs and default FederatedTypeConfigs, wires its webhooks to one consistent
//! certificate, grants no wildcard rights — and, the real proof, its RBAC alone is enough to
//! run the federation: a controller authenticated as the chart's ServiceAccount keeps two
//! members Ready and propagates a FederatedConfigMap to both. A real `helm install` and
//! `helm upgrade` against the test hub show that the KubeFedConfig and FederatedTypeConfigs
//! are seeded once and the webhook certificate survives upgrades.
//!
//! Needs `helm`: `HUBFED_HELM`, else the binary `hack/build-helm.sh` builds and caches. The
//! tests fail (never skip) without it.
//!
//! The proof does not use the harness's controller (it runs as cluster admin): this binary
//! starts its own, in the test, with a TokenRequest token of the chart's ServiceAccount.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail, ensure};
use base64::Engine as _;
use hubfed_api::federatedtypeconfig::FederatedTypeConfig;
use hubfed_api::kubefedconfig::KubeFedConfig;
use hubfed_api::names::MANAGED_LABEL;
use hubfed_api::propagatedversion::PropagatedVersion;
use hubfed_controller::ControllerConfig;
use hubfed_e2e::controller::ControllerTask;
use hubfed_e2e::{
    FIELD_MANAGER, KUBEFED_NAMESPACE, MEMBERS, TIMEOUT, Wait, create_federated,
    create_hub_namespace, dynamic_api, get_value, install_crds, member_mismatch, placement,
    propagated_ok, report, target, unique_ns, wait_for,
};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::authentication::v1::{SelfSubjectReview, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{AuthInfo, KubeConfigOptions};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::{Client, ResourceExt as _};
use serde::Deserialize as _;
use serde_json::{Value, json};

/// Release name of every render: objects are then named `hubfed`.
const RELEASE: &str = "hubfed";
/// KubeFed's leader-election lock name.
const LEASE: &str = "kubefed-controller-manager";
/// The webhook paths the controller serves (docs/kubefed-compatibility.md §6, plus hubfed's
/// `/validate-federated`).
const WEBHOOK_PATHS: [&str; 6] = [
    "/default-kubefedconfig",
    "/validate-federated",
    "/validate-federatedtypeconfigs",
    "/validate-kubefedcluster",
    "/validate-kubefedconfig",
    "/validate-placementpolicy",
];
/// Rendered kinds the proof applies to the hub: RBAC and the seeded control-plane objects. The
/// Deployment, Services and webhooks need pods, which the test clusters cannot run.
const APPLIED_KINDS: [&str; 7] = [
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "KubeFedConfig",
    "FederatedTypeConfig",
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ sits in the repository")
        .to_path_buf()
}

fn chart_dir() -> PathBuf {
    repo_root().join("charts/hubfed")
}

/// `HUBFED_HELM`, else the pinned release cached by `hack/build-helm.sh` (its version is read
/// from the script, the one place it is pinned).
fn helm_binary() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("HUBFED_HELM") {
        let path = PathBuf::from(path);
        ensure!(
            path.is_file(),
            "HUBFED_HELM={} is not a file",
            path.display()
        );
        return Ok(path);
    }
    let script = std::fs::read_to_string(repo_root().join("hack/build-helm.sh"))?;
    let version = script
        .lines()
        .find_map(|line| line.strip_prefix("V=${HELM_VERSION:-"))
        .and_then(|rest| rest.strip_suffix('}'))
        .context("hack/build-helm.sh no longer pins V=${HELM_VERSION:-<version>}")?;
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")))
        .context("neither XDG_CACHE_HOME nor HOME is set")?;
    let path = cache.join(format!(
        "hubfed/helm/v{}/helm",
        version.trim_start_matches('v')
    ));
    ensure!(
        path.is_file(),
        "helm is missing: no HUBFED_HELM and no {}. Build the pinned helm once with \
         `hack/build-helm.sh` (a few minutes; needs Go), or point HUBFED_HELM at a helm binary.",
        path.display()
    );
    Ok(path)
}

/// Runs helm; its standard output, or an error with its standard error.
fn helm(args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new(helm_binary()?)
        .args(args)
        .output()
        .context("running helm")?;
    let stdout = String::from_utf8(output.stdout)?;
    if !output.status.success() {
        bail!(
            "helm {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr),
            stdout
        );
    }
    Ok(stdout)
}

/// `helm template` of the chart in the control-plane namespace with `extra` arguments, as
/// JSON documents.
fn render(extra: &[&str]) -> anyhow::Result<Vec<Value>> {
    let chart = chart_dir();
    let chart = chart.to_str().context("chart path is UTF-8")?;
    let mut args = vec!["template", RELEASE, chart, "--namespace", KUBEFED_NAMESPACE];
    args.extend_from_slice(extra);
    parse_documents(&helm(&args)?)
}

fn parse_documents(text: &str) -> anyhow::Result<Vec<Value>> {
    let mut documents = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let value = Value::deserialize(document).context("rendered YAML")?;
        if !value.is_null() {
            documents.push(value);
        }
    }
    Ok(documents)
}

fn of_kind<'a>(documents: &'a [Value], kind: &str) -> Vec<&'a Value> {
    documents.iter().filter(|d| d["kind"] == kind).collect()
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[test]
fn chart_ships_the_generated_crds_and_default_ftcs() -> anyhow::Result<()> {
    let root = repo_root();
    for (copy, generated) in [
        ("charts/hubfed/crds/core.yaml", "crds/core.yaml"),
        (
            "charts/hubfed/crds/federated-types.yaml",
            "crds/federated-types.yaml",
        ),
        (
            "charts/hubfed/files/default-ftcs.yaml",
            "crds/default-ftcs.yaml",
        ),
    ] {
        let copy_text = std::fs::read_to_string(root.join(copy))?;
        let generated_text = std::fs::read_to_string(root.join(generated))?;
        ensure!(
            copy_text == generated_text,
            "{copy} differs from the generated {generated}: run `cp {generated} {copy}`"
        );
    }
    let mut shipped: Vec<String> = std::fs::read_dir(chart_dir().join("crds"))?
        .map(|entry| Ok(entry?.file_name().to_string_lossy().into_owned()))
        .collect::<anyhow::Result<_>>()?;
    shipped.sort();
    assert_eq!(
        shipped,
        ["core.yaml", "federated-types.yaml"],
        "charts/hubfed/crds/ holds exactly the generated CRD files"
    );
    Ok(())
}

#[test]
fn chart_readme_lists_every_value() -> anyhow::Result<()> {
    fn leaves(prefix: &str, value: &Value, readme: &str, missing: &mut Vec<String>) {
        if readme.contains(&format!("`{prefix}`")) {
            return;
        }
        match value.as_object() {
            Some(map) if !map.is_empty() => {
                for (key, child) in map {
                    let path = if prefix.is_empty() {
                        key.clone()
                    } else {
                        format!("{prefix}.{key}")
                    };
                    leaves(&path, child, readme, missing);
                }
            }
            _ => missing.push(prefix.to_owned()),
        }
    }
    let values: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(chart_dir().join("values.yaml"))?)?;
    let readme = std::fs::read_to_string(chart_dir().join("README.md"))?;
    let mut missing = Vec::new();
    leaves("", &values, &readme, &mut missing);
    assert!(
        missing.is_empty(),
        "charts/hubfed/README.md does not list {missing:?}"
    );
    Ok(())
}

#[test]
fn chart_lints_and_renders_every_option() -> anyhow::Result<()> {
    let chart = chart_dir();
    let chart = chart.to_str().context("chart path is UTF-8")?;
    helm(&["lint", "--strict", chart, "--namespace", KUBEFED_NAMESPACE])?;
    let variants: [&[&str]; 6] = [
        &[],
        &["--set", "webhook.certManager.enabled=true"],
        &[
            "--set",
            "webhook.certManager.enabled=true",
            "--set",
            "webhook.certManager.issuerRef.name=ca",
            "--set",
            "webhook.certManager.issuerRef.kind=ClusterIssuer",
        ],
        &[
            "--set",
            "serviceMonitor.enabled=true",
            "--set",
            "kubefedConfig.scope=Namespaced",
        ],
        &[
            "--set",
            "webhook.enabled=false",
            "--set",
            "kubefedConfig.create=false",
        ],
        &[
            "--set",
            "replicaCount=1",
            "--set",
            "controller.leaderElect=false",
        ],
    ];
    for variant in variants {
        let mut args = vec!["lint", "--strict", chart, "--namespace", KUBEFED_NAMESPACE];
        args.extend_from_slice(variant);
        helm(&args)?;
        let documents = render(variant)?;
        ensure!(
            of_kind(&documents, "Deployment").len() == 1,
            "{variant:?}: one Deployment"
        );
    }
    let error = render(&["--set", "controller.leaderElect=false"])
        .expect_err("two replicas without leader election must not render");
    assert!(
        error.to_string().contains("leaderElect"),
        "the refusal says why: {error:#}"
    );

    let namespaced = render(&["--set", "kubefedConfig.scope=Namespaced"])?;
    for config in of_kind(&namespaced, "ValidatingWebhookConfiguration")
        .into_iter()
        .chain(of_kind(&namespaced, "MutatingWebhookConfiguration"))
    {
        let name = config["metadata"]["name"].as_str().unwrap_or_default();
        assert!(
            name.ends_with(&format!("-{KUBEFED_NAMESPACE}")),
            "{name}: a namespaced control plane suffixes its webhook configurations"
        );
        for webhook in config["webhooks"].as_array().context("webhooks")? {
            assert_eq!(
                webhook["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
                KUBEFED_NAMESPACE,
                "{name}: only the control plane's namespace is validated"
            );
        }
    }
    Ok(())
}

#[test]
fn chart_deployment_and_webhooks_match_the_controller() -> anyhow::Result<()> {
    let documents = render(&[])?;
    let deployments = of_kind(&documents, "Deployment");
    let deployment = deployments.first().context("a Deployment")?;
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let args = strings(&container["args"]);
    for wanted in [
        format!("--kubefed-namespace={KUBEFED_NAMESPACE}"),
        "--admin-addr=0.0.0.0:8080".to_owned(),
        "--leader-elect=true".to_owned(),
        "--webhook-addr=0.0.0.0:8443".to_owned(),
        "--webhook-cert-dir=/var/run/hubfed/webhook-tls".to_owned(),
        "--log-format=json".to_owned(),
    ] {
        assert!(args.contains(&wanted.as_str()), "{wanted} in {args:?}");
    }
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["serviceAccountName"], RELEASE,
        "the pods run as the chart's ServiceAccount"
    );
    assert!(container["resources"]["limits"]["memory"].is_string());

    let secrets = of_kind(&documents, "Secret");
    let secret = secrets.first().context("the webhook certificate Secret")?;
    let ca = secret["data"]["ca.crt"].as_str().context("ca.crt")?;
    let b64 = base64::engine::general_purpose::STANDARD;
    for key in ["ca.crt", "tls.crt", "tls.key"] {
        let pem = b64.decode(secret["data"][key].as_str().unwrap_or_default())?;
        assert!(
            String::from_utf8(pem)?.starts_with("-----BEGIN"),
            "{key} is PEM"
        );
    }
    let volume = &pod["volumes"][0]["secret"]["secretName"];
    assert_eq!(
        *volume, secret["metadata"]["name"],
        "the pods mount the Secret"
    );

    let mut paths = BTreeSet::new();
    for config in of_kind(&documents, "ValidatingWebhookConfiguration")
        .into_iter()
        .chain(of_kind(&documents, "MutatingWebhookConfiguration"))
    {
        for webhook in config["webhooks"].as_array().context("webhooks")? {
            let name = webhook["name"].as_str().unwrap_or_default();
            let client = &webhook["clientConfig"];
            assert_eq!(client["service"]["name"], "hubfed-webhook", "{name}");
            assert_eq!(client["service"]["port"], 443, "{name}");
            assert_eq!(
                client["caBundle"], ca,
                "{name}: the caBundle is the CA of the served certificate"
            );
            assert_eq!(webhook["admissionReviewVersions"], json!(["v1"]), "{name}");
            assert_eq!(webhook["sideEffects"], "None", "{name}");
            assert_eq!(webhook["failurePolicy"], "Fail", "{name}");
            paths.insert(
                client["service"]["path"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
            if name == "federated.types.kubefed.io" {
                assert_eq!(
                    webhook["rules"],
                    json!([{
                        "apiGroups": ["types.kubefed.io"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["*"],
                        "scope": "*",
                    }])
                );
            }
        }
    }
    assert_eq!(paths, WEBHOOK_PATHS.map(str::to_owned).into());

    let services = of_kind(&documents, "Service");
    let webhook_service = services
        .iter()
        .find(|s| s["metadata"]["name"] == "hubfed-webhook")
        .context("the webhook Service")?;
    assert_eq!(
        webhook_service["spec"]["ports"],
        json!([{"name": "https-webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}])
    );
    let metrics_service = services
        .iter()
        .find(|s| s["metadata"]["name"] == "hubfed-metrics")
        .context("the metrics Service")?;
    assert_eq!(metrics_service["spec"]["ports"][0]["targetPort"], "admin");

    let federated = render(&["--set", "webhook.federatedValidation.failurePolicy=Ignore"])?;
    let configs = of_kind(&federated, "ValidatingWebhookConfiguration");
    let policies: Vec<(&str, &str)> =
        configs.first().context("the validating configuration")?["webhooks"]
            .as_array()
            .context("webhooks")?
            .iter()
            .map(|w| {
                (
                    w["name"].as_str().unwrap_or_default(),
                    w["failurePolicy"].as_str().unwrap_or_default(),
                )
            })
            .collect();
    assert_eq!(
        policies,
        [
            ("federatedtypeconfigs.core.kubefed.io", "Fail"),
            ("kubefedclusters.core.kubefed.io", "Fail"),
            ("kubefedconfigs.core.kubefed.io", "Fail"),
            ("placementpolicies.scheduling.hubfed.io", "Fail"),
            ("federated.types.kubefed.io", "Ignore"),
        ],
        "only the federated-object webhook's failurePolicy is a value"
    );
    Ok(())
}

#[test]
fn chart_rbac_grants_no_wildcards() -> anyhow::Result<()> {
    for variant in [&[][..], &["--set", "kubefedConfig.scope=Namespaced"][..]] {
        let documents = render(variant)?;
        let roles: Vec<&Value> = of_kind(&documents, "ClusterRole")
            .into_iter()
            .chain(of_kind(&documents, "Role"))
            .collect();
        assert_eq!(roles.len(), 2, "{variant:?}: one ClusterRole and one Role");
        for role in roles {
            let kind = role["kind"].as_str().unwrap_or_default();
            if kind == "Role" {
                assert_eq!(role["metadata"]["namespace"], KUBEFED_NAMESPACE);
            }
            for rule in role["rules"].as_array().context("rules")? {
                let groups = strings(&rule["apiGroups"]);
                let resources = strings(&rule["resources"]);
                let verbs = strings(&rule["verbs"]);
                let what = format!("{variant:?} {kind} rule {rule}");
                assert!(!verbs.contains(&"*"), "{what}: wildcard verb");
                assert!(!groups.contains(&"*"), "{what}: wildcard API group");
                for verb in ["deletecollection", "escalate", "bind", "impersonate"] {
                    assert!(!verbs.contains(&verb), "{what}: {verb}");
                }
                // The one delete: the controller's own ConfigMaps (staged rollouts' state,
                // deleted with their federated object), in the control-plane namespace only.
                if verbs.contains(&"delete") {
                    assert_eq!(
                        (kind, groups.as_slice(), resources.as_slice()),
                        ("Role", &[""][..], &["configmaps"][..]),
                        "{what}: delete"
                    );
                }
                if resources.contains(&"*") {
                    assert_eq!(
                        groups,
                        ["types.kubefed.io"],
                        "{what}: all resources only of the federated types"
                    );
                    assert!(
                        !verbs.contains(&"create"),
                        "{what}: users create federated objects"
                    );
                }
                if resources.contains(&"secrets") {
                    assert_eq!(
                        kind, "Role",
                        "{what}: Secrets only in the control-plane namespace"
                    );
                    assert_eq!(verbs, ["get", "list", "watch"], "{what}");
                }
            }
        }
    }
    Ok(())
}

/// One access the chart's ServiceAccount must (or must not) have.
struct Access {
    verb: &'static str,
    group: &'static str,
    resource: &'static str,
    /// `None`: cluster-wide; `Some("")`: the test's federated namespace.
    namespace: Option<&'static str>,
    name: &'static str,
    allowed: bool,
}

const fn access(
    verb: &'static str,
    group: &'static str,
    resource: &'static str,
    namespace: Option<&'static str>,
    allowed: bool,
) -> Access {
    Access {
        verb,
        group,
        resource,
        namespace,
        name: "",
        allowed,
    }
}

/// What the controller needs, and what it must not have. `Some("")` is the test's namespace.
const ACCESSES: &[Access] = &[
    access(
        "watch",
        "types.kubefed.io",
        "federateddeployments",
        None,
        true,
    ),
    access(
        "patch",
        "types.kubefed.io",
        "federatedconfigmaps/status",
        Some(""),
        true,
    ),
    access(
        "update",
        "types.kubefed.io",
        "federatedconfigmaps",
        Some(""),
        true,
    ),
    access(
        "create",
        "types.kubefed.io",
        "federatedconfigmaps",
        Some(""),
        false,
    ),
    access(
        "delete",
        "types.kubefed.io",
        "federatedconfigmaps",
        Some(""),
        false,
    ),
    access(
        "create",
        "core.kubefed.io",
        "propagatedversions",
        Some(""),
        true,
    ),
    access(
        "patch",
        "core.kubefed.io",
        "clusterpropagatedversions/status",
        None,
        true,
    ),
    access(
        "patch",
        "core.kubefed.io",
        "kubefedclusters/status",
        Some(KUBEFED_NAMESPACE),
        true,
    ),
    access(
        "patch",
        "core.kubefed.io",
        "kubefedclusters/status",
        Some(""),
        false,
    ),
    access(
        "delete",
        "core.kubefed.io",
        "kubefedclusters",
        Some(KUBEFED_NAMESPACE),
        false,
    ),
    access("watch", "", "secrets", Some(KUBEFED_NAMESPACE), true),
    access("get", "", "secrets", Some(""), false),
    access("list", "", "secrets", None, false),
    access("create", "", "configmaps", Some(""), false),
    access("watch", "", "namespaces", None, true),
    access("create", "events.k8s.io", "events", Some(""), true),
    access("patch", "", "events", Some(KUBEFED_NAMESPACE), true),
    access(
        "create",
        "coordination.k8s.io",
        "leases",
        Some(KUBEFED_NAMESPACE),
        true,
    ),
    Access {
        name: LEASE,
        ..access(
            "patch",
            "coordination.k8s.io",
            "leases",
            Some(KUBEFED_NAMESPACE),
            true,
        )
    },
    Access {
        name: "another-lease",
        ..access(
            "update",
            "coordination.k8s.io",
            "leases",
            Some(KUBEFED_NAMESPACE),
            false,
        )
    },
    access("create", "coordination.k8s.io", "leases", Some(""), false),
];

async fn check_accesses(client: &Client, namespace: &str) -> anyhow::Result<()> {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut wrong = Vec::new();
    for access in ACCESSES {
        let (resource, subresource) = access
            .resource
            .split_once('/')
            .map_or((access.resource, None), |(r, s)| (r, Some(s.to_owned())));
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(access.verb.to_owned()),
                    group: Some(access.group.to_owned()),
                    resource: Some(resource.to_owned()),
                    subresource,
                    namespace: access
                        .namespace
                        .map(|ns| if ns.is_empty() { namespace } else { ns }.to_owned()),
                    name: (!access.name.is_empty()).then(|| access.name.to_owned()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = reviews.create(&PostParams::default(), &review).await?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        if allowed != access.allowed {
            wrong.push(format!(
                "{} {}/{} {} in {:?}: allowed={allowed}",
                access.verb, access.group, access.resource, access.name, access.namespace
            ));
        }
    }
    ensure!(wrong.is_empty(), "wrong RBAC: {}", wrong.join("; "));
    Ok(())
}

/// Server-side applies a rendered object as [`FIELD_MANAGER`], finding its resource by
/// discovery.
async fn apply_rendered(client: &Client, object: &Value) -> anyhow::Result<()> {
    let (group, version) = match object["apiVersion"].as_str().context("apiVersion")? {
        api_version if api_version.contains('/') => {
            api_version.split_once('/').context("group/version")?
        }
        version => ("", version),
    };
    let kind = object["kind"].as_str().context("kind")?;
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk).await?;
    let object: DynamicObject = serde_json::from_value(object.clone())?;
    let namespace = object.namespace();
    let api = match capabilities.scope {
        Scope::Namespaced => dynamic_api(client.clone(), &resource, namespace.as_deref()),
        Scope::Cluster => dynamic_api(client.clone(), &resource, None),
    };
    api.patch(
        &object.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&object),
    )
    .await
    .with_context(|| format!("applying {kind} {}", object.name_any()))?;
    Ok(())
}

/// A hub client that authenticates with `token` only.
async fn client_with_token(token: String) -> anyhow::Result<Client> {
    let hub = hubfed_testenv::shared().hub();
    let mut kubeconfig = hub.kubeconfig()?;
    for named in &mut kubeconfig.auth_infos {
        named.auth_info = Some(AuthInfo {
            token: Some(token.clone().into()),
            ..Default::default()
        });
    }
    let options = KubeConfigOptions {
        context: Some(hub.name().to_owned()),
        ..Default::default()
    };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?;
    Ok(Client::try_from(config)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_rbac_is_enough_to_run_the_federation() -> anyhow::Result<()> {
    let env = hubfed_testenv::shared();
    let admin = env.hub().client().await?;
    let documents = render(&["--include-crds"])?;

    // As cluster admin, what `helm install` would do: the chart's CRDs, the namespace, RBAC,
    // the seeded KubeFedConfig and FTCs; and the members joined as `hubfedctl join` would.
    let crds: Vec<CustomResourceDefinition> = of_kind(&documents, "CustomResourceDefinition")
        .into_iter()
        .map(|crd| serde_json::from_value(crd.clone()))
        .collect::<Result<_, _>>()?;
    ensure!(
        crds.len() >= 16,
        "the chart ships the core and federated CRDs"
    );
    install_crds(&admin, &crds).await?;
    hubfed_e2e::bootstrap(env).await?;
    for kind in APPLIED_KINDS {
        let objects = of_kind(&documents, kind);
        ensure!(!objects.is_empty(), "the chart renders a {kind}");
        for object in objects {
            apply_rendered(&admin, object).await?;
        }
    }

    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), KUBEFED_NAMESPACE);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = accounts
        .create_token_request(RELEASE, &PostParams::default(), &request)
        .await?
        .status
        .and_then(|status| status.token)
        .filter(|token| !token.is_empty())
        .context("no token for the chart's ServiceAccount")?;
    let controller_client = client_with_token(token).await?;
    let review = Api::<SelfSubjectReview>::all(controller_client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await?;
    let user = review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .unwrap_or_default();
    assert_eq!(
        user,
        format!("system:serviceaccount:{KUBEFED_NAMESPACE}:{RELEASE}"),
        "the controller's client is the chart's ServiceAccount, not an admin"
    );

    let namespace = unique_ns("chart");
    check_accesses(&controller_client, &namespace).await?;

    let config = ControllerConfig {
        leader_elect: true,
        ..ControllerConfig::default()
    };
    let mut controller = ControllerTask::spawn(
        "the controller running as the chart's ServiceAccount",
        controller_client,
        config,
    );

    // Health probes (Secrets, KubeFedCluster status) work.
    controller
        .while_running(hubfed_e2e::wait_clusters_ready(&admin, &MEMBERS))
        .await?;
    // Leader election works.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), KUBEFED_NAMESPACE);
    controller
        .while_running(wait_for(
            &format!("Lease {LEASE} to be held"),
            TIMEOUT,
            async || {
                let holder = leases
                    .get_opt(LEASE)
                    .await?
                    .and_then(|lease| lease.spec)
                    .and_then(|spec| spec.holder_identity)
                    .unwrap_or_default();
                Ok(if holder.is_empty() {
                    Wait::Pending("no holder".into())
                } else {
                    Wait::Done(())
                })
            },
        ))
        .await?;

    // Propagation: a federated namespace, then a FederatedConfigMap in it, to both members.
    create_hub_namespace(&admin, &namespace).await?;
    let spec = json!({"placement": placement(&MEMBERS)});
    create_federated(&admin, "Namespace", Some(&namespace), &namespace, spec).await?;
    let spec = json!({
        "template": {"data": {"mode": "federated"}},
        "placement": placement(&MEMBERS),
    });
    let hub_configmaps =
        create_federated(&admin, "ConfigMap", Some(&namespace), "settings", spec).await?;
    let configmap = target("ConfigMap");
    let mut member_apis = Vec::new();
    for member in MEMBERS {
        let client = env.cluster(member).context("member")?.client().await?;
        member_apis.push((member, dynamic_api(client, &configmap, Some(&namespace))));
    }
    let wanted = json!("federated");
    controller
        .while_running(wait_for(
            "the ConfigMap in both members",
            TIMEOUT,
            async || {
                let mut problems = Vec::new();
                for (member, api) in &member_apis {
                    let found = get_value(api, "settings").await?;
                    if let Some(problem) =
                        member_mismatch(member, found.as_ref(), &[("/data/mode", Some(&wanted))])
                    {
                        problems.push(problem);
                    }
                }
                Ok(Wait::all_or_pending(problems))
            },
        ))
        .await?;
    // Status, finalizer and PropagatedVersion writes work too.
    controller
        .while_running(wait_for(
            "the FederatedConfigMap's status",
            TIMEOUT,
            async || match get_value(&hub_configmaps, "settings").await? {
                Some(object) => Ok(propagated_ok(&object, &MEMBERS)),
                None => bail!("the FederatedConfigMap is gone"),
            },
        ))
        .await?;
    let versions: Api<PropagatedVersion> = Api::namespaced(admin.clone(), &namespace);
    controller
        .while_running(wait_for(
            "PropagatedVersion configmap-settings",
            TIMEOUT,
            async || {
                let recorded = versions
                    .get_opt("configmap-settings")
                    .await?
                    .and_then(|version| version.status)
                    .map(|status| status.cluster_versions.len());
                Ok(if recorded == Some(MEMBERS.len()) {
                    Wait::Done(())
                } else {
                    Wait::Pending(format!("cluster versions recorded: {recorded:?}"))
                })
            },
        ))
        .await?;
    for (member, api) in &member_apis {
        let object = get_value(api, "settings").await?.context("member copy")?;
        assert_eq!(
            object["metadata"]["labels"][MANAGED_LABEL], "true",
            "{member}"
        );
    }

    let exit = controller.stop().await?;
    report(format_args!(
        "controller as the chart's ServiceAccount stopped: {exit:?}"
    ));
    Ok(())
}

/// `helm install` against a real API server: the seeds are created by the hooks (before the
/// webhooks exist), an upgrade neither re-creates a seed the operator deleted nor changes the
/// webhook certificate, and uninstall leaves the seeds. A namespaced control plane, so that
/// its webhooks (which no pod serves here) only cover its own namespace.
#[tokio::test]
async fn helm_install_seeds_once_and_keeps_its_certificate() -> anyhow::Result<()> {
    let env = hubfed_testenv::shared();
    let admin = env.hub().client().await?;
    let namespace = unique_ns("helm");
    let release = "hubfed-install";
    let chart = chart_dir();
    let chart = chart.to_str().context("chart path is UTF-8")?;
    let kubeconfig = env
        .kubeconfig_path()
        .to_str()
        .context("kubeconfig path is UTF-8")?
        .to_owned();
    let common = [
        "--kubeconfig",
        kubeconfig.as_str(),
        "--kube-context",
        env.hub().name(),
        "--namespace",
        namespace.as_str(),
    ];
    let settings = [
        "--set",
        "kubefedConfig.scope=Namespaced",
        "--set",
        "webhook.federatedValidation.enabled=false",
    ];
    let with = |verb: &[&str], extra: &[&str]| -> anyhow::Result<String> {
        let mut args: Vec<&str> = verb.to_vec();
        args.extend_from_slice(&common);
        args.extend_from_slice(extra);
        helm(&args)
    };

    with(
        &["install", release, chart],
        &[&settings[..], &["--create-namespace"]].concat(),
    )?;
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(admin.clone(), &namespace);
    let configs: Api<KubeFedConfig> = Api::namespaced(admin.clone(), &namespace);
    let names = |list: Vec<FederatedTypeConfig>| -> BTreeSet<String> {
        list.iter().map(|ftc| ftc.name_any()).collect()
    };
    let seeded = names(ftcs.list(&Default::default()).await?.items);
    assert_eq!(seeded.len(), 10, "the default FTCs are seeded: {seeded:?}");
    let config = configs.get("kubefed").await?;
    assert_eq!(
        serde_json::to_value(&config.spec)?["scope"],
        "Namespaced",
        "the KubeFedConfig is seeded from the values"
    );

    let certificate = async || -> anyhow::Result<(Vec<u8>, Vec<Vec<u8>>)> {
        let secret = Api::<Secret>::namespaced(admin.clone(), &namespace)
            .get(&format!("{release}-webhook-tls"))
            .await?;
        let ca = secret
            .data
            .unwrap_or_default()
            .remove("ca.crt")
            .context("ca.crt")?
            .0;
        let webhooks = Api::<ValidatingWebhookConfiguration>::all(admin.clone())
            .get(&format!("validations.core.kubefed.io-{namespace}"))
            .await?
            .webhooks
            .unwrap_or_default();
        let bundles = webhooks
            .into_iter()
            .map(|w| w.client_config.ca_bundle.map(|b| b.0).unwrap_or_default())
            .collect();
        Ok((ca, bundles))
    };
    let (ca, bundles) = certificate().await?;
    assert!(!ca.is_empty());
    assert!(
        bundles.iter().all(|bundle| *bundle == ca),
        "every caBundle is the Secret's CA"
    );

    // The operator disables a default type for good; an upgrade must not bring it back.
    ftcs.delete("jobs.batch", &Default::default()).await?;
    wait_for("FTC jobs.batch to be deleted", TIMEOUT, async || {
        Ok(match ftcs.get_opt("jobs.batch").await? {
            None => Wait::Done(()),
            Some(_) => Wait::Pending("still there".into()),
        })
    })
    .await?;
    with(&["upgrade", release, chart], &settings)?;
    let after_upgrade = names(ftcs.list(&Default::default()).await?.items);
    let mut expected = seeded.clone();
    expected.remove("jobs.batch");
    assert_eq!(after_upgrade, expected, "an upgrade does not re-seed");
    assert_eq!(
        certificate().await?,
        (ca, bundles),
        "an upgrade keeps the webhook certificate"
    );

    with(&["uninstall", release], &[])?;
    assert!(
        configs.get_opt("kubefed").await?.is_some(),
        "uninstall leaves the seeded KubeFedConfig"
    );
    Api::<Namespace>::all(admin)
        .delete(&namespace, &Default::default())
        .await?;
    Ok(())
}
