//! How long deletions wait: the gauge `hubfed_oldest_deletion_wait_seconds{type}`, from the
//! federated objects' cache every [`EVERY`] — stateless, so a deletion finished by anyone
//! (hubfed, a person removing the finalizer) stops counting at once, and a restart loses
//! nothing.

use std::time::Duration;

use hubfed_api::names::SYNC_CONTROLLER_FINALIZER;
use hubfed_core::conclude::oldest_waiting_deletion;
use k8s_openapi::jiff::Timestamp;
use kube::api::DynamicObject;
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use crate::metrics::METRICS;

const EVERY: Duration = Duration::from_secs(15);

/// Sets the gauge of `kind` (lowercase) from `store` until `stop`, then clears it.
pub(super) async fn report_waiting_deletions(
    store: Store<DynamicObject>,
    kind: String,
    stop: CancellationToken,
) {
    let gauge = METRICS.oldest_deletion_wait.with_label_values(&[&kind]);
    loop {
        let deletions = store.state().into_iter().filter_map(|object| {
            let deleted_at = object.metadata.deletion_timestamp.as_ref()?.0.as_second();
            let held = object
                .metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| f.iter().any(|f| f == SYNC_CONTROLLER_FINALIZER));
            Some((deleted_at, held))
        });
        gauge.set(oldest_waiting_deletion(
            Timestamp::now().as_second(),
            deletions,
        ));
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(EVERY) => {}
        }
    }
    gauge.set(0);
}
