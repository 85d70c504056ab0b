//! The container image as real Pods: `make image`'s archive imported into a real containerd and
//! run by a real kubelet (the pinned release, built by `hack/build-kube.sh kubelet`) that
//! registers as a Node of the test hub (`hack/run-node.sh`). First a Pod runs
//! `hubfed-controller --version`; then the chart's Deployment runs the controller as the
//! chart's ServiceAccount, with in-cluster configuration: its Pod becomes Ready, both members
//! become Ready and a FederatedConfigMap reaches both — no controller runs in this test
//! process, so the Pod did it.
//!
//! What the test clusters lack is filled in on the Pod side, not in the chart: there is no
//! scheduler in the hub (the Deployment's pod template names the Node), no CNI and no
//! kube-proxy (`hostNetwork: true`, and `KUBERNETES_SERVICE_HOST`/`_PORT` point at the hub's
//! loopback address, which its serving certificate names), no endpoints for the webhook
//! Service (rendered with `webhook.enabled=false`). One replica: with the host's network two
//! would contend for the admin port.
//!
//! Needs root, `containerd`, `runc`, `ctr` and `unshare` (Debian: `containerd`, `runc`,
//! `util-linux`); without them the test prints why and passes without running. It fails when
//! the image archive (`make image`) or `helm` (`hack/build-helm.sh`) is missing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, bail, ensure};
use hubfed_e2e::helm::{APPLIED_KINDS, apply_rendered, render};
use hubfed_e2e::{
    Expected, KUBEFED_NAMESPACE, MEMBERS, Wait, federate_settings, report, unique_ns, wait_for,
    wait_propagated,
};
use hubfed_testenv::process::{GuardedProcess, Spawn};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, ResourceExt as _};
use serde_json::json;

/// The image `hack/build-image.sh` tags, the chart's default.
const IMAGE_REPOSITORY: &str = "ghcr.io/hubfed/hubfed-controller";
const VERSION: &str = env!("CARGO_PKG_VERSION");
/// KubeFed's leader-election lock name.
const LEASE: &str = "kubefed-controller-manager";
/// The kubelet's start, and a Pod's first start (image unpacking), on a shared 2-core machine.
const NODE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(180);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ sits in the repository")
        .to_path_buf()
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()))
}

/// Why this machine cannot run a node, if it cannot.
fn missing_prerequisites() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|uids| uids.split_whitespace().nth(1))
        == Some("0");
    if !root {
        return Some("not root: containerd and the kubelet need root".to_owned());
    }
    // Each tool and the Debian package holding it.
    let missing: Vec<String> = [
        ("containerd", "containerd"),
        ("ctr", "containerd"),
        ("runc", "runc"),
        ("unshare", "util-linux"),
    ]
    .into_iter()
    .filter(|(tool, _)| !on_path(tool))
    .map(|(tool, package)| format!("{tool} (Debian package {package})"))
    .collect();
    (!missing.is_empty()).then(|| format!("not on PATH: {}", missing.join(", ")))
}

fn image_archive() -> anyhow::Result<PathBuf> {
    let path = repo_root().join(format!("target/image/hubfed-controller-{VERSION}.oci.tar"));
    ensure!(
        path.is_file(),
        "{} is missing: build it with `make image`",
        path.display()
    );
    Ok(path)
}

/// Runs a program; its standard output, or an error with its standard error.
fn run(program: &Path, args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {}", program.display()))?;
    ensure!(
        output.status.success(),
        "{} {} failed: {}",
        program.display(),
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8(output.stdout)?)
}

/// A real node: `hack/run-node.sh` (containerd + kubelet) under a guardian, so that it stops
/// with this process however that ends.
struct RealNode {
    name: String,
    dir: PathBuf,
    process: GuardedProcess,
}

