//! `enable` and `disable` (docs/kubefed-compatibility.md §3): a type's federated CRD and
//! FederatedTypeConfig written to the hub, or propagation stopped and both deleted.

use std::path::Path;
use std::time::Duration;

use hubfed_api::federatedcrd::{FederatedTypeDescription, federated_crd, target_has_replicas};
use hubfed_api::federatedtypeconfig::{
    ApiResource, ControllerStatus, FederatedTypeConfig, PropagationMode, ResourceScope,
};
use hubfed_api::kubefedcluster::{KubeFedCluster, SyncMode};
use hubfed_api::names::{CORE_GROUP, NAMESPACES_FTC_NAME, SCHEDULING_GROUP, TYPES_GROUP};
use hubfed_core::openapi;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde::Deserialize;
use serde_json::Value;

use crate::cli::{DisableArgs, EnableArgs};
use crate::control_plane::ensure_kubefed_installed;
use crate::error::{Error, Result};
use crate::kubeconfig::Target;
use crate::ops;
use crate::session::Session;
use crate::types::{DiscoveredType, discover, find_type, resolve_enabled};

/// KubeFed's `EnableTypeDirective` file (`enable -f`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EnableTypeDirective {
    kind: String,
    metadata: DirectiveMetadata,
    #[serde(default)]
    spec: DirectiveSpec,
}

#[derive(Deserialize)]
struct DirectiveMetadata {
    name: String,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DirectiveSpec {
    target_version: Option<String>,
    federated_group: Option<String>,
    federated_version: Option<String>,
}

/// What to enable: the type name, target version, federated group and version.
struct EnableRequest {
    name: String,
    version: Option<String>,
    federated_group: String,
    federated_version: String,
}

fn read_directive(path: &Path, args: &EnableArgs) -> Result<EnableRequest> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::ReadFile {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    let directive: EnableTypeDirective =
        serde_yaml_ng::from_str(&text).map_err(|e| Error::ReadFile {
            path: path.to_owned(),
            reason: format!("not an EnableTypeDirective: {e}"),
        })?;
    if directive.kind != "EnableTypeDirective" {
        return Err(Error::ReadFile {
            path: path.to_owned(),
            reason: format!("kind is {:?}, want EnableTypeDirective", directive.kind),
        });
    }
    Ok(EnableRequest {
        name: directive.metadata.name,
        version: directive.spec.target_version.or(args.version.clone()),
        federated_group: directive
            .spec
            .federated_group
            .unwrap_or_else(|| args.federated_group.clone()),
        federated_version: directive
            .spec
            .federated_version
            .unwrap_or_else(|| args.federated_version.clone()),
    })
}

/// The target's structural schema: for a CRD target, the served version's
/// `openAPIV3Schema`; for any other type, the kind's schema in the hub's OpenAPI v3 document
/// (as KubeFed took it from OpenAPI v2). Without one the template is free-form, which a
/// warning says for types that should have one.
pub async fn target_schema(
    session: &mut Session<'_>,
    hub: &Target,
    target: &ApiResource,
) -> Result<Option<Value>> {
    // CRD groups always contain a dot; built-in ones such as apps or batch do not.
    if target.group.contains('.') {
        let crds: Api<CustomResourceDefinition> = Api::all(hub.client.clone());
        if let Some(crd) = crds
            .get_opt(&target.group_qualified_name())
            .await
            .map_err(|e| hub.err(e))?
        {
            let version = crd
                .spec
                .versions
                .iter()
                .find(|v| v.name == target.version)
                .or(crd.spec.versions.first());
            return version
                .and_then(|v| v.schema.as_ref())
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .map(|schema| {
                    serde_json::to_value(schema).map_err(|e| {
                        Error::Refused(format!("cannot read the schema of {}: {e}", target.kind))
                    })
                })
                .transpose();
        }
    }
    let api_version = match target.group.as_str() {
        "" => target.version.clone(),
        group => format!("{group}/{}", target.version),
    };
    let missing = match openapi_schema(hub, target).await {
        Ok(Some(schema)) => return Ok(Some(schema)),
        Ok(None) => format!(
            "the hub's OpenAPI v3 document of {api_version} has no {}",
            target.kind
        ),
        Err(e) => format!("cannot read the hub's OpenAPI v3 document of {api_version}: {e}"),
    };
    session.warn(format_args!(
        "{missing}; the federated template of {} is free-form (not type-checked)",
        target.kind
    ))?;
    Ok(None)
}

/// The structural schema of `target`'s kind from the hub's OpenAPI v3 document of its
/// group/version.
async fn openapi_schema(hub: &Target, target: &ApiResource) -> Result<Option<Value>> {
    let path = match target.group.as_str() {
        "" => format!("/openapi/v3/api/{}", target.version),
        group => format!("/openapi/v3/apis/{group}/{}", target.version),
    };
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| Error::Refused(format!("cannot build the OpenAPI request: {e}")))?;
    let document: Value = hub.client.request(request).await.map_err(|e| hub.err(e))?;
    Ok(openapi::kind_schema(
        &document,
        &target.group,
        &target.version,
        &target.kind,
    ))
}

