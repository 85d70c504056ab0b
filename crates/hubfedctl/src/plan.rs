//! `plan -f FILE` and `diff KIND/NAME`: what a change to a federated object would do in every
//! cluster, before it is made. The decision is the controller's own ([`hubfed_core::plan`],
//! from the hub's registry, KubeFedConfig, FederatedNamespace and each member's live object);
//! the effect of each apply is the member API server's, by a server-side-apply dry run with
//! hubfed's field manager (defaulting, admission and other owners' fields included). Nothing is
//! written anywhere. Exit codes as `kubectl diff`: 0 no change, 1 changes, 2 an error — a
//! member that refuses the dry run is reported for its cluster and the others still shown.
//! `-o yaml|json` prints, per cluster, the change and the object the member would hold after
//! it (the dry run's answer) instead of diffs.

use std::collections::BTreeMap;
use std::path::Path;

use hubfed_api::federated::FederatedSpec;
use hubfed_api::federatedtypeconfig::{FederatedTypeConfig, ResourceScope};
use hubfed_api::kubefedcluster::KubeFedCluster;
use hubfed_api::kubefedconfig::{KubeFedConfig, KubeFedConfigSpec};
use hubfed_api::names::{FIELD_MANAGER, KUBEFED_CONFIG_NAME, SYNC_CONTROLLER_FINALIZER};
use hubfed_core::desired::TargetType;
use hubfed_core::hub::HubNamespace;
use hubfed_core::placement::{ClusterInfo, ControlPlaneScope, NamespaceFederation};
use hubfed_core::plan::{
    ClusterAction, ContainingNamespace, FederatedObject, MemberObject, MemberObservation,
    PlanInput, plan,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::Value;

use crate::cli::{DiffArgs, PlanArgs};
use crate::error::{Error, Result};
use crate::kubeconfig::Target;
use crate::session::Session;
use crate::template::{FederatedKind, federated_object};
use crate::types::{hub_object, resolve_enabled};

mod change;

use change::{Change, report};

pub async fn plan_file(session: &mut Session<'_>, args: PlanArgs) -> Result<i32> {
    let object = read_object(&args.file)?;
    let hub = session.hub().await?;
    let kubefed_ns = session.kubefed_namespace().to_owned();
    let kind = object["kind"].as_str().unwrap_or_default().to_owned();
    let ftc = resolve_enabled(&hub, &kubefed_ns, &kind).await?;
    let federated = if ftc.spec.federated_type.kind == kind {
        if !args.placement.is_empty() {
            return Err(Error::Usage(
                "--placement is for plain objects; a federated object has its own placement"
                    .to_owned(),
            ));
        }
        object
    } else {
        let mut federated = federated_object(
            &object,
            &FederatedKind {
                api_version: ftc.spec.federated_type.api_version(),
                kind: ftc.spec.federated_type.kind.clone(),
            },
        );
        let clusters: Vec<Value> = args
            .placement
            .iter()
            .map(|c| serde_json::json!({"name": c}))
            .collect();
        federated["spec"]["placement"] = serde_json::json!({ "clusters": clusters });
        federated
    };
    let namespace = object_namespace(&federated, &ftc, args.namespace.as_deref(), &hub);
    let contexts = parse_contexts(&args.dry_runs.cluster_context)?;
    let changes = evaluate(session, &hub, &ftc, federated, namespace, &contexts).await?;
    report(session, &changes, args.dry_runs.output)
}

pub async fn diff(session: &mut Session<'_>, args: DiffArgs) -> Result<i32> {
    let hub = session.hub().await?;
    let kubefed_ns = session.kubefed_namespace().to_owned();
    let found = hub_object(&hub, &kubefed_ns, &args.target, args.namespace.as_deref()).await?;
    let object = serde_json::to_value(&found.object).map_err(|e| Error::Usage(e.to_string()))?;
    let contexts = parse_contexts(&args.dry_runs.cluster_context)?;
    let changes = evaluate(
        session,
        &hub,
        &found.ftc,
        object,
        found.namespace,
        &contexts,
    )
    .await?;
    report(session, &changes, args.dry_runs.output)
}

fn read_object(path: &Path) -> Result<Value> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .map_err(|e| Error::Usage(format!("cannot read {}: {e}", path.display())))?;
    let value: Value = serde_yaml_ng::from_str(&text).map_err(|e| {
        Error::Usage(format!(
            "{}: not a YAML or JSON object: {e}",
            path.display()
        ))
    })?;
    if !value.is_object() || value["kind"].as_str().is_none_or(str::is_empty) {
        return Err(Error::Usage(format!(
            "{}: expected one object with a kind",
            path.display()
        )));
    }
    Ok(value)
}

