//! Creating a member object when adoption is Disabled: really create-only.
//!
//! An apply creates the object when it is absent and takes it over when it exists, so the
//! GET that showed it absent is no guarantee: an object created in between (by a member
//! controller, a person, a deploy pipeline) would be adopted. A POST fails when the object
//! exists. It leaves hubfed's field manager with an `Update` entry, though, which later
//! applies never clear; so the POST carries a placeholder desired hash, an apply of the
//! real body follows at once (it co-owns every field the POST set), and the `Update` entry
//! is dropped ([`hubfed_core::ownership`]). A crash after the POST leaves the placeholder:
//! the next reconcile applies and drops the entry then.

use hubfed_api::names::{DESIRED_HASH_ANNOTATION, FIELD_MANAGER};
use hubfed_core::ownership::drop_update_entries;
use kube::ResourceExt as _;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tracing::warn;

use super::member_io::patch_answer;

/// The desired hash of a copy created by a POST and not yet applied: it never equals a real
/// hash, so the next reconcile applies it.
const CREATED_NOT_APPLIED: &str = "created-not-applied";

/// What a create-only attempt found.
pub(super) enum Created {
    Created(Box<DynamicObject>),
    /// An object of that name exists: nothing was written.
    Exists,
}

/// POSTs `body`, then applies it with `params` and settles field ownership; the answer is
/// the whole object only when `whole` ([`patch_answer`]).
pub(super) async fn create(
    api: &Api<DynamicObject>,
    name: &str,
    params: &PatchParams,
    body: &Value,
    whole: bool,
) -> Result<Created, kube::Error> {
    let mut placeholder = body.clone();
    placeholder["metadata"]["annotations"][DESIRED_HASH_ANNOTATION] = json!(CREATED_NOT_APPLIED);
    let object: DynamicObject =
        serde_json::from_value(placeholder).map_err(kube::Error::SerdeError)?;
    let post = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    match api.create(&post, &object).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => return Ok(Created::Exists),
        Err(e) => return Err(e),
    }
    let applied = patch_answer(api, name, params, &Patch::Apply(body), whole).await?;
    Ok(Created::Created(Box::new(
        settle_ownership(api, name, applied, whole).await,
    )))
}

/// Drops hubfed's `Update` entries from `applied`'s managedFields when its `Apply` entry
/// is there too (after a create-only POST). Best effort: on failure the object is returned
/// as applied, with a warning.
pub(super) async fn settle_ownership(
    api: &Api<DynamicObject>,
    name: &str,
    applied: DynamicObject,
    whole: bool,
) -> DynamicObject {
    let version = applied.resource_version().unwrap_or_default();
    let Some(patch) = drop_update_entries(applied.managed_fields(), FIELD_MANAGER, &version) else {
        return applied;
    };
    let patched = patch_answer(
        api,
        name,
        &PatchParams::default(),
        &Patch::Merge(&patch),
        whole,
    )
    .await;
    match patched {
        Ok(patched) => patched,
        Err(error) => {
            warn!(object = name, error = %error, "cannot drop hubfed's Update entry from managedFields");
            applied
        }
    }
}