pub async fn enable(session: &mut Session<'_>, args: EnableArgs) -> Result<()> {
    let request = match (&args.filename, &args.type_name) {
        (Some(path), _) => read_directive(path, &args)?,
        (None, Some(name)) => EnableRequest {
            name: name.clone(),
            version: args.version.clone(),
            federated_group: args.federated_group.clone(),
            federated_version: args.federated_version.clone(),
        },
        (None, None) => return Err(Error::Usage("give TYPE or -f FILE".to_owned())),
    };
    let ns = session.kubefed_namespace().to_owned();
    let hub = session.hub().await?;
    enable_type(
        session,
        &hub,
        &ns,
        &request_from(&request),
        args.output,
        args.dry_run,
    )
    .await?;
    Ok(())
}

/// The parameters of one `enable`, shared with `federate --enable-type`.
pub struct EnableType<'a> {
    pub name: &'a str,
    pub version: Option<&'a str>,
    pub federated_group: &'a str,
    pub federated_version: &'a str,
}

fn request_from(request: &EnableRequest) -> EnableType<'_> {
    EnableType {
        name: &request.name,
        version: request.version.as_deref(),
        federated_group: &request.federated_group,
        federated_version: &request.federated_version,
    }
}

/// Builds the FTC and CRD for `request`; prints them (`output`) or writes them, waiting until
/// the CRD is served. Returns the FTC.
pub async fn enable_type(
    session: &mut Session<'_>,
    hub: &Target,
    ns: &str,
    request: &EnableType<'_>,
    output: Option<crate::cli::OutputFormat>,
    dry_run: bool,
) -> Result<FederatedTypeConfig> {
    let types = discover(hub, request.version).await?;
    let found = find_type(request.name, &types)?.clone();
    check_federable(&found, request)?;
    let target = found.resource.clone();
    let schema = target_schema(session, hub, &target).await?;
    let retain_replicas = match &schema {
        Some(schema) => target_has_replicas(schema),
        None => found.has_scale,
    };
    let ftc = FederatedTypeConfig::for_target_in_group(
        target.clone(),
        ns,
        request.federated_group,
        request.federated_version,
    );
    let short_names: Vec<&str> = found.short_names.iter().map(String::as_str).collect();
    let description = FederatedTypeDescription::for_ftc(&ftc, &short_names, retain_replicas);
    let crd = federated_crd(&description, schema)
        .map_err(|e| Error::Refused(format!("cannot build the federated CRD: {e}")))?;

    if let Some(format) = output {
        let text = ops::render(&[ops::to_value(&crd)?, ops::to_value(&ftc)?], format)?;
        session.print(&text)?;
        return Ok(ftc);
    }

    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(hub.client.clone(), ns);
    ensure_kubefed_installed(hub, ns).await?;
    let newly_enabled = check_not_enabled_otherwise(hub, &ftcs, &ftc).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(hub.client.clone());
    let mut writes = ops::Writer::new(session, "hub", hub, dry_run);
    writes.apply(&crds, &crd).await?;
    if !dry_run {
        wait_established(hub, &crds, crd.metadata.name.as_deref().unwrap_or_default()).await?;
    }
    writes.apply(&ftcs, &ftc).await?;
    if newly_enabled {
        remind_after_enable(session, hub, ns, &ftcs, &target).await?;
    }
    Ok(ftc)
}