fn object_namespace(
    object: &Value,
    ftc: &FederatedTypeConfig,
    flag: Option<&str>,
    hub: &Target,
) -> Option<String> {
    ftc.federated_namespaced().then(|| {
        object["metadata"]["namespace"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| flag.map(str::to_owned))
            .unwrap_or_else(|| hub.default_namespace.clone())
    })
}

/// `CLUSTER=CONTEXT` pairs; a cluster not named is reached through the context of its name.
fn parse_contexts(pairs: &[String]) -> Result<BTreeMap<String, String>> {
    pairs
        .iter()
        .map(|pair| match pair.split_once('=') {
            Some((cluster, context)) if !cluster.is_empty() && !context.is_empty() => {
                Ok((cluster.to_owned(), context.to_owned()))
            }
            _ => Err(Error::Usage(format!(
                "--cluster-context {pair:?}: expected CLUSTER=CONTEXT"
            ))),
        })
        .collect()
}

/// The hub's view: registry, scope, adoption, the FederatedNamespace, the control plane's
/// identity.
struct HubView {
    clusters: Vec<ClusterInfo>,
    kubefed: KubeFedConfigSpec,
    namespace_placement: Option<Option<hubfed_api::federated::Placement>>,
    control_plane: Option<String>,
}

async fn hub_view(
    hub: &Target,
    kubefed_ns: &str,
    ftc: &FederatedTypeConfig,
    namespace: Option<&str>,
) -> Result<HubView> {
    let registry: Api<KubeFedCluster> = Api::namespaced(hub.client.clone(), kubefed_ns);
    let clusters = registry
        .list(&Default::default())
        .await
        .map_err(|e| hub.err(e))?
        .items
        .into_iter()
        .map(|c| ClusterInfo {
            ready: c.is_ready(),
            labels: c.metadata.labels.clone().unwrap_or_default(),
            name: c.metadata.name.unwrap_or_default(),
        })
        .collect();
    let configs: Api<KubeFedConfig> = Api::namespaced(hub.client.clone(), kubefed_ns);
    let mut kubefed = configs
        .get_opt(KUBEFED_CONFIG_NAME)
        .await
        .map_err(|e| hub.err(e))?
        .map(|c| c.spec)
        .unwrap_or_else(|| KubeFedConfigSpec::with_defaults(ResourceScope::Cluster));
    kubefed.apply_defaults();
    let is_namespace =
        ftc.spec.target_type.kind == "Namespace" && ftc.spec.target_type.group.is_empty();
    let namespace_placement = match namespace {
        Some(ns) if ftc.spec.target_type.namespaced() && !is_namespace => {
            let resource = ApiResource {
                group: ftc.spec.federated_type.group.clone(),
                version: ftc.spec.federated_type.version.clone(),
                api_version: ftc.spec.federated_type.api_version(),
                kind: "FederatedNamespace".to_owned(),
                plural: "federatednamespaces".to_owned(),
            };
            let api: Api<DynamicObject> = Api::namespaced_with(hub.client.clone(), ns, &resource);
            match api.get_opt(ns).await {
                Ok(found) => {
                    found.map(|o| serde_json::from_value(o.data["spec"]["placement"].clone()).ok())
                }
                Err(kube::Error::Api(e)) if e.code == 404 => None,
                Err(e) => return Err(hub.err(e)),
            }
        }
        _ => None,
    };
    let namespaces: Api<Namespace> = Api::all(hub.client.clone());
    let control_plane = namespaces
        .get_opt(kubefed_ns)
        .await
        .map_err(|e| hub.err(e))?
        .and_then(|n| n.metadata.uid);
    Ok(HubView {
        clusters,
        kubefed,
        namespace_placement,
        control_plane,
    })
}

