//! What the registry reports of its probes: the KubeFedCluster's status, written only when it
//! changes, and a Warning event once per distinct failure.

use hubfed_api::kubefedcluster::{
    ClusterCondition, EVENT_RETRIEVING_CLUSTER_HEALTH_FAILED, KubeFedCluster, KubeFedClusterStatus,
};
use hubfed_core::health::{ProbeOutcome, desired_conditions, status_needs_write, status_patch};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use super::super::config::error_chain;
use super::super::probe::{Probed, heartbeat_outcome};
use super::{Entry, HUB_WRITE_TIMEOUT, Registry, TaskDone};

/// events.k8s.io limits `note` to 1kB.
const EVENT_NOTE_LIMIT: usize = 1024;

impl Registry {
    pub(super) fn on_task_done(&mut self, done: TaskDone, tasks: &mut JoinSet<TaskDone>) {
        match done {
            TaskDone::Probed {
                cluster,
                probe,
                client_id,
                probe_time,
                outcome,
            } => self.on_probed(&cluster, probe, client_id, &probe_time, outcome, tasks),
            TaskDone::StatusWritten {
                cluster,
                probe,
                conditions,
                result,
            } => self.on_status_written(&cluster, probe, conditions, result),
            TaskDone::EventPublished {
                cluster,
                reason,
                result,
            } => {
                if let Err(error) = result {
                    warn!(cluster = %cluster, reason, %error, "cannot publish event");
                }
            }
        }
    }

    fn on_probed(
        &mut self,
        cluster: &str,
        probe: u64,
        client_id: usize,
        probe_time: &Time,
        outcome: Probed,
        tasks: &mut JoinSet<TaskDone>,
    ) {
        let settings = self.pool.health;
        let Some(entry) = self.entries.get_mut(cluster) else {
            return;
        };
        if entry.in_flight != Some(probe) {
            return;
        }
        if entry.client_id != client_id {
            // Probed with clients that have since been replaced; the new ones get a probe.
            entry.in_flight = None;
            entry.probe_wanted = true;
            return;
        }
        let outcome = match outcome {
            Probed::Member(outcome) => outcome,
            Probed::Heartbeat(lease) => {
                match heartbeat_outcome(&mut entry.heartbeat, lease, settings) {
                    Some(outcome) => outcome,
                    None => {
                        // No verdict yet: the published health (or the stored one) stands.
                        entry.in_flight = None;
                        entry.probed = true;
                        return;
                    }
                }
            }
        };
        let warning = self.publish_health(cluster, probe, probe_time, outcome, tasks);
        if let (Some(note), Some(entry)) = (warning, self.entries.get(cluster)) {
            let object = entry.object.clone();
            self.emit_warning(
                cluster,
                &object,
                EVENT_RETRIEVING_CLUSTER_HEALTH_FAILED,
                "ProbeHealth",
                note,
                tasks,
            );
        }
    }

    /// Takes a probe's verdict into the cluster's health and writes the KubeFedCluster's
    /// status when it changes. Returns the note of a Warning for a probe error that is news.
    fn publish_health(
        &mut self,
        cluster: &str,
        probe: u64,
        probe_time: &Time,
        outcome: ProbeOutcome,
        tasks: &mut JoinSet<TaskDone>,
    ) -> Option<String> {
        let settings = self.pool.health;
        let entry = self.entries.get_mut(cluster)?;
        debug!(cluster = %cluster, ?outcome, "cluster probed");
        let warning = new_probe_error(cluster, entry, &outcome);
        let was_ready = entry.ready();
        let published = entry
            .tracker
            .observe(
                outcome,
                settings.failure_threshold,
                settings.success_threshold,
            )
            .clone();
        entry.probed = true;
        if was_ready != published.is_ready() {
            info!(cluster = %cluster, ready = published.is_ready(), "cluster readiness changed");
        }
        let previous = entry
            .last_written
            .as_deref()
            .or_else(|| {
                entry
                    .object
                    .status
                    .as_ref()
                    .map(|status| status.conditions.as_slice())
            })
            .unwrap_or_default();
        let conditions = desired_conditions(&published, previous, probe_time);
        let version = published.kubernetes_version();
        let topology = entry.topology();
        let current = entry.object.status.as_ref();
        if status_needs_write(current, &conditions, version, topology.as_ref()) {
            let patch = status_patch(&conditions, version, topology.as_ref());
            entry.topology_stale = false;
            let conditions = Some(conditions);
            spawn_status_write(&self.clusters_api, cluster, probe, conditions, patch, tasks);
        } else {
            entry.in_flight = None;
        }
        warning
    }