/// A type can be federated when it is served in the version asked for, is not one of the
/// control plane's own, and supports every verb the sync controller uses.
fn check_federable(found: &DiscoveredType, request: &EnableType<'_>) -> Result<()> {
    let target = &found.resource;
    if let Some(version) = request.version
        && target.version != version
    {
        return Err(Error::UnknownType {
            name: request.name.to_owned(),
            reason: format!(
                "{} is not served in version {version}",
                target.group_qualified_name()
            ),
        });
    }
    let internal = [
        CORE_GROUP,
        SCHEDULING_GROUP,
        TYPES_GROUP,
        request.federated_group,
    ];
    if internal.contains(&target.group.as_str()) {
        return Err(Error::Refused(format!(
            "{} belongs to the federation control plane and cannot itself be federated",
            target.group_qualified_name()
        )));
    }
    let missing: Vec<&str> = [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ]
    .into_iter()
    .filter(|verb| !found.verbs.iter().any(|v| v == verb))
    .collect();
    if !missing.is_empty() {
        return Err(Error::Refused(format!(
            "{} cannot be federated: the API does not support {}",
            target.group_qualified_name(),
            missing.join(", ")
        )));
    }
    Ok(())
}

/// Refuses a type already federated as another federated type; returns whether it is newly
/// enabled.
async fn check_not_enabled_otherwise(
    hub: &Target,
    ftcs: &Api<FederatedTypeConfig>,
    ftc: &FederatedTypeConfig,
) -> Result<bool> {
    let ftc_name = ftc.spec.target_type.group_qualified_name();
    let Some(mut existing) = ftcs.get_opt(&ftc_name).await.map_err(|e| hub.err(e))? else {
        return Ok(true);
    };
    existing.set_defaults();
    if existing.spec.federated_type != ftc.spec.federated_type {
        return Err(Error::Refused(format!(
            "{ftc_name} is already federated as {}/{} {}; disable it first to change the federated type",
            existing.spec.federated_type.group,
            existing.spec.federated_type.version,
            existing.spec.federated_type.kind
        )));
    }
    Ok(false)
}

