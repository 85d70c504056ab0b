//! Member writes: server-side applies of bodies that differ from the cached objects, and
//! deletions of what this control plane wrote. Each is counted in
//! `hubfed_mcs_member_writes_total{cluster, kind, operation, result}`.

use std::fmt::Debug;
use std::time::Duration;

use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::{debug, warn};

use super::FIELD_MANAGER;
use crate::clusters::MemberCluster;
use crate::metrics::METRICS;

/// The longest a member write may take: a member that stops answering holds up its keys'
/// reconciles this long at most (the client's own limit is a minute of silence).
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// `request`, or a timeout error after [`WRITE_TIMEOUT`].
async fn bounded<T>(
    request: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    match tokio::time::timeout(WRITE_TIMEOUT, request).await {
        Ok(result) => result,
        Err(_) => Err(kube::Error::Service(
            format!("no answer within {}s", WRITE_TIMEOUT.as_secs()).into(),
        )),
    }
}

/// One kind of write into one member.
pub(super) struct Write<'a> {
    pub cluster: &'a MemberCluster,
    /// The kind written, a metric label.
    pub kind: &'static str,
    /// A write of the status subresource.
    pub status: bool,
}

impl Write<'_> {
    fn count(&self, operation: &str, result: &str) {
        METRICS
            .mcs_member_writes
            .with_label_values(&[&self.cluster.name, self.kind, operation, result])
            .inc();
    }
}

/// A failed member write: already logged and counted.
#[derive(Debug)]
pub(super) struct WriteFailed;

/// Applies `body` as object `name` (its status when `write.status`), with this controller's
/// field manager, never forcing: another manager's fields are never taken over.
pub(super) async fn apply<K>(
    write: &Write<'_>,
    api: &Api<K>,
    name: &str,
    body: &Value,
) -> Result<K, WriteFailed>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let operation = if write.status {
        "apply-status"
    } else {
        "apply"
    };
    let _permit = write.cluster.writes.acquire().await;
    let params = PatchParams::apply(FIELD_MANAGER);
    let patch = Patch::Apply(body);
    let result = if write.status {
        bounded(api.patch_status(name, &params, &patch)).await
    } else {
        bounded(api.patch(name, &params, &patch)).await
    };
    match result {
        Ok(object) => {
            write.count(operation, "ok");
            debug!(cluster = %write.cluster.name, kind = write.kind, name, operation, "MCS write");
            Ok(object)
        }
        Err(error) => {
            write.count(operation, "error");
            warn!(
                cluster = %write.cluster.name,
                kind = write.kind,
                name,
                operation,
                error = %error,
                "MCS write failed"
            );
            Err(WriteFailed)
        }
    }
}

/// Deletes object `name`; one already gone is no failure.
pub(super) async fn delete<K>(
    write: &Write<'_>,
    api: &Api<K>,
    name: &str,
) -> Result<(), WriteFailed>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let _permit = write.cluster.writes.acquire().await;
    match bounded(api.delete(name, &DeleteParams::background())).await {
        Ok(_) => {
            write.count("delete", "ok");
            debug!(cluster = %write.cluster.name, kind = write.kind, name, "MCS delete");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 404 => {
            write.count("delete", "absent");
            Ok(())
        }
        Err(error) => {
            write.count("delete", "error");
            warn!(
                cluster = %write.cluster.name,
                kind = write.kind,
                name,
                error = %error,
                "MCS delete failed"
            );
            Err(WriteFailed)
        }
    }
}

/// The JSON of a cached object, to compare a body with.
pub(super) fn as_json<K: serde::Serialize>(object: &K) -> Option<Value> {
    serde_json::to_value(object).ok()
}
