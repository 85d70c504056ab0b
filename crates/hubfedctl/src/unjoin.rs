//! `unjoin CLUSTER`: the reverse of join. The hub forgets the cluster first (KubeFedCluster,
//! then its Secret), so the controller stops writing there; then the member loses hubfed's
//! rights (bindings first, which cuts off any write still in flight), optionally every object
//! hubfed propagated (`--remove-managed-resources`), and the rest of the join artifacts.
//! The kubefed namespace is kept when the member is the hub itself, and when the control plane
//! is namespaced (that namespace then holds what it propagated). `--remove-managed-resources`
//! removes only copies that carry this control plane's proof of ownership
//! (`hubfed.io/owner`): another control plane's copies share the managed label.

use std::time::Duration;

use hubfed_api::federatedtypeconfig::{ApiResource, ResourceScope};
use hubfed_api::kubefedcluster::{KubeFedCluster, SyncMode};
use hubfed_api::names::{MANAGED_LABEL, OWNER_ANNOTATION};
use hubfed_api::work::{AGENT_SERVICE_ACCOUNT, WORK_CLUSTER_LABEL};
use hubfed_core::gc::owned_by;
use hubfed_core::pull::cluster_namespace;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};

use crate::cli::UnjoinArgs;
use crate::control_plane::{control_plane_id, control_plane_scope, federated_targets};
use crate::error::{Error, Result};
use crate::join::{HostCluster, host_cluster, member_context};
use crate::kubeconfig::Target;
use crate::ops;
use crate::pull::AGENT_HUB_SECRET;
use crate::rbac::JoinNames;
use crate::session::Session;

pub async fn unjoin(session: &mut Session<'_>, args: UnjoinArgs) -> Result<()> {
    let cluster = args.cluster.as_str();
    let member_context = member_context(cluster, args.cluster_context.as_deref());
    let ns = session.kubefed_namespace().to_owned();
    let dry_run = args.dry_run;
    let host = host_cluster(session, args.host_cluster_name.as_deref()).await?;
    let hub = &host.target;

    let (registered, pull) = registration(hub, &ns, cluster, args.force).await?;
    let names = acting_names(pull, &ns, cluster, &host.name);

    // Everything that can fail on the member side without --force is checked before the hub
    // is changed.
    // A pull member need not be reachable from here (behind NAT: its agent reaches the hub,
    // nothing reaches it); its copies then go through the agent, its agent's own objects
    // are left to whoever installed it (the chart, the join manifests).
    let member =
        reach_member_or_force(session, cluster, &member_context, args.force || pull).await?;
    let member_is_hub = match &member {
        Some(member) => same_cluster(hub, member).await?,
        None => false,
    };
    let targets = if args.remove_managed_resources && member.is_some() {
        federated_targets(hub, &ns).await?
    } else {
        Vec::new()
    };
    let plane = control_plane(hub, &ns).await?;

    // A pull member's copies are removed by its agent (which reaches the member when
    // nothing else does), before its hub credentials go with the work namespace.
    let through_agent = pull && args.remove_managed_resources;
    clean_hub(
        session,
        &host,
        cluster,
        registered.as_ref(),
        through_agent,
        &args,
    )
    .await?;

    let Some(member) = member else {
        return say_member_left_as_is(session, cluster, pull, &ns);
    };
    match clean_member(
        session,
        &member,
        cluster,
        &names,
        (member_is_hub, &plane),
        &targets,
        &args,
    )
    .await
    {
        Ok(()) => {}
        Err(e) if args.force => {
            session.warn(format_args!("cleaning up {cluster} failed: {e} (--force)"))?;
        }
        Err(e) => return Err(e),
    }
    let suffix = if dry_run { " (dry run)" } else { "" };
    session.say(format_args!("cluster {cluster:?} unjoined{suffix}"))
}

/// Who hubfed acts as in the member: a pull member's agent as `hubfed-agent`, a push
/// member's hubfed as kubefedctl's `<cluster>-<host>`.
fn acting_names(pull: bool, ns: &str, cluster: &str, host_name: &str) -> JoinNames {
    if pull {
        JoinNames {
            namespace: ns.to_owned(),
            service_account: AGENT_SERVICE_ACCOUNT.to_owned(),
        }
    } else {
        JoinNames::new(ns, cluster, host_name)
    }
}

/// The last word when the member was not reached: unjoined from the hub only, and what is
/// left in the member.
fn say_member_left_as_is(
    session: &mut Session<'_>,
    cluster: &str,
    pull: bool,
    ns: &str,
) -> Result<()> {
    let left = if pull {
        format!(
            "remove its agent there (helm uninstall, or the manifests join printed: ServiceAccount, RBAC and Secret {AGENT_HUB_SECRET} in {ns})"
        )
    } else {
        "its own objects were not cleaned up".to_owned()
    };
    session.say(format_args!(
        "cluster {cluster:?} unjoined from the hub; {left}"
    ))
}

