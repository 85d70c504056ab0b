//! `orphaning-deletion enable|disable|status TYPE NAME`: the `kubefed.io/orphan: "true"`
//! annotation on a federated object (docs/kubefed-compatibility.md §1.10): with it, deleting the
//! federated object keeps the member copies (only their managed label is removed).

use hubfed_api::federatedtypeconfig::FederatedTypeConfig;
use hubfed_api::names::ORPHAN_ANNOTATION;
use kube::api::{Api, DynamicObject, Patch, PatchParams};

use crate::cli::{OrphaningCommand, OrphaningTarget};
use crate::error::{Error, Result};
use crate::kubeconfig::Target;
use crate::ops;
use crate::session::Session;
use crate::types::resolve_enabled;

pub async fn orphaning(session: &mut Session<'_>, command: OrphaningCommand) -> Result<()> {
    let (target, enable, dry_run) = match command {
        OrphaningCommand::Enable(args) => (args.target, Some(true), args.dry_run),
        OrphaningCommand::Disable(args) => (args.target, Some(false), args.dry_run),
        OrphaningCommand::Status(target) => (target, None, false),
    };
    let ns = session.kubefed_namespace().to_owned();
    let hub = session.hub().await?;
    let ftc = resolve_enabled(&hub, &ns, &target.type_name).await?;
    let (api, shown) = federated_api(&hub, &ftc, &target);
    let object = api
        .get_opt(&target.name)
        .await
        .map_err(|e| hub.err(e))?
        .ok_or_else(|| Error::NotFound(format!("{}: {shown} not found", hub.subject)))?;
    let orphaning = object
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ORPHAN_ANNOTATION))
        .is_some_and(|v| v == "true");
    let Some(enable) = enable else {
        return session.say(if orphaning { "Enabled" } else { "Disabled" });
    };
    if enable != orphaning && !dry_run {
        let value = if enable {
            serde_json::Value::from("true")
        } else {
            serde_json::Value::Null
        };
        let patch = serde_json::json!({"metadata": {"annotations": {ORPHAN_ANNOTATION: value}}});
        api.patch(&target.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| hub.err(e))?;
    }
    let state = match (enable, enable == orphaning) {
        (true, false) => "orphaning deletion enabled",
        (false, false) => "orphaning deletion disabled",
        (true, true) => "orphaning deletion already enabled",
        (false, true) => "orphaning deletion already disabled",
    };
    ops::report(session, "hub", &shown, state, dry_run)
}

/// The API of the federated object and how to name it in messages.
fn federated_api(
    hub: &Target,
    ftc: &FederatedTypeConfig,
    target: &OrphaningTarget,
) -> (Api<DynamicObject>, String) {
    let federated = &ftc.spec.federated_type;
    let resource = federated.to_dynamic();
    let kind = federated.kind.to_lowercase();
    if ftc.federated_namespaced() {
        let namespace = target
            .namespace
            .clone()
            .unwrap_or_else(|| hub.default_namespace.clone());
        let shown = format!("{kind} {namespace}/{}", target.name);
        (
            Api::namespaced_with(hub.client.clone(), &namespace, &resource),
            shown,
        )
    } else {
        (
            Api::all_with(hub.client.clone(), &resource),
            format!("{kind} {}", target.name),
        )
    }
}
