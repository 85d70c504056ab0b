//! `migrate`: taking over a live KubeFed hub (docs/migrating-from-kubefed.md).
//!
//! `check` lists what the takeover will change and what stands in its way; `backup` keeps
//! a copy of the objects `helm uninstall` of KubeFed's chart deletes (its FederatedTypeConfigs
//! and KubeFedConfig) in a ConfigMap of the control-plane namespace; `upgrade` restores them,
//! applies hubfed's CRDs and replaces each federated type's CRD with hubfed's; `rollback`
//! is the way back, marking the objects KubeFed's chart installs for adoption by its Helm
//! release. Nothing here touches a federated object or a member cluster.

use std::time::Duration;

use hubfed_api::defaulttypes::default_federated_crds;
use hubfed_api::federatedcrd::{FederatedTypeDescription, federated_crd, target_has_replicas};
use hubfed_api::federatedtypeconfig::FederatedTypeConfig;
use hubfed_api::kubefedconfig::KubeFedConfig;
use hubfed_api::names::{FTC_FINALIZER, KUBEFED_CONFIG_NAME};
use hubfed_api::render::core_crds;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::cli::{MigrateBackupArgs, MigrateCommand, MigrateRollbackArgs, MigrateUpgradeArgs};
use crate::enable::target_schema;
use crate::error::{EXIT_NOT_READY, EXIT_OK, Error, Result};
use crate::kubeconfig::Target;
use crate::ops::{self, FIELD_MANAGER};
use crate::session::Session;
use crate::types::discover;

/// The ConfigMap `backup` writes and `upgrade` restores from.
pub const BACKUP_CONFIGMAP: &str = "hubfed-kubefed-backup";
const BACKUP_KEY: &str = "objects.yaml";
/// KubeFed's leader-election lock (a ConfigMap; v0.10.0 has no Lease lock).
const KUBEFED_LOCK: &str = "kubefed-controller-manager";
const LEADER_ANNOTATION: &str = "control-plane.alpha.kubernetes.io/leader";
/// A lock renewed more recently than this means KubeFed's controller-manager runs (its
/// default lease is 15 s, renewed every 5 s).
const LOCK_FRESH: Duration = Duration::from_secs(30);
const HELM_RELEASE_ANNOTATION: &str = "meta.helm.sh/release-name";

pub async fn migrate(session: &mut Session<'_>, command: MigrateCommand) -> Result<i32> {
    match command {
        MigrateCommand::Check => check(session).await,
        MigrateCommand::Backup(args) => backup(session, args).await.map(|()| EXIT_OK),
        MigrateCommand::Upgrade(args) => upgrade(session, args).await.map(|()| EXIT_OK),
        MigrateCommand::Rollback(args) => rollback(session, args).await.map(|()| EXIT_OK),
    }
}

/// One line of the pre-flight check.
struct Finding {
    blocker: bool,
    line: String,
}

impl Finding {
    fn note(line: impl Into<String>) -> Self {
        Self {
            blocker: false,
            line: line.into(),
        }
    }
    fn blocker(line: impl Into<String>) -> Self {
        Self {
            blocker: true,
            line: line.into(),
        }
    }
}

async fn check(session: &mut Session<'_>) -> Result<i32> {
    let hub = session.hub().await?;
    let ns = session.kubefed_namespace().to_owned();
    let mut findings = Vec::new();
    if let Some(line) = kubefed_running(&hub, &ns).await? {
        findings.push(Finding::blocker(format!(
            "{line}: stop it before hubfed starts (two controllers must never run together)"
        )));
    }
    findings.extend(helm_owned(&hub, &ns).await?);
    let missing = to_restore(&hub, &ns).await?;
    if !missing.is_empty() {
        findings.push(Finding::note(format!(
            "{} object(s) missing, restored from ConfigMap {ns}/{BACKUP_CONFIGMAP}: {}",
            missing.len(),
            missing.join(", ")
        )));
    }
    for (crd, change) in crd_changes(session, &hub, &ns).await? {
        findings.push(Finding::note(format!("CRD {crd}: {change}")));
    }
    let blockers = findings.iter().filter(|f| f.blocker).count();
    for finding in &findings {
        let mark = if finding.blocker {
            "blocker"
        } else {
            "change "
        };
        session.say(format_args!("{mark}  {}", finding.line))?;
    }
    if blockers > 0 {
        session.say(format_args!(
            "{blockers} blocker(s): resolve them, then run `hubfedctl migrate check` again"
        ))?;
        return Ok(EXIT_NOT_READY);
    }
    session.say(format_args!(
        "ready: {} change(s) listed; no federated object and no member cluster is touched",
        findings.len()
    ))?;
    Ok(EXIT_OK)
}

