//! A running federation for end-to-end tests: the hub and members of
//! [`hubfed_testenv::shared`], the KubeFed CRDs, the ten default FederatedTypeConfigs, both
//! members joined, and one `hubfed-controller` per test binary.
//!
//! [`Federation::shared`] sets all of this up on first use and blocks until both members'
//! KubeFedClusters are `Ready`. The controller then runs for as long as the test binary, on a
//! dedicated thread with its own multi-thread tokio runtime: every `#[tokio::test]` has its own
//! runtime, and kube clients die with the runtime that created them. For the same reason the
//! client getters here create a fresh client per call; keep one per test.
//!
//! Tests wait for conditions with [`wait_for`] and generous deadlines ([`TIMEOUT`]), never
//! sleep-and-assert. Each test works in its own namespace ([`unique_ns`]) or on uniquely named
//! cluster-scoped objects ([`unique_name`]), so tests run in parallel. Namespaced federated
//! objects propagate only inside a federated namespace (cluster-scoped control plane,
//! docs/kubefed-compatibility.md §1.6): [`Federation::create_federated_namespace`] makes one.
//!
//! Tests that need their own clusters — a KubeFedConfig in place before the controller starts,
//! members they join themselves, a controller they start, stop or kill — set them up with
//! [`PrivateFederation`] and start a controller with [`controller::ControllerTask`] or
//! [`controller::ControllerProcess`] (docs/development.md, "Writing an end-to-end test").
//!
//! Shared steps, one place each: waits ([`wait_for`], [`wait_copies`] with [`Expected`]
//! copies, [`wait_present`], [`wait_absent`], [`wait_member_field`]), objects and edits
//! (`objects.rs`), checks of copies and statuses (`checks.rs`), set-up without a controller
//! (`setup.rs`), a custom type of the tests' own ([`ExampleType`]); by subject, [`rollout`]
//! (RolloutStrategies, rollout state), [`scheduling`] (RSPs, PlacementPolicies), [`cli`]
//! (`hubfedctl` on a federation with nothing joined), [`helm`] (the charts), [`agent`] and
//! [`controller`] (processes), [`fault_proxy`], [`webhooks`], [`member_lists`] (the member
//! lists of the controller in the test process), [`statuses`] (an object's statuses as
//! written).
//!
//! Controller logs: set `HUBFED_E2E_LOG` to a tracing filter (e.g.
//! `info,hubfed_controller=debug`); they go to stderr, or to `HUBFED_E2E_LOG_FILE`.

use std::fmt::Display;
use std::io::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use hubfed_api::kubefedcluster::KubeFedCluster;
use hubfed_api::names::DEFAULT_KUBEFED_NAMESPACE;
use hubfed_testenv::{Cluster, TestEnv};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use serde_json::Value;
use tokio::sync::{Mutex, MutexGuard, OnceCell};

pub mod agent;
mod checks;
pub mod cli;
pub mod controller;
mod copies;
pub mod dns;
mod example_type;
pub mod fault_proxy;
pub mod helm;
pub mod kubefed;
pub mod mcs;
pub mod member_lists;
mod objects;
mod private;
pub mod proxied;
pub mod rollout;
pub mod scheduling;
mod setup;
mod shared;
pub mod staged;
pub mod statuses;
pub mod upstream_crds;
mod wait;
pub mod webhooks;

pub use checks::*;
pub use copies::{
    Expected, Field, copy_problems, federate_settings, wait_absent, wait_copies, wait_federated_ok,
    wait_member_field, wait_present, wait_propagated,
};
pub use example_type::ExampleType;
pub use objects::*;
pub use private::{PrivateFederation, fast_health_checks, pull_health_checks};
pub use setup::*;
pub(crate) use shared::{FEDERATION, start};
pub use wait::*;

/// Namespace of the control plane: FTCs, KubeFedClusters, their Secrets, the KubeFedConfig.
pub const KUBEFED_NAMESPACE: &str = DEFAULT_KUBEFED_NAMESPACE;
/// The members [`Federation::shared`] joins.
pub const MEMBERS: [&str; 2] = ["member1", "member2"];
/// Default deadline of a wait: generous, the machine is shared and has 2 cores.
pub const TIMEOUT: Duration = Duration::from_secs(60);
/// Pause between two checks of a [`wait_for`].
pub const POLL_INTERVAL: Duration = Duration::from_millis(150);
/// Field manager of every write the tests make.
pub const FIELD_MANAGER: &str = "hubfed-e2e";

