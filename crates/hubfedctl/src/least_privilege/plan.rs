//! What `migrate least-privilege` changes in a member, decided from what the member holds.
//!
//! Join's grant ([`crate::rbac::member_rbac`]) is applied where the live object differs
//! from it: a role whose rules differ, a binding whose subjects differ, anything missing.
//! What an earlier grant left under join's names and the grant does not hold now (the
//! other scope's role and binding, kubefedctl's health-check pair in a cluster-scoped
//! control plane) is deleted, bindings before roles. Bindings join did not write that name
//! the ServiceAccount are listed, never touched: they are not join's to remove.

use std::collections::BTreeSet;

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::ResourceExt as _;

use crate::ops::describe;
use crate::rbac::{JoinNames, MemberRbac};

/// One RBAC object of a member.
#[derive(Clone, Debug, PartialEq)]
pub enum RbacObject {
    ClusterRole(ClusterRole),
    ClusterRoleBinding(ClusterRoleBinding),
    Role(Role),
    RoleBinding(RoleBinding),
}

impl RbacObject {
    /// The object's name.
    pub fn name(&self) -> &str {
        let meta = match self {
            Self::ClusterRole(o) => &o.metadata,
            Self::ClusterRoleBinding(o) => &o.metadata,
            Self::Role(o) => &o.metadata,
            Self::RoleBinding(o) => &o.metadata,
        };
        meta.name.as_deref().unwrap_or_default()
    }

    /// `kind ns/name` or `kind name`, as the writes report it.
    pub fn describe(&self) -> String {
        match self {
            Self::ClusterRole(o) => describe(o),
            Self::ClusterRoleBinding(o) => describe(o),
            Self::Role(o) => describe(o),
            Self::RoleBinding(o) => describe(o),
        }
    }
}

/// What to do with one object.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Missing, or its rules or subjects differ from join's: server-side apply join's.
    Apply(RbacObject),
    /// Already as join writes it: no write.
    Unchanged(RbacObject),
    /// Left under join's names by an earlier grant, and not part of join's grant now.
    Delete(RbacObject),
}

/// The member's RBAC that concerns the join's ServiceAccount.
#[derive(Clone, Debug, Default)]
pub struct LiveRbac {
    /// The ClusterRoles with join's names (the main and the health-check role), if present.
    pub cluster_roles: Vec<ClusterRole>,
    /// Every ClusterRoleBinding of the member.
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    /// The Role with join's name in the kubefed namespace, if present.
    pub roles: Vec<Role>,
    /// Every RoleBinding of the member, in every namespace.
    pub role_bindings: Vec<RoleBinding>,
}

/// The steps, in order, and the bindings left alone.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GrantPlan {
    pub steps: Vec<Step>,
    /// Bindings join did not write that name the ServiceAccount: `kind name (roleRef)`.
    pub other_bindings: Vec<String>,
}

impl GrantPlan {
    /// How many objects the plan writes or deletes.
    pub fn changes(&self) -> usize {
        self.steps
            .iter()
            .filter(|step| !matches!(step, Step::Unchanged(_)))
            .count()
    }
}

