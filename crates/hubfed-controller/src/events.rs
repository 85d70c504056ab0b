//! Recording Events without holding up the caller.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tracing::debug;

/// The reporter of `controller`'s Events, its instance this pod (`HOSTNAME`).
pub fn reporter(controller: impl Into<String>) -> Reporter {
    Reporter {
        controller: controller.into(),
        instance: std::env::var("HOSTNAME").ok(),
    }
}

/// Records an Event on `reference` in the background (notes are cut at 1,024 characters, the
/// API's limit); a failure to record is logged at debug level, never an error of the caller.
pub fn publish(
    recorder: &Recorder,
    reference: &ObjectReference,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    publish_related(recorder, reference, None, type_, reason, note);
}

/// [`publish`] with a related object (the Event's `related`): Events of one reason on one
/// object are one series per related object — a pull member's writes, reported later than
/// the push members', are their own series, related to the cluster's KubeFedCluster.
pub fn publish_related(
    recorder: &Recorder,
    reference: &ObjectReference,
    related: Option<ObjectReference>,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    let recorder = recorder.clone();
    let reference = reference.clone();
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note.chars().take(1024).collect()),
        action: reason.to_owned(),
        secondary: related,
    };
    tokio::spawn(async move {
        if let Err(e) = recorder.publish(&event, &reference).await {
            debug!(error = %e, "recording an event failed");
        }
    });
}