impl RealNode {
    /// Starts the node with the sandbox image and `images` imported, and waits until its Node
    /// object exists in the cluster of `kubeconfig`'s current context.
    async fn start(
        hub: &Client,
        kubeconfig: &Path,
        dir: PathBuf,
        images: &[&Path],
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        let pause = dir.join("pause.oci.tar");
        let pause_str = pause.to_str().context("UTF-8 path")?;
        run(&repo_root().join("hack/build-pause-image.sh"), &[pause_str])?;
        let name = format!("hubfed-node-{}", std::process::id());
        let mut args = vec![
            dir.display().to_string(),
            kubeconfig.display().to_string(),
            name.clone(),
            hubfed_testenv::free_port()?.to_string(),
            hubfed_testenv::free_port()?.to_string(),
            pause.display().to_string(),
        ];
        args.extend(images.iter().map(|image| image.display().to_string()));
        let process = GuardedProcess::spawn(Spawn {
            name: "node",
            program: &repo_root().join("hack/run-node.sh"),
            args,
            env: vec![],
            pid_dir: &dir,
            log_file: dir.join("run-node.log"),
            // run-node.sh stops the kubelet, then kills and deletes every container.
            grace_seconds: 60,
            outlive_others: false,
            remove_dir_after: None,
        })?;
        let node = Self { name, dir, process };
        let nodes: Api<Node> = Api::all(hub.clone());
        wait_for(
            &format!("Node {} to register", node.name),
            NODE_TIMEOUT,
            async || {
                if !node.process.is_alive() {
                    bail!("run-node.sh exited:\n{}", node.logs());
                }
                Ok(match nodes.get_opt(&node.name).await? {
                    Some(_) => Wait::Done(()),
                    None => Wait::Pending("no Node object".to_owned()),
                })
            },
        )
        .await
        .with_context(|| node.logs())?;
        Ok(node)
    }

    /// The last lines of the script's and the kubelet's logs, for failures.
    fn logs(&self) -> String {
        let kubelet =
            std::fs::read_to_string(self.dir.join("logs/kubelet.log")).unwrap_or_default();
        let lines: Vec<&str> = kubelet.lines().collect();
        format!(
            "run-node.sh:\n{}\nkubelet:\n{}",
            self.process.log_tail(20),
            lines[lines.len().saturating_sub(20)..].join("\n")
        )
    }

    /// What container `container` of `pod` wrote, from the kubelet's log files: the API
    /// server cannot reach this kubelet for logs (it would dial the Node's host name).
    fn container_log(&self, pod: &Pod, container: &str) -> String {
        let dir = self.dir.join("podlogs").join(format!(
            "{}_{}_{}",
            pod.namespace().unwrap_or_default(),
            pod.name_any(),
            pod.uid().unwrap_or_default()
        ));
        let text = std::fs::read_to_string(dir.join(container).join("0.log")).unwrap_or_default();
        // CRI log lines: `<time> <stream> <tag> <text>`.
        text.lines()
            .filter_map(|line| line.splitn(4, ' ').nth(3))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Where a Pod's containers stand, for `Pending` observations and failures.
fn pod_state(pod: &Pod) -> String {
    let status = pod.status.clone().unwrap_or_default();
    let containers: Vec<String> = status
        .container_statuses
        .unwrap_or_default()
        .iter()
        .map(|c| {
            let state = c
                .state
                .as_ref()
                .map(|s| serde_json::to_string(s).unwrap_or_default());
            format!("{} ready={} {}", c.name, c.ready, state.unwrap_or_default())
        })
        .collect();
    let conditions: Vec<String> = status
        .conditions
        .unwrap_or_default()
        .iter()
        .map(|c| format!("{}={}", c.type_, c.status))
        .collect();
    format!(
        "phase {} [{}] {}",
        status.phase.unwrap_or_default(),
        conditions.join(", "),
        containers.join("; ")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_runs_the_controller_as_a_pod() -> anyhow::Result<()> {
    if let Some(reason) = missing_prerequisites() {
        report(format_args!("image_pod: SKIPPED, {reason}"));
        return Ok(());
    }
    let image = image_archive()?;
    let env = hubfed_testenv::shared();
    let admin = env.hub().client().await?;
    hubfed_e2e::bootstrap(env).await?;

    let began = Instant::now();
    let node = RealNode::start(
        &admin,
        env.kubeconfig_path(),
        env.dir().join("real-node"),
        &[&image],
    )
    .await?;
    report(format_args!(
        "image_pod: containerd + kubelet started, Node {} registered in {:.1}s",
        node.name,
        began.elapsed().as_secs_f64()
    ));

    // The image's entrypoint, run once.
    let began = Instant::now();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "hubfed-version"},
        "spec": {
            "nodeName": node.name,
            "hostNetwork": true,
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "containers": [{
                "name": "controller",
                "image": format!("{IMAGE_REPOSITORY}:{VERSION}"),
                "imagePullPolicy": "Never",
                "args": ["--version"],
            }],
        },
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let pod = wait_for("Pod hubfed-version to finish", NODE_TIMEOUT, async || {
        let pod = pods.get("hubfed-version").await?;
        let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
        match phase.as_deref() {
            Some("Succeeded") => Ok(Wait::Done(pod)),
            Some("Failed") => bail!("Pod hubfed-version failed: {}", pod_state(&pod)),
            _ => Ok(Wait::Pending(pod_state(&pod))),
        }
    })
    .await
    .with_context(|| node.logs())?;
    let output = node.container_log(&pod, "controller");
    assert_eq!(output.trim(), format!("hubfed-controller {VERSION}"));
    report(format_args!(
        "image_pod: `hubfed-controller --version` ran as a Pod in {:.1}s",
        began.elapsed().as_secs_f64()
    ));

    // The chart's Deployment, on that node.
    let began = Instant::now();
    let hub_url = env.hub().server_url();
    let hub_port = hub_url
        .rsplit_once(':')
        .map(|(_, port)| port.to_owned())
        .context("the hub's URL has a port")?;
    let admin_port = hubfed_testenv::free_port()?;
    let extra_env = json!([
        {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
        {"name": "KUBERNETES_SERVICE_PORT", "value": hub_port},
    ]);
    let documents = render(&[
        "--set",
        "replicaCount=1",
        "--set",
        "image.pullPolicy=Never",
        "--set",
        "webhook.enabled=false",
        "--set",
        &format!("controller.adminPort={admin_port}"),
        "--set-json",
        &format!("controller.extraEnv={extra_env}"),
    ])?;
    for kind in APPLIED_KINDS {
        for object in documents.iter().filter(|d| d["kind"] == kind) {
            apply_rendered(&admin, object).await?;
        }
    }
    let mut deployment = documents
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .context("the chart renders a Deployment")?
        .clone();
    let pod_spec = &mut deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod_spec["containers"][0]["image"],
        format!("{IMAGE_REPOSITORY}:{VERSION}"),
        "the chart's default image is the archive's"
    );
    pod_spec["hostNetwork"] = json!(true);
    pod_spec["nodeName"] = json!(node.name);
    apply_rendered(&admin, &deployment).await?;

    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), KUBEFED_NAMESPACE);
    let controller_pods: Api<Pod> = Api::namespaced(admin.clone(), KUBEFED_NAMESPACE);
    let name = deployment["metadata"]["name"]
        .as_str()
        .context("Deployment name")?
        .to_owned();
    wait_for(
        &format!("Deployment {name} to have a Ready replica"),
        NODE_TIMEOUT,
        async || {
            let ready = deployments
                .get(&name)
                .await?
                .status
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0);
            if ready >= 1 {
                return Ok(Wait::Done(()));
            }
            let pods = controller_pods.list(&Default::default()).await?;
            let states: Vec<String> = pods
                .iter()
                .map(|pod| format!("{}: {}", pod.name_any(), pod_state(pod)))
                .collect();
            Ok(Wait::Pending(format!(
                "no Ready replica; {}",
                states.join("; ")
            )))
        },
    )
    .await
    .with_context(|| node.logs())?;
    report(format_args!(
        "image_pod: the chart's Deployment Ready in {:.1}s",
        began.elapsed().as_secs_f64()
    ));

