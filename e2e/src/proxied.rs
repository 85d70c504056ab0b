//! A private federation whose member2 is reached through a [`FaultProxy`], with the
//! controller in this process: for tests that make one member's answers hang or fail while
//! the other's go through.

use anyhow::Context as _;
use hubfed_api::kubefedconfig::KubeFedConfigSpec;
use hubfed_controller::ControllerConfig;
use hubfed_testenv::TestEnv;
use kube::Client;
use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};

use crate::controller::ControllerTask;
use crate::fault_proxy::FaultProxy;
use crate::{
    Expected, MEMBERS, PrivateFederation, create_federated, create_federated_namespace,
    dynamic_api, federated, modify, placement, register_cluster_at, target, unique_ns,
    wait_clusters_ready, wait_propagated,
};

/// A hub, member1 joined directly and member2 through a fault proxy (no
/// kube-controller-manager), a controller with `config` running in this process with both
/// members ready, and a federated namespace on both. Everything stops when it is dropped.
pub struct ProxiedMember2 {
    /// The clusters; kept for as long as the test runs.
    pub env: TestEnv,
    pub hub: Client,
    /// In front of member2.
    pub proxy: FaultProxy,
    pub controller: ControllerTask,
    /// The federated namespace.
    pub ns: String,
    /// Each member's ConfigMaps in `ns`, in the order of [`MEMBERS`].
    pub copies: Vec<(&'static str, Api<DynamicObject>)>,
}

impl ProxiedMember2 {
    /// Starts it all; the namespace's name begins with `prefix`.
    pub async fn start(config: ControllerConfig, prefix: &str) -> anyhow::Result<Self> {
        Self::start_in(PrivateFederation::new(), config, prefix).await
    }

    /// [`Self::start`] with the KubeFedConfig `spec` (e.g. [`crate::fast_health_checks`]).
    pub async fn with_kubefed_config(
        spec: KubeFedConfigSpec,
        config: ControllerConfig,
        prefix: &str,
    ) -> anyhow::Result<Self> {
        Self::start_in(PrivateFederation::new().config(spec), config, prefix).await
    }

    async fn start_in(
        federation: PrivateFederation,
        config: ControllerConfig,
        prefix: &str,
    ) -> anyhow::Result<Self> {
        let env = federation
            .without_controller_manager()
            .join(&["member1"])
            .start()
            .await?;
        let hub = env.hub().client().await?;
        let member2 = env.cluster("member2").context("no member2")?;
        let proxy = FaultProxy::start(&member2.server_url(), member2.ca_pem(), None).await?;
        register_cluster_at(&hub, "member2", member2, &proxy.url(), proxy.ca_pem()).await?;
        let mut controller = ControllerTask::spawn("the controller", hub.clone(), config);
        controller
            .while_running(wait_clusters_ready(&hub, &MEMBERS))
            .await?;

        let ns = unique_ns(prefix);
        let mut members = Vec::new();
        for name in MEMBERS {
            let cluster = env.cluster(name).with_context(|| format!("no {name}"))?;
            members.push((name, cluster.client().await?));
        }
        controller
            .while_running(create_federated_namespace(&hub, &members, &ns))
            .await?;
        let copies = members
            .into_iter()
            .map(|(name, client)| (name, dynamic_api(client, &target("ConfigMap"), Some(&ns))))
            .collect();
        Ok(Self {
            env,
            hub,
            proxy,
            controller,
            ns,
            copies,
        })
    }
}

/// A FederatedConfigMap placed on both members, its template holding a version under `data.v`:
/// what tests change and wait for while one member's answers are held.
pub struct Versioned {
    /// Its type's API in its namespace on the hub.
    pub hub_api: Api<DynamicObject>,
    name: &'static str,
    copies: Vec<(&'static str, Api<DynamicObject>)>,
}

impl Versioned {
    /// Creates `name` in `federation`'s namespace holding `v`.
    pub async fn create(
        federation: &ProxiedMember2,
        name: &'static str,
        v: &str,
    ) -> anyhow::Result<Self> {
        let spec = json!({"template": {"data": {"v": v}}, "placement": placement(&MEMBERS)});
        let ns = Some(federation.ns.as_str());
        create_federated(&federation.hub, "ConfigMap", ns, name, spec).await?;
        Ok(Self {
            hub_api: dynamic_api(federation.hub.clone(), &federated("ConfigMap"), ns),
            name,
            copies: federation.copies.clone(),
        })
    }

    /// Changes its template to hold `v`.
    pub async fn change(&self, v: &str) -> anyhow::Result<()> {
        modify(&self.hub_api, self.name, |object| {
            object["spec"]["template"]["data"]["v"] = json!(v);
        })
        .await?;
        Ok(())
    }

    /// Its copies in the first `members` members (in the order of [`MEMBERS`]) holding `v`.
    pub fn holding<'a>(&'a self, members: usize, v: &'a Value) -> Vec<Expected<'a>> {
        let copies = self.copies[..members].iter().map(|(c, a)| (*c, a));
        Expected::each(copies, &[("/data/v", Some(v))])
    }

    /// Waits until both members hold `v` and its status says so.
    pub async fn converged(&self, v: &str) -> anyhow::Result<()> {
        let v = json!(v);
        let what = format!("v={v} in both members");
        let expected = self.holding(MEMBERS.len(), &v);
        wait_propagated(&what, &self.hub_api, self.name, &MEMBERS, &expected).await
    }
}
