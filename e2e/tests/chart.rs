//! The Helm chart `charts/hubfed`: it lints and renders with every option, ships exactly the
//! generated CRDs and default FederatedTypeConfigs, wires its webhooks to one consistent
//! certificate, grants no wildcard rights — and, the real proof, its RBAC alone is enough to
//! run the federation: a controller authenticated as the chart's ServiceAccount keeps two
//! members Ready and propagates a FederatedConfigMap to both. A real `helm install` and
//! `helm upgrade` against the test hub show that the KubeFedConfig and FederatedTypeConfigs
//! are seeded once and the webhook certificate survives upgrades.
//!
//! The agent's chart `charts/hubfed-agent` is only rendered: one agent as join's
//! ServiceAccount with join's Secret mounted, and — when it creates the ServiceAccount — the
//! RBAC `hubfedctl join --mode pull` grants in the member, rule for rule.
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

/// The values of `chart`'s values.yaml its README.md does not list (a value is listed when
/// its dotted path, or a parent's, appears in backquotes).
fn values_missing_from_readme(chart: &Path) -> anyhow::Result<Vec<String>> {
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
        serde_yaml_ng::from_str(&std::fs::read_to_string(chart.join("values.yaml"))?)?;
    let readme = std::fs::read_to_string(chart.join("README.md"))?;
    let mut missing = Vec::new();
    leaves("", &values, &readme, &mut missing);
    Ok(missing)
}