    pub(super) fn emit_warning(
        &self,
        cluster: &str,
        object: &KubeFedCluster,
        reason: &'static str,
        action: &'static str,
        note: String,
        tasks: &mut JoinSet<TaskDone>,
    ) {
        let recorder = self.recorder.clone();
        let reference = object.object_ref(&());
        let cluster = cluster.to_owned();
        tasks.spawn(async move {
            let event = Event {
                type_: EventType::Warning,
                reason: reason.to_owned(),
                note: Some(truncate(note, EVENT_NOTE_LIMIT)),
                action: action.to_owned(),
                secondary: None,
            };
            let publish = recorder.publish(&event, &reference);
            let result = match tokio::time::timeout(HUB_WRITE_TIMEOUT, publish).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(error)) => Err(error_chain(&error)),
                Err(_) => Err("timed out".to_owned()),
            };
            TaskDone::EventPublished {
                cluster,
                reason,
                result,
            }
        });
    }

    fn on_status_written(
        &mut self,
        cluster: &str,
        probe: u64,
        conditions: Option<Vec<ClusterCondition>>,
        result: Result<Option<KubeFedClusterStatus>, String>,
    ) {
        let Some(entry) = self.entries.get_mut(cluster) else {
            return;
        };
        if entry.in_flight == Some(probe) {
            entry.in_flight = None;
        }
        match result {
            Ok(status) => {
                debug!(cluster = %cluster, "KubeFedCluster status written");
                entry.object.status = status;
                if conditions.is_some() {
                    entry.last_written = conditions;
                }
            }
            Err(error) => {
                warn!(cluster = %cluster, %error, "cannot write KubeFedCluster status");
            }
        }
    }
}

/// Writes the KubeFedCluster's status in a child task, which reports back.
pub(super) fn spawn_status_write(
    api: &Api<KubeFedCluster>,
    cluster: &str,
    probe: u64,
    conditions: Option<Vec<ClusterCondition>>,
    patch: serde_json::Value,
    tasks: &mut JoinSet<TaskDone>,
) {
    let api = api.clone();
    let cluster = cluster.to_owned();
    tasks.spawn(async move {
        let params = PatchParams::default();
        let merge = Patch::Merge(&patch);
        let write = api.patch_status(&cluster, &params, &merge);
        let result = match tokio::time::timeout(HUB_WRITE_TIMEOUT, write).await {
            Ok(Ok(updated)) => Ok(updated.status),
            Ok(Err(error)) => Err(error_chain(&error)),
            Err(_) => Err(format!(
                "no answer from the hub within {}s",
                HUB_WRITE_TIMEOUT.as_secs()
            )),
        };
        TaskDone::StatusWritten {
            cluster,
            probe,
            conditions,
            result,
        }
    });
}

/// A probe failure not reported yet: its warning, once per distinct error.
fn new_probe_error(cluster: &str, entry: &mut Entry, outcome: &ProbeOutcome) -> Option<String> {
    let ProbeOutcome::Unreachable { error } = outcome else {
        entry.last_probe_error = None;
        return None;
    };
    if entry.last_probe_error.as_ref() == Some(error) {
        return None;
    }
    warn!(cluster = %cluster, %error, "cluster health check failed");
    entry.last_probe_error = Some(error.clone());
    Some(format!("Failed to retrieve health of the cluster: {error}"))
}

fn truncate(mut text: String, limit: usize) -> String {
    if text.len() > limit {
        let mut end = limit;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_truncated_on_char_boundaries() {
        assert_eq!(truncate("short".to_owned(), 10), "short");
        assert_eq!(truncate("ééé".to_owned(), 3), "é");
        assert_eq!(truncate("x".repeat(2000), EVENT_NOTE_LIMIT).len(), 1024);
    }
}
