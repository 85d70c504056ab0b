//! The Helm chart `charts/hubfed`: it lints and renders with every option, ships exactly the
//! generated CRDs and default FederatedTypeConfigs, wires its webhooks to one consistent
//! certificate, grants no wildcard rights. A real `helm install` and `helm upgrade` against the
//! test hub show that the KubeFedConfig and FederatedTypeConfigs are seeded once and the
//! webhook certificate survives upgrades.
//!
//! Needs `helm`: `HUBFED_HELM`, else the binary `hack/build-helm.sh` builds and caches. The
//! tests fail (never skip) without it. The proof that the chart's RBAC runs the federation is
//! in `chart_rbac.rs`, the agent's chart in `chart_agent.rs`.

use std::collections::BTreeSet;

use anyhow::{Context as _, ensure};
use base64::Engine as _;
use hubfed_api::federatedtypeconfig::FederatedTypeConfig;
use hubfed_api::kubefedconfig::KubeFedConfig;
use hubfed_e2e::helm::{
    RELEASE, chart_dir, helm, of_kind, render, repo_root, strings, values_missing_from_readme,
};
use hubfed_e2e::{KUBEFED_NAMESPACE, TIMEOUT, Wait, unique_ns, wait_for};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::ResourceExt as _;
use kube::api::Api;
use serde_json::{Value, json};

/// The webhook paths the controller serves (docs/kubefed-compatibility.md §6, plus hubfed's
/// `/validate-federated` and `/default-federated`).
const WEBHOOK_PATHS: [&str; 10] = [
    "/default-federated",
    "/default-kubefedconfig",
    "/validate-domain",
    "/validate-federated",
    "/validate-federatedtypeconfigs",
    "/validate-ingressdnsrecord",
    "/validate-kubefedcluster",
    "/validate-kubefedconfig",
    "/validate-placementpolicy",
    "/validate-servicednsrecord",
];

