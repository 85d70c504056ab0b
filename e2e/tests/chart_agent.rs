//! The agent's chart `charts/hubfed-agent`, only rendered: one agent as join's ServiceAccount
//! with join's Secret mounted, and — when it creates the ServiceAccount — the RBAC
//! `hubfedctl join --mode pull` grants in the member, rule for rule.
//!
//! Needs `helm` (see `chart.rs`).

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use hubfed_e2e::KUBEFED_NAMESPACE;
use hubfed_e2e::helm::{
    helm, of_kind, parse_documents, render, repo_root, values_missing_from_readme,
};
use serde_json::{Value, json};

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
            "--mcs=true",
            format!("--cluster-set={KUBEFED_NAMESPACE}"),
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

    // rbac.rs's mcs_rules, after the others of a cluster-scoped least-privilege grant.
    let all = json!([
        "get", "list", "watch", "create", "update", "patch", "delete"
    ]);
    let mcs = json!([
        {"apiGroups": ["multicluster.x-k8s.io"], "resources": ["serviceexports"],
            "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["multicluster.x-k8s.io"], "resources": ["serviceimports"], "verbs": all},
        {"apiGroups": ["multicluster.x-k8s.io"],
            "resources": ["serviceexports/status", "serviceimports/status"],
            "verbs": ["get", "update", "patch"]},
        {"apiGroups": [""], "resources": ["services"], "verbs": all},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": all},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["about.k8s.io"], "resources": ["clusterproperties"],
            "verbs": ["get", "list", "watch", "create", "update", "patch"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"],
            "verbs": ["create", "patch"]},
    ]);
    let plus_mcs = |rules: Value| -> Value {
        let mut rules = rules.as_array().cloned().unwrap_or_default();
        rules.extend(mcs.as_array().cloned().unwrap_or_default());
        Value::Array(rules)
    };

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
            plus_mcs(json!([
                objects("", &["configmaps", "secrets"]),
                objects("apps", &["deployments"]),
                objects(RBAC_GROUP, &["clusterroles"]),
                bind,
                pods,
                namespaces,
                urls,
            ])),
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
    assert_rbac(
        &agent_rbac(&[])?,
        &[("ClusterRole", role, plus_mcs(default_rules.clone()))],
    );
    // Without multi-cluster services (join --mcs=false).
    assert_rbac(
        &agent_rbac(&["--set", "rbac.mcs=false"])?,
        &[("ClusterRole", role, default_rules)],
    );

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
            plus_mcs(json!([
                objects("", &["pods"]),
                objects("apps", &["deployments"]),
                namespaces,
                urls
            ])),
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
            plus_mcs(json!([
                objects("", &["configmaps"]),
                objects("apps", &["replicasets"]),
                pods,
                namespaces,
                urls
            ])),
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