fn target_type(ftc: &FederatedTypeConfig) -> TargetType {
    TargetType {
        kind: ftc.spec.target_type.kind.clone(),
        group: ftc.spec.target_type.group.clone(),
        version: ftc.spec.target_type.version.clone(),
        namespaced: ftc.spec.target_type.namespaced(),
    }
}

fn federated_of(object: &Value, namespace: Option<&str>) -> Result<FederatedObject> {
    let spec: FederatedSpec = serde_json::from_value(object["spec"].clone())
        .map_err(|e| Error::Usage(format!("spec: {e}")))?;
    let metadata = &object["metadata"];
    let strings = |v: &Value| -> BTreeMap<String, String> {
        serde_json::from_value(v.clone()).unwrap_or_default()
    };
    Ok(FederatedObject {
        name: metadata["name"].as_str().unwrap_or_default().to_owned(),
        namespace: namespace.map(str::to_owned),
        uid: metadata["uid"].as_str().map(str::to_owned),
        spec,
        annotations: strings(&metadata["annotations"]),
        deleting: false,
        has_sync_finalizer: metadata["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == SYNC_CONTROLLER_FINALIZER)),
    })
}

/// A member, its live copy, and the client to dry-run against.
struct Member {
    target: Target,
    api: Api<DynamicObject>,
    live: Option<Value>,
}

async fn evaluate(
    session: &mut Session<'_>,
    hub: &Target,
    ftc: &FederatedTypeConfig,
    object: Value,
    namespace: Option<String>,
    contexts: &BTreeMap<String, String>,
) -> Result<Vec<(String, Change)>> {
    let kubefed_ns = session.kubefed_namespace().to_owned();
    let view = hub_view(hub, &kubefed_ns, ftc, namespace.as_deref()).await?;
    let mut federated = federated_of(&object, namespace.as_deref())?;
    if federated.uid.is_none() {
        federated.uid = existing_uid(hub, ftc, namespace.as_deref(), &federated.name).await?;
    }
    let target = target_type(ftc);
    let ready: Vec<&ClusterInfo> = view.clusters.iter().filter(|c| c.ready).collect();
    let (members, observations) = observe_members(
        session,
        &ready,
        contexts,
        ftc,
        namespace.as_deref(),
        &federated.name,
    )
    .await;
    let (identities, duplicates, recorded) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    let decided = plan(&PlanInput {
        object: &federated,
        target: &target,
        clusters: &view.clusters,
        namespace: namespace_federation(&target, &view),
        scope: control_plane_scope(&view.kubefed),
        kubefed_namespace: &kubefed_ns,
        control_plane: view.control_plane.as_deref(),
        identities: &identities,
        hub_namespace: HubNamespace::NotRead,
        // A manifest cannot be applied in a namespace being deleted.
        containing_namespace: ContainingNamespace::Active,
        duplicates: &duplicates,
        adopt_resources: adopts_resources(&view.kubefed),
        members: &observations,
        recorded: &recorded,
    });
    if let Some(message) = decided.reason_message.as_deref() {
        return Err(Error::Refused(format!("placement: {message}")));
    }
    let mut changes = Vec::new();
    for cluster in &view.clusters {
        let action = decided
            .clusters
            .iter()
            .find(|c| c.cluster == cluster.name)
            .map(|c| &c.action);
        let change = match action {
            None if decided.placement.namespace_not_federated => Change::Skipped(format!(
                "namespace {} is not federated",
                namespace.as_deref().unwrap_or_default()
            )),
            None => Change::Skipped("not placed".to_owned()),
            Some(action) => carry_out(action, members.get(&cluster.name), &federated).await?,
        };
        changes.push((cluster.name.clone(), change));
    }
    Ok(changes)
}

/// Each of `clusters` as the plan observes it, with the live copy of `name` and the client
/// to dry-run against; a member that cannot be reached or read is a failed retrieval.
async fn observe_members(
    session: &mut Session<'_>,
    clusters: &[&ClusterInfo],
    contexts: &BTreeMap<String, String>,
    ftc: &FederatedTypeConfig,
    namespace: Option<&str>,
    name: &str,
) -> (
    BTreeMap<String, Member>,
    BTreeMap<String, MemberObservation>,
) {
    let resource = ftc.spec.target_type.to_dynamic();
    let namespaced = ftc.spec.target_type.namespaced();
    let mut members: BTreeMap<String, Member> = BTreeMap::new();
    let mut observations: BTreeMap<String, MemberObservation> = BTreeMap::new();
    for cluster in clusters {
        let context = contexts.get(&cluster.name).unwrap_or(&cluster.name).clone();
        let member = match session.member(&cluster.name, &context).await {
            Ok(member) => member,
            Err(e) => {
                observations.insert(
                    cluster.name.clone(),
                    MemberObservation::RetrievalFailed(format!(
                        "{e} (pass --cluster-context {}=CONTEXT)",
                        cluster.name
                    )),
                );
                continue;
            }
        };
        let api: Api<DynamicObject> = match (namespace, namespaced) {
            (Some(ns), true) => Api::namespaced_with(member.client.clone(), ns, &resource),
            _ => Api::all_with(member.client.clone(), &resource),
        };
        match api.get_opt(name).await {
            Ok(found) => {
                let live = found.map(|o| serde_json::to_value(o).unwrap_or_default());
                observations.insert(
                    cluster.name.clone(),
                    live.as_ref().map_or(MemberObservation::Absent, |l| {
                        MemberObservation::Present(observe(l))
                    }),
                );
                let member = Member {
                    target: member,
                    api,
                    live,
                };
                members.insert(cluster.name.clone(), member);
            }
            Err(e) => {
                observations.insert(
                    cluster.name.clone(),
                    MemberObservation::RetrievalFailed(member.err(e).to_string()),
                );
            }
        }
    }
    (members, observations)
}

fn control_plane_scope(kubefed: &KubeFedConfigSpec) -> ControlPlaneScope {
    match kubefed.scope {
        ResourceScope::Namespaced => ControlPlaneScope::Namespaced,
        ResourceScope::Cluster => ControlPlaneScope::Cluster,
    }
}

/// Whether the object's namespace is federated, and where (a namespaced target other than
/// `Namespace` itself only).
fn namespace_federation<'a>(target: &TargetType, view: &'a HubView) -> NamespaceFederation<'a> {
    if !target.namespaced || target.is_namespace() {
        return NamespaceFederation::NotApplicable;
    }
    match &view.namespace_placement {
        Some(placement) => NamespaceFederation::Federated(placement.as_ref()),
        None => NamespaceFederation::NotFederated,
    }
}