/// The plan that turns `live` into `desired` for the ServiceAccount of `names`. Fails when a
/// binding with join's name refers to another role: a roleRef cannot change in place, and
/// deleting the binding first would leave hubfed without rights until it is created again.
pub fn plan_grant(
    names: &JoinNames,
    desired: &MemberRbac,
    live: &LiveRbac,
) -> Result<GrantPlan, String> {
    let mut steps = Vec::new();
    for (role, binding) in &desired.cluster_roles {
        let name = role.name_any();
        let current = find(&live.cluster_roles, &name, None);
        steps.push(role_step(
            current.map(|r| r.rules.as_ref()),
            role.rules.as_ref(),
            RbacObject::ClusterRole(role.clone()),
        ));
        let current = find(&live.cluster_role_bindings, &name, None);
        steps.push(binding_step(
            current.map(|b| (&b.role_ref, b.subjects.as_ref())),
            (&binding.role_ref, binding.subjects.as_ref()),
            RbacObject::ClusterRoleBinding(binding.clone()),
        )?);
    }
    for (role, binding) in &desired.roles {
        let (name, ns) = (role.name_any(), role.namespace());
        let current = find(&live.roles, &name, ns.as_deref());
        steps.push(role_step(
            current.map(|r| r.rules.as_ref()),
            role.rules.as_ref(),
            RbacObject::Role(role.clone()),
        ));
        let current = find(&live.role_bindings, &name, ns.as_deref());
        steps.push(binding_step(
            current.map(|b| (&b.role_ref, b.subjects.as_ref())),
            (&binding.role_ref, binding.subjects.as_ref()),
            RbacObject::RoleBinding(binding.clone()),
        )?);
    }
    steps.extend(leftovers(names, desired, live));
    Ok(GrantPlan {
        steps,
        other_bindings: other_bindings(names, live),
    })
}

/// Objects with join's names that `desired` does not hold: bindings first, then roles.
fn leftovers(names: &JoinNames, desired: &MemberRbac, live: &LiveRbac) -> Vec<Step> {
    let wanted_cluster: BTreeSet<String> = desired
        .cluster_roles
        .iter()
        .map(|(role, _)| role.name_any())
        .collect();
    let wanted_namespaced = desired
        .roles
        .iter()
        .any(|(role, _)| role.name_any() == names.role());
    let mut bindings = Vec::new();
    let mut roles = Vec::new();
    for name in [names.role(), names.health_role()] {
        if wanted_cluster.contains(&name) {
            continue;
        }
        if let Some(binding) = find(&live.cluster_role_bindings, &name, None) {
            bindings.push(Step::Delete(RbacObject::ClusterRoleBinding(
                binding.clone(),
            )));
        }
        if let Some(role) = find(&live.cluster_roles, &name, None) {
            roles.push(Step::Delete(RbacObject::ClusterRole(role.clone())));
        }
    }
    if !wanted_namespaced {
        let (name, ns) = (names.role(), Some(names.namespace.as_str()));
        if let Some(binding) = find(&live.role_bindings, &name, ns) {
            bindings.push(Step::Delete(RbacObject::RoleBinding(binding.clone())));
        }
        if let Some(role) = find(&live.roles, &name, ns) {
            roles.push(Step::Delete(RbacObject::Role(role.clone())));
        }
    }
    bindings.extend(roles);
    bindings
}

/// Bindings without join's names whose subjects include the ServiceAccount.
fn other_bindings(names: &JoinNames, live: &LiveRbac) -> Vec<String> {
    let join_cluster_names = [names.role(), names.health_role()];
    let mut found = Vec::new();
    for binding in &live.cluster_role_bindings {
        if join_cluster_names.contains(&binding.name_any()) {
            continue;
        }
        if binds(names, binding.subjects.as_deref(), None) {
            found.push(format!(
                "{} ({} {})",
                describe(binding),
                binding.role_ref.kind,
                binding.role_ref.name
            ));
        }
    }
    for binding in &live.role_bindings {
        let ns = binding.namespace().unwrap_or_default();
        if ns == names.namespace && binding.name_any() == names.role() {
            continue;
        }
        if binds(names, binding.subjects.as_deref(), Some(&ns)) {
            found.push(format!(
                "{} ({} {})",
                describe(binding),
                binding.role_ref.kind,
                binding.role_ref.name
            ));
        }
    }
    found
}

