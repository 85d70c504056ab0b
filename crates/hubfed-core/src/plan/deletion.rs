//! Deletion plans: the federated object is being deleted, its copies are deleted or, when it
//! orphans them, unlabelled.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions;

use super::{
    ClusterAction, ClusterPlan, Disposition, FinalizerAction, MemberObservation, Plan, PlanInput,
    cache_failed, delete_options, is_orphaning, member_role, observation, protection, removal,
    sorted,
};
use crate::Result;
use crate::hub::NamespaceRole;
use crate::placement::{ClusterInfo, PlacementDecision};

pub(super) fn plan_deletion(
    input: &PlanInput<'_>,
    mut plan: Plan,
    placement: Option<PlacementDecision>,
) -> Plan {
    plan.disposition = Disposition::Delete;
    plan.placement = placement.unwrap_or_default();
    if is_orphaning(&input.object.annotations) {
        return plan_orphaning(input, plan);
    }
    let options = delete_options(&input.object.annotations);
    let mut blocked = false;
    let mut remaining = false;
    for cluster in sorted(input.clusters) {
        let Some((action, copy_remains)) = removal_action(input, &mut plan, cluster, &options)
        else {
            continue;
        };
        remaining |= copy_remains;
        blocked |= matches!(action, ClusterAction::Blocked { .. });
        plan.clusters.push(ClusterPlan {
            cluster: cluster.name.clone(),
            action,
        });
    }
    plan.finalizer = if blocked || remaining {
        FinalizerAction::Keep
    } else {
        FinalizerAction::RemoveAfterVerification
    };
    plan.verify_absent_in = verify_absent_in(input, &plan);
    plan
}

/// An orphaning deletion: the managed label comes off every copy a ready cluster holds; the
/// finalizer goes unless a placed copy has not been seen yet.
fn plan_orphaning(input: &PlanInput<'_>, mut plan: Plan) -> Plan {
    plan.finalizer = FinalizerAction::Remove;
    for cluster in sorted(input.clusters) {
        let placed = plan.placement.clusters.contains(&cluster.name);
        if !cluster.ready {
            if placed {
                plan.leftovers.push(cluster.name.clone());
            }
            continue;
        }
        if protection(input, &cluster.name).is_some()
            || input.duplicates.contains_key(&cluster.name)
        {
            continue;
        }
        let action = match observation(input, &cluster.name) {
            MemberObservation::Present(member) if member.is_managed() && !member.terminating => {
                ClusterAction::RemoveManagedLabel
            }
            // A placed copy not seen yet would keep its managed label: wait for the cache.
            MemberObservation::RetrievalFailed(message) if placed => {
                plan.finalizer = FinalizerAction::Keep;
                cache_failed(message.clone())
            }
            // A copy this controller wrote that its cache does not show yet (a watch event
            // still on its way) would keep its managed label — and garbage collection would
            // then delete it: remove the label all the same (a copy really gone is a 404).
            // Placed or not: a namespaced object whose FederatedNamespace went first is
            // placed nowhere any more, its copies are still there.
            MemberObservation::Absent if input.recorded.contains_key(&cluster.name) => {
                ClusterAction::RemoveManagedLabel
            }
            _ => continue,
        };
        plan.clusters.push(ClusterPlan {
            cluster: cluster.name.clone(),
            action,
        });
    }
    plan
}

/// What a deletion does in one cluster, and whether a copy remains there to wait for; `None`
/// when the cluster has nothing to do with it (not placed and no managed copy, protected,
/// unreachable — then recorded as a leftover —, or the copy already gone).
fn removal_action(
    input: &PlanInput<'_>,
    plan: &mut Plan,
    cluster: &ClusterInfo,
    options: &Result<Option<DeleteOptions>>,
) -> Option<(ClusterAction, bool)> {
    let observed = observation(input, &cluster.name);
    let placed = plan.placement.clusters.contains(&cluster.name);
    // A cluster whose cache cannot be read blocks only if the object is placed there.
    let holds_managed = match observed {
        MemberObservation::Absent
        | MemberObservation::NotServed
        | MemberObservation::RetrievalFailed(_) => false,
        MemberObservation::Present(member) => member.is_managed(),
    };
    if !placed && !holds_managed {
        return None;
    }
    if cluster.ready && protection(input, &cluster.name).is_some() {
        // Never deleted; nothing to wait for.
        return None;
    }
    if !cluster.ready || input.duplicates.contains_key(&cluster.name) {
        // Never wait on an unreachable cluster (nor one joined twice): record it, collect
        // the copy later.
        plan.leftovers.push(cluster.name.clone());
        return None;
    }
    match observed {
        MemberObservation::Absent | MemberObservation::NotServed => None,
        MemberObservation::RetrievalFailed(message) => Some((cache_failed(message.clone()), false)),
        MemberObservation::Present(member) if !member.is_managed() => None,
        MemberObservation::Present(member) if member.terminating => {
            match member_role(input, &cluster.name, member) {
                NamespaceRole::Hub => {
                    // The hub namespace itself is going away; it takes the federated object
                    // with it, so nothing can be waited for.
                    plan.hub_namespace_in.push(cluster.name.clone());
                    return None;
                }
                NamespaceRole::NeedsHubNamespace => plan.needs_hub_namespace = true,
                NamespaceRole::Member | NamespaceRole::Unknown(_) => {}
            }
            Some((ClusterAction::WaitForRemoval, true))
        }
        MemberObservation::Present(member) => {
            Some((removal(input, plan, &cluster.name, member, options), true))
        }
    }
}

/// Where the copy's absence is verified before the finalizer goes: only where a copy was
/// expected — a cluster the object is not placed on and whose cache shows no copy is not
/// asked (a slow cluster would hold up unrelated deletions).
fn verify_absent_in(input: &PlanInput<'_>, plan: &Plan) -> Vec<String> {
    sorted(input.clusters)
        .into_iter()
        .filter(|c| c.ready && !plan.hub_namespace_in.contains(&c.name))
        .filter(|c| protection(input, &c.name).is_none())
        .filter(|c| !input.duplicates.contains_key(&c.name))
        .filter(|c| match observation(input, &c.name) {
            MemberObservation::Absent => plan.placement.clusters.contains(&c.name),
            MemberObservation::Present(_) => true,
            MemberObservation::RetrievalFailed(_) | MemberObservation::NotServed => false,
        })
        .map(|c| c.name.clone())
        .collect()
}
