//! What `plan` and `diff` found, per cluster, and how it is shown: diffs as text, or a
//! document (`-o yaml|json`), and `kubectl diff`'s exit code.

use serde_json::Value;

use crate::cli::OutputFormat;
use crate::error::Result;
use crate::session::Session;

/// What would happen in one cluster.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Change {
    /// `after`: the object as the member's dry run returned it.
    Create {
        diff: String,
        after: Value,
    },
    Update {
        diff: String,
        after: Value,
    },
    Unchanged,
    Delete,
    /// The managed label would be removed (orphaning deletion).
    Unlabel,
    /// An immutable field changes: the copy must be deleted and created again.
    Recreate {
        why: String,
        annotated: bool,
    },
    /// Nothing would be done there, and why.
    Skipped(String),
    /// The member refused the dry run (other than for an immutable field): its message.
    Failed(String),
}

impl Change {
    fn changes(&self) -> bool {
        !matches!(self, Self::Unchanged | Self::Skipped(_) | Self::Failed(_))
    }
}

/// Prints the changes; returns the exit code.
pub(super) fn report(
    session: &mut Session<'_>,
    changes: &[(String, Change)],
    output: Option<OutputFormat>,
) -> Result<i32> {
    let out = match output {
        None => text(changes),
        Some(format) => crate::ops::render(&[document(changes)], format)?,
    };
    session.print(&out)?;
    Ok(exit_code(changes))
}

/// `kubectl diff`'s error code: 1 means changes.
const EXIT_DIFF_ERROR: i32 = 2;

/// 2 when a member refused a dry run, else 1 when something would change, else 0.
fn exit_code(changes: &[(String, Change)]) -> i32 {
    if changes.iter().any(|(_, c)| matches!(c, Change::Failed(_))) {
        EXIT_DIFF_ERROR
    } else {
        i32::from(changes.iter().any(|(_, c)| c.changes()))
    }
}

fn text(changes: &[(String, Change)]) -> String {
    let mut out = String::new();
    for (cluster, change) in changes {
        match change {
            Change::Create { diff, .. } => out.push_str(&format!("{cluster}: create\n{diff}")),
            Change::Update { diff, .. } => out.push_str(&format!("{cluster}: update\n{diff}")),
            Change::Unchanged => out.push_str(&format!("{cluster}: unchanged\n")),
            Change::Delete => out.push_str(&format!("{cluster}: delete (no longer placed)\n")),
            Change::Unlabel => out.push_str(&format!("{cluster}: unlabel (orphaned: kept, no longer managed)\n")),
            Change::Recreate { why, annotated: true } => out.push_str(&format!(
                "{cluster}: recreate (an immutable field changes; hubfed.io/recreate-on-immutable-change deletes and creates it again): {why}\n"
            )),
            Change::Recreate { why, annotated: false } => out.push_str(&format!(
                "{cluster}: needs recreation (an immutable field changes; the update would fail unless the object is annotated hubfed.io/recreate-on-immutable-change: \"true\"): {why}\n"
            )),
            Change::Skipped(why) => out.push_str(&format!("{cluster}: skipped ({why})\n")),
            Change::Failed(why) => out.push_str(&format!("{cluster}: error ({why})\n")),
        }
    }
    out
}

/// `-o yaml|json`: `{clusters: [{cluster, change, after?, message?}]}`.
fn document(changes: &[(String, Change)]) -> Value {
    let entries: Vec<Value> = changes
        .iter()
        .map(|(cluster, change)| {
            let (kind, after, message) = match change {
                Change::Create { after, .. } => ("create", Some(after), None),
                Change::Update { after, .. } => ("update", Some(after), None),
                Change::Unchanged => ("unchanged", None, None),
                Change::Delete => ("delete", None, None),
                Change::Unlabel => ("unlabel", None, None),
                Change::Recreate { why, annotated } => (
                    if *annotated {
                        "recreate"
                    } else {
                        "needs-recreation"
                    },
                    None,
                    Some(why),
                ),
                Change::Skipped(why) => ("skipped", None, Some(why)),
                Change::Failed(why) => ("error", None, Some(why)),
            };
            let mut entry = serde_json::json!({"cluster": cluster, "change": kind});
            if let Some(after) = after {
                entry["after"] = after.clone();
            }
            if let Some(message) = message {
                entry["message"] = Value::from(message.as_str());
            }
            entry
        })
        .collect();
    serde_json::json!({ "clusters": entries })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A member that refuses one dry run is that cluster's error, not the command's: the other
    /// clusters are shown, and the exit code is 2 at the end.
    #[test]
    fn a_refused_dry_run_is_its_clusters_error() {
        let changes = vec![
            (
                "member1".to_owned(),
                Change::Create {
                    diff: "+a\n".to_owned(),
                    after: serde_json::json!({"kind": "ConfigMap"}),
                },
            ),
            (
                "member2".to_owned(),
                Change::Failed("member2: ConfigMap \"x\" is invalid".to_owned()),
            ),
            (
                "member3".to_owned(),
                Change::Skipped("not placed".to_owned()),
            ),
        ];
        assert_eq!(
            text(&changes),
            "member1: create\n+a\nmember2: error (member2: ConfigMap \"x\" is invalid)\nmember3: skipped (not placed)\n"
        );
        assert_eq!(exit_code(&changes), EXIT_DIFF_ERROR);
        assert_eq!(exit_code(&changes[..1]), 1);
        assert_eq!(exit_code(&changes[2..]), 0);
        assert_eq!(
            document(&changes),
            serde_json::json!({"clusters": [
                {"cluster": "member1", "change": "create", "after": {"kind": "ConfigMap"}},
                {"cluster": "member2", "change": "error", "message": "member2: ConfigMap \"x\" is invalid"},
                {"cluster": "member3", "change": "skipped", "message": "not placed"},
            ]})
        );
    }
}