#[test]
fn chart_readme_lists_every_value() -> anyhow::Result<()> {
    let missing = values_missing_from_readme(&chart_dir())?;
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
                // The only deletes: the controller's own ConfigMaps (staged rollouts' state,
                // deleted with their federated object), in the control-plane namespace only;
                // and the works of pull-mode members, which the controller writes and removes
                // (they hold nothing else).
                if verbs.contains(&"delete") {
                    let allowed = [
                        ("Role", &[""][..], &["configmaps"][..]),
                        ("ClusterRole", &["pull.hubfed.io"][..], &["works"][..]),
                    ];
                    assert!(
                        allowed.contains(&(kind, groups.as_slice(), resources.as_slice())),
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

// The agent's chart, `charts/hubfed-agent`: rendered only (no cluster), against what
// `hubfedctl join --mode pull` writes in the member and the agent's command line.

/// Release name of every render of the agent's chart: its Deployment is then `hubfed-agent`.
const AGENT_RELEASE: &str = "hubfed-agent";
/// The member Secret `hubfedctl join --mode pull` writes (hubfedctl's `AGENT_HUB_SECRET`,
/// private to the CLI), with keys `kubeconfig` and `cluster`.
const AGENT_HUB_SECRET: &str = "hubfed-agent-hub";
/// Where the chart mounts that Secret.
const AGENT_HUB_DIR: &str = "/etc/hubfed-agent/hub";
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
const RBAC_KINDS: [&str; 4] = ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"];

fn agent_chart_dir() -> PathBuf {
    repo_root().join("charts/hubfed-agent")
}

/// `helm template` of the agent's chart in the KubeFed namespace with `extra` arguments.
fn render_agent(extra: &[&str]) -> anyhow::Result<Vec<Value>> {
    let chart = agent_chart_dir();
    let chart = chart.to_str().context("chart path is UTF-8")?;
    let mut args = vec![
        "template",
        AGENT_RELEASE,
        chart,
        "--namespace",
        KUBEFED_NAMESPACE,
    ];
    args.extend_from_slice(extra);
    parse_documents(&helm(&args)?)
}

/// The one Deployment of a render, its pod spec and its one container.
fn agent_pod(documents: &[Value]) -> anyhow::Result<(&Value, &Value, &Value)> {
    let deployments = of_kind(documents, "Deployment");
    let [deployment] = deployments.as_slice() else {
        bail!("one Deployment expected, got {}", deployments.len());
    };
    let pod = &deployment["spec"]["template"]["spec"];
    let containers = pod["containers"].as_array().context("containers")?;
    let [container] = containers.as_slice() else {
        bail!("one container expected: {containers:?}");
    };
    Ok((deployment, pod, container))
}

#[test]
fn agent_chart_readme_lists_every_value() -> anyhow::Result<()> {
    let missing = values_missing_from_readme(&agent_chart_dir())?;
    assert!(
        missing.is_empty(),
        "charts/hubfed-agent/README.md does not list {missing:?}"
    );
    Ok(())
}

#[test]
fn agent_chart_lints_and_renders_every_option() -> anyhow::Result<()> {
    let chart = agent_chart_dir();
    let chart = chart.to_str().context("chart path is UTF-8")?;
    let variants: [&[&str]; 6] = [
        &[],
        &["--set", "serviceAccount.create=true"],
        &[
            "--set",
            "serviceAccount.create=true",
            "--set",
            "rbac.scope=Namespaced",
        ],
        &[
            "--set",
            "serviceAccount.create=true",
            "--set",
            "rbac.clusterAdmin=true",
        ],
        &[
            "--set",
            "serviceAccount.create=true",
            "--set",
            "rbac.scope=Namespaced",
            "--set",
            "rbac.clusterAdmin=true",
            "--set-json",
            "rbac.federatedTypes=[]",
        ],
        &[
            "--set",
            "agent.logFormat=plain",
            "--set",
            "image.digest=sha256:0123456789abcdef",
            "--set",
            "hubSecret.name=agent-hub",
            "--set-json",
            r#"agent.extraEnv=[{"name":"KUBECONFIG","value":"/member/kubeconfig"}]"#,
        ],
    ];
    for variant in variants {
        let mut args = vec!["lint", "--strict", chart, "--namespace", KUBEFED_NAMESPACE];
        args.extend_from_slice(variant);
        helm(&args)?;
        let documents = render_agent(variant)?;
        agent_pod(&documents).with_context(|| format!("{variant:?}"))?;
    }
    for (wrong, says) in [
        (&["--set", "agent.logFormat=text"][..], "logFormat"),
        (
            &["--set", "agent.heartbeatInterval=0"][..],
            "heartbeatInterval",
        ),
        (
            &[
                "--set",
                "serviceAccount.create=true",
                "--set",
                "rbac.scope=Global",
            ][..],
            "rbac.scope",
        ),
        (
            &[
                "--set",
                "serviceAccount.create=true",
                "--set-json",
                r#"rbac.federatedTypes=[{"group":"","pluralName":"configmaps"}]"#,
            ][..],
            "scope",
        ),
    ] {
        let error = render_agent(wrong).expect_err("a wrong value must not render");
        assert!(
            error.to_string().contains(says),
            "{wrong:?}: the refusal says why: {error:#}"
        );
    }
    Ok(())
}

#[test]
fn agent_chart_runs_the_agent_as_joins_service_account() -> anyhow::Result<()> {
    let documents = render_agent(&[])?;
    let kinds: Vec<&str> = documents
        .iter()
        .filter_map(|d| d["kind"].as_str())
        .collect();
    assert_eq!(
        kinds,
        ["Deployment"],
        "by default join's ServiceAccount and RBAC are used: the chart creates neither"
    );
    let (deployment, pod, container) = agent_pod(&documents)?;
    assert_eq!(deployment["metadata"]["name"], AGENT_RELEASE);
    assert_eq!(deployment["metadata"]["namespace"], KUBEFED_NAMESPACE);
    assert_eq!(deployment["spec"]["replicas"], 1, "one agent per cluster");
    assert_eq!(
        deployment["spec"]["strategy"],
        json!({"type": "Recreate"}),
        "an upgrade never runs two agents"
    );
    assert_eq!(
        pod["serviceAccountName"],
        hubfed_api::work::AGENT_SERVICE_ACCOUNT,
        "the agent runs as the ServiceAccount join creates"
    );
    assert_eq!(
        pod["automountServiceAccountToken"], true,
        "join's ServiceAccount mounts no token by default; the agent needs one for the member"
    );

    // The image: hubfed-controller's, the chart's default, with the agent as command.
    let app_version = serde_yaml_ng::from_str::<Value>(&std::fs::read_to_string(
        agent_chart_dir().join("Chart.yaml"),
    )?)?["appVersion"]
        .clone();
    assert_eq!(
        container["image"],
        format!(
            "ghcr.io/hubfed/hubfed-controller:{}",
            app_version.as_str().unwrap_or_default()
        )
    );
    let controller = render(&[])?;
    let (_, controller_pod, controller_container) = agent_pod(&controller)?;
    assert_eq!(
        container["image"], controller_container["image"],
        "the agent's chart and hubfed's deploy the same image"
    );
    assert_eq!(container["command"], json!(["/usr/local/bin/hubfed-agent"]));

    // The command line the agent takes.
    assert_eq!(
        container["args"],
        json!([
            format!("--hub-kubeconfig={AGENT_HUB_DIR}/kubeconfig"),
            format!("--kubefed-namespace={KUBEFED_NAMESPACE}"),
            "--admin-addr=0.0.0.0:8080",
            "--heartbeat-interval=10",
            "--log-format=json",
        ])
    );
    let env = container["env"].as_array().context("env")?;
    let cluster = env
        .iter()
        .find(|e| e["name"] == "HUBFED_AGENT_CLUSTER")
        .context("HUBFED_AGENT_CLUSTER")?;
    assert_eq!(
        cluster["valueFrom"],
        json!({"secretKeyRef": {"name": AGENT_HUB_SECRET, "key": "cluster"}}),
        "the cluster's name comes from join's Secret"
    );
    let control_plane = env
        .iter()
        .find(|e| e["name"] == "HUBFED_AGENT_CONTROL_PLANE")
        .context("HUBFED_AGENT_CONTROL_PLANE")?;
    assert_eq!(
        control_plane["valueFrom"],
        json!({"secretKeyRef": {"name": AGENT_HUB_SECRET, "key": "control-plane", "optional": true}}),
        "the control plane's identity comes from join's Secret, when an older join did not omit it"
    );
    assert!(
        env.iter().any(|e| e["name"] == "RUST_LOG"),
        "the log filter: {env:?}"
    );

    // Join's Secret, mounted read-only where --hub-kubeconfig points.
    let mounts = container["volumeMounts"]
        .as_array()
        .context("volumeMounts")?;
    let [mount] = mounts.as_slice() else {
        bail!("one mount expected: {mounts:?}");
    };
    assert_eq!(mount["mountPath"], AGENT_HUB_DIR);
    assert_eq!(mount["readOnly"], true);
    let volumes = pod["volumes"].as_array().context("volumes")?;
    let volume = volumes
        .iter()
        .find(|v| v["name"] == mount["name"])
        .context("the mounted volume")?;
    assert_eq!(volume["secret"]["secretName"], AGENT_HUB_SECRET);

    // Probes on the admin port.
    assert_eq!(
        container["ports"],
        json!([{"name": "admin", "containerPort": 8080, "protocol": "TCP"}])
    );
    assert_eq!(
        container["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "admin"})
    );
    assert_eq!(
        container["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "admin"})
    );

    // Non-root, read-only, as hubfed's controller.
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_ne!(pod["securityContext"]["runAsUser"], 0);
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"],
        json!(["ALL"])
    );
    assert_eq!(pod["securityContext"], controller_pod["securityContext"]);
    assert_eq!(
        container["securityContext"],
        controller_container["securityContext"]
    );
    assert!(container["resources"]["limits"]["memory"].is_string());
    assert!(container["resources"]["requests"]["cpu"].is_string());

    // Another Secret name moves the mount and the cluster's name together.
    let renamed = render_agent(&["--set", "hubSecret.name=agent-hub"])?;
    let (_, pod, container) = agent_pod(&renamed)?;
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], "agent-hub");
    let env = container["env"].as_array().context("env")?;
    let from_secret: Vec<&Value> = env
        .iter()
        .map(|e| &e["valueFrom"]["secretKeyRef"]["name"])
        .filter(|name| !name.is_null())
        .collect();
    assert_eq!(from_secret, [&json!("agent-hub"); 2], "{env:?}");
    Ok(())
}

/// The string literals of `const NAME: &[&str] = &[...];` in hubfedctl's rbac.rs: join's
/// verbs and health paths, private to the CLI, read from its source so that the chart's
/// copies cannot drift from them unnoticed.
fn join_constant(name: &str) -> anyhow::Result<Vec<String>> {
    let source = std::fs::read_to_string(repo_root().join("crates/hubfedctl/src/rbac.rs"))?;
    let start = format!("const {name}: &[&str] = &[");
    let body = source
        .split_once(&start)
        .and_then(|(_, rest)| rest.split_once("];"))
        .map(|(body, _)| body)
        .with_context(|| format!("crates/hubfedctl/src/rbac.rs no longer has `{start}...];`"))?;
    Ok(body
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect())
}

/// The RBAC objects of a render with `serviceAccount.create=true`, by kind and name.
fn agent_rbac(extra: &[&str]) -> anyhow::Result<Vec<(String, String, Value)>> {
    let mut args = vec!["--set", "serviceAccount.create=true"];
    args.extend_from_slice(extra);
    let documents = render_agent(&args)?;
    let accounts = of_kind(&documents, "ServiceAccount");
    let [account] = accounts.as_slice() else {
        bail!("{extra:?}: one ServiceAccount expected");
    };
    // As join's (crates/hubfedctl's rbac.rs service_account).
    assert_eq!(
        account["metadata"]["name"],
        hubfed_api::work::AGENT_SERVICE_ACCOUNT
    );
    assert_eq!(account["metadata"]["namespace"], KUBEFED_NAMESPACE);
    assert_eq!(account["automountServiceAccountToken"], false);
    let (_, pod, _) = agent_pod(&documents)?;
    assert_eq!(pod["serviceAccountName"], account["metadata"]["name"]);
    Ok(documents
        .iter()
        .filter(|d| RBAC_KINDS.iter().any(|kind| d["kind"] == *kind))
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or_default().to_owned(),
                d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                d.clone(),
            )
        })
        .collect())
}