/// A line naming KubeFed's controller-manager when its leader lock was renewed recently.
async fn kubefed_running(hub: &Target, ns: &str) -> Result<Option<String>> {
    let api: Api<ConfigMap> = Api::namespaced(hub.client.clone(), ns);
    let Some(lock) = api.get_opt(KUBEFED_LOCK).await.map_err(|e| hub.err(e))? else {
        return Ok(None);
    };
    let record: Value = lock
        .annotations()
        .get(LEADER_ANNOTATION)
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or(Value::Null);
    let renewed = record["renewTime"]
        .as_str()
        .and_then(|time| time.parse::<k8s_openapi::jiff::Timestamp>().ok());
    let Some(renewed) = renewed else {
        return Ok(None);
    };
    let age = k8s_openapi::jiff::Timestamp::now().duration_since(renewed);
    let fresh = age.as_secs() < LOCK_FRESH.as_secs() as i64;
    Ok(fresh.then(|| {
        format!(
            "KubeFed's controller-manager runs ({} holds the lock {ns}/{KUBEFED_LOCK}, renewed {}s ago)",
            record["holderIdentity"].as_str().unwrap_or("a replica"),
            age.as_secs().max(0)
        )
    }))
}

/// The FederatedTypeConfigs and the KubeFedConfig a Helm release owns: `helm uninstall`
/// deletes them.
async fn helm_owned(hub: &Target, ns: &str) -> Result<Vec<Finding>> {
    let backed_up = backup_objects(hub, ns).await?.is_some();
    let mut owned = Vec::new();
    for object in control_plane_objects(hub, ns).await? {
        if let Some(release) = object.annotations().get(HELM_RELEASE_ANNOTATION) {
            owned.push(format!(
                "{} {} (release {release})",
                object.types.as_ref().map_or("", |t| t.kind.as_str()),
                object.name_any()
            ));
        }
    }
    if owned.is_empty() {
        return Ok(Vec::new());
    }
    let line = format!(
        "`helm uninstall` of KubeFed's chart deletes {} object(s): {}",
        owned.len(),
        owned.join(", ")
    );
    Ok(vec![if backed_up {
        Finding::note(format!(
            "{line}; a backup is in ConfigMap {ns}/{BACKUP_CONFIGMAP} (`migrate upgrade` restores it)"
        ))
    } else {
        Finding::blocker(format!(
            "{line}; run `hubfedctl migrate backup` first (`migrate upgrade` restores them)"
        ))
    }])
}

/// The FTCs and the KubeFedConfig as dynamic objects (kind set).
async fn control_plane_objects(hub: &Target, ns: &str) -> Result<Vec<kube::api::DynamicObject>> {
    let mut objects = Vec::new();
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(hub.client.clone(), ns);
    for ftc in ftcs
        .list(&ListParams::default())
        .await
        .map_err(|e| hub.err(e))?
    {
        objects.push(dynamic(&ftc)?);
    }
    let configs: Api<KubeFedConfig> = Api::namespaced(hub.client.clone(), ns);
    if let Some(config) = configs
        .get_opt(KUBEFED_CONFIG_NAME)
        .await
        .map_err(|e| hub.err(e))?
    {
        objects.push(dynamic(&config)?);
    }
    Ok(objects)
}

fn dynamic<K: serde::Serialize + kube::Resource<DynamicType = ()>>(
    object: &K,
) -> Result<kube::api::DynamicObject> {
    let mut value = ops::to_value(object)?;
    value["apiVersion"] = json!(K::api_version(&()));
    value["kind"] = json!(K::kind(&()));
    serde_json::from_value(value)
        .map_err(|e| Error::Refused(format!("cannot read {}: {e}", K::kind(&()))))
}

