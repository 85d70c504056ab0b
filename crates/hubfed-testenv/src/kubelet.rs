//! A fake kubelet per member of an environment that schedules pods: it makes pods the
//! scheduler bound to the member's nodes look as a kubelet would report them — `Running` and
//! ready — and finishes deleting them. No container runs, no probe runs, nothing is pulled.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::thread::JoinHandle;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::config::Kubeconfig;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::{Error, io_err};

/// First pause after a failed request before the pods are listed and handled again; it
/// doubles with each failure in a row, up to [`MAX_RETRY`].
const RETRY: Duration = Duration::from_millis(500);
const MAX_RETRY: Duration = Duration::from_secs(8);

/// The background thread of one member's fake kubelet. Stopped by [`FakeKubelet::stop`] or
/// when dropped.
pub(crate) struct FakeKubelet {
    cancel: CancellationToken,
    thread: Option<JoinHandle<()>>,
}

impl FakeKubelet {
    /// Starts the thread. `kubeconfig` holds the member only, as context `member`; `nodes`
    /// are the member's nodes, the only ones whose pods this kubelet handles.
    pub(crate) fn spawn(
        member: &str,
        kubeconfig: Kubeconfig,
        nodes: Vec<String>,
    ) -> Result<Self, Error> {
        let cancel = CancellationToken::new();
        let token = cancel.clone();
        let kubelet = Kubelet {
            member: member.to_string(),
            kubeconfig,
            nodes,
            pod_ips: 0,
            failures: 0,
        };
        let thread = std::thread::Builder::new()
            .name(format!("fake-kubelet-{member}"))
            .spawn(move || kubelet.run_thread(token))
            .map_err(io_err(format!("starting the fake kubelet of {member}")))?;
        Ok(Self {
            cancel,
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits for it; does nothing the second time.
    pub(crate) fn stop(&mut self) {
        self.cancel.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Kubelet {
    member: String,
    kubeconfig: Kubeconfig,
    nodes: Vec<String>,
    /// Pod IPs handed out so far.
    pod_ips: u32,
    /// Failed requests in a row.
    failures: u32,
}

impl Kubelet {
    /// The thread's body: its own runtime (a client is bound to the runtime that made it),
    /// until cancelled.
    fn run_thread(mut self, cancel: CancellationToken) {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(e) => {
                tracing::error!(member = %self.member, "fake kubelet: no tokio runtime: {e}");
                return;
            }
        };
        runtime.block_on(async {
            tokio::select! {
                () = cancel.cancelled() => {}
                () = self.run() => {}
            }
        });
    }

    /// Watches every pod, forever; each watch that ends starts over with a new list.
    async fn run(&mut self) {
        loop {
            if let Err(e) = self.watch().await {
                // Only making the client fails here: the watch retries on its own.
                self.failures = self.failures.saturating_add(1);
                tracing::debug!(member = %self.member, "fake kubelet: {e:#}; retrying");
                tokio::time::sleep(self.backoff()).await;
            }
        }
    }

    fn backoff(&self) -> Duration {
        RETRY
            .saturating_mul(1 << self.failures.min(5))
            .min(MAX_RETRY)
    }

    /// One watch of every pod. A pod whose handling failed does not hold the others up: the
    /// watch goes on, and ends after a pause so that the next one lists (and handles) every
    /// pod again.
    async fn watch(&mut self) -> anyhow::Result<()> {
        let options = kube::config::KubeConfigOptions {
            context: Some(self.member.clone()),
            ..Default::default()
        };
        let config =
            kube::Config::from_custom_kubeconfig(self.kubeconfig.clone(), &options).await?;
        let pods: Api<Pod> = Api::all(kube::Client::try_from(config)?);
        let stream = watcher::watcher(pods.clone(), watcher::Config::default()).default_backoff();
        let mut stream = std::pin::pin!(stream);
        let mut relist_at = None;
        loop {
            let relist = async {
                match relist_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let event = tokio::select! {
                event = stream.next() => event,
                () = relist => return Ok(()),
            };
            match event {
                None => return Ok(()),
                Some(Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod))) => {
                    match self.handle(&pods, &pod).await {
                        Ok(true) => self.failures = 0,
                        Ok(false) => {}
                        Err(e) => {
                            self.failures = self.failures.saturating_add(1);
                            tracing::debug!(member = %self.member, "fake kubelet: {e:#}");
                            relist_at.get_or_insert(tokio::time::Instant::now() + self.backoff());
                        }
                    }
                }
                Some(Ok(_)) => {}
                // The watcher backs off and continues on its own.
                Some(Err(e)) => tracing::debug!(member = %self.member, "fake kubelet watch: {e}"),
            }
        }
    }

    /// What a kubelet would do about one pod: nothing unless it is bound to one of our nodes;
    /// finish its deletion; report it running. Whether it wrote anything.
    async fn handle(&mut self, pods: &Api<Pod>, pod: &Pod) -> anyhow::Result<bool> {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        if !node.is_some_and(|n| self.nodes.iter().any(|ours| ours == n)) {
            return Ok(false);
        }
        let (Some(ns), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) else {
            return Ok(false);
        };
        let pods = Api::<Pod>::namespaced(pods.clone().into_client(), ns);
        if pod.metadata.deletion_timestamp.is_some() {
            let params = DeleteParams::default()
                .grace_period(0)
                .preconditions(Preconditions {
                    uid: pod.metadata.uid.clone(),
                    resource_version: None,
                });
            ignore_gone(pods.delete(name, &params).await.map(|_| ()))?;
            return Ok(true);
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if !matches!(phase, None | Some("Pending")) {
            return Ok(false);
        }
        self.pod_ips = self.pod_ips.wrapping_add(1);
        let ip = format!(
            "10.244.{}.{}",
            (self.pod_ips / 250) % 256,
            self.pod_ips % 250 + 1
        );
        let status = running_status(pod, &ip, &now());
        let patched = pods
            .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
            .await;
        ignore_gone(patched.map(|_| ()))?;
        Ok(true)
    }
}

/// A pod deleted meanwhile is not a failure.
fn ignore_gone(result: Result<(), kube::Error>) -> anyhow::Result<()> {
    match result {
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        other => Ok(other?),
    }
}

/// Now, as Kubernetes writes times.
pub(crate) fn now() -> String {
    Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A stable fake 64-hex-digit digest of `parts`.
fn digest(parts: &[&str]) -> String {
    let mut hasher = DefaultHasher::new();
    parts.hash(&mut hasher);
    format!("{:064x}", hasher.finish())
}

/// The `status` merge patch of a pod whose containers all started and are ready.
fn running_status(pod: &Pod, ip: &str, now: &str) -> Value {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let running = json!({"running": {"startedAt": now}});
    let containers: Vec<Value> = spec
        .containers
        .iter()
        .map(|c| container_status(c, uid, true, running.clone()))
        .collect();
    let init_containers: Vec<Value> = spec
        .init_containers
        .unwrap_or_default()
        .iter()
        .map(|c| {
            // A sidecar (restartPolicy Always) keeps running; the others ran and completed.
            let sidecar = c.restart_policy.as_deref() == Some("Always");
            let state = if sidecar {
                running.clone()
            } else {
                json!({"terminated": {"exitCode": 0, "reason": "Completed",
                                      "startedAt": now, "finishedAt": now}})
            };
            container_status(c, uid, sidecar, state)
        })
        .collect();
    let conditions = [
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
        "PodScheduled",
    ]
    .map(|kind| json!({"type": kind, "status": "True", "lastTransitionTime": now}));
    json!({"status": {
        "phase": "Running",
        "startTime": now,
        "hostIP": "127.0.0.1",
        "hostIPs": [{"ip": "127.0.0.1"}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "conditions": conditions,
        "containerStatuses": containers,
        "initContainerStatuses": init_containers,
    }})
}

fn container_status(c: &Container, uid: &str, started: bool, state: Value) -> Value {
    let image = c.image.as_deref().unwrap_or_default();
    json!({
        "name": c.name,
        "ready": true,
        "started": started,
        "restartCount": 0,
        "image": image,
        "imageID": format!("{image}@sha256:{}", digest(&[image])),
        "containerID": format!("fake://{}", digest(&[uid, &c.name])),
        "state": state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_status_reports_every_container_ready() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "n", "uid": "u"},
            "spec": {
                "nodeName": "member1-node-1",
                "initContainers": [{"name": "init", "image": "busybox"},
                                   {"name": "sidecar", "image": "proxy", "restartPolicy": "Always"}],
                "containers": [{"name": "a", "image": "pause"}, {"name": "b", "image": "pause"}],
            },
        }))
        .unwrap();
        let status = running_status(&pod, "10.244.0.2", "2026-01-01T00:00:00Z");
        // What the API server would keep of it.
        let patched: Pod = serde_json::from_value(json!({"status": status["status"]})).unwrap();
        let s = patched.status.unwrap();
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.244.0.2"));
        let conditions = s.conditions.unwrap();
        assert!(conditions.iter().all(|c| c.status == "True"));
        assert!(conditions.iter().any(|c| c.type_ == "Ready"));
        let containers = s.container_statuses.unwrap();
        assert_eq!(containers.len(), 2);
        assert!(
            containers
                .iter()
                .all(|c| c.ready && c.started == Some(true))
        );
        assert!(
            containers
                .iter()
                .all(|c| c.state.as_ref().unwrap().running.is_some())
        );
        let init = s.init_container_statuses.unwrap();
        assert!(init[0].state.as_ref().unwrap().terminated.is_some());
        assert!(init[1].state.as_ref().unwrap().running.is_some());
    }
}
