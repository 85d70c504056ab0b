//! Why a reconcile failed: one variant per step of the pipeline, so that the retry policy
//! and the log can tell the steps apart.

use super::hub_writes::HubError;

/// A reconcile's failure, by the step that failed. Every step that can fail is a hub request
/// ([`HubError`]): member writes fail per cluster and end in the status instead.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// *Plan*: reading the object's rollout strategy or recording its rollout.
    #[error("staging the rollout: {0}")]
    Rollout(#[source] HubError),
    /// *Execute*: adding the finalizer before the first member write.
    #[error("adding the finalizer: {0}")]
    AddFinalizer(#[source] HubError),
    /// *Execute*: settling the works of pull members a deletion no longer needs.
    #[error("settling pull members' works: {0}")]
    Works(#[source] HubError),
    /// *Conclude*: removing the finalizer once the copies are gone.
    #[error("removing the finalizer: {0}")]
    RemoveFinalizer(#[source] HubError),
    /// *Write*: the object's status (a deletion's, or a spec that cannot be read).
    #[error("writing the status: {0}")]
    Status(#[source] HubError),
}

impl Error {
    /// The step that failed, as logs name it.
    pub fn step(&self) -> &'static str {
        match self {
            Self::Rollout(_) => "rollout",
            Self::AddFinalizer(_) => "add-finalizer",
            Self::Works(_) => "works",
            Self::RemoveFinalizer(_) => "remove-finalizer",
            Self::Status(_) => "status",
        }
    }

    /// The hub's failure underneath.
    pub fn hub(&self) -> &HubError {
        match self {
            Self::Rollout(e)
            | Self::AddFinalizer(e)
            | Self::Works(e)
            | Self::RemoveFinalizer(e)
            | Self::Status(e) => e,
        }
    }
}
