//! The hub joined as a member under a name whose identity cannot be established (issue 17):
//! its `kube-system` lookup refused by RBAC (403), failing (500) or never answered. Removing it
//! from a FederatedNamespace's placement, and deleting the FederatedNamespace, must leave the
//! hub's namespace Active with every federated object in it: at most its managed label goes.
//!
//! The 500 and the silence come from a TLS-terminating proxy in front of the hub's API server
//! that fails only `GET /api/v1/namespaces/kube-system`.
//!
//! Its own test binary: joining the hub changes the cluster registry that every placement
//! reads. The variants run one after another (two KubeFedClusters for the same API server would
//! fight over its namespaces), each unjoined at the end.

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use hubfed_api::names::MANAGED_LABEL;
use hubfed_e2e::fault_proxy::{Fault, FaultProxy, FaultResponse};
use hubfed_e2e::{
    Federation, TIMEOUT, Wait, apply, create_federated, get_value, modify, placement,
    register_endpoint, service_account_token, unique_ns, wait_clusters_ready, wait_for,
    wait_offline,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::{Client, ResourceExt};
use serde_json::json;

/// The name the hub is joined under.
const HUB_MEMBER: &str = "hubself";
const KUBE_SYSTEM_PATH: &str = "/api/v1/namespaces/kube-system";

#[derive(Clone, Copy, Debug)]
enum Failure {
    /// The member credential may `get` only the federated namespace (403 on kube-system).
    Forbidden,
    /// A proxy answers 500 to the kube-system lookup.
    ServerError,
    /// A proxy never answers the kube-system lookup.
    NoAnswer,
}

#[tokio::test]
async fn an_unknown_hub_identity_never_deletes_the_hubs_namespace() -> anyhow::Result<()> {
    let fed = Federation::shared();
    for failure in [Failure::Forbidden, Failure::ServerError, Failure::NoAnswer] {
        let result = scenario(fed, failure).await;
        let unjoined = fed.unjoin(HUB_MEMBER).await;
        result.with_context(|| format!("kube-system lookup failing with {failure:?}"))?;
        unjoined?;
    }
    let result = collected_after_an_outage(fed).await;
    let unjoined = fed.unjoin(HUB_MEMBER).await;
    result.context("garbage collection after the hub came back")?;
    unjoined
}

/// The hub joined as a member is cut off (a proxy drops everything), a FederatedNamespace
/// placed on it is deleted meanwhile — its finalizer goes, recording that a copy may remain in
/// the hub — and when the hub is back, garbage collection finds that "copy" with this control
/// plane's proof and no federated object. It is the hub's own namespace: unlabelled, never
/// deleted (issue 9). Before the guard, garbage collection deleted it with everything in it.
async fn collected_after_an_outage(fed: &Federation) -> anyhow::Result<()> {
    let hub = fed.hub().await?;
    let ns = unique_ns("gc-victim");
    let cluster = fed.env().hub();
    let proxy = FaultProxy::start(&cluster.server_url(), cluster.ca_pem(), None).await?;
    fed.join_via(HUB_MEMBER, cluster, &proxy.url(), proxy.ca_pem())
        .await?;
    let (fns_api, fcm_api) = federate_victim(fed, &hub, &ns).await?;
    let hub_namespaces: Api<Namespace> = Api::all(hub.clone());
    let survivors = Survivors {
        namespaces: &hub_namespaces,
        ns: &ns,
        federated: [(&fcm_api, "precious"), (&fcm_api, "precious")],
    };
    wait_for(
        "the hub's namespace labelled managed",
        TIMEOUT,
        async || {
            Ok(
                match managed_label(&hub_namespaces, &ns).await?.as_deref() {
                    Some("true") => Wait::Done(()),
                    other => Wait::Pending(format!("hub: {MANAGED_LABEL}={other:?}")),
                },
            )
        },
    )
    .await?;

    proxy.partition();
    wait_offline(&hub, HUB_MEMBER).await?;
    fns_api
        .delete(&ns, &DeleteParams::default())
        .await
        .context("deleting the FederatedNamespace")?;
    wait_for(
        "the FederatedNamespace deleted without waiting for the Offline hub member",
        TIMEOUT,
        async || {
            survivors.check().await?;
            Ok(match get_value(&fns_api, &ns).await? {
                None => Wait::Done(()),
                Some(o) => Wait::Pending(format!("finalizers {}", o["metadata"]["finalizers"])),
            })
        },
    )
    .await?;
    survivors.hold(Duration::from_secs(2)).await?;

    proxy.heal();
    wait_clusters_ready(&hub, &[HUB_MEMBER]).await?;
    survivors
        .wait_label(
            "garbage collection unlabels the hub's namespace and never deletes it",
            None,
        )
        .await?;
    survivors.hold(Duration::from_secs(5)).await?;
    hub_namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .context("deleting the test namespace")?;
    Ok(())
}

async fn scenario(fed: &Federation, failure: Failure) -> anyhow::Result<()> {
    let hub = fed.hub().await?;
    let ns = unique_ns("victim");
    let proxy = join_hub(fed, &hub, &ns, failure).await?;

    let (fns_api, fcm_api) = federate_victim(fed, &hub, &ns).await?;

    let hub_namespaces: Api<Namespace> = Api::all(hub.clone());
    let member1_namespaces: Api<Namespace> = Api::all(fed.client("member1").await?);
    let member1_configmaps: Api<ConfigMap> = Api::namespaced(fed.client("member1").await?, &ns);
    let survivors = Survivors {
        namespaces: &hub_namespaces,
        ns: &ns,
        federated: [(&fns_api, ns.as_str()), (&fcm_api, "precious")],
    };

    wait_for(
        "the hub's namespace labelled managed, member1 holding the namespace and the ConfigMap",
        TIMEOUT,
        async || {
            let mut problems = Vec::new();
            if managed_label(&hub_namespaces, &ns).await?.as_deref() != Some("true") {
                problems.push("hub: namespace not labelled managed".to_owned());
            }
            if member1_namespaces.get_opt(&ns).await?.is_none() {
                problems.push("member1: no namespace".to_owned());
            }
            if member1_configmaps.get_opt("precious").await?.is_none() {
                problems.push("member1: no ConfigMap".to_owned());
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;

    // 1. The hub leaves the placement: its namespace only loses the managed label.
    set_placement(&fns_api, &ns, &["member1"]).await?;
    survivors
        .wait_label("the hub's namespace unlabelled, never deleted", None)
        .await?;
    survivors.hold(Duration::from_secs(5)).await?;

    // 2. Back in the placement, then the FederatedNamespace deleted: member1's copy goes, the
    //    hub's namespace stays with the other federated objects.
    set_placement(&fns_api, &ns, &[HUB_MEMBER, "member1"]).await?;
    survivors
        .wait_label("the hub's namespace labelled again", Some("true"))
        .await?;
    fns_api
        .delete(&ns, &DeleteParams::default())
        .await
        .context("deleting the FederatedNamespace")?;
    let kept = Survivors {
        federated: [(&fcm_api, "precious"), (&fcm_api, "precious")],
        ..survivors
    };
    wait_for(
        "the FederatedNamespace and member1's namespace gone, the hub's namespace kept",
        TIMEOUT,
        async || {
            kept.check().await?;
            let mut problems = Vec::new();
            if get_value(&fns_api, &ns).await?.is_some() {
                problems.push("the FederatedNamespace still exists".to_owned());
            }
            if member1_namespaces.get_opt(&ns).await?.is_some() {
                problems.push("member1: the namespace still exists".to_owned());
            }
            if let Some(value) = managed_label(&hub_namespaces, &ns).await? {
                problems.push(format!("hub: {MANAGED_LABEL}={value}"));
            }
            Ok(Wait::all_or_pending(problems))
        },
    )
    .await?;
    kept.hold(Duration::from_secs(5)).await?;

    if let Some(proxy) = &proxy {
        ensure!(
            proxy.fault_hits() > 0,
            "the controller never looked up kube-system through the proxy: the fault was not exercised"
        );
    }
    // Leave nothing behind for the next variant.
    hub_namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .context("deleting the test namespace")?;
    Ok(())
}

/// The hub's namespace `ns` federated to the hub member and member1, with a FederatedConfigMap
/// "precious" in it placed on member1: the FederatedNamespace's and the ConfigMap's APIs.
async fn federate_victim(
    fed: &Federation,
    hub: &Client,
    ns: &str,
) -> anyhow::Result<(Api<DynamicObject>, Api<DynamicObject>)> {
    fed.create_hub_namespace(ns).await?;
    let fns_api = create_federated(
        hub,
        "Namespace",
        Some(ns),
        ns,
        json!({ "placement": placement(&[HUB_MEMBER, "member1"]) }),
    )
    .await?;
    let fcm_api = create_federated(
        hub,
        "ConfigMap",
        Some(ns),
        "precious",
        json!({"template": {"data": {"key": "value"}}, "placement": placement(&["member1"])}),
    )
    .await?;
    Ok((fns_api, fcm_api))
}

/// Joins the hub as [`HUB_MEMBER`] so that its `kube-system` lookup fails as `failure` says;
/// returns the proxy in front of it, if any.
async fn join_hub(
    fed: &Federation,
    hub: &Client,
    ns: &str,
    failure: Failure,
) -> anyhow::Result<Option<FaultProxy>> {
    let cluster = fed.env().hub();
    let (endpoint, ca_pem, token, proxy) = match failure {
        Failure::Forbidden => {
            let role = restricted_role(hub, ns).await?;
            let token = service_account_token(hub, &role, &role).await?;
            // The precondition of the scenario: this credential cannot read kube-system.
            let as_member = member_client(&cluster.server_url(), cluster.ca_pem(), &token).await?;
            let refused = Api::<Namespace>::all(as_member)
                .get_metadata("kube-system")
                .await;
            ensure!(
                matches!(&refused, Err(kube::Error::Api(s)) if s.code == 403),
                "the restricted credential was not refused kube-system: {refused:?}"
            );
            let endpoint = cluster.server_url();
            (endpoint, cluster.ca_pem().to_owned(), token, None)
        }
        Failure::ServerError | Failure::NoAnswer => {
            let proxy = FaultProxy::start(&cluster.server_url(), cluster.ca_pem(), None).await?;
            proxy.set_faults(vec![Fault {
                path: KUBE_SYSTEM_PATH.to_owned(),
                method: Some(http::Method::GET),
                response: match failure {
                    Failure::ServerError => FaultResponse::Status(500),
                    _ => FaultResponse::Hang,
                },
            }]);
            fed.join_via(HUB_MEMBER, cluster, &proxy.url(), proxy.ca_pem())
                .await?;
            return Ok(Some(proxy));
        }
    };
    register_endpoint(hub, HUB_MEMBER, &endpoint, &ca_pem, &token).await?;
    wait_clusters_ready(hub, &[HUB_MEMBER]).await?;
    Ok(proxy)
}

/// A ClusterRole as issue 17 describes: namespaces may be listed, watched, created, updated,
/// patched and deleted, but `get` only for `ns`; full access to the other federated types.
async fn restricted_role(hub: &Client, ns: &str) -> anyhow::Result<String> {
    let name = format!("hubfed-restricted-{ns}");
    let rule =
        |groups: &[&str], resources: &[&str], verbs: &[&str], names: Option<&str>| PolicyRule {
            api_groups: Some(groups.iter().map(|g| (*g).to_owned()).collect()),
            resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
            verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
            resource_names: names.map(|n| vec![n.to_owned()]),
            ..Default::default()
        };
    let role = ClusterRole {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        rules: Some(vec![
            rule(
                &[""],
                &["namespaces"],
                &["list", "watch", "create", "update", "patch", "delete"],
                None,
            ),
            rule(&[""], &["namespaces"], &["get"], Some(ns)),
            rule(
                &[""],
                &["configmaps", "secrets", "services", "serviceaccounts"],
                &["*"],
                None,
            ),
            rule(
                &["apps", "batch", "networking.k8s.io"],
                &["*"],
                &["*"],
                None,
            ),
        ]),
        ..Default::default()
    };
    apply(&Api::<ClusterRole>::all(hub.clone()), &role).await?;
    Ok(name)
}

async fn member_client(endpoint: &str, ca_pem: &str, token: &str) -> anyhow::Result<Client> {
    use base64::Engine as _;
    let kubeconfig: kube::config::Kubeconfig = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {
            "server": endpoint,
            "certificate-authority-data":
                base64::engine::general_purpose::STANDARD.encode(ca_pem.as_bytes()),
        }}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(Client::try_from(config)?)
}

async fn set_placement(
    api: &Api<DynamicObject>,
    name: &str,
    clusters: &[&str],
) -> anyhow::Result<()> {
    modify(api, name, |object| {
        object["spec"]["placement"] = placement(clusters);
    })
    .await?;
    Ok(())
}

async fn managed_label(api: &Api<Namespace>, name: &str) -> anyhow::Result<Option<String>> {
    let namespace = api
        .get_opt(name)
        .await?
        .with_context(|| format!("the hub's namespace {name} is gone"))?;
    Ok(namespace.labels().get(MANAGED_LABEL).cloned())
}

/// What must never be lost: the hub's namespace, Active, and federated objects in it.
#[derive(Clone, Copy)]
struct Survivors<'a> {
    namespaces: &'a Api<Namespace>,
    ns: &'a str,
    federated: [(&'a Api<DynamicObject>, &'a str); 2],
}

impl Survivors<'_> {
    /// Fails at once (no retry) when anything was lost.
    async fn check(&self) -> anyhow::Result<()> {
        let Some(namespace) = self.namespaces.get_opt(self.ns).await? else {
            bail!("the hub's namespace {} was deleted", self.ns);
        };
        if namespace.metadata.deletion_timestamp.is_some() {
            bail!("the hub's namespace {} is being deleted", self.ns);
        }
        for (api, name) in self.federated {
            if get_value(api, name).await?.is_none() {
                bail!("the federated object {name} in the hub's namespace is gone");
            }
        }
        Ok(())
    }

    /// Waits until the hub's namespace has `want` as its managed label, [`Self::check`]ing
    /// on every look.
    async fn wait_label(&self, what: &str, want: Option<&str>) -> anyhow::Result<()> {
        wait_for(what, TIMEOUT, async || {
            self.check().await?;
            let label = managed_label(self.namespaces, self.ns).await?;
            Ok(if label.as_deref() == want {
                Wait::Done(())
            } else {
                Wait::Pending(format!("hub: {MANAGED_LABEL}={label:?}"))
            })
        })
        .await
    }

    /// [`Self::check`] throughout `period`.
    async fn hold(&self, period: Duration) -> anyhow::Result<()> {
        let until = std::time::Instant::now() + period;
        while std::time::Instant::now() < until {
            self.check().await?;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        Ok(())
    }
}