/// Whether `subjects` name the ServiceAccount of `names`, as a ServiceAccount (whose
/// namespace in a RoleBinding defaults to the binding's, `binding_ns`) or as its user name.
fn binds(names: &JoinNames, subjects: Option<&[Subject]>, binding_ns: Option<&str>) -> bool {
    let user = format!(
        "system:serviceaccount:{}:{}",
        names.namespace, names.service_account
    );
    subjects
        .unwrap_or_default()
        .iter()
        .any(|s| match s.kind.as_str() {
            "ServiceAccount" => {
                let ns = s.namespace.as_deref().filter(|ns| !ns.is_empty());
                s.name == names.service_account
                    && ns.or(binding_ns) == Some(names.namespace.as_str())
            }
            "User" => s.name == user,
            _ => false,
        })
}

fn find<'a, K: kube::Resource>(
    items: &'a [K],
    name: &str,
    namespace: Option<&str>,
) -> Option<&'a K> {
    items.iter().find(|item| {
        item.meta().name.as_deref() == Some(name) && item.meta().namespace.as_deref() == namespace
    })
}

fn role_step(
    live: Option<Option<&Vec<PolicyRule>>>,
    desired: Option<&Vec<PolicyRule>>,
    object: RbacObject,
) -> Step {
    let rules = |r: Option<&Vec<PolicyRule>>| r.map_or(&[][..], Vec::as_slice).to_vec();
    match live {
        Some(live) if rules(live) == rules(desired) => Step::Unchanged(object),
        _ => Step::Apply(object),
    }
}

/// A binding is applied when missing or when its subjects differ; one referring to another
/// role is refused (see [`plan_grant`]).
fn binding_step(
    live: Option<(&RoleRef, Option<&Vec<Subject>>)>,
    (wanted_ref, wanted_subjects): (&RoleRef, Option<&Vec<Subject>>),
    object: RbacObject,
) -> Result<Step, String> {
    let Some((role_ref, subjects)) = live else {
        return Ok(Step::Apply(object));
    };
    if !same_role_ref(role_ref, wanted_ref) {
        return Err(format!(
            "{} refers to {} {}, not to {} {}; a binding's role cannot change in place: delete the binding and run again (hubfed has no rights through it meanwhile)",
            object.describe(),
            role_ref.kind,
            role_ref.name,
            wanted_ref.kind,
            wanted_ref.name
        ));
    }
    if same_subjects(subjects, wanted_subjects) {
        Ok(Step::Unchanged(object))
    } else {
        Ok(Step::Apply(object))
    }
}

fn same_role_ref(a: &RoleRef, b: &RoleRef) -> bool {
    a.kind == b.kind && a.name == b.name && a.api_group.as_deref() == b.api_group.as_deref()
}

