//! The CLI's errors. Each one renders as a single line meant for a person: which cluster,
//! what went wrong, and what to do when that is not obvious. Nothing here ever carries a
//! token.

use std::path::PathBuf;

/// Exit code of a successful run.
pub const EXIT_OK: i32 = 0;
/// Exit code of a failed command (the error is on stderr).
pub const EXIT_ERROR: i32 = 1;
/// Exit code of a command line that could not be parsed.
pub const EXIT_USAGE: i32 = 2;
/// Exit code of `join` when the cluster was joined but did not report `Ready` within `--wait`.
pub const EXIT_NOT_READY: i32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Arguments that parse but do not make sense together.
    #[error("{0}")]
    Usage(String),

    #[error("cannot read kubeconfig {path}: {reason}")]
    Kubeconfig { path: String, reason: String },

    #[error("{subject}: context {context:?} not found in kubeconfig {path}")]
    ContextNotFound {
        subject: String,
        context: String,
        path: String,
    },

    #[error("{subject}: cannot use context {context:?} of kubeconfig {path}: {reason}")]
    BadContext {
        subject: String,
        context: String,
        path: String,
        reason: String,
    },

    #[error("{subject}: cannot reach {url}: {reason}")]
    Unreachable {
        subject: String,
        url: String,
        reason: String,
    },

    #[error("{subject}: permission denied: {message}")]
    Forbidden { subject: String, message: String },

    #[error("{subject}: the credentials were rejected (401 Unauthorized)")]
    Unauthorized { subject: String },

    /// Any other refusal by an API server, with its message.
    #[error("{subject}: {message}")]
    Api { subject: String, message: String },

    #[error("{0}")]
    NotFound(String),

    #[error("unknown type {name:?}: {reason}")]
    UnknownType { name: String, reason: String },

    /// A request that cannot be carried out as asked, with the reason and, where there is
    /// one, the way out.
    #[error("{0}")]
    Refused(String),

    #[error("{0}")]
    Timeout(String),

    #[error("cannot read {}: {reason}", path.display())]
    ReadFile { path: PathBuf, reason: String },

    #[error("cannot write the output: {0}")]
    Output(#[source] std::io::Error),

    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

impl Error {
    /// Maps a kube client error from a request to `subject` (e.g. `cluster "member1"`) at
    /// `url` to a one-line error.
    pub fn kube(subject: &str, url: &str, error: kube::Error) -> Self {
        match error {
            kube::Error::Api(status) => match status.code {
                401 => Self::Unauthorized {
                    subject: subject.to_owned(),
                },
                403 => Self::Forbidden {
                    subject: subject.to_owned(),
                    message: one_line(&status.message),
                },
                _ => Self::Api {
                    subject: subject.to_owned(),
                    message: if status.message.is_empty() {
                        format!("request failed with HTTP {} {}", status.code, status.reason)
                    } else {
                        one_line(&status.message)
                    },
                },
            },
            kube::Error::HyperError(_) | kube::Error::Service(_) => Self::Unreachable {
                subject: subject.to_owned(),
                url: url.to_owned(),
                reason: root_cause(&error),
            },
            kube::Error::Auth(e) => Self::Api {
                subject: subject.to_owned(),
                message: format!("cannot authenticate: {}", one_line(&e.to_string())),
            },
            other => Self::Api {
                subject: subject.to_owned(),
                message: one_line(&root_cause(&other)),
            },
        }
    }

    /// Whether this error says the cluster could not be reached at all.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Unreachable { .. })
    }
}

/// The innermost cause of an error chain, with the outer messages that add information
/// (kube's wrappers such as `ServiceError:` do not).
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut innermost = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !text.is_empty() {
            innermost = text;
        }
        source = cause.source();
    }
    let text = one_line(&innermost);
    if text.contains("deadline has elapsed") || text.contains("timed out") {
        "no answer (timed out)".to_owned()
    } else {
        text
    }
}

/// Collapses whitespace runs (newlines included) into single spaces.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api_error(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(Status {
            code,
            message: message.to_owned(),
            reason: "Reason".to_owned(),
            ..Status::default()
        }))
    }

    #[test]
    fn api_errors_become_one_line_with_the_subject() {
        let forbidden = Error::kube(
            "cluster \"member1\"",
            "https://x",
            api_error(403, "secrets is forbidden:\n User \"u\" cannot list"),
        );
        assert_eq!(
            forbidden.to_string(),
            "cluster \"member1\": permission denied: secrets is forbidden: User \"u\" cannot list"
        );
        let unauthorized = Error::kube("hub cluster \"hub\"", "https://x", api_error(401, ""));
        assert_eq!(
            unauthorized.to_string(),
            "hub cluster \"hub\": the credentials were rejected (401 Unauthorized)"
        );
        let other = Error::kube("cluster \"m\"", "https://x", api_error(422, ""));
        assert_eq!(
            other.to_string(),
            "cluster \"m\": request failed with HTTP 422 Reason"
        );
    }

    #[test]
    fn root_cause_is_the_innermost_message() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let wrapped = kube::Error::ReadEvents(io);
        assert_eq!(root_cause(&wrapped), "refused");
    }

    #[test]
    fn one_line_collapses_newlines() {
        assert_eq!(one_line(" a\n  b\tc \n"), "a b c");
    }
}