/// Checks the roles and bindings of a render against join's: `roles` are the
/// (kind, name, rules) it must hold exactly, each bound to the agent's ServiceAccount by a
/// binding of the same name (kubefedctl's naming).
fn assert_rbac(rendered: &[(String, String, Value)], roles: &[(&str, &str, Value)]) {
    let mut wanted: Vec<(String, String)> = Vec::new();
    for (kind, name, rules) in roles {
        let binding_kind = format!("{kind}Binding");
        wanted.push(((*kind).to_owned(), (*name).to_owned()));
        wanted.push((binding_kind.clone(), (*name).to_owned()));
        let role = rendered
            .iter()
            .find(|(k, n, _)| k == kind && n == name)
            .map(|(_, _, object)| object);
        let Some(role) = role else {
            panic!("no {kind} {name} in {rendered:?}");
        };
        assert_eq!(role["rules"], *rules, "{kind} {name}: join's rules");
        let binding = rendered
            .iter()
            .find(|(k, n, _)| *k == binding_kind && n == name)
            .map(|(_, _, object)| object)
            .unwrap_or(&Value::Null);
        assert_eq!(
            binding["roleRef"],
            json!({"apiGroup": RBAC_GROUP, "kind": kind, "name": name}),
            "{binding_kind} {name}"
        );
        assert_eq!(
            binding["subjects"],
            json!([{
                "kind": "ServiceAccount",
                "name": hubfed_api::work::AGENT_SERVICE_ACCOUNT,
                "namespace": KUBEFED_NAMESPACE,
            }]),
            "{binding_kind} {name}"
        );
        if *kind == "Role" {
            assert_eq!(role["metadata"]["namespace"], KUBEFED_NAMESPACE);
            assert_eq!(binding["metadata"]["namespace"], KUBEFED_NAMESPACE);
        }
    }
    let mut found: Vec<(String, String)> = rendered
        .iter()
        .map(|(kind, name, _)| (kind.clone(), name.clone()))
        .collect();
    found.sort();
    wanted.sort();
    assert_eq!(found, wanted, "exactly join's RBAC objects");
}