/// Subjects compared as the API server stores them: an empty `apiGroup` or `namespace` is
/// the same as none.
fn same_subjects(a: Option<&Vec<Subject>>, b: Option<&Vec<Subject>>) -> bool {
    let key = |subjects: Option<&Vec<Subject>>| -> Vec<(String, String, String, String)> {
        subjects
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|s| {
                (
                    s.kind.clone(),
                    s.name.clone(),
                    s.namespace.clone().unwrap_or_default(),
                    s.api_group.clone().unwrap_or_default(),
                )
            })
            .collect()
    };
    key(a) == key(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rbac::tests::resource;
    use crate::rbac::{Grant, member_rbac};
    use hubfed_api::federatedtypeconfig::ResourceScope;
    use serde_json::{Value, json};

    const NS: &str = "kube-federation-system";
    const ROLE: &str = "kubefed-controller-manager:member1-hub";
    const HEALTH: &str =
        "kubefed-controller-manager:kube-federation-system:healthcheck-member1-hub";

    fn names() -> JoinNames {
        JoinNames::new(NS, "member1", "hub")
    }

    fn from<K: serde::de::DeserializeOwned>(value: Value) -> K {
        serde_json::from_value(value).unwrap()
    }

    fn account() -> Value {
        json!([{"kind": "ServiceAccount", "name": "member1-hub", "namespace": NS}])
    }

    /// The grant for configmaps, in `scope`.
    fn desired(scope: ResourceScope) -> MemberRbac {
        let types = [resource("", "configmaps", ResourceScope::Namespaced)];
        member_rbac(&names(), scope, Grant::Types(&types))
    }

    fn binding(name: &str, kind: &str, role: &str, subjects: Value) -> ClusterRoleBinding {
        from(json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
            "subjects": subjects,
        }))
    }

    fn role_binding(ns: &str, name: &str, role: &str, subjects: Value) -> RoleBinding {
        from(json!({
            "metadata": {"name": name, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": subjects,
        }))
    }

    /// What `kubefedctl join` leaves in a member of a cluster-scoped control plane.
    fn kubefedctl_cluster_scope() -> LiveRbac {
        LiveRbac {
            cluster_roles: vec![from(json!({
                "metadata": {"name": ROLE},
                "rules": [
                    {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                    {"nonResourceURLs": ["*"], "verbs": ["get"]},
                ],
            }))],
            cluster_role_bindings: vec![
                binding(ROLE, "ClusterRole", ROLE, account()),
                binding(
                    "system:basic-user",
                    "ClusterRole",
                    "system:basic-user",
                    json!([{"kind": "Group", "name": "system:authenticated", "apiGroup": "rbac.authorization.k8s.io"}]),
                ),
            ],
            ..LiveRbac::default()
        }
    }

    /// `kind name` and what happens to it, in order.
    fn shown(plan: &GrantPlan) -> Vec<String> {
        plan.steps
            .iter()
            .map(|step| match step {
                Step::Apply(o) => format!("apply {}", o.describe()),
                Step::Unchanged(o) => format!("unchanged {}", o.describe()),
                Step::Delete(o) => format!("delete {}", o.describe()),
            })
            .collect()
    }

    #[test]
    fn kubefedctls_grant_is_narrowed_in_place() {
        let plan = plan_grant(
            &names(),
            &desired(ResourceScope::Cluster),
            &kubefedctl_cluster_scope(),
        )
        .unwrap();
        assert_eq!(
            shown(&plan),
            [
                format!("apply clusterrole {ROLE}"),
                format!("unchanged clusterrolebinding {ROLE}")
            ]
        );
        assert_eq!(plan.changes(), 1);
        assert!(plan.other_bindings.is_empty(), "{:?}", plan.other_bindings);
    }

    #[test]
    fn join_s_own_grant_is_left_unchanged() {
        let desired = desired(ResourceScope::Cluster);
        let (role, binding) = desired.cluster_roles[0].clone();
        let mut stored = binding.clone();
        // As the API server returns it: apiGroup of a ServiceAccount subject empty.
        stored.subjects.as_mut().unwrap()[0].api_group = Some(String::new());
        let live = LiveRbac {
            cluster_roles: vec![role],
            cluster_role_bindings: vec![stored],
            ..LiveRbac::default()
        };
        let plan = plan_grant(&names(), &desired, &live).unwrap();
        assert_eq!(plan.changes(), 0, "{:?}", shown(&plan));
    }

    #[test]
    fn what_another_scope_left_is_deleted_bindings_first() {
        let mut live = kubefedctl_cluster_scope();
        // kubefedctl's join for a namespaced control plane, from before the scope changed.
        live.roles.push(from(json!({
            "metadata": {"name": ROLE, "namespace": NS},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
        })));
        live.role_bindings
            .push(role_binding(NS, ROLE, ROLE, account()));
        live.cluster_roles.push(from(json!({
            "metadata": {"name": HEALTH},
            "rules": [{"nonResourceURLs": ["/healthz"], "verbs": ["Get"]},
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}],
        })));
        live.cluster_role_bindings
            .push(binding(HEALTH, "ClusterRole", HEALTH, account()));
        let plan = plan_grant(&names(), &desired(ResourceScope::Cluster), &live).unwrap();
        assert_eq!(
            shown(&plan),
            [
                format!("apply clusterrole {ROLE}"),
                format!("unchanged clusterrolebinding {ROLE}"),
                format!("delete clusterrolebinding {HEALTH}"),
                format!("delete rolebinding {NS}/{ROLE}"),
                format!("delete clusterrole {HEALTH}"),
                format!("delete role {NS}/{ROLE}"),
            ]
        );
        assert_eq!(plan.changes(), 5);
    }

    #[test]
    fn a_namespaced_control_plane_narrows_the_role_and_the_health_check() {
        let live = LiveRbac {
            cluster_roles: vec![from(json!({
                "metadata": {"name": HEALTH},
                "rules": [{"nonResourceURLs": ["/healthz"], "verbs": ["Get"]},
                    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}],
            }))],
            cluster_role_bindings: vec![binding(HEALTH, "ClusterRole", HEALTH, account())],
            roles: vec![from(json!({
                "metadata": {"name": ROLE, "namespace": NS},
                "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
            }))],
            role_bindings: vec![role_binding(NS, ROLE, ROLE, account())],
        };
        let plan = plan_grant(&names(), &desired(ResourceScope::Namespaced), &live).unwrap();
        assert_eq!(
            shown(&plan),
            [
                format!("apply clusterrole {HEALTH}"),
                format!("unchanged clusterrolebinding {HEALTH}"),
                format!("apply role {NS}/{ROLE}"),
                format!("unchanged rolebinding {NS}/{ROLE}"),
            ]
        );
    }

    #[test]
    fn bindings_join_did_not_write_are_named_not_touched() {
        let mut live = kubefedctl_cluster_scope();
        live.cluster_role_bindings
            .push(binding("ops", "ClusterRole", "cluster-admin", account()));
        live.cluster_role_bindings.push(binding(
            "by-user-name",
            "ClusterRole",
            "view",
            json!([{"kind": "User", "name": "system:serviceaccount:kube-federation-system:member1-hub"}]),
        ));
        live.cluster_role_bindings.push(binding(
            "someone-else",
            "ClusterRole",
            "cluster-admin",
            json!([{"kind": "ServiceAccount", "name": "member2-hub", "namespace": NS}]),
        ));
        // A RoleBinding's ServiceAccount subject without a namespace is in the binding's.
        live.role_bindings.push(role_binding(
            NS,
            "extra",
            "anything",
            json!([{"kind": "ServiceAccount", "name": "member1-hub"}]),
        ));
        live.role_bindings.push(role_binding(
            "default",
            "elsewhere",
            "anything",
            json!([{"kind": "ServiceAccount", "name": "member1-hub"}]),
        ));
        let plan = plan_grant(&names(), &desired(ResourceScope::Cluster), &live).unwrap();
        assert_eq!(
            plan.other_bindings,
            [
                "clusterrolebinding ops (ClusterRole cluster-admin)",
                "clusterrolebinding by-user-name (ClusterRole view)",
                "rolebinding kube-federation-system/extra (Role anything)",
            ]
        );
        assert_eq!(plan.changes(), 1, "{:?}", shown(&plan));
    }

    #[test]
    fn changed_subjects_are_applied_and_another_role_is_refused() {
        let mut live = kubefedctl_cluster_scope();
        live.cluster_role_bindings[0] = binding(
            ROLE,
            "ClusterRole",
            ROLE,
            json!([{"kind": "ServiceAccount", "name": "member1-hub", "namespace": NS},
                {"kind": "User", "name": "alice"}]),
        );
        let plan = plan_grant(&names(), &desired(ResourceScope::Cluster), &live).unwrap();
        assert_eq!(shown(&plan)[1], format!("apply clusterrolebinding {ROLE}"));
        live.cluster_role_bindings[0] = binding(ROLE, "ClusterRole", "cluster-admin", account());
        let refused = plan_grant(&names(), &desired(ResourceScope::Cluster), &live).unwrap_err();
        assert!(
            refused.starts_with(&format!("clusterrolebinding {ROLE} refers to ClusterRole cluster-admin, not to ClusterRole {ROLE}")),
            "{refused}"
        );
    }
}
