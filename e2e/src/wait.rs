//! Waits on conditions: [`wait_for`] and what a check returns ([`Wait`]); waits on Events and
//! on clusters' health.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use hubfed_api::kubefedcluster::{ClusterConditionType, KubeFedCluster};
use kube::Client;
use kube::api::Api;

use crate::{KUBEFED_NAMESPACE, POLL_INTERVAL, TIMEOUT};

/// Set when the controller stops; every [`wait_for`] then fails at once with this text.
pub(crate) static CONTROLLER_EXIT: OnceLock<String> = OnceLock::new();

/// What one check of a [`wait_for`] found.
#[derive(Debug)]
pub enum Wait<T> {
    /// The condition holds; the wait returns this value.
    Done(T),
    /// Not yet; the text says what was observed (shown if the deadline passes).
    Pending(String),
}

impl Wait<()> {
    /// `Done` when `problems` is empty, else `Pending` listing them.
    pub fn all_or_pending(problems: Vec<String>) -> Self {
        if problems.is_empty() {
            Wait::Done(())
        } else {
            Wait::Pending(problems.join("; "))
        }
    }
}

/// Polls `check` every [`POLL_INTERVAL`] until it returns [`Wait::Done`] or `timeout` passes.
///
/// An error from `check` fails the wait at once (use it for what can never recover, e.g. an
/// object that must not be deleted is gone). A timeout fails with `what` and the last
/// observation. If the controller has stopped, the wait fails at once saying why.
pub async fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut check: impl AsyncFnMut() -> anyhow::Result<Wait<T>>,
) -> anyhow::Result<T> {
    let began = Instant::now();
    let mut last = String::from("nothing checked yet");
    loop {
        if let Some(exit) = CONTROLLER_EXIT.get() {
            bail!("while waiting for {what}: {exit} (last observed: {last})");
        }
        match check()
            .await
            .with_context(|| format!("while waiting for {what}"))?
        {
            Wait::Done(value) => return Ok(value),
            Wait::Pending(observed) => last = observed,
        }
        if began.elapsed() >= timeout {
            bail!(
                "timed out after {}s waiting for {what}; last observed: {last}",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Waits for an Event in `namespace` with `reason` whose message contains every one of `words`.
pub async fn wait_event(
    hub: &Client,
    namespace: &str,
    reason: &str,
    words: &[&str],
) -> anyhow::Result<()> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(hub.clone(), namespace);
    wait_for(
        &format!("a {reason} event naming {}", words.join(", ")),
        TIMEOUT,
        async || {
            let found = events
                .list(&kube::api::ListParams::default())
                .await?
                .items
                .into_iter()
                .any(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.message
                            .as_deref()
                            .is_some_and(|m| words.iter().all(|w| m.contains(w)))
                });
            Ok(if found {
                Wait::Done(())
            } else {
                Wait::Pending("no event yet".into())
            })
        },
    )
    .await
}

/// Whether the KubeFedCluster `cluster` reports Offline (and not Ready).
pub async fn is_offline(hub: &Client, cluster: &str) -> anyhow::Result<bool> {
    let clusters: Api<KubeFedCluster> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    let object = clusters.get(cluster).await?;
    Ok(object
        .status
        .as_ref()
        .and_then(|s| s.condition(ClusterConditionType::Offline))
        .is_some_and(|c| c.status == "True")
        && !object.is_ready())
}

/// Waits (up to 2 minutes: default health checks take about 30 s) until `cluster` is Offline;
/// returns when it was seen so.
pub async fn wait_offline(hub: &Client, cluster: &str) -> anyhow::Result<Instant> {
    wait_for(
        &format!("{cluster} Offline"),
        Duration::from_secs(120),
        async || {
            Ok(if is_offline(hub, cluster).await? {
                Wait::Done(Instant::now())
            } else {
                Wait::Pending("not Offline".into())
            })
        },
    )
    .await
}

/// Waits until the KubeFedClusters `names` report Ready.
pub async fn wait_clusters_ready(hub: &Client, names: &[&str]) -> anyhow::Result<()> {
    let clusters: Api<KubeFedCluster> = Api::namespaced(hub.clone(), KUBEFED_NAMESPACE);
    wait_for(
        &format!("KubeFedClusters {} to be Ready", names.join(", ")),
        TIMEOUT,
        async || {
            let mut pending = Vec::new();
            for name in names {
                match clusters.get_opt(name).await? {
                    Some(cluster) if cluster.is_ready() => {}
                    Some(cluster) => {
                        let conditions = cluster
                            .status
                            .map(|s| {
                                s.conditions
                                    .iter()
                                    .map(|c| {
                                        format!(
                                            "{}={} ({})",
                                            c.type_,
                                            c.status,
                                            c.message.as_deref().unwrap_or_default()
                                        )
                                    })
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            })
                            .unwrap_or_else(|| "no status".to_owned());
                        pending.push(format!(
                            "{name}: not {} [{conditions}]",
                            ClusterConditionType::Ready
                        ));
                    }
                    None => pending.push(format!("{name}: no KubeFedCluster")),
                }
            }
            Ok(Wait::all_or_pending(pending))
        },
    )
    .await
}
