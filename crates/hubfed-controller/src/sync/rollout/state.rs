//! Where a rollout's state is kept: a ConfigMap of the control plane's namespace per object
//! ([`state_name`]), read ([`load`]), saved over the version read ([`save`]), made to fit or
//! given up for an unstaged object ([`save_fitted`]), and deleted with its object.

use hubfed_api::federated::FederatedSpec;
use hubfed_core::rollout::{
    Fit, RolloutState, STATE_OBJECT_ANNOTATION, STATE_UID_ANNOTATION, fit, read_state,
    state_belongs, state_key, state_name, state_owned_by_object, too_large,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt as _;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::events::EventType;
use serde_json::json;
use tracing::{info, warn};

use crate::sync::TypeContext;
use crate::sync::hub_writes::{HubError, bounded, publish};
use crate::sync::observe::Observed;

/// What was stored of a rollout.
#[derive(Clone, Default)]
pub(super) struct Stored {
    pub(super) state: Option<RolloutState>,
    /// The spec of `state.revision`.
    pub(super) current: Option<FederatedSpec>,
    /// The spec of `state.stable`.
    pub(super) stable: Option<FederatedSpec>,
    pub(super) exists: bool,
    /// Why the stored data cannot be read ([`read_state`]): every change is held.
    pub(super) unreadable: Option<String>,
    /// The ConfigMap's resourceVersion as read (or written): a save is made only over it, so
    /// that a stale leader never overwrites a newer state (it fails, and the reconcile is
    /// retried from what is stored then).
    pub(super) resource_version: Option<String>,
}

/// Where an object's rollout state is stored, and what identifies it there.
pub(super) struct StateRef {
    /// The ConfigMap ([`state_name`]).
    pub(super) name: String,
    /// [`state_key`].
    pub(super) key: String,
    pub(super) uid: Option<String>,
    /// The owner reference to the object, where one is possible ([`state_owned_by_object`]).
    pub(super) owner: Option<serde_json::Value>,
}

impl StateRef {
    pub(super) fn new(ctx: &TypeContext, obj: &DynamicObject) -> Self {
        let (kind, namespace, name) = (&ctx.federated.kind, obj.namespace(), obj.name_any());
        let owned = state_owned_by_object(namespace.as_deref(), &ctx.shared.kubefed_namespace);
        Self {
            name: state_name(kind, namespace.as_deref(), &name),
            key: state_key(kind, namespace.as_deref(), &name),
            uid: obj.uid(),
            owner: obj.uid().filter(|_| owned).map(|uid| {
                json!({
                    "apiVersion": ctx.federated.api_version,
                    "kind": kind,
                    "name": name,
                    "uid": uid,
                })
            }),
        }
    }
}

/// The stored state of the object; none when there is none, or when it is an earlier same-named
/// object's ([`state_belongs`]: it is overwritten).
pub(super) async fn load(ctx: &TypeContext, state: &StateRef) -> Result<Stored, HubError> {
    let api: Api<ConfigMap> =
        Api::namespaced(ctx.shared.hub.clone(), &ctx.shared.kubefed_namespace);
    let Some(map) = bounded(api.get_opt(&state.name)).await?? else {
        return Ok(Stored::default());
    };
    let stored_uid = map.annotations().get(STATE_UID_ANNOTATION).cloned();
    let resource_version = map.resource_version();
    if !state_belongs(stored_uid.as_deref(), state.uid.as_deref()) {
        return Ok(Stored {
            exists: true,
            resource_version,
            ..Stored::default()
        });
    }
    Ok(match read_state(&map.data.unwrap_or_default()) {
        Ok(data) => Stored {
            state: data.state,
            current: data.current,
            stable: data.stable,
            exists: true,
            unreadable: None,
            resource_version,
        },
        Err(why) => Stored {
            exists: true,
            unreadable: Some(why),
            resource_version,
            ..Stored::default()
        },
    })
}

/// Deletes the object's state (known to exist). A failure is a Warning, never an error: the
/// deletion of the object goes on.
pub(super) async fn delete_state(ctx: &TypeContext, observed: &Observed, state: &StateRef) {
    let api: Api<ConfigMap> =
        Api::namespaced(ctx.shared.hub.clone(), &ctx.shared.kubefed_namespace);
    let result = bounded(api.delete(&state.name, &Default::default()))
        .await
        .and_then(|r| r.map_err(HubError::from));
    match result {
        Ok(_) => info!(configmap = %state.name, "rollout state deleted with its object"),
        Err(HubError::Hub(kube::Error::Api(e))) if e.code == 404 => {}
        Err(e) => {
            warn!(configmap = %state.name, error = %e, "rollout state left behind");
            publish(
                ctx,
                &observed.reference,
                EventType::Warning,
                "RolloutStateNotDeleted",
                &format!(
                    "the rollout state {}/{} was not deleted ({e}); it is left behind, and a new \
                     object of the same name ignores it",
                    ctx.shared.kubefed_namespace, state.name
                ),
            );
        }
    }
}

/// Why an object is not staged when its state does not fit.
const TOO_LARGE: &str = "the rollout state of this object does not fit in a ConfigMap (1 MiB): \
                         its changes go to every cluster at once";

/// Saves `saved` as far as it fits ([`fit`]: the stable spec is dropped first). When it does
/// not fit at all, or the API server refuses it as too large, the object is not staged
/// ([`too_large`]: a small state is stored instead, and a Warning `RolloutStateTooLarge`
/// published when news): `None`, the plan goes out as it is.
pub(super) async fn save_fitted(
    ctx: &TypeContext,
    observed: &Observed,
    state_ref: &StateRef,
    stored: &Stored,
    mut saved: Stored,
    new: &str,
) -> Result<Option<Stored>, HubError> {
    let len = |v: Option<String>| v.map_or(0, |v| v.len());
    let state = len(json_text(saved.state.as_ref())?);
    let current = len(json_text(saved.current.as_ref())?);
    let stable = len(json_text(saved.stable.as_ref())?);
    match fit(state, current, stable) {
        Fit::All => {}
        Fit::WithoutStable => saved.stable = None,
        Fit::TooLarge => {
            unstage(ctx, observed, state_ref, stored, new).await?;
            return Ok(None);
        }
    }
    match save(ctx, state_ref, stored, &mut saved).await {
        Ok(()) => Ok(Some(saved)),
        Err(HubError::Hub(kube::Error::Api(e)))
            if e.code == 413
                || (e.code == 422 && e.message.contains("Too long"))
                || e.message.to_lowercase().contains("too large") =>
        {
            unstage(ctx, observed, state_ref, stored, new).await?;
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Stores that the object's revision `new` went out unstaged, its state being too large.
async fn unstage(
    ctx: &TypeContext,
    observed: &Observed,
    state_ref: &StateRef,
    stored: &Stored,
    new: &str,
) -> Result<(), HubError> {
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let hold = too_large(stored.state.as_ref(), new, TOO_LARGE, now);
    let mut small = Stored {
        state: Some(hold.state),
        current: None,
        stable: None,
        exists: stored.exists,
        unreadable: None,
        resource_version: None,
    };
    save(ctx, state_ref, stored, &mut small).await?;
    if hold.publish {
        warn!(name = %observed.federated.name, "{TOO_LARGE}");
        publish(
            ctx,
            &observed.reference,
            EventType::Warning,
            "RolloutStateTooLarge",
            TOO_LARGE,
        );
    }
    Ok(())
}

/// Saves `saved` over `stored` (as read: its resourceVersion is the precondition, a conflict
/// fails the reconcile, which is retried from what is stored then), and records the new
/// resourceVersion in `saved`. Nothing is written when nothing changed.
pub(super) async fn save(
    ctx: &TypeContext,
    state: &StateRef,
    stored: &Stored,
    saved: &mut Stored,
) -> Result<(), HubError> {
    let name = state.name.as_str();
    saved.resource_version = stored.resource_version.clone();
    let unchanged = stored.exists
        && stored.unreadable.is_none()
        && stored.state == saved.state
        && stored.current == saved.current
        && stored.stable == saved.stable;
    if unchanged {
        return Ok(());
    }
    let body = state_body(state, saved, stored.resource_version.as_deref())?;
    let api: Api<ConfigMap> =
        Api::namespaced(ctx.shared.hub.clone(), &ctx.shared.kubefed_namespace);
    let written = if stored.exists {
        let params = PatchParams::apply(hubfed_api::names::FIELD_MANAGER).force();
        bounded(api.patch(name, &params, &Patch::Apply(&body))).await??
    } else {
        // Created first: the chart's Role grants `create` (not limitable by name) and
        // `patch`, and server-side apply of a missing object needs both. A state created
        // meanwhile by another makes this fail (AlreadyExists): retried like a conflict.
        let map: ConfigMap = serde_json::from_value(body)?;
        bounded(api.create(&Default::default(), &map)).await??
    };
    saved.resource_version = written.resource_version();
    Ok(())
}

/// The state ConfigMap holding `saved`, to be written over `resource_version` (the one read;
/// none for a creation).
fn state_body(
    state: &StateRef,
    saved: &Stored,
    resource_version: Option<&str>,
) -> Result<serde_json::Value, HubError> {
    let text = |v: Option<String>| v.unwrap_or_default();
    let data = json!({
        "state": text(json_text(saved.state.as_ref())?),
        "current": text(json_text(saved.current.as_ref())?),
        "stable": text(json_text(saved.stable.as_ref())?),
    });
    let mut metadata = json!({
        "name": state.name,
        "labels": {"app.kubernetes.io/managed-by": "hubfed"},
        "annotations": {
            STATE_OBJECT_ANNOTATION: state.key,
            STATE_UID_ANNOTATION: state.uid,
        },
        "ownerReferences": state.owner.iter().collect::<Vec<_>>(),
    });
    if let Some(resource_version) = resource_version {
        metadata["resourceVersion"] = json!(resource_version);
    }
    Ok(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": data,
    }))
}

/// `value` as the JSON text stored for it; none for none.
fn json_text<T: serde::Serialize>(value: Option<&T>) -> Result<Option<String>, serde_json::Error> {
    value.map(serde_json::to_string).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A save is made over the state as read: its resourceVersion is the precondition, so a
    /// stale leader's save fails instead of overwriting a newer state.
    #[test]
    fn a_save_is_made_over_the_state_as_read() {
        let state = StateRef {
            name: "hubfed-rollout.x-0123456789".into(),
            key: "FederatedDeployment/ns/x".into(),
            uid: Some("uid-1".into()),
            owner: None,
        };
        let saved = Stored {
            state: Some(RolloutState::default()),
            ..Stored::default()
        };
        let over = state_body(&state, &saved, Some("42")).expect("a body");
        assert_eq!(over["metadata"]["resourceVersion"], "42");
        assert_eq!(
            over["metadata"]["annotations"][STATE_UID_ANNOTATION],
            "uid-1"
        );
        let created = state_body(&state, &saved, None).expect("a body");
        assert!(created["metadata"].get("resourceVersion").is_none());
    }
}