/// With `serviceAccount.create=true` the chart creates what `hubfedctl join --mode pull`
/// creates in the member (crates/hubfedctl's rbac.rs `member_rbac` with the ServiceAccount
/// `hubfed-agent`). That code is private to the CLI and join needs a hub, so the expectation
/// is written here, rule for rule — the first case is rbac.rs's own unit test
/// (`least_privilege_covers_exactly_the_types`) — with join's verbs and health paths read
/// from rbac.rs.
#[test]
fn agent_chart_rbac_is_joins() -> anyhow::Result<()> {
    let verbs = join_constant("OBJECT_VERBS")?;
    assert_eq!(
        verbs,
        [
            "get", "list", "watch", "create", "update", "patch", "delete"
        ]
    );
    let health = join_constant("HEALTH_URLS")?;
    assert_eq!(health, ["/healthz", "/version"]);
    let verbs = json!(verbs);
    let role = "kubefed-controller-manager:hubfed-agent";
    let health_role =
        format!("kubefed-controller-manager:{KUBEFED_NAMESPACE}:healthcheck-hubfed-agent");
    let objects = |group: &str, resources: &[&str]| json!({"apiGroups": [group], "resources": resources, "verbs": verbs});
    let pods = json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]});
    let namespaces = json!({"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]});
    let urls = json!({"nonResourceURLs": health, "verbs": ["get"]});
    let bind = json!({
        "apiGroups": [RBAC_GROUP],
        "resources": ["clusterroles"],
        "verbs": ["bind", "escalate"],
    });

    // rbac.rs's unit test, type for type.
    let four = r#"rbac.federatedTypes=[
        {"group": "", "pluralName": "configmaps", "scope": "Namespaced"},
        {"group": "apps", "pluralName": "deployments", "scope": "Namespaced"},
        {"group": "", "pluralName": "secrets", "scope": "Namespaced"},
        {"group": "rbac.authorization.k8s.io", "pluralName": "clusterroles", "scope": "Cluster"}
    ]"#;
    assert_rbac(
        &agent_rbac(&["--set-json", four])?,
        &[(
            "ClusterRole",
            role,
            json!([
                objects("", &["configmaps", "secrets"]),
                objects("apps", &["deployments"]),
                objects(RBAC_GROUP, &["clusterroles"]),
                bind,
                pods,
                namespaces,
                urls,
            ]),
        )],
    );

    // The default: the ten default FederatedTypeConfigs. Namespaces are federated, so no
    // extra namespace rule.
    let default_rules = json!([
        objects(
            "",
            &[
                "configmaps",
                "namespaces",
                "secrets",
                "serviceaccounts",
                "services"
            ]
        ),
        objects("apps", &["deployments", "replicasets"]),
        objects("batch", &["jobs"]),
        objects("networking.k8s.io", &["ingresses"]),
        objects(RBAC_GROUP, &["clusterroles"]),
        bind,
        pods,
        urls,
    ]);
    assert_rbac(&agent_rbac(&[])?, &[("ClusterRole", role, default_rules)]);

    // A namespaced control plane: namespaced types in a Role, health cluster-wide.
    assert_rbac(
        &agent_rbac(&["--set", "rbac.scope=Namespaced"])?,
        &[
            (
                "Role",
                role,
                json!([
                    objects(
                        "",
                        &["configmaps", "secrets", "serviceaccounts", "services"]
                    ),
                    objects("apps", &["deployments", "replicasets"]),
                    objects("batch", &["jobs"]),
                    objects("networking.k8s.io", &["ingresses"]),
                    pods,
                ]),
            ),
            ("ClusterRole", &health_role, json!([namespaces, urls])),
        ],
    );

    // --cluster-admin, both scopes.
    let everything = json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]});
    assert_rbac(
        &agent_rbac(&["--set", "rbac.clusterAdmin=true"])?,
        &[(
            "ClusterRole",
            role,
            json!([everything, {"nonResourceURLs": ["*"], "verbs": ["get"]}]),
        )],
    );
    assert_rbac(
        &agent_rbac(&[
            "--set",
            "rbac.clusterAdmin=true",
            "--set",
            "rbac.scope=Namespaced",
        ])?,
        &[
            ("Role", role, json!([everything])),
            ("ClusterRole", &health_role, json!([namespaces, urls])),
        ],
    );

    // rbac.rs's other cases: federated pods need no read-only pod rule; replicasets alone
    // need it; duplicates and order do not matter.
    let pods_federated = r#"rbac.federatedTypes=[
        {"group": "", "pluralName": "pods", "scope": "Namespaced"},
        {"group": "apps", "pluralName": "deployments", "scope": "Namespaced"}
    ]"#;
    assert_rbac(
        &agent_rbac(&["--set-json", pods_federated])?,
        &[(
            "ClusterRole",
            role,
            json!([
                objects("", &["pods"]),
                objects("apps", &["deployments"]),
                namespaces,
                urls
            ]),
        )],
    );
    let replicasets = r#"rbac.federatedTypes=[
        {"group": "apps", "pluralName": "replicasets", "scope": "Namespaced"},
        {"pluralName": "configmaps", "scope": "Namespaced"},
        {"group": "apps", "pluralName": "replicasets", "scope": "Namespaced"}
    ]"#;
    assert_rbac(
        &agent_rbac(&["--set-json", replicasets])?,
        &[(
            "ClusterRole",
            role,
            json!([
                objects("", &["configmaps"]),
                objects("apps", &["replicasets"]),
                pods,
                namespaces,
                urls
            ]),
        )],
    );
    Ok(())
}

