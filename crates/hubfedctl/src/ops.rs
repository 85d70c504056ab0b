//! Writes that report what they did (`created`, `configured`, `unchanged`, `deleted`) and
//! honour `--dry-run`; waits; printing objects as YAML or JSON.

use std::fmt::Debug;
use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::cli::OutputFormat;
use crate::error::{Error, Result};
use crate::kubeconfig::Target;
use crate::session::Session;

/// Field manager of every write hubfedctl makes.
pub const FIELD_MANAGER: &str = "hubfedctl";

/// What a write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Created,
    Configured,
    Unchanged,
}

impl Change {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Configured => "configured",
            Self::Unchanged => "unchanged",
        }
    }
}

/// `kind ns/name` or `kind name`, lowercase kind as kubectl prints it.
pub fn describe<K: Resource<DynamicType = ()>>(object: &K) -> String {
    let kind = K::kind(&()).to_lowercase();
    match object.meta().namespace.as_deref() {
        Some(ns) => format!("{kind} {ns}/{}", object.name_any()),
        None => format!("{kind} {}", object.name_any()),
    }
}

/// Prints `<where>: <what> <change>[ (dry run)]`.
pub fn report(
    session: &mut Session<'_>,
    place: &str,
    what: &str,
    change: &str,
    dry_run: bool,
) -> Result<()> {
    let suffix = if dry_run { " (dry run)" } else { "" };
    session.say(format_args!("{place}: {what} {change}{suffix}"))
}

/// What hubfedctl writes: typed objects it can name, read back and print.
pub trait Object:
    Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned
{
}

impl<K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned> Object for K {}

/// Writes to one cluster, each reported under `place` (`<place>: <what> <change>`); with
/// `dry_run`, reported and not made.
pub struct Writer<'w, 's> {
    pub session: &'w mut Session<'s>,
    pub place: &'w str,
    pub target: &'w Target,
    pub dry_run: bool,
}

impl<'w, 's> Writer<'w, 's> {
    pub fn new(
        session: &'w mut Session<'s>,
        place: &'w str,
        target: &'w Target,
        dry_run: bool,
    ) -> Self {
        Self {
            session,
            place,
            target,
            dry_run,
        }
    }

    /// Server-side applies `object` (forced, as [`FIELD_MANAGER`]) unless a dry run; reports
    /// and returns what changed.
    pub async fn apply<K: Object>(&mut self, api: &Api<K>, object: &K) -> Result<K> {
        let target = self.target;
        let name = object.name_any();
        let existing = api.get_opt(&name).await.map_err(|e| target.err(e))?;
        let (change, result) = if self.dry_run {
            let change = if existing.is_some() {
                Change::Configured
            } else {
                Change::Created
            };
            (change, existing.unwrap_or_else(|| object.clone()))
        } else {
            let params = PatchParams::apply(FIELD_MANAGER).force();
            let written = api
                .patch(&name, &params, &Patch::Apply(object))
                .await
                .map_err(|e| target.err(e))?;
            let change = match &existing {
                None => Change::Created,
                Some(old) if old.resource_version() == written.resource_version() => {
                    Change::Unchanged
                }
                Some(_) => Change::Configured,
            };
            (change, written)
        };
        self.report(&describe(object), change.as_str())?;
        Ok(result)
    }

    /// Creates `object` unless it exists; reports `created` or nothing.
    pub async fn create_if_missing<K: Object>(&mut self, api: &Api<K>, object: &K) -> Result<()> {
        let target = self.target;
        if api
            .get_opt(&object.name_any())
            .await
            .map_err(|e| target.err(e))?
            .is_some()
        {
            return Ok(());
        }
        if !self.dry_run {
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PostParams::default()
            };
            match api.create(&params, object).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 409 => return Ok(()),
                Err(e) => return Err(target.err(e)),
            }
        }
        self.report(&describe(object), "created")
    }

    /// Deletes `name` (background propagation) unless a dry run; reports `deleted` when it
    /// existed. Returns whether it existed.
    pub async fn delete<K: Object>(&mut self, api: &Api<K>, name: &str) -> Result<bool> {
        let target = self.target;
        let Some(existing) = api.get_opt(name).await.map_err(|e| target.err(e))? else {
            return Ok(false);
        };
        if !self.dry_run {
            let params = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                ..DeleteParams::default()
            };
            match api.delete(name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => return Ok(false),
                Err(e) => return Err(target.err(e)),
            }
        }
        self.report(&describe(&existing), "deleted")?;
        Ok(true)
    }

    /// Reports `<place>: <what> <change>[ (dry run)]`.
    pub fn report(&mut self, what: &str, change: &str) -> Result<()> {
        report(self.session, self.place, what, change, self.dry_run)
    }
}