    // What only the controller in the Pod can have done: health, leadership, propagation.
    let began = Instant::now();
    hubfed_e2e::wait_clusters_ready(&admin, &MEMBERS).await?;
    let leases: Api<Lease> = Api::namespaced(admin.clone(), KUBEFED_NAMESPACE);
    let lease = leases.get(LEASE).await?;
    let holder = lease.spec.and_then(|spec| spec.holder_identity);
    ensure!(holder.is_some(), "Lease {LEASE} has a holder");
    let namespace = unique_ns("image-pod");
    let data = json!({"ran": "in-a-pod"});
    let (hub_configmaps, member_apis) = federate_settings(&admin, env, &namespace, data).await?;
    let wanted = json!("in-a-pod");
    let copies = member_apis.iter().map(|(member, api)| (*member, api));
    let expected = Expected::each(copies, &[("/data/ran", Some(&wanted))]);
    wait_propagated(
        "the ConfigMap in both members, the FederatedConfigMap's status",
        &hub_configmaps,
        "settings",
        &MEMBERS,
        &expected,
    )
    .await?;
    // One incarnation did all of it: the controller never crashed or failed its liveness.
    let restarts: Vec<i32> = controller_pods
        .list(&Default::default())
        .await?
        .iter()
        .flat_map(|pod| pod.status.clone().unwrap_or_default().container_statuses)
        .flatten()
        .map(|status| status.restart_count)
        .collect();
    assert_eq!(restarts, [0], "one controller container, never restarted");
    report(format_args!(
        "image_pod: members Ready and a FederatedConfigMap propagated by the Pod in {:.1}s \
         (Lease holder {})",
        began.elapsed().as_secs_f64(),
        holder.unwrap_or_default()
    ));

    deployments.delete(&name, &DeleteParams::default()).await?;
    let began = Instant::now();
    let mut node = node;
    node.process.stop();
    report(format_args!(
        "image_pod: node stopped in {:.1}s",
        began.elapsed().as_secs_f64()
    ));
    Ok(())
}