/// The cluster's KubeFedCluster, if it is registered, and whether it is a pull member —
/// also when a former unjoin of a pull member stopped after its KubeFedCluster (its agent
/// had not removed the copies yet) and left the work namespace: unjoin carries on from
/// there. Not registered, and no such leftover, is an error unless `force`.
async fn registration(
    hub: &Target,
    ns: &str,
    cluster: &str,
    force: bool,
) -> Result<(Option<KubeFedCluster>, bool)> {
    let hub_clusters: Api<KubeFedCluster> = Api::namespaced(hub.client.clone(), ns);
    let registered = match hub_clusters.get_opt(cluster).await {
        Ok(found) => found,
        Err(kube::Error::Api(status)) if status.code == 404 => None,
        Err(e) => return Err(hub.err(e)),
    };
    if let Some(registered) = registered {
        let pull = registered.spec.sync_mode == SyncMode::Pull;
        return Ok((Some(registered), pull));
    }
    let namespaces: Api<Namespace> = Api::all(hub.client.clone());
    let pull_leftover = namespaces
        .get_opt(&cluster_namespace(cluster))
        .await
        .map_err(|e| hub.err(e))?
        .is_some_and(|n| n.labels().get(WORK_CLUSTER_LABEL).map(String::as_str) == Some(cluster));
    if !pull_leftover && !force {
        return Err(Error::NotFound(format!(
            "cluster {cluster:?} is not joined: no KubeFedCluster {ns}/{cluster} in the hub (pass --force to clean up the member anyway)"
        )));
    }
    Ok((None, pull_leftover))
}

/// The member, when it answers; with `--force`, `None` (and a warning) when it does not.
async fn reach_member_or_force(
    session: &mut Session<'_>,
    cluster: &str,
    context: &str,
    force: bool,
) -> Result<Option<Target>> {
    match reach_member(session, cluster, context).await {
        Ok(member) => Ok(Some(member)),
        Err(e) if force => {
            session.warn(format_args!("{e}; cleaning up the hub only"))?;
            Ok(None)
        }
        Err(e) if e.is_unreachable() => Err(Error::Refused(format!(
            "{e} (pass --force to remove it from the hub anyway)"
        ))),
        Err(e) => Err(e),
    }
}

/// The hub forgets the cluster: its KubeFedCluster, then its token Secret (push) or its work
/// namespace, which holds the agent's identity, token and work (pull).
async fn clean_hub(
    session: &mut Session<'_>,
    host: &HostCluster,
    cluster: &str,
    registered: Option<&KubeFedCluster>,
    through_agent: bool,
    args: &UnjoinArgs,
) -> Result<()> {
    let dry_run = args.dry_run;
    let (hub, place) = (&host.target, host.name.as_str());
    let mut writes = ops::Writer::new(session, place, hub, dry_run);
    if let Some(registered) = registered {
        let ns = registered.metadata.namespace.clone().unwrap_or_default();
        let clusters: Api<KubeFedCluster> = Api::namespaced(hub.client.clone(), &ns);
        writes.delete(&clusters, cluster).await?;
        let secret = registered.spec.secret_ref.name.as_str();
        if !secret.is_empty() {
            let secrets: Api<Secret> = Api::namespaced(hub.client.clone(), &ns);
            writes.delete(&secrets, secret).await?;
        }
    }
    // A pull join's work namespace (only the one join made for this cluster, labelled so),
    // also when a former unjoin removed the KubeFedCluster and stopped there.
    let namespaces: Api<Namespace> = Api::all(hub.client.clone());
    let work_ns = cluster_namespace(cluster);
    let Some(namespace) = namespaces.get_opt(&work_ns).await.map_err(|e| hub.err(e))? else {
        return Ok(());
    };
    if namespace
        .labels()
        .get(WORK_CLUSTER_LABEL)
        .map(String::as_str)
        != Some(cluster)
    {
        if registered.is_some_and(|r| r.spec.sync_mode == SyncMode::Pull) {
            writes.session.warn(format_args!(
                "hub namespace {work_ns} was not made by join for {cluster:?} ({WORK_CLUSTER_LABEL} differs): kept"
            ))?;
        }
        return Ok(());
    }
    if through_agent {
        let session = &mut *writes.session;
        let removed =
            crate::pull::remove_through_agent(session, hub, place, cluster, args.wait, dry_run)
                .await;
        match removed {
            Ok(()) => {}
            Err(e) if args.force => session.warn(format_args!("{e} (--force)"))?,
            Err(e) => {
                return Err(Error::Refused(format!(
                    "{e}; the cluster is no longer joined, its work namespace {work_ns} is kept until `hubfedctl unjoin {cluster} --remove-managed-resources` succeeds or `--force` is passed"
                )));
            }
        }
    }
    writes.delete(&namespaces, &work_ns).await?;
    Ok(())
}

