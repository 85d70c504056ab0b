//! A federation on test clusters of its own, for tests that cannot share
//! [`Federation::shared`]'s: they need a particular KubeFedConfig before the controller starts
//! (health checks, leader election, scope), members left for them to join, fewer members, or
//! clusters they may freeze.
//!
//! ```ignore
//! // One per test binary, the controller in this process on a thread of its own:
//! let federation = PrivateFederation::new().config(fast_health_checks()).unjoined().shared();
//! // One per test, no controller yet: the test starts one (ControllerTask, ControllerProcess).
//! let env = PrivateFederation::new().members(1).start().await?;
//! ```

use hubfed_api::federatedtypeconfig::ResourceScope;
use hubfed_api::kubefedconfig::{ClusterHealthCheckConfig, KubeFedConfigSpec};
use hubfed_testenv::{Scheduling, TestEnv, TestEnvConfig};

use crate::{Federation, report, set_up_federation, start, start_env};

/// How a private federation is set up: its test clusters, its KubeFedConfig and which members
/// are joined. Built with the methods below, then started with [`PrivateFederation::start`]
/// (no controller) or [`PrivateFederation::shared`] (the controller on its own thread).
#[derive(Clone, Debug)]
pub struct PrivateFederation {
    env: TestEnvConfig,
    config: Option<KubeFedConfigSpec>,
    joined: Option<Vec<String>>,
}

impl Default for PrivateFederation {
    fn default() -> Self {
        Self::new()
    }
}

impl PrivateFederation {
    /// A hub and 2 members with kube-controller-manager, no KubeFedConfig (the controller
    /// creates one with defaults), every member joined.
    pub fn new() -> Self {
        Self {
            env: TestEnvConfig {
                members: 2,
                ..TestEnvConfig::default()
            },
            config: None,
            joined: None,
        }
    }

    /// `members` members: `member1` ... `member<members>`.
    pub fn members(mut self, members: usize) -> Self {
        self.env.members = members;
        self
    }

    /// No kube-controller-manager in the clusters (a faster start; namespaces do not finalize,
    /// nothing is garbage-collected).
    pub fn without_controller_manager(mut self) -> Self {
        self.env.controller_manager = false;
        self
    }

    /// Members that schedule pods ([`hubfed_testenv::Scheduling`]).
    pub fn scheduling(mut self, scheduling: Scheduling) -> Self {
        self.env.scheduling = Some(scheduling);
        self
    }

    /// The KubeFedConfig, in place before the controller starts.
    pub fn config(mut self, spec: KubeFedConfigSpec) -> Self {
        self.config = Some(spec);
        self
    }

    /// Joins only `clusters` at set-up (the harness's join, as [`crate::register_cluster`]).
    pub fn join(mut self, clusters: &[&str]) -> Self {
        self.joined = Some(clusters.iter().map(|name| (*name).to_owned()).collect());
        self
    }

    /// Joins nothing: the test joins the members itself (e.g. with `hubfedctl join`).
    pub fn unjoined(self) -> Self {
        self.join(&[])
    }

    /// Starts the test clusters (off the async runtime) and sets the federation up in them:
    /// [`set_up_federation`] with the KubeFedConfig and joins. No controller runs: start one
    /// with [`crate::controller::ControllerTask`] or [`crate::controller::ControllerProcess`].
    /// The clusters stop when the returned environment is dropped.
    pub async fn start(self) -> anyhow::Result<TestEnv> {
        let env = start_env(self.env.clone()).await?;
        let joined = self.joined_in(&env);
        set_up_federation(&env, self.config.clone(), &joined).await?;
        Ok(env)
    }

    /// This test binary's federation, set up so on first use (blocking), with the controller
    /// in this process on a thread of its own until the binary exits, as
    /// [`Federation::shared`]'s; returns once the joined members are `Ready`. Every test of a
    /// binary must ask for the same federation (the first call sets it up); panics as
    /// [`Federation::shared`] when it cannot be set up.
    pub fn shared(self) -> &'static Federation {
        Federation::shared_by(move || {
            let env = self.binary_env()?;
            let joined = self.joined_in(env);
            start(env, self.config.clone(), &joined)
        })
    }

    /// The joined clusters' names: those given, or every member of `env`.
    fn joined_in<'a>(&'a self, env: &'a TestEnv) -> Vec<&'a str> {
        match &self.joined {
            Some(names) => names.iter().map(String::as_str).collect(),
            None => env.members().iter().map(|member| member.name()).collect(),
        }
    }

    /// The test clusters, started for the rest of the test binary.
    fn binary_env(&self) -> Result<&'static TestEnv, String> {
        let env = TestEnv::start(self.env.clone())
            .map_err(|e| format!("cannot start the test clusters: {e}"))?;
        report(format_args!(
            "hubfed-testenv: hub + {} members{} ready in {:.1}s, kubeconfig {}",
            env.members().len(),
            if self.env.scheduling.is_some() {
                " with schedulers and nodes"
            } else {
                ""
            },
            env.startup_time().as_secs_f64(),
            env.kubeconfig_path().display()
        ));
        // Never dropped, as hubfed_testenv::shared(): the guardians stop the servers when the
        // test binary exits.
        Ok(Box::leak(Box::new(env)))
    }
}

/// A KubeFedConfig spec (cluster-scoped control plane) probing cluster health every second
/// and failing after 2 missed probes of 1 s: joins are Ready, and a frozen member Offline,
/// within seconds.
pub fn fast_health_checks() -> KubeFedConfigSpec {
    health_checks_every_second("1s")
}

/// [`fast_health_checks`] for pull members, whose probe reads a heartbeat in the hub: a probe
/// may take 3 s; two silent heartbeats to go Offline, one to come back.
pub fn pull_health_checks() -> KubeFedConfigSpec {
    health_checks_every_second("3s")
}

fn health_checks_every_second(timeout: &str) -> KubeFedConfigSpec {
    let mut spec = KubeFedConfigSpec::with_defaults(ResourceScope::Cluster);
    spec.cluster_health_check = Some(ClusterHealthCheckConfig {
        period: Some("1s".to_owned()),
        failure_threshold: Some(2),
        success_threshold: Some(1),
        timeout: Some(timeout.to_owned()),
    });
    spec
}
