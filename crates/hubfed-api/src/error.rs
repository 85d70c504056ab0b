use std::path::PathBuf;

/// Errors of the API crate: bad input values and CRD rendering.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid duration {value:?}: {reason}")]
    InvalidDuration { value: String, reason: &'static str },

    #[error("target schema of {kind} is not an OpenAPI v3 schema")]
    InvalidTargetSchema {
        kind: String,
        #[source]
        source: serde_json::Error,
    },

    #[error("the schema generated for {kind} is not an OpenAPI v3 schema")]
    InvalidSchema {
        kind: String,
        #[source]
        source: serde_json::Error,
    },

    #[error("cannot render {what} as YAML")]
    Yaml {
        what: String,
        #[source]
        source: serde_yaml_ng::Error,
    },

    #[error("cannot write {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