/// The federation of this test binary. See the [crate documentation](crate).
pub struct Federation {
    env: &'static TestEnv,
}

/// This test binary's [`Federation::shared_on`] three members, `member3` joined too and `init`
/// run once; and the binary's one-at-a-time lock, for tests that share the members' capacity
/// or settings: hold it for the whole test.
pub async fn three_members_one_at_a_time<F, Fut>(
    init: F,
) -> anyhow::Result<(&'static Federation, MutexGuard<'static, ()>)>
where
    F: FnOnce(&'static Federation) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    static SETUP: OnceCell<()> = OnceCell::const_new();
    static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());
    let fed = Federation::shared_on(3);
    SETUP
        .get_or_try_init(|| async {
            fed.join("member3", fed.cluster("member3")?).await?;
            init(fed).await
        })
        .await?;
    Ok((fed, ONE_AT_A_TIME.lock().await))
}

impl Federation {
    /// The federation of this test binary, set up on first use (blocking). Panics when it
    /// cannot be set up; every later call panics with the same message.
    pub fn shared() -> &'static Federation {
        Self::shared_by(|| start(hubfed_testenv::shared(), None, &MEMBERS))
    }

    /// Like [`Federation::shared`], on members that schedule pods: a kube-scheduler each, one
    /// Node of [`SCHEDULING_PODS_PER_NODE`] pods and the environment's stand-in kubelet
    /// ([`hubfed_testenv::Scheduling`]). Every test of a binary must use the same one of the
    /// two.
    pub fn shared_scheduling() -> &'static Federation {
        Self::shared_on(MEMBERS.len())
    }

    /// [`Federation::shared_scheduling`] with `members` members: `member1` and `member2`
    /// joined, the others (`member3`, ...) left for the test to join.
    pub fn shared_on(members: usize) -> &'static Federation {
        PrivateFederation::new()
            .members(members.max(MEMBERS.len()))
            .scheduling(hubfed_testenv::Scheduling {
                nodes_per_member: 1,
                pods_per_node: SCHEDULING_PODS_PER_NODE,
                ..Default::default()
            })
            .join(&MEMBERS)
            .shared()
    }

    /// The federation of this test binary, set up by `init` on first use.
    pub(crate) fn shared_by(
        init: impl FnOnce() -> Result<Federation, String>,
    ) -> &'static Federation {
        match FEDERATION.get_or_init(init) {
            Ok(federation) => federation,
            Err(e) => panic!("cannot start the federation: {e}"),
        }
    }

    /// The test clusters underneath.
    pub fn env(&self) -> &'static TestEnv {
        self.env
    }

    /// The kubeconfig of the test clusters (one admin context each: `hub`, `member1`, ...).
    pub fn kubeconfig(&self) -> &'static std::path::Path {
        self.env.kubeconfig_path()
    }

    /// A test cluster by kubeconfig context (`hub`, `member1`, ...).
    pub fn cluster(&self, name: &str) -> anyhow::Result<&'static Cluster> {
        self.env
            .cluster(name)
            .with_context(|| format!("no test cluster named {name}"))
    }

    /// A new admin client of the hub, bound to the calling runtime.
    pub async fn hub(&self) -> anyhow::Result<Client> {
        self.env.hub().client().await
    }

    /// A new admin client of a test cluster (`hub`, `member1`, ...), bound to the calling
    /// runtime.
    pub async fn client(&self, cluster: &str) -> anyhow::Result<Client> {
        self.cluster(cluster)?.client().await
    }

    /// Joins `cluster` under the name `name` (as `hubfedctl join` will) and waits until its
    /// KubeFedCluster is `Ready`. Joining the hub itself as `"hub"` is allowed.
    pub async fn join(&self, name: &str, cluster: &Cluster) -> anyhow::Result<()> {
        self.join_via(name, cluster, &cluster.server_url(), cluster.ca_pem())
            .await
    }

    /// [`Self::join`] with the KubeFedCluster's endpoint and CA bundle given, e.g. those of a
    /// [`fault_proxy::FaultProxy`] in front of the cluster.
    pub async fn join_via(
        &self,
        name: &str,
        cluster: &Cluster,
        endpoint: &str,
        ca_pem: &str,
    ) -> anyhow::Result<()> {
        let hub = self.hub().await?;
        register_cluster_at(&hub, name, cluster, endpoint, ca_pem).await?;
        wait_clusters_ready(&hub, &[name]).await
    }

    /// Removes the KubeFedCluster `name` and its Secret, and waits until the KubeFedCluster is
    /// gone. What the member holds stays, as with KubeFed's unjoin.
    pub async fn unjoin(&self, name: &str) -> anyhow::Result<()> {
        let hub = self.hub().await?;
        let clusters: Api<KubeFedCluster> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
        let secrets: Api<Secret> = Api::namespaced(hub, KUBEFED_NAMESPACE);
        delete_ignoring_absent(&clusters, name).await?;
        delete_ignoring_absent(&secrets, &secret_name(name)).await?;
        wait_for(
            &format!("KubeFedCluster {name} to be deleted"),
            TIMEOUT,
            async || match clusters.get_opt(name).await? {
                None => Ok(Wait::Done(())),
                Some(_) => Ok(Wait::Pending("it still exists".into())),
            },
        )
        .await
    }

    /// Creates namespace `namespace` on the hub (only there).
    pub async fn create_hub_namespace(&self, namespace: &str) -> anyhow::Result<()> {
        create_hub_namespace(&self.hub().await?, namespace).await
    }

    /// Creates namespace `namespace` on the hub and its FederatedNamespace placed on
    /// `clusters`, and waits until each of them holds the namespace, managed.
    pub async fn create_federated_namespace(
        &self,
        namespace: &str,
        clusters: &[&str],
    ) -> anyhow::Result<()> {
        let mut members = Vec::new();
        for cluster in clusters {
            members.push((*cluster, self.client(cluster).await?));
        }
        create_federated_namespace(&self.hub().await?, &members, namespace).await
    }

    /// Creates `Federated<kind>` `namespace/name` (or cluster-scoped `name`) on the hub with
    /// `spec` ([`create_federated`]); returns the API of its type in that namespace.
    pub async fn create_federated(
        &self,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        spec: Value,
    ) -> anyhow::Result<Api<DynamicObject>> {
        create_federated(&self.hub().await?, kind, namespace, name, spec).await
    }

    /// A dynamic API of `kind`'s target type in test cluster `cluster` (`hub`, `member1`, ...),
    /// in `namespace` (cluster-wide when `None`).
    pub async fn member_api(
        &self,
        cluster: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> anyhow::Result<Api<DynamicObject>> {
        Ok(dynamic_api(
            self.client(cluster).await?,
            &target(kind),
            namespace,
        ))
    }

    /// [`Self::member_api`] of each of [`MEMBERS`], member1 first.
    pub async fn member_apis(
        &self,
        kind: &str,
        namespace: Option<&str>,
    ) -> anyhow::Result<[Api<DynamicObject>; 2]> {
        Ok([
            self.member_api(MEMBERS[0], kind, namespace).await?,
            self.member_api(MEMBERS[1], kind, namespace).await?,
        ])
    }

    /// A member's (or the hub's) object of type `resource` as JSON; `None` when absent.
    pub async fn member_object(
        &self,
        cluster: &str,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> anyhow::Result<Option<Value>> {
        let api = dynamic_api(self.client(cluster).await?, resource, namespace);
        get_value(&api, name).await
    }
}

/// One plain HTTP/1.0 GET on loopback (a controller's admin port): (status, body); `None` when
/// it fails or takes more than 10 s.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        let (head, body) = response.split_once("\r\n\r\n")?;
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, body.to_owned()))
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .ok()
        .flatten()
}

/// Runs `hubfedctl --kubeconfig <kubeconfig> --host-cluster-context hub <args>` in this process
/// (through `hubfedctl::run_async`, the code the binary runs): exit code, stdout, stderr.
pub async fn hubfedctl(kubeconfig: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let mut full = vec![
        "hubfedctl".to_owned(),
        "--kubeconfig".to_owned(),
        kubeconfig.display().to_string(),
        "--host-cluster-context".to_owned(),
        "hub".to_owned(),
    ];
    full.extend(args.iter().map(|a| (*a).to_owned()));
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let code = ::hubfedctl::run_async(full, &mut stdout, &mut stderr).await;
    (
        code,
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// Writes a line to stderr (not through the print macros, which the test harness captures):
/// timings and facts worth seeing in CI logs, never asserted.
pub fn report(line: impl Display) {
    let _ = writeln!(std::io::stderr(), "hubfed-e2e: {line}");
}

/// Pods one Node of [`Federation::shared_scheduling`] holds.
pub const SCHEDULING_PODS_PER_NODE: u32 = 40;