/// `rbac.federatedTypes`' default is the target types of the ten default
/// FederatedTypeConfigs (`crds/default-ftcs.yaml`), defaulted as join reads them (an empty
/// group or plural comes from the FTC's name).
#[test]
fn agent_chart_default_types_are_the_default_ftcs() -> anyhow::Result<()> {
    let text = std::fs::read_to_string(repo_root().join("crds/default-ftcs.yaml"))?;
    let mut ftcs = BTreeSet::new();
    for ftc in parse_documents(&text)? {
        let name = ftc["metadata"]["name"].as_str().context("FTC name")?;
        let (plural, group) = name.split_once('.').unwrap_or((name, ""));
        let target = &ftc["spec"]["targetType"];
        let or = |field: &str, default: &str| {
            Some(target[field].as_str().unwrap_or_default())
                .filter(|s| !s.is_empty())
                .unwrap_or(default)
                .to_owned()
        };
        ftcs.insert((
            or("group", group),
            or("pluralName", plural),
            or("scope", ""),
        ));
    }
    assert_eq!(ftcs.len(), 10, "{ftcs:?}");
    let values: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(
        agent_chart_dir().join("values.yaml"),
    )?)?;
    let chart: BTreeSet<(String, String, String)> = values["rbac"]["federatedTypes"]
        .as_array()
        .context("rbac.federatedTypes")?
        .iter()
        .map(|t| {
            let field = |f: &str| t[f].as_str().unwrap_or_default().to_owned();
            (field("group"), field("pluralName"), field("scope"))
        })
        .collect();
    assert_eq!(chart, ftcs);
    Ok(())
}