/// A member client that has answered a request.
async fn reach_member(session: &mut Session<'_>, cluster: &str, context: &str) -> Result<Target> {
    let member = session.member(cluster, context).await?;
    member
        .client
        .apiserver_version()
        .await
        .map_err(|e| member.err(e))?;
    Ok(member)
}

/// What unjoin needs to know of the control plane.
struct ControlPlane {
    /// The UID of its namespace in the hub: its identity in `hubfed.io/owner`.
    id: String,
    /// KubeFedConfig `scope: Namespaced`.
    namespaced: bool,
}

async fn control_plane(hub: &Target, ns: &str) -> Result<ControlPlane> {
    Ok(ControlPlane {
        id: control_plane_id(hub, ns).await?,
        namespaced: control_plane_scope(hub, ns).await? == ResourceScope::Namespaced,
    })
}

/// Whether two clients reach the same cluster: same UID of `kube-system`.
async fn same_cluster(a: &Target, b: &Target) -> Result<bool> {
    let uid = async |target: &Target| -> Result<Option<String>> {
        let namespaces: Api<Namespace> = Api::all(target.client.clone());
        Ok(namespaces
            .get_metadata_opt("kube-system")
            .await
            .map_err(|e| target.err(e))?
            .and_then(|m| m.metadata.uid))
    };
    let (a, b) = (uid(a).await?, uid(b).await?);
    Ok(a.is_some() && a == b)
}

async fn clean_member(
    session: &mut Session<'_>,
    member: &Target,
    cluster: &str,
    names: &JoinNames,
    (member_is_hub, plane): (bool, &ControlPlane),
    targets: &[ApiResource],
    args: &UnjoinArgs,
) -> Result<()> {
    let mut writes = ops::Writer::new(session, cluster, member, args.dry_run);
    let ns = names.namespace.as_str();
    let cluster_roles: Api<ClusterRole> = Api::all(member.client.clone());
    let cluster_bindings: Api<ClusterRoleBinding> = Api::all(member.client.clone());
    let roles: Api<Role> = Api::namespaced(member.client.clone(), ns);
    let bindings: Api<RoleBinding> = Api::namespaced(member.client.clone(), ns);
    let role_names = [names.role(), names.health_role()];

    // Bindings first: hubfed's access ends here.
    for name in &role_names {
        writes.delete(&cluster_bindings, name).await?;
    }
    writes.delete(&bindings, &names.role()).await?;

    if args.remove_managed_resources {
        remove_managed(
            writes.session,
            member,
            cluster,
            (member_is_hub, &plane.id),
            targets,
            args,
        )
        .await?;
    }

    for name in &role_names {
        writes.delete(&cluster_roles, name).await?;
    }
    writes.delete(&roles, &names.role()).await?;
    let secrets: Api<Secret> = Api::namespaced(member.client.clone(), ns);
    // A push join's token Secret; a pull join's hub credentials (only a pull join's: the
    // member may hold another hub's).
    let secret = if names.service_account == AGENT_SERVICE_ACCOUNT {
        AGENT_HUB_SECRET
    } else {
        names.service_account.as_str()
    };
    writes.delete(&secrets, secret).await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(member.client.clone(), ns);
    writes.delete(&accounts, &names.service_account).await?;
    if member_is_hub {
        writes.session.note(format_args!(
            "{cluster} is the hub itself: namespace {ns} is kept"
        ))?;
    } else if plane.namespaced {
        writes.session.note(format_args!(
            "the control plane is namespaced: namespace {ns} in {cluster} holds what it propagated and is kept"
        ))?;
    } else {
        let namespaces: Api<Namespace> = Api::all(member.client.clone());
        writes.delete(&namespaces, ns).await?;
    }
    Ok(())
}

/// Whether a member object carries this control plane's proof of ownership.
fn owned(plane: &str, object: &kube::core::PartialObjectMeta<DynamicObject>) -> bool {
    let owner = object
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(OWNER_ANNOTATION));
    owned_by(plane, owner.map(String::as_str)).is_some()
}

/// Order of removal: namespaced types, then cluster-scoped ones, namespaces last (deleting
/// a namespace deletes its content anyway; doing it last keeps the report accurate).
fn removal_order(targets: &[ApiResource]) -> Vec<&ApiResource> {
    let is_namespace = |t: &ApiResource| t.group.is_empty() && t.plural_name == "namespaces";
    let mut ordered: Vec<&ApiResource> = targets.iter().collect();
    ordered.sort_by_key(|t| {
        (
            is_namespace(t),
            t.scope == ResourceScope::Cluster,
            t.group_qualified_name(),
        )
    });
    ordered
}