/// What a newly enabled type still needs: the namespaces type for a namespaced one, and
/// wider grants in clusters joined with least privilege.
async fn remind_after_enable(
    session: &mut Session<'_>,
    hub: &Target,
    ns: &str,
    ftcs: &Api<FederatedTypeConfig>,
    target: &ApiResource,
) -> Result<()> {
    if target.scope == ResourceScope::Namespaced
        && ftcs
            .get_opt(NAMESPACES_FTC_NAME)
            .await
            .map_err(|e| hub.err(e))?
            .is_none()
    {
        session.note(format_args!(
            "namespaced types propagate only into federated namespaces: also run hubfedctl enable namespaces"
        ))?;
    }
    let clusters: Api<KubeFedCluster> = Api::namespaced(hub.client.clone(), ns);
    let joined = clusters
        .list(&ListParams::default())
        .await
        .map_err(|e| hub.err(e))?
        .items;
    let (pull, push): (Vec<_>, Vec<_>) = joined
        .iter()
        .partition(|c| c.spec.sync_mode == SyncMode::Pull);
    let names = |clusters: &[&KubeFedCluster]| {
        clusters
            .iter()
            .map(|c| c.name_any())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let what = target.group_qualified_name();
    if !push.is_empty() {
        session.note(format_args!(
            "clusters joined with least privilege need rights on {what}: re-run hubfedctl join CLUSTER --error-on-existing=false for {}",
            names(&push)
        ))?;
    }
    if !pull.is_empty() {
        session.note(format_args!(
            "pull members' agents need rights on {what}: re-run hubfedctl join CLUSTER --mode pull --error-on-existing=false for {}",
            names(&pull)
        ))?;
    }
    Ok(())
}

async fn wait_established(
    hub: &Target,
    crds: &Api<CustomResourceDefinition>,
    name: &str,
) -> Result<()> {
    let timeout = Duration::from_secs(30);
    let established = ops::poll(timeout, Duration::from_millis(250), async || {
        let crd = crds.get_opt(name).await.map_err(|e| hub.err(e))?;
        let ok = crd
            .and_then(|c| c.status)
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        Ok(ok.then_some(()))
    })
    .await?;
    established.ok_or_else(|| {
        Error::Timeout(format!(
            "{}: CRD {name} was not Established within {}s",
            hub.subject,
            timeout.as_secs()
        ))
    })
}

pub async fn disable(session: &mut Session<'_>, args: DisableArgs) -> Result<()> {
    let ns = session.kubefed_namespace().to_owned();
    let hub = session.hub().await?;
    let ftc = resolve_enabled(&hub, &ns, &args.type_name).await?;
    let name = ftc.metadata.name.clone().unwrap_or_default();
    let federated = ftc.spec.federated_type.clone();
    let crd_name = federated.group_qualified_name();
    let dry_run = args.dry_run;
    if args.delete_crd {
        refuse_if_objects_exist(&hub, &federated).await?;
    }
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(hub.client.clone(), &ns);
    let mut writes = ops::Writer::new(session, "hub", &hub, dry_run);
    if ftc.spec.propagation != PropagationMode::Disabled {
        if !dry_run {
            let patch = serde_json::json!({"spec": {"propagation": PropagationMode::Disabled}});
            ftcs.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| hub.err(e))?;
        }
        let what = format!("federatedtypeconfig {ns}/{name}");
        writes.report(&what, "propagation disabled")?;
    }
    if !dry_run {
        wait_propagation_stopped(&hub, &ftcs, &name, args.wait).await?;
    }
    if args.delete_crd {
        let crds: Api<CustomResourceDefinition> = Api::all(hub.client.clone());
        writes.delete(&crds, &crd_name).await?;
    }
    writes.delete(&ftcs, &name).await?;
    Ok(())
}

/// `disable --delete-crd` deletes the federated CRD only when no object of it exists:
/// deleting the CRD would delete them all.
async fn refuse_if_objects_exist(hub: &Target, federated: &ApiResource) -> Result<()> {
    let crd_name = federated.group_qualified_name();
    let objects: Api<DynamicObject> = Api::all_with(hub.client.clone(), &federated.to_dynamic());
    match objects.list_metadata(&ListParams::default().limit(1)).await {
        Ok(list) if !list.items.is_empty() => {
            let example = &list.items[0].metadata;
            let example = match &example.namespace {
                Some(ns) => format!("{ns}/{}", example.name.clone().unwrap_or_default()),
                None => example.name.clone().unwrap_or_default(),
            };
            Err(Error::Refused(format!(
                "cannot delete CRD {crd_name}: {} objects exist (e.g. {example}); delete them first, or disable without --delete-crd",
                federated.kind
            )))
        }
        Ok(_) => Ok(()),
        // The CRD is already gone: nothing can exist.
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        // Anything else (a 403 above all) is no proof that no object exists: deleting
        // the CRD would delete them all.
        Err(e) => Err(hub.err(e)),
    }
}

/// Waits until the controller confirms the FTC's propagation stopped (or the FTC is gone);
/// nothing is deleted before.
async fn wait_propagation_stopped(
    hub: &Target,
    ftcs: &Api<FederatedTypeConfig>,
    name: &str,
    wait: Duration,
) -> Result<()> {
    let stopped = ops::poll(wait, Duration::from_millis(250), async || {
        let current = ftcs.get_opt(name).await.map_err(|e| hub.err(e))?;
        Ok(match current {
            None => Some(()),
            Some(current) => current
                .status
                .as_ref()
                .filter(|s| {
                    s.propagation_controller == ControllerStatus::NotRunning
                        && Some(s.observed_generation) >= current.metadata.generation
                })
                .map(|_| ()),
        })
    })
    .await?;
    if stopped.is_none() {
        return Err(Error::Timeout(format!(
            "propagation of {name} is disabled, but the controller did not confirm it stopped within {}s (is hubfed-controller running?); nothing was deleted",
            wait.as_secs()
        )));
    }
    Ok(())
}
