//! The Helm chart `charts/hubfed`, the real proof: its RBAC alone is enough to run the
//! federation — a controller authenticated as the chart's ServiceAccount keeps two members
//! Ready and propagates a FederatedConfigMap to both.
//!
//! Needs `helm` (see `chart.rs`). The proof does not use the harness's controller (it runs as
//! cluster admin): this binary starts its own, in the test, with a TokenRequest token of the
//! chart's ServiceAccount.

use anyhow::{Context as _, ensure};
use hubfed_api::names::MANAGED_LABEL;
use hubfed_api::propagatedversion::PropagatedVersion;
use hubfed_controller::ControllerConfig;
use hubfed_e2e::controller::ControllerTask;
use hubfed_e2e::helm::{APPLIED_KINDS, RELEASE, apply_rendered, of_kind, render};
use hubfed_e2e::{
    Expected, KUBEFED_NAMESPACE, MEMBERS, TIMEOUT, Wait, federate_settings, get_value,
    install_crds, report, unique_ns, wait_for, wait_propagated,
};
use k8s_openapi::api::authentication::v1::{SelfSubjectReview, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::config::{AuthInfo, KubeConfigOptions};
use serde_json::json;

/// KubeFed's leader-election lock name.
const LEASE: &str = "kubefed-controller-manager";

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
    // Multi-cluster DNS: records read and their status written, DNSEndpoints of both groups
    // written, Domains read in the control plane's namespace only.
    access(
        "watch",
        "multiclusterdns.kubefed.io",
        "servicednsrecords",
        None,
        true,
    ),
    access(
        "patch",
        "multiclusterdns.kubefed.io",
        "ingressdnsrecords/status",
        Some(""),
        true,
    ),
    access(
        "update",
        "multiclusterdns.kubefed.io",
        "servicednsrecords",
        Some(""),
        false,
    ),
    access(
        "delete",
        "externaldns.k8s.io",
        "dnsendpoints",
        Some(""),
        true,
    ),
    access(
        "create",
        "multiclusterdns.kubefed.io",
        "dnsendpoints",
        Some(""),
        true,
    ),
    access(
        "watch",
        "multiclusterdns.kubefed.io",
        "domains",
        Some(KUBEFED_NAMESPACE),
        true,
    ),
    access(
        "create",
        "multiclusterdns.kubefed.io",
        "domains",
        Some(KUBEFED_NAMESPACE),
        false,
    ),
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

    // Propagation: a federated namespace, then a FederatedConfigMap in it, to both members;
    // status and finalizer writes work too.
    let data = json!({"mode": "federated"});
    let (hub_configmaps, member_apis) = federate_settings(&admin, env, &namespace, data).await?;
    let wanted = json!("federated");
    let copies = member_apis.iter().map(|(member, api)| (*member, api));
    let expected = Expected::each(copies, &[("/data/mode", Some(&wanted))]);
    controller
        .while_running(wait_propagated(
            "the ConfigMap in both members, the FederatedConfigMap's status",
            &hub_configmaps,
            "settings",
            &MEMBERS,
            &expected,
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