/// Deletes every object labelled `kubefed.io/managed=true` of the federated types, then waits
/// until they are gone. In the hub joined as a member, objects only lose the label: the hub's
/// namespaces hold the federated objects themselves, and its objects are usually the very
/// ones that were federated (adopted, not created, by propagation).
async fn remove_managed(
    session: &mut Session<'_>,
    member: &Target,
    place: &str,
    (member_is_hub, plane): (bool, &str),
    targets: &[ApiResource],
    args: &UnjoinArgs,
) -> Result<()> {
    let selector = ListParams::default().labels(&format!("{MANAGED_LABEL}=true"));
    let mut waiting: Vec<Api<DynamicObject>> = Vec::new();
    let mut foreign = 0_usize;
    for target in removal_order(targets) {
        let api: Api<DynamicObject> = Api::all_with(member.client.clone(), &target.to_dynamic());
        let mut objects = match api.list_metadata(&selector).await {
            Ok(list) => list.items,
            // The type is not served there: nothing of it can have been propagated.
            Err(kube::Error::Api(status)) if status.code == 404 => continue,
            Err(e) => return Err(member.err(e)),
        };
        let listed = objects.len();
        objects.retain(|o| owned(plane, o));
        foreign += listed - objects.len();
        if objects.is_empty() {
            continue;
        }
        if !args.dry_run {
            for object in &objects {
                remove_one(member, target, object, member_is_hub).await?;
            }
        }
        let action = if member_is_hub {
            "unlabelled (kept: they are the hub's own)"
        } else {
            "deleted"
        };
        let what = format!(
            "{} managed {}",
            objects.len(),
            target.group_qualified_name()
        );
        ops::report(session, place, &what, action, args.dry_run)?;
        if !member_is_hub {
            waiting.push(api);
        }
    }
    if foreign > 0 {
        session.note(format_args!(
            "{foreign} objects in {place} labelled {MANAGED_LABEL}=true were left: they carry no proof ({OWNER_ANNOTATION}) that this control plane created them"
        ))?;
    }
    if args.dry_run || waiting.is_empty() {
        return Ok(());
    }
    wait_removed(session, member, place, plane, &waiting, args.wait).await
}

/// Deletes one managed copy, or — in the hub joined as a member, whose objects are its own —
/// only removes its managed label.
async fn remove_one(
    member: &Target,
    target: &ApiResource,
    object: &kube::core::PartialObjectMeta<DynamicObject>,
    unlabel_only: bool,
) -> Result<()> {
    let name = object.metadata.name.clone().unwrap_or_default();
    let scoped: Api<DynamicObject> = match &object.metadata.namespace {
        Some(ns) => Api::namespaced_with(member.client.clone(), ns, &target.to_dynamic()),
        None => Api::all_with(member.client.clone(), &target.to_dynamic()),
    };
    let result = if unlabel_only {
        let patch = serde_json::json!({"metadata": {"labels": {MANAGED_LABEL: null}}});
        scoped
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
    } else {
        scoped
            .delete(&name, &DeleteParams::background())
            .await
            .map(|_| ())
    };
    match result {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(member.err(e)),
    }
}

/// Waits up to `wait` until none of this control plane's managed copies is left.
async fn wait_removed(
    session: &mut Session<'_>,
    member: &Target,
    place: &str,
    plane: &str,
    apis: &[Api<DynamicObject>],
    wait: Duration,
) -> Result<()> {
    let selector = ListParams::default().labels(&format!("{MANAGED_LABEL}=true"));
    let gone = ops::poll(wait, Duration::from_millis(500), async || {
        for api in apis {
            match api.list_metadata(&selector).await {
                Ok(list) if list.items.iter().any(|o| owned(plane, o)) => return Ok(None),
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => return Err(member.err(e)),
            }
        }
        Ok(Some(()))
    })
    .await?;
    if gone.is_none() {
        session.warn(format_args!(
            "some managed objects in {place} are still being deleted after {}s (finalizers?)",
            wait.as_secs()
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rbac::tests::resource;

    #[test]
    fn namespaces_are_removed_last() {
        let targets = [
            resource("", "namespaces", ResourceScope::Cluster),
            resource(
                "rbac.authorization.k8s.io",
                "clusterroles",
                ResourceScope::Cluster,
            ),
            resource("apps", "deployments", ResourceScope::Namespaced),
            resource("", "configmaps", ResourceScope::Namespaced),
        ];
        let order: Vec<String> = removal_order(&targets)
            .iter()
            .map(|t| t.group_qualified_name())
            .collect();
        assert_eq!(
            order,
            [
                "configmaps",
                "deployments.apps",
                "clusterroles.rbac.authorization.k8s.io",
                "namespaces"
            ]
        );
    }
}