/// The KubeFedConfig's `adoptResources`, enabled unless said otherwise.
fn adopts_resources(kubefed: &KubeFedConfigSpec) -> bool {
    kubefed
        .sync_controller
        .as_ref()
        .and_then(|s| s.adopt_resources)
        .is_none_or(|a| a.is_enabled())
}

async fn existing_uid(
    hub: &Target,
    ftc: &FederatedTypeConfig,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<String>> {
    let resource = ftc.spec.federated_type.to_dynamic();
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(hub.client.clone(), ns, &resource),
        None => Api::all_with(hub.client.clone(), &resource),
    };
    Ok(api
        .get_opt(name)
        .await
        .map_err(|e| hub.err(e))?
        .and_then(|o| o.metadata.uid))
}

fn observe(live: &Value) -> MemberObject {
    let strings = |v: &Value| -> BTreeMap<String, String> {
        serde_json::from_value(v.clone()).unwrap_or_default()
    };
    let labels = strings(&live["metadata"]["labels"]);
    MemberObject {
        managed_label: labels.get(hubfed_api::names::MANAGED_LABEL).cloned(),
        terminating: live["metadata"]["deletionTimestamp"].is_string(),
        version: hubfed_core::version::object_version_of(live),
        uid: live["metadata"]["uid"].as_str().map(str::to_owned),
        labels,
        annotations: strings(&live["metadata"]["annotations"]),
        readiness: hubfed_core::readiness::Readiness::Ready,
        remote_status: None,
    }
}

