//! Members that really schedule pods (opt-in, [`crate::TestEnvConfig::scheduling`]): a real
//! `kube-scheduler`, Node objects whose status a kubelet would have written, and a fake
//! kubelet ([`crate::kubelet`]) that reports bound pods running and finishes deletions.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::apiserver::readyz_ok;
use crate::kubeconfig::kubeconfig_yaml;
use crate::kubelet::{FakeKubelet, now};
use crate::process::GuardedProcess;
use crate::{Cluster, Error, TestEnv, block_on, free_port, kube_version, spawn_component, write};

/// The nodes of each member and what they offer the scheduler.
#[derive(Clone, Debug)]
pub struct Scheduling {
    /// Nodes per member: `<member>-node-1` ... `<member>-node-N`.
    pub nodes_per_member: usize,
    /// Pods one node takes (its `pods` capacity); [`TestEnv::set_pods_per_node`] changes it.
    pub pods_per_node: u32,
    /// CPU capacity of a node, a quantity such as `"4"`.
    pub cpu_per_node: String,
    /// Memory capacity of a node, a quantity such as `"8Gi"`.
    pub memory_per_node: String,
}

impl Default for Scheduling {
    fn default() -> Self {
        Self {
            nodes_per_member: 1,
            pods_per_node: 10,
            cpu_per_node: "4".into(),
            memory_per_node: "8Gi".into(),
        }
    }
}

impl TestEnv {
    /// For every member: its nodes, its kube-scheduler and its fake kubelet; then waits until
    /// every scheduler is ready.
    pub(crate) fn start_scheduling(
        &mut self,
        scheduler: &Path,
        scheduling: &Scheduling,
        timeout: Duration,
    ) -> Result<(), Error> {
        let dir = self.dir.clone();
        for cluster in &mut self.clusters[1..] {
            let nodes: Vec<String> = (1..=scheduling.nodes_per_member)
                .map(|i| format!("{}-node-{i}", cluster.name))
                .collect();
            let created = block_on(tokio::time::timeout(
                timeout,
                create_nodes(cluster, &nodes, scheduling),
            ));
            created
                .unwrap_or_else(|_| Err(anyhow::anyhow!("timed out after {timeout:?}")))
                .map_err(|e| Error::Setup {
                    what: format!("creating the nodes of {}", cluster.name),
                    message: format!("{e:#}"),
                })?;
            cluster.nodes = nodes.clone();
            cluster.scheduler = Some(spawn_scheduler(cluster, scheduler, &dir)?);
            let kubeconfig = cluster.kubeconfig()?;
            cluster.kubelet = Some(FakeKubelet::spawn(&cluster.name, kubeconfig, nodes)?);
        }
        for cluster in &self.clusters[1..] {
            wait_for_scheduler(cluster, timeout)?;
        }
        Ok(())
    }

    /// Sets the `pods` capacity and allocatable of every node of `member`, as a kubelet
    /// started with another `--max-pods` would: lower it to make the member full, raise it
    /// to make room. Pods already bound stay where they are; the scheduler sees the change at
    /// once. Async like [`Cluster::client`], whose client it uses.
    pub async fn set_pods_per_node(&self, member: &str, pods: u32) -> anyhow::Result<()> {
        let cluster = self
            .cluster(member)
            .with_context(|| format!("no cluster {member}"))?;
        anyhow::ensure!(
            !cluster.nodes.is_empty(),
            "{member} has no nodes: the environment does not schedule pods"
        );
        let api: Api<Node> = Api::all(cluster.client().await?);
        let count = json!({"pods": pods.to_string()});
        let patch = json!({"status": {"capacity": count, "allocatable": count}});
        for node in &cluster.nodes {
            api.patch_status(node, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .with_context(|| format!("setting the pods of node {node}"))?;
        }
        Ok(())
    }
}

/// Creates the nodes and writes their status through `nodes/status`, as a kubelet registers.
async fn create_nodes(
    cluster: &Cluster,
    nodes: &[String],
    scheduling: &Scheduling,
) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(cluster.client().await?);
    for name in nodes {
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(
                    [
                        ("kubernetes.io/hostname", name.as_str()),
                        ("kubernetes.io/os", "linux"),
                        ("kubernetes.io/arch", arch()),
                    ]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&PostParams::default(), &node).await {
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            other => drop(other.with_context(|| format!("creating node {name}"))?),
        }
        let status = Patch::Merge(node_status(name, scheduling));
        api.patch_status(name, &PatchParams::default(), &status)
            .await
            .with_context(|| format!("writing the status of node {name}"))?;
        // The TaintNodesByCondition admission plugin taints every new node not-ready; the
        // node lifecycle controller, which would lift it, does not run here.
        let no_taints = Patch::Merge(json!({"spec": {"taints": null}}));
        api.patch(name, &PatchParams::default(), &no_taints)
            .await
            .with_context(|| format!("removing the taints of node {name}"))?;
    }
    Ok(())
}