/// `object` as it can be created again: name, namespace, labels and annotations (Helm's
/// ownership marks left out), spec.
pub fn restorable(object: &Value) -> Value {
    let metadata = &object["metadata"];
    let mut kept = json!({
        "name": metadata["name"],
        "namespace": metadata["namespace"],
    });
    let without_helm = |map: &Value, skip: &dyn Fn(&str) -> bool| -> Option<Value> {
        let map: serde_json::Map<String, Value> = map
            .as_object()?
            .iter()
            .filter(|(key, _)| !skip(key))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        (!map.is_empty()).then_some(Value::Object(map))
    };
    let helm_annotation = |key: &str| key.starts_with("meta.helm.sh/");
    let helm_label = |key: &str| {
        key == "app.kubernetes.io/managed-by" || key == "helm.sh/chart" || key == "heritage"
    };
    if let Some(labels) = without_helm(&metadata["labels"], &helm_label) {
        kept["labels"] = labels;
    }
    if let Some(annotations) = without_helm(&metadata["annotations"], &helm_annotation) {
        kept["annotations"] = annotations;
    }
    json!({
        "apiVersion": object["apiVersion"],
        "kind": object["kind"],
        "metadata": kept,
        "spec": object["spec"],
    })
}

async fn backup(session: &mut Session<'_>, args: MigrateBackupArgs) -> Result<()> {
    let hub = session.hub().await?;
    let ns = session.kubefed_namespace().to_owned();
    let objects: Vec<Value> = control_plane_objects(&hub, &ns)
        .await?
        .iter()
        .map(|object| ops::to_value(object).map(|value| restorable(&value)))
        .collect::<Result<_>>()?;
    if objects.is_empty() {
        return Err(Error::Refused(format!(
            "{}: no FederatedTypeConfig or KubeFedConfig in namespace {ns}: nothing to back up",
            hub.subject
        )));
    }
    let yaml = ops::render(&objects, crate::cli::OutputFormat::Yaml)?;
    if let Some(path) = &args.output {
        std::fs::write(path, &yaml)
            .map_err(|e| Error::Refused(format!("cannot write {}: {e}", path.display())))?;
    }
    let configmap: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": BACKUP_CONFIGMAP, "namespace": ns,
            "labels": {"app.kubernetes.io/managed-by": "hubfedctl"}},
        "data": {BACKUP_KEY: yaml},
    }))
    .map_err(|e| Error::Refused(format!("cannot build the backup ConfigMap: {e}")))?;
    let api: Api<ConfigMap> = Api::namespaced(hub.client.clone(), &ns);
    let mut writes = ops::Writer::new(session, "hub", &hub, args.dry_run);
    writes.apply(&api, &configmap).await?;
    session.say(format_args!(
        "{} object(s) backed up: {}",
        objects.len(),
        objects
            .iter()
            .map(|o| format!(
                "{} {}",
                o["kind"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or("")
            ))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// The backed-up objects, when `backup` ran.
async fn backup_objects(hub: &Target, ns: &str) -> Result<Option<Vec<Value>>> {
    let api: Api<ConfigMap> = Api::namespaced(hub.client.clone(), ns);
    let Some(configmap) = api
        .get_opt(BACKUP_CONFIGMAP)
        .await
        .map_err(|e| hub.err(e))?
    else {
        return Ok(None);
    };
    let text = configmap
        .data
        .as_ref()
        .and_then(|data| data.get(BACKUP_KEY))
        .cloned()
        .unwrap_or_default();
    let objects = documents(&text).map_err(|e| {
        Error::Refused(format!(
            "{}: ConfigMap {ns}/{BACKUP_CONFIGMAP} does not hold a backup: {e}",
            hub.subject
        ))
    })?;
    Ok(Some(objects))
}

async fn upgrade(session: &mut Session<'_>, args: MigrateUpgradeArgs) -> Result<()> {
    let hub = session.hub().await?;
    let ns = session.kubefed_namespace().to_owned();
    if let Some(line) = kubefed_running(&hub, &ns).await? {
        return Err(Error::Refused(format!(
            "{line}: stop it first (two controllers must never run together)"
        )));
    }
    let crds: Api<CustomResourceDefinition> = Api::all(hub.client.clone());
    {
        let mut writes = ops::Writer::new(session, "hub", &hub, args.dry_run);
        for crd in core_crds() {
            writes.apply(&crds, &crd).await?;
        }
    }
    restore(session, &hub, &ns, args.dry_run).await?;
    for (crd, _) in federated_crds(session, &hub, &ns).await? {
        let mut writes = ops::Writer::new(session, "hub", &hub, args.dry_run);
        writes.apply(&crds, &crd).await?;
    }
    Ok(())
}

/// Creates the backed-up objects that are missing; an FTC left terminating with KubeFed's
/// finalizer (KubeFed stopped before it could release it) is released first.
async fn restore(session: &mut Session<'_>, hub: &Target, ns: &str, dry_run: bool) -> Result<()> {
    let Some(objects) = backup_objects(hub, ns).await? else {
        return Ok(());
    };
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(hub.client.clone(), ns);
    let configs: Api<KubeFedConfig> = Api::namespaced(hub.client.clone(), ns);
    for object in objects {
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        match object["kind"].as_str() {
            Some("FederatedTypeConfig") => {
                release_terminating(session, hub, &ftcs, &name, dry_run).await?;
                let ftc: FederatedTypeConfig = parse(&object)?;
                ops::Writer::new(session, "hub", hub, dry_run)
                    .create_if_missing(&ftcs, &ftc)
                    .await?;
            }
            Some("KubeFedConfig") => {
                let config: KubeFedConfig = parse(&object)?;
                ops::Writer::new(session, "hub", hub, dry_run)
                    .create_if_missing(&configs, &config)
                    .await?;
            }
            other => {
                return Err(Error::Refused(format!(
                    "ConfigMap {ns}/{BACKUP_CONFIGMAP} holds an object of kind {other:?}"
                )));
            }
        }
    }
    Ok(())
}

/// hubfed's leader Lease (the name of KubeFed's lock, as a Lease).
const HUBFED_LEASE: &str = "kubefed-controller-manager";
/// Cluster-scoped objects KubeFed's chart installs under names hubfed's chart uses too.
const SHARED_NAMES: [(&str, &str); 5] = [
    ("ClusterRole", "kubefed-admin"),
    ("ClusterRole", "kubefed-edit"),
    ("ClusterRole", "kubefed-view"),
    (
        "ValidatingWebhookConfiguration",
        "validations.core.kubefed.io",
    ),
    ("MutatingWebhookConfiguration", "mutation.core.kubefed.io"),
];
const HELM_NAMESPACE_ANNOTATION: &str = "meta.helm.sh/release-namespace";
const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// Marks the FTCs and the KubeFedConfig KubeFed's chart installs for adoption by its
/// release; refused while hubfed runs or another release still owns KubeFed's names.
async fn rollback(session: &mut Session<'_>, args: MigrateRollbackArgs) -> Result<()> {
    let hub = session.hub().await?;
    let ns = session.kubefed_namespace().to_owned();
    if let Some(line) = hubfed_running(&hub, &ns).await? {
        return Err(Error::Refused(format!(
            "{line}: stop it first (`helm uninstall` of hubfed's chart; two controllers must never run together)"
        )));
    }
    let taken = taken_names(&hub, &args.release).await?;
    if !taken.is_empty() {
        return Err(Error::Refused(format!(
            "{} still installed by another Helm release: {}; uninstall that release first",
            hub.subject,
            taken.join(", ")
        )));
    }
    let chart_ftcs: Vec<String> = hubfed_api::defaulttypes::default_federated_type_configs(&ns)
        .iter()
        .map(|ftc| ftc.name_any())
        .collect();
    let marks = json!({
        "metadata": {
            "labels": {MANAGED_BY_LABEL: "Helm"},
            "annotations": {HELM_RELEASE_ANNOTATION: args.release, HELM_NAMESPACE_ANNOTATION: ns},
        }
    });
    for object in control_plane_objects(&hub, &ns).await? {
        let kind = object.types.as_ref().map_or("", |t| t.kind.as_str());
        let name = object.name_any();
        if kind == "FederatedTypeConfig" && !chart_ftcs.contains(&name) {
            continue;
        }
        let what = format!("{} {name}", kind.to_lowercase());
        if marked_for(&object, &args.release, &ns) {
            ops::report(session, "hub", &what, "unchanged", args.dry_run)?;
            continue;
        }
        ops::report(
            session,
            "hub",
            &what,
            &format!("marked for adoption by release {}", args.release),
            args.dry_run,
        )?;
        if !args.dry_run {
            let patch = Patch::Merge(&marks);
            let params = PatchParams::default();
            let patched = if kind == "KubeFedConfig" {
                Api::<KubeFedConfig>::namespaced(hub.client.clone(), &ns)
                    .patch(&name, &params, &patch)
                    .await
                    .map(drop)
            } else {
                Api::<FederatedTypeConfig>::namespaced(hub.client.clone(), &ns)
                    .patch(&name, &params, &patch)
                    .await
                    .map(drop)
            };
            patched.map_err(|e| hub.err(e))?;
        }
    }
    Ok(())
}

/// Whether `object` carries Helm's ownership marks for `release` in `ns`.
fn marked_for(object: &kube::api::DynamicObject, release: &str, ns: &str) -> bool {
    let annotations = object.annotations();
    object.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some("Helm")
        && annotations.get(HELM_RELEASE_ANNOTATION).map(String::as_str) == Some(release)
        && annotations
            .get(HELM_NAMESPACE_ANNOTATION)
            .map(String::as_str)
            == Some(ns)
}

/// A line naming hubfed's controller when its leader Lease is held and not expired.
async fn hubfed_running(hub: &Target, ns: &str) -> Result<Option<String>> {
    let api: Api<Lease> = Api::namespaced(hub.client.clone(), ns);
    let Some(lease) = api.get_opt(HUBFED_LEASE).await.map_err(|e| hub.err(e))? else {
        return Ok(None);
    };
    let Some(spec) = lease.spec else {
        return Ok(None);
    };
    let holder = spec.holder_identity.unwrap_or_default();
    let Some(renewed) = spec.renew_time else {
        return Ok(None);
    };
    let age = k8s_openapi::jiff::Timestamp::now().duration_since(renewed.0);
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    Ok((!holder.is_empty() && age.as_secs() < duration).then(|| {
        format!(
            "hubfed's controller runs ({holder} holds the Lease {ns}/{HUBFED_LEASE}, renewed {}s ago)",
            age.as_secs().max(0)
        )
    }))
}

/// KubeFed's chart's cluster-scoped names that exist under another Helm release (hubfed's
/// chart not uninstalled yet), as `kind/name (release R)`.
async fn taken_names(hub: &Target, release: &str) -> Result<Vec<String>> {
    let mut taken = Vec::new();
    for (kind, name) in SHARED_NAMES {
        let object = match kind {
            "ClusterRole" => Api::<ClusterRole>::all(hub.client.clone())
                .get_opt(name)
                .await
                .map(|o| o.map(|o| o.metadata)),
            "ValidatingWebhookConfiguration" => {
                Api::<ValidatingWebhookConfiguration>::all(hub.client.clone())
                    .get_opt(name)
                    .await
                    .map(|o| o.map(|o| o.metadata))
            }
            _ => Api::<MutatingWebhookConfiguration>::all(hub.client.clone())
                .get_opt(name)
                .await
                .map(|o| o.map(|o| o.metadata)),
        }
        .map_err(|e| hub.err(e))?;
        let owner = object
            .and_then(|metadata| metadata.annotations)
            .and_then(|annotations| annotations.get(HELM_RELEASE_ANNOTATION).cloned());
        if let Some(owner) = owner.filter(|owner| owner != release) {
            taken.push(format!("{kind} {name} (release {owner})"));
        }
    }
    Ok(taken)
}

/// The objects of a multi-document YAML text.
fn documents(text: &str) -> std::result::Result<Vec<Value>, serde_yaml_ng::Error> {
    use serde::Deserialize as _;
    let mut objects = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let object = Value::deserialize(document)?;
        if !object.is_null() {
            objects.push(object);
        }
    }
    Ok(objects)
}

fn parse<K: serde::de::DeserializeOwned>(object: &Value) -> Result<K> {
    serde_json::from_value(object.clone()).map_err(|e| {
        Error::Refused(format!(
            "ConfigMap {BACKUP_CONFIGMAP} holds an invalid object: {e}"
        ))
    })
}

/// Removes KubeFed's finalizer from FTC `name` when it is being deleted, and waits until it
/// is gone.
async fn release_terminating(
    session: &mut Session<'_>,
    hub: &Target,
    ftcs: &Api<FederatedTypeConfig>,
    name: &str,
    dry_run: bool,
) -> Result<()> {
    let Some(ftc) = ftcs.get_opt(name).await.map_err(|e| hub.err(e))? else {
        return Ok(());
    };
    if ftc.metadata.deletion_timestamp.is_none() {
        return Ok(());
    }
    ops::report(
        session,
        "hub",
        &format!("federatedtypeconfig {name}"),
        "released (deleted while no controller ran)",
        dry_run,
    )?;
    if dry_run {
        return Ok(());
    }
    let rest: Vec<&String> = ftc
        .finalizers()
        .iter()
        .filter(|f| *f != FTC_FINALIZER)
        .collect();
    let patch =
        json!({"metadata": {"finalizers": rest, "resourceVersion": ftc.resource_version()}});
    ftcs.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| hub.err(e))?;
    let gone = ops::poll(
        Duration::from_secs(30),
        Duration::from_millis(200),
        async || {
            Ok(ftcs
                .get_opt(name)
                .await
                .map_err(|e| hub.err(e))?
                .is_none()
                .then_some(()))
        },
    )
    .await?;
    gone.ok_or_else(|| {
        Error::Refused(format!(
            "{}: FederatedTypeConfig {name} is still being deleted (another finalizer holds it)",
            hub.subject
        ))
    })
}

/// hubfed's CRD for the federated type of every FTC (those of the hub, and those of the
/// backup that `upgrade` will restore): the chart's for a default type, else built from the
/// target's schema as `enable` builds it.
async fn federated_crds(
    session: &mut Session<'_>,
    hub: &Target,
    ns: &str,
) -> Result<Vec<(CustomResourceDefinition, String)>> {
    let defaults = default_federated_crds()
        .map_err(|e| Error::Refused(format!("cannot build the default federated CRDs: {e}")))?;
    let ftcs = all_ftcs(hub, ns).await?;
    let types = discover(hub, None).await?;
    let mut out = Vec::new();
    for ftc in ftcs {
        let federated = &ftc.spec.federated_type;
        let name = format!("{}.{}", federated.plural_name, federated.group);
        if let Some(crd) = defaults.iter().find(|c| c.name_any() == name) {
            out.push((crd.clone(), name));
            continue;
        }
        let target = ftc.spec.target_type.clone();
        let short_names: Vec<&str> = types
            .iter()
            .find(|t| {
                t.resource.group == target.group && t.resource.plural_name == target.plural_name
            })
            .map(|t| t.short_names.iter().map(String::as_str).collect())
            .unwrap_or_default();
        let schema = target_schema(session, hub, &target).await?;
        let retain_replicas = schema.as_ref().is_some_and(target_has_replicas);
        let description = FederatedTypeDescription::for_ftc(&ftc, &short_names, retain_replicas);
        let crd = federated_crd(&description, schema)
            .map_err(|e| Error::Refused(format!("cannot build the CRD {name}: {e}")))?;
        out.push((crd, name));
    }
    Ok(out)
}

/// What `upgrade` would change in each CRD: `created`, or the fields a server-side dry run
/// of hubfed's CRD changes (none: left out).
/// The FTCs of the hub, and those of the backup the hub lacks.
async fn all_ftcs(hub: &Target, ns: &str) -> Result<Vec<FederatedTypeConfig>> {
    let api: Api<FederatedTypeConfig> = Api::namespaced(hub.client.clone(), ns);
    let mut ftcs = api
        .list(&ListParams::default())
        .await
        .map_err(|e| hub.err(e))?
        .items;
    for object in backup_objects(hub, ns).await?.unwrap_or_default() {
        if object["kind"] == "FederatedTypeConfig"
            && !ftcs
                .iter()
                .any(|f| Some(f.name_any().as_str()) == object["metadata"]["name"].as_str())
        {
            ftcs.push(parse(&object)?);
        }
    }
    Ok(ftcs)
}

/// The backed-up objects the hub lacks, as `kind name` (`upgrade` restores them).
async fn to_restore(hub: &Target, ns: &str) -> Result<Vec<String>> {
    let present: Vec<(String, String)> = control_plane_objects(hub, ns)
        .await?
        .iter()
        .map(|o| {
            (
                o.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default(),
                o.name_any(),
            )
        })
        .collect();
    Ok(backup_objects(hub, ns)
        .await?
        .unwrap_or_default()
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap_or_default().to_owned(),
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .filter(|object| !present.contains(object))
        .map(|(kind, name)| format!("{kind} {name}"))
        .collect())
}

async fn crd_changes(
    session: &mut Session<'_>,
    hub: &Target,
    ns: &str,
) -> Result<Vec<(String, String)>> {
    let mut wanted: Vec<CustomResourceDefinition> = core_crds();
    wanted.extend(
        federated_crds(session, hub, ns)
            .await?
            .into_iter()
            .map(|(crd, _)| crd),
    );
    let api: Api<CustomResourceDefinition> = Api::all(hub.client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force().dry_run();
    let mut changes = Vec::new();
    for crd in wanted {
        let name = crd.name_any();
        let Some(existing) = api.get_opt(&name).await.map_err(|e| hub.err(e))? else {
            changes.push((name, "missing: will be created".to_owned()));
            continue;
        };
        let after = api
            .patch(&name, &params, &Patch::Apply(&crd))
            .await
            .map_err(|e| hub.err(e))?;
        let changed = changed_fields(
            &ops::to_value(&existing.spec)?,
            &ops::to_value(&after.spec)?,
        );
        if !changed.is_empty() {
            changes.push((name, format!("will be updated ({})", changed.join(", "))));
        }
    }
    Ok(changes)
}

/// The top-level parts of a CRD spec that differ, e.g. `names`, `v1beta1 schema`.
pub fn changed_fields(before: &Value, after: &Value) -> Vec<String> {
    let mut changed = Vec::new();
    for field in ["group", "names", "scope", "conversion"] {
        if before[field] != after[field] {
            changed.push(field.to_owned());
        }
    }
    let versions = |spec: &Value| spec["versions"].as_array().cloned().unwrap_or_default();
    let (old, new) = (versions(before), versions(after));
    for version in &new {
        let name = version["name"].as_str().unwrap_or_default();
        let Some(previous) = old.iter().find(|v| v["name"] == version["name"]) else {
            changed.push(format!("{name} added"));
            continue;
        };
        for (field, label) in [
            ("schema", "schema"),
            ("subresources", "subresources"),
            ("additionalPrinterColumns", "printer columns"),
            ("served", "served"),
            ("storage", "storage"),
        ] {
            if previous[field] != version[field] {
                changed.push(format!("{name} {label}"));
            }
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restorable_object_keeps_what_a_person_wrote_and_not_helms_marks() {
        let live = json!({
            "apiVersion": "core.kubefed.io/v1beta1", "kind": "FederatedTypeConfig",
            "metadata": {"name": "configmaps", "namespace": "kube-federation-system",
                "uid": "u", "resourceVersion": "7", "finalizers": [FTC_FINALIZER],
                "labels": {"app.kubernetes.io/managed-by": "Helm", "team": "a"},
                "annotations": {"meta.helm.sh/release-name": "kubefed",
                    "meta.helm.sh/release-namespace": "kube-federation-system"},
                "managedFields": []},
            "spec": {"propagation": "Disabled"},
            "status": {"observedGeneration": 1},
        });
        assert_eq!(
            restorable(&live),
            json!({
                "apiVersion": "core.kubefed.io/v1beta1", "kind": "FederatedTypeConfig",
                "metadata": {"name": "configmaps", "namespace": "kube-federation-system",
                    "labels": {"team": "a"}},
                "spec": {"propagation": "Disabled"},
            })
        );
    }

    #[test]
    fn changed_fields_name_the_parts_of_a_crd_that_differ() {
        let before = json!({"group": "g", "names": {"kind": "A"},
            "versions": [{"name": "v1", "served": true, "schema": {"a": 1}}]});
        assert!(changed_fields(&before, &before).is_empty());
        let after = json!({"group": "g", "names": {"kind": "A", "categories": ["federated"]},
            "versions": [{"name": "v1", "served": true, "schema": {"a": 2},
                "subresources": {"status": {}}}, {"name": "v2"}]});
        assert_eq!(
            changed_fields(&before, &after),
            ["names", "v1 schema", "v1 subresources", "v2 added"]
        );
    }
}