async fn carry_out(
    action: &ClusterAction,
    member: Option<&Member>,
    federated: &FederatedObject,
) -> Result<Change> {
    Ok(match action {
        ClusterAction::Apply(apply) => {
            let Some(member) = member else {
                return Ok(Change::Skipped("not reachable".to_owned()));
            };
            dry_run(member, &apply.object, apply.creates, federated).await?
        }
        ClusterAction::Delete(_) => Change::Delete,
        ClusterAction::RemoveManagedLabel => Change::Unlabel,
        ClusterAction::UpToDate => Change::Unchanged,
        ClusterAction::WaitForRemoval => Change::Skipped("its copy is being deleted".to_owned()),
        ClusterAction::Blocked { status, message } => {
            Change::Skipped(format!("{status:?}: {message}"))
        }
    })
}

/// Server-side apply, dry run, with hubfed's field manager (forced only if a plain apply
/// conflicts, as the controller resolves conflicts).
async fn dry_run(
    member: &Member,
    body: &Value,
    creates: bool,
    federated: &FederatedObject,
) -> Result<Change> {
    let name = federated.name.as_str();
    let mut params = PatchParams::apply(FIELD_MANAGER);
    params.dry_run = true;
    let applied = match member.api.patch(name, &params, &Patch::Apply(body)).await {
        Err(kube::Error::Api(e)) if e.code == 409 => {
            member
                .api
                .patch(name, &params.clone().force(), &Patch::Apply(body))
                .await
        }
        other => other,
    };
    let applied = match applied {
        Ok(applied) => applied,
        Err(kube::Error::Api(e)) if e.code == 422 && e.message.contains("immutable") => {
            let annotated = federated
                .annotations
                .get(hubfed_api::names::RECREATE_ON_IMMUTABLE_ANNOTATION)
                .is_some_and(|v| v == "true");
            return Ok(Change::Recreate {
                why: e.message,
                annotated,
            });
        }
        Err(e) => return Ok(Change::Failed(member.target.err(e).to_string())),
    };
    let applied = serde_json::to_value(applied).unwrap_or_default();
    let after = normalized(&applied);
    let before = member.live.as_ref().map(normalized).unwrap_or_default();
    if !creates && before == after {
        return Ok(Change::Unchanged);
    }
    let diff = similar::TextDiff::from_lines(&before, &after)
        .unified_diff()
        .context_radius(3)
        .header("live", "after apply")
        .to_string();
    Ok(if creates {
        Change::Create {
            diff,
            after: applied,
        }
    } else {
        Change::Update {
            diff,
            after: applied,
        }
    })
}

/// YAML of an object without what every write changes (resourceVersion, managedFields, ...)
/// and without status (applies do not write it).
fn normalized(object: &Value) -> String {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
    }
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "managedFields",
            "resourceVersion",
            "generation",
            "uid",
            "creationTimestamp",
        ] {
            metadata.remove(field);
        }
    }
    serde_yaml_ng::to_string(&object).unwrap_or_default()
}