/// What a ready kubelet reports of its node.
fn node_status(name: &str, s: &Scheduling) -> Value {
    let now = now();
    let resources = json!({
        "cpu": s.cpu_per_node,
        "memory": s.memory_per_node,
        "pods": s.pods_per_node.to_string(),
    });
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    let version = kube_version();
    json!({"status": {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory",
                      "kubelet has sufficient memory available"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure",
                      "kubelet has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID",
                      "kubelet has sufficient PID available"),
            condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "Hostname", "address": name},
        ],
        "nodeInfo": {
            "machineID": "", "systemUUID": "", "bootID": "",
            "kernelVersion": kernel_version(),
            "osImage": "hubfed-testenv fake node",
            "containerRuntimeVersion": format!("fake://{version}"),
            "kubeletVersion": version,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": arch(),
        },
    }})
}

fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn kernel_version() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|v| v.trim().to_string())
        .unwrap_or_default()
}

/// Starts the member's kube-scheduler: the admin credential, no leader election, and its
/// HTTPS port on loopback with the API server's serving certificate, for `/readyz`.
fn spawn_scheduler(
    cluster: &mut Cluster,
    program: &Path,
    dir: &Path,
) -> Result<GuardedProcess, Error> {
    let name = cluster.name.clone();
    let cdir = dir.join(&name);
    let kubeconfig = cdir.join("scheduler.kubeconfig");
    write(&kubeconfig, &kubeconfig_yaml(&[cluster], &name))?;
    let config = cdir.join("kube-scheduler.yaml");
    let config_yaml = json!({
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig.display().to_string()},
        "leaderElection": {"leaderElect": false},
    });
    write(
        &config,
        &serde_yaml_ng::to_string(&config_yaml).unwrap_or_default(),
    )?;
    let port = free_port()?;
    cluster.scheduler_port = port;
    let args = vec![
        format!("--config={}", config.display()),
        "--leader-elect=false".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        format!("--tls-cert-file={}", cdir.join("serving.crt").display()),
        format!(
            "--tls-private-key-file={}",
            cdir.join("serving.key").display()
        ),
        "--v=0".into(),
    ];
    spawn_component(
        dir,
        &name,
        "kube-scheduler",
        program,
        args,
        Vec::new(),
        None,
    )
}

/// The scheduler's `/readyz` is `ok` once its informers have synced: from then on it
/// schedules every pending pod.
fn wait_for_scheduler(cluster: &Cluster, timeout: Duration) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    let pid = cluster.scheduler.as_ref().and_then(GuardedProcess::pid);
    let ready = block_on(async {
        match scheduler_client(cluster).await {
            Ok(client) => readyz_ok(&client, pid, deadline).await,
            Err(e) => Err(format!("no client: {e}")),
        }
    });
    ready.map_err(|last| Error::NotReady {
        component: format!("{} kube-scheduler ({last})", cluster.name),
        seconds: timeout.as_secs(),
        log: cluster
            .scheduler
            .as_ref()
            .map(|s| s.log_tail(20))
            .unwrap_or_default(),
    })
}

/// A client of the scheduler's own HTTPS port, trusting the cluster's CA.
async fn scheduler_client(cluster: &Cluster) -> anyhow::Result<kube::Client> {
    let options = kube::config::KubeConfigOptions {
        context: Some(cluster.name.clone()),
        ..Default::default()
    };
    let mut config = kube::Config::from_custom_kubeconfig(cluster.kubeconfig()?, &options).await?;
    config.cluster_url = format!("https://127.0.0.1:{}", cluster.scheduler_port).parse()?;
    Ok(kube::Client::try_from(config)?)
}
