//! The crate's single error type.

use thiserror::Error;

/// Everything a decision in `hubfed-core` can reject.
#[derive(Debug, Error)]
pub enum CoreError {
    /// A `metav1.LabelSelector` that `LabelSelectorAsSelector` would refuse.
    #[error("invalid cluster selector: {0}")]
    InvalidSelector(String),

    /// Two `spec.overrides` entries name the same cluster.
    #[error("cluster {cluster:?} appears more than once in spec.overrides")]
    DuplicateClusterOverrides { cluster: String },

    /// An override targets a path that would change the object's identity.
    #[error("override[{index}] for cluster {cluster:?} has an invalid path: {path}")]
    ForbiddenOverridePath {
        cluster: String,
        index: usize,
        path: String,
    },

    /// The same path is overridden twice for one cluster.
    #[error("path {path:?} appears more than once for cluster {cluster:?}")]
    DuplicateOverridePath { cluster: String, path: String },

    /// An override uses an op other than add, remove or replace.
    #[error(
        "override[{index}] for cluster {cluster:?} has unsupported op {op:?} (allowed: add, remove, replace)"
    )]
    UnsupportedOverrideOp {
        cluster: String,
        index: usize,
        op: String,
    },

    /// The overrides are valid but do not apply to the object (e.g. replace of a missing path).
    #[error("applying overrides for cluster {cluster:?} failed: {source}")]
    ApplyOverrides {
        cluster: String,
        #[source]
        source: crate::gopatch::PatchError,
    },

    /// `spec.template` is present but not a JSON object.
    #[error("spec.template must be an object, found {found}")]
    InvalidTemplate { found: &'static str },

    /// The `kubefed.io/deleteoption` annotation is not JSON `metav1.DeleteOptions`.
    #[error("annotation kubefed.io/deleteoption is not valid metav1.DeleteOptions JSON: {source}")]
    InvalidDeleteOptions {
        #[source]
        source: serde_json::Error,
    },
}

/// `Result` with [`CoreError`] as the default error.
pub type Result<T, E = CoreError> = std::result::Result<T, E>;