/// Calls `check` every `interval` until it returns `Some` or `timeout` passes (`None`).
/// Errors from `check` end the wait at once.
pub async fn poll<T>(
    timeout: Duration,
    interval: Duration,
    mut check: impl AsyncFnMut() -> Result<Option<T>>,
) -> Result<Option<T>> {
    let began = Instant::now();
    loop {
        if let Some(value) = check().await? {
            return Ok(Some(value));
        }
        if began.elapsed() >= timeout {
            return Ok(None);
        }
        tokio::time::sleep(interval).await;
    }
}

/// Renders objects as YAML documents (`---` between them) or as JSON (one object, or a
/// kubectl-style `List` for several).
pub fn render(objects: &[Value], format: OutputFormat) -> Result<String> {
    match format {
        OutputFormat::Yaml => {
            let mut out = String::new();
            for (i, object) in objects.iter().enumerate() {
                if i > 0 {
                    out.push_str("---\n");
                }
                let yaml = serde_yaml_ng::to_string(object)
                    .map_err(|e| Error::Refused(format!("cannot render YAML: {e}")))?;
                out.push_str(&yaml);
            }
            Ok(out)
        }
        OutputFormat::Json => {
            let value = match objects {
                [one] => one.clone(),
                many => list(many.to_vec()),
            };
            let mut text = serde_json::to_string_pretty(&value)
                .map_err(|e| Error::Refused(format!("cannot render JSON: {e}")))?;
            text.push('\n');
            Ok(text)
        }
    }
}

/// A kubectl `List` of `items`.
pub fn list(items: Vec<Value>) -> Value {
    serde_json::json!({ "apiVersion": "v1", "kind": "List", "metadata": {}, "items": items })
}

/// An object as JSON without `metadata.managedFields` (kubectl hides them too).
pub fn to_value<T: Serialize>(object: &T) -> Result<Value> {
    let mut value = serde_json::to_value(object)
        .map_err(|e| Error::Refused(format!("cannot serialise an object: {e}")))?;
    if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    Ok(value)
}

/// kubectl's age: `45s`, `12m`, `5h`, `3d`, `2y`.
pub fn age(elapsed: Duration) -> String {
    let seconds = elapsed.as_secs();
    match seconds {
        0..120 => format!("{seconds}s"),
        120..7200 => format!("{}m", seconds / 60),
        7200..172_800 => format!("{}h", seconds / 3600),
        172_800..63_072_000 => format!("{}d", seconds / 86_400),
        _ => format!("{}y", seconds / 31_536_000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ages_read_like_kubectl() {
        let cases = [
            (5, "5s"),
            (119, "119s"),
            (600, "10m"),
            (7300, "2h"),
            (200_000, "2d"),
            (70_000_000, "2y"),
        ];
        for (seconds, shown) in cases {
            assert_eq!(age(Duration::from_secs(seconds)), shown);
        }
    }

    #[test]
    fn yaml_separates_documents_and_json_lists_several() {
        let objects = [json!({"kind": "A"}), json!({"kind": "B"})];
        assert_eq!(
            render(&objects, OutputFormat::Yaml).unwrap(),
            "kind: A\n---\nkind: B\n"
        );
        let json: Value =
            serde_json::from_str(&render(&objects, OutputFormat::Json).unwrap()).unwrap();
        assert_eq!(json["kind"], "List");
        assert_eq!(json["items"][1]["kind"], "B");
        let one: Value =
            serde_json::from_str(&render(&objects[..1], OutputFormat::Json).unwrap()).unwrap();
        assert_eq!(one, objects[0]);
    }
}