/// The ClusterRoles aggregated into admin, edit and view, with KubeFed's names.
const AGGREGATED_ROLES: [&str; 3] = ["kubefed-admin", "kubefed-edit", "kubefed-view"];

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
            "charts/hubfed/crds/multiclusterdns.yaml",
            "crds/multiclusterdns.yaml",
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
        ["core.yaml", "federated-types.yaml", "multiclusterdns.yaml"],
        "charts/hubfed/crds/ holds exactly the generated CRD files"
    );
    Ok(())
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
    let variants: [&[&str]; 7] = [
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
        &[
            "--set",
            "crds.manage=true",
            "--set",
            "prometheusRule.enabled=true",
            "--set",
            "grafanaDashboard.enabled=true",
            "--set",
            "rbac.aggregatedRoles.enabled=false",
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
            // The sync finalizer only spares a write: a webhook down must not refuse creates.
            let policy = if name == "sync-finalizer.types.kubefed.io" {
                "Ignore"
            } else {
                "Fail"
            };
            assert_eq!(webhook["failurePolicy"], policy, "{name}");
            paths.insert(
                client["service"]["path"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
            if name == "sync-finalizer.types.kubefed.io" {
                assert_eq!(
                    webhook["rules"],
                    json!([{
                        "apiGroups": ["types.kubefed.io"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE"],
                        "resources": ["*"],
                        "scope": "*",
                    }])
                );
            }
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
            ("domains.multiclusterdns.kubefed.io", "Fail"),
            ("servicednsrecords.multiclusterdns.kubefed.io", "Fail"),
            ("ingressdnsrecords.multiclusterdns.kubefed.io", "Fail"),
            ("federated.types.kubefed.io", "Ignore"),
        ],
        "only the federated-object webhook's failurePolicy is a value"
    );
    let federated_hook = configs[0]["webhooks"]
        .as_array()
        .and_then(|hooks| {
            hooks
                .iter()
                .find(|w| w["name"] == "federated.types.kubefed.io")
        })
        .context("the federated-object webhook")?;
    assert_eq!(
        federated_hook["matchConditions"],
        hubfed_e2e::webhooks::federated_validation_match_conditions(),
        "the chart's matchConditions are those the e2e webhooks test proves"
    );
    Ok(())
}

#[test]
fn chart_rbac_grants_no_wildcards() -> anyhow::Result<()> {
    for variant in [&[][..], &["--set", "kubefedConfig.scope=Namespaced"][..]] {
        let documents = render(variant)?;
        // The controller's roles; the aggregated roles for people are checked below.
        let roles: Vec<&Value> = of_kind(&documents, "ClusterRole")
            .into_iter()
            .chain(of_kind(&documents, "Role"))
            .filter(|role| {
                !AGGREGATED_ROLES.contains(&role["metadata"]["name"].as_str().unwrap_or_default())
            })
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
                // the works and import works of pull-mode members, which the controller writes
                // and removes (they hold nothing else); and the DNSEndpoints the DNS controller writes for
                // a record, removed with it.
                if verbs.contains(&"delete") {
                    let dns_groups = ["multiclusterdns.kubefed.io", "externaldns.k8s.io"];
                    let allowed = [
                        ("Role", &[""][..], &["configmaps"][..]),
                        ("ClusterRole", &["pull.hubfed.io"][..], &["works"][..]),
                        (
                            "ClusterRole",
                            &["pull.hubfed.io"][..],
                            &["serviceimportworks"][..],
                        ),
                        ("ClusterRole", &dns_groups[..], &["dnsendpoints"][..]),
                        ("Role", &dns_groups[..], &["dnsendpoints"][..]),
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

/// A mistyped key or a wrong type is refused by `values.schema.json`, naming the value, where
/// without a schema Helm would ignore the key or fail deep in a template.
#[test]
fn chart_schema_refuses_unknown_values_and_wrong_types() -> anyhow::Result<()> {
    let chart = chart_dir();
    let chart = chart.to_str().context("chart path is UTF-8")?;
    for (setting, named) in [
        ("replicaCont=2", "replicaCont"),
        ("controller.logLevl=debug", "logLevl"),
        ("rbac.aggregatedRole.enabled=false", "aggregatedRole"),
        ("grafanaDashboard.lable=x", "lable"),
        ("replicaCount=two", "/replicaCount"),
        ("webhook.port=true", "/webhook/port"),
        ("controller.logFormat=text", "/controller/logFormat"),
        ("kubefedConfig.scope=Global", "/kubefedConfig/scope"),
        ("crds.manage=yes", "/crds/manage"),
    ] {
        for verb in ["lint", "template"] {
            let error = helm(&[
                verb,
                chart,
                "--namespace",
                KUBEFED_NAMESPACE,
                "--set",
                setting,
            ])
            .expect_err(&format!("helm {verb} --set {setting} must be refused"));
            let message = error.to_string();
            assert!(
                message.contains("schema") && message.contains(named),
                "helm {verb} --set {setting}: the refusal names {named}: {message}"
            );
        }
    }
    render(&["--set", "podDisruptionBudget.minAvailable=50%"])?;
    render(&["--set-string", "grafanaDashboard.labelValue=yes"])?;
    Ok(())
}

/// Who the aggregated roles let do what: KubeFed's rights on federated and scheduling
/// objects, read-only on the control plane's, nothing on Secrets, Works or (for view)
/// FederatedSecrets. Only for a cluster-scoped control plane, and only when asked.
#[test]
fn chart_aggregated_roles_follow_kubefeds() -> anyhow::Result<()> {
    let documents = render(&[])?;
    let roles: Vec<&Value> = of_kind(&documents, "ClusterRole")
        .into_iter()
        .filter(|r| AGGREGATED_ROLES.contains(&r["metadata"]["name"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(
        roles.len(),
        3,
        "kubefed-admin, kubefed-edit and kubefed-view"
    );
    for role in roles {
        let name = role["metadata"]["name"].as_str().unwrap_or_default();
        let aggregate_to = name.trim_start_matches("kubefed-");
        assert_eq!(
            role["metadata"]["labels"]
                [format!("rbac.authorization.k8s.io/aggregate-to-{aggregate_to}").as_str()],
            "true",
            "{name}"
        );
        let mut writes_federated = false;
        for rule in role["rules"].as_array().context("rules")? {
            let groups = strings(&rule["apiGroups"]);
            let resources = strings(&rule["resources"]);
            let verbs = strings(&rule["verbs"]);
            let what = format!("{name} rule {rule}");
            assert!(!verbs.contains(&"*"), "{what}: wildcard verb");
            for group in &groups {
                assert!(
                    [
                        "types.kubefed.io",
                        "core.kubefed.io",
                        "scheduling.kubefed.io",
                        "scheduling.hubfed.io"
                    ]
                    .contains(group),
                    "{what}: {group}"
                );
            }
            if groups.contains(&"core.kubefed.io") {
                assert_eq!(
                    verbs,
                    ["get", "list", "watch"],
                    "{what}: the control plane is read-only"
                );
            }
            if name == "kubefed-view" {
                assert_eq!(verbs, ["get", "list", "watch"], "{what}");
                if groups.contains(&"types.kubefed.io") {
                    assert!(
                        !resources.contains(&"*"),
                        "{what}: view lists what it reads"
                    );
                }
                assert!(
                    !resources.iter().any(|r| r.starts_with("federatedsecrets")),
                    "{what}: view reads no Secret data"
                );
            }
            if groups == ["types.kubefed.io"] && verbs.contains(&"create") {
                writes_federated = resources == ["*"];
            }
        }
        assert_eq!(
            writes_federated,
            name != "kubefed-view",
            "{name}: admin and edit write every federated type"
        );
    }
    let view = of_kind(&documents, "ClusterRole")
        .into_iter()
        .find(|r| r["metadata"]["name"] == "kubefed-view")
        .context("kubefed-view")?;
    let readable = strings(&view["rules"][0]["resources"]);
    assert!(
        readable.contains(&"federateddeployments/status"),
        "{readable:?}"
    );

    for variant in [
        &["--set", "rbac.aggregatedRoles.enabled=false"][..],
        &["--set", "kubefedConfig.scope=Namespaced"][..],
    ] {
        let documents = render(variant)?;
        let names: Vec<&Value> = of_kind(&documents, "ClusterRole")
            .into_iter()
            .map(|r| &r["metadata"]["name"])
            .filter(|n| AGGREGATED_ROLES.contains(&n.as_str().unwrap_or_default()))
            .collect();
        assert!(
            names.is_empty(),
            "{variant:?}: no aggregated roles, got {names:?}"
        );
    }
    let extra = render(&[
        "--set",
        "rbac.aggregatedRoles.extraViewResources={federatedcronjobs}",
    ])?;
    let view = of_kind(&extra, "ClusterRole")
        .into_iter()
        .find(|r| r["metadata"]["name"] == "kubefed-view")
        .context("kubefed-view")?;
    assert!(strings(&view["rules"][0]["resources"]).contains(&"federatedcronjobs"));
    Ok(())
}

/// `prometheusRule` and `grafanaDashboard` render exactly the rules and dashboard of
/// `deploy/` (which `hack/check-monitoring.sh` checks), with the configured labels; neither
/// by default.
#[test]
fn chart_monitoring_renders_the_shipped_rules_and_dashboard() -> anyhow::Result<()> {
    let defaults = render(&[])?;
    assert!(of_kind(&defaults, "PrometheusRule").is_empty());
    assert!(
        of_kind(&defaults, "ConfigMap").is_empty(),
        "no dashboard ConfigMap by default"
    );

    let documents = render(&[
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "prometheusRule.labels.release=prometheus",
        "--set",
        "grafanaDashboard.enabled=true",
        "--set",
        "grafanaDashboard.labelKey=dashboards",
        "--set-string",
        "grafanaDashboard.labelValue=hubfed",
        "--set",
        "grafanaDashboard.namespace=monitoring",
        "--set",
        "grafanaDashboard.annotations.grafana_folder=Federation",
    ])?;
    let root = repo_root();
    let shipped_rules: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(
        root.join("deploy/prometheus/hubfed-alerts.yaml"),
    )?)?;
    let rules = of_kind(&documents, "PrometheusRule");
    let rule = rules.first().context("a PrometheusRule")?;
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(
        rule["spec"]["groups"], shipped_rules["groups"],
        "the PrometheusRule holds deploy/prometheus/hubfed-alerts.yaml's groups"
    );

    let shipped_dashboard = std::fs::read_to_string(root.join("deploy/grafana/hubfed.json"))?;
    let maps = of_kind(&documents, "ConfigMap");
    let dashboard = maps.first().context("the dashboard ConfigMap")?;
    assert_eq!(dashboard["metadata"]["namespace"], "monitoring");
    assert_eq!(dashboard["metadata"]["labels"]["dashboards"], "hubfed");
    assert_eq!(
        dashboard["metadata"]["annotations"]["grafana_folder"],
        "Federation"
    );
    assert_eq!(
        dashboard["data"]["hubfed.json"].as_str(),
        Some(shipped_dashboard.as_str()),
        "the ConfigMap holds deploy/grafana/hubfed.json byte for byte"
    );
    let label = render(&["--set", "grafanaDashboard.enabled=true"])?;
    assert_eq!(
        of_kind(&label, "ConfigMap")[0]["metadata"]["labels"]["grafana_dashboard"],
        "1",
        "the sidecar's usual label by default"
    );
    Ok(())
}

/// `crds.manage` renders every CRD of `crds/` as a release object, unchanged but for Helm's
/// labels and `helm.sh/resource-policy: keep`; off by default (Helm's crds/ step only).
#[test]
fn chart_renders_managed_crds_only_when_asked() -> anyhow::Result<()> {
    assert!(of_kind(&render(&[])?, "CustomResourceDefinition").is_empty());
    let managed = render(&["--set", "crds.manage=true"])?;
    let rendered = of_kind(&managed, "CustomResourceDefinition");
    let mut shipped = Vec::new();
    for file in [
        "crds/core.yaml",
        "crds/federated-types.yaml",
        "crds/multiclusterdns.yaml",
    ] {
        shipped.extend(hubfed_e2e::helm::parse_documents(
            &std::fs::read_to_string(chart_dir().join(file))?,
        )?);
    }
    assert_eq!(rendered.len(), shipped.len(), "every CRD of crds/");
    for (rendered, shipped) in rendered.iter().zip(&shipped) {
        let name = &shipped["metadata"]["name"];
        assert_eq!(
            rendered["metadata"]["annotations"]["helm.sh/resource-policy"], "keep",
            "{name}: uninstall keeps it"
        );
        assert_eq!(
            rendered["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "Helm"
        );
        let mut bare = (*rendered).clone();
        if let Some(metadata) = bare["metadata"].as_object_mut() {
            metadata.remove("labels");
            metadata.remove("annotations");
        }
        assert_eq!(&bare, shipped, "{name}: the generated CRD as it is");
    }
    Ok(())
}

/// `helm upgrade --reuse-values` from a release of a chart that had none of the newer values
/// renders with their defaults instead of failing on a nil value (values set to null are
/// dropped, as the older release's values lack them).
#[test]
fn chart_renders_without_the_newer_values() -> anyhow::Result<()> {
    let documents = render(&[
        "--set",
        "crds=null",
        "--set",
        "prometheusRule=null",
        "--set",
        "grafanaDashboard=null",
        "--set",
        "rbac.aggregatedRoles=null",
    ])?;
    let aggregated = of_kind(&documents, "ClusterRole")
        .into_iter()
        .filter(|r| AGGREGATED_ROLES.contains(&r["metadata"]["name"].as_str().unwrap_or_default()))
        .count();
    assert_eq!(aggregated, 3, "the aggregated roles, on by default");
    for kind in ["CustomResourceDefinition", "PrometheusRule", "ConfigMap"] {
        assert!(
            of_kind(&documents, kind).is_empty(),
            "no {kind}: off by default"
        );
    }
    Ok(())
}
