//! What join grants hubfed in a member cluster, and the names of the objects (kubefedctl's
//! names, docs/kubefed-compatibility.md §3, so a KubeFed-joined cluster unjoins with hubfedctl and
//! vice versa).
//!
//! By default the grant is least privilege: full object rights on exactly the target types of
//! the hub's FederatedTypeConfigs, `get` on namespaces (the controller compares the UID of
//! `kube-system` to recognise the hub joined as a member) and `get` on `/healthz` and
//! `/version` (health probes); for a push member, `get`, `list` and `watch` on nodes
//! ([`with_node_reads`]: region and zones from their labels). When Deployments or ReplicaSets are federated, also `get` and
//! `list` on pods: the ReplicaSchedulingPreference scheduler counts their running and
//! unschedulable pods. With `--mcs` (the default) a cluster-scoped control plane's grant also
//! covers what the multi-cluster services controller reads and writes ([`with_mcs`]).
//! `--cluster-admin` grants everything, as kubefedctl does.

use std::collections::{BTreeMap, BTreeSet};

use hubfed_api::federatedtypeconfig::{ApiResource, ResourceScope};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
/// What the sync controller does to member objects: watch (list + watch), read, apply
/// (patch), create, replace, delete.
const OBJECT_VERBS: &[&str] = &[
    "get", "list", "watch", "create", "update", "patch", "delete",
];
/// Paths the health probe reads.
const HEALTH_URLS: &[&str] = &["/healthz", "/version"];

/// Member-side names of one join.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinNames {
    /// The kubefed namespace (in the member).
    pub namespace: String,
    /// ServiceAccount and its token Secret: `<cluster>-<hostcluster>`.
    pub service_account: String,
}

impl JoinNames {
    pub fn new(namespace: &str, cluster: &str, host_cluster: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            service_account: format!("{cluster}-{host_cluster}"),
        }
    }

    /// ClusterRole/ClusterRoleBinding (cluster scope) and Role/RoleBinding (namespaced
    /// scope): `kubefed-controller-manager:<sa>`.
    pub fn role(&self) -> String {
        format!("kubefed-controller-manager:{}", self.service_account)
    }

    /// ClusterRole/ClusterRoleBinding for health checks in a namespaced control plane:
    /// `kubefed-controller-manager:<ns>:healthcheck-<sa>`.
    pub fn health_role(&self) -> String {
        format!(
            "kubefed-controller-manager:{}:healthcheck-{}",
            self.namespace, self.service_account
        )
    }
}

/// The RBAC objects of one join.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemberRbac {
    pub cluster_roles: Vec<(ClusterRole, ClusterRoleBinding)>,
    pub roles: Vec<(Role, RoleBinding)>,
}

/// What to grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant<'a> {
    /// Every right (kubefedctl's grant).
    ClusterAdmin,
    /// Object rights on these target types only.
    Types(&'a [ApiResource]),
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    let owned = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(owned(groups)),
        resources: Some(owned(resources)),
        verbs: owned(verbs),
        ..PolicyRule::default()
    }
}

fn url_rule(urls: &[&str]) -> PolicyRule {
    PolicyRule {
        non_resource_urls: Some(urls.iter().map(|s| (*s).to_owned()).collect()),
        verbs: vec!["get".to_owned()],
        ..PolicyRule::default()
    }
}

/// Object rules for `types`, one per API group. Roles and ClusterRoles also get `bind` and
/// `escalate`: without them the API server refuses to create a role granting rights the
/// writer does not hold, and federated roles may grant anything.
fn type_rules<'a>(types: impl IntoIterator<Item = &'a ApiResource>) -> Vec<PolicyRule> {
    let mut by_group: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for resource in types {
        by_group
            .entry(resource.group.as_str())
            .or_default()
            .insert(resource.plural_name.as_str());
    }
    let mut rules = Vec::new();
    for (group, resources) in &by_group {
        let resources: Vec<&str> = resources.iter().copied().collect();
        rules.push(rule(&[group], &resources, OBJECT_VERBS));
        if *group == RBAC_GROUP {
            let roles: Vec<&str> = resources
                .iter()
                .copied()
                .filter(|r| *r == "roles" || *r == "clusterroles")
                .collect();
            if !roles.is_empty() {
                rules.push(rule(&[RBAC_GROUP], &roles, &["bind", "escalate"]));
            }
        }
    }
    let schedulable = by_group
        .get("apps")
        .is_some_and(|r| r.contains("deployments") || r.contains("replicasets"));
    let federates_pods = by_group.get("").is_some_and(|r| r.contains("pods"));
    if schedulable && !federates_pods {
        rules.push(rule(&[""], &["pods"], &["get", "list"]));
    }
    rules
}

/// `get` on namespaces, unless `types` already grants more on them.
fn namespace_rule(types: &[ApiResource]) -> Option<PolicyRule> {
    let federates_namespaces = types
        .iter()
        .any(|t| t.group.is_empty() && t.plural_name == "namespaces");
    (!federates_namespaces).then(|| rule(&[""], &["namespaces"], &["get"]))
}

fn admin_rules() -> Vec<PolicyRule> {
    vec![rule(&["*"], &["*"], &["*"]), url_rule(&["*"])]
}

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        ..ObjectMeta::default()
    }
}

fn subject(names: &JoinNames) -> Vec<Subject> {
    vec![Subject {
        kind: "ServiceAccount".to_owned(),
        name: names.service_account.clone(),
        namespace: Some(names.namespace.clone()),
        ..Subject::default()
    }]
}

fn cluster_role_pair(
    name: &str,
    names: &JoinNames,
    rules: Vec<PolicyRule>,
) -> (ClusterRole, ClusterRoleBinding) {
    (
        ClusterRole {
            metadata: meta(name, None),
            rules: Some(rules),
            ..ClusterRole::default()
        },
        ClusterRoleBinding {
            metadata: meta(name, None),
            role_ref: RoleRef {
                api_group: Some(RBAC_GROUP.to_owned()),
                kind: "ClusterRole".to_owned(),
                name: name.to_owned(),
            },
            subjects: Some(subject(names)),
        },
    )
}

/// The RBAC of a join. A `Cluster`-scoped control plane gets one ClusterRole; a `Namespaced`
/// one gets a Role in the kubefed namespace (namespaced types only: nothing else is
/// propagated) and a ClusterRole for what only exists cluster-wide.
pub fn member_rbac(names: &JoinNames, scope: ResourceScope, grant: Grant<'_>) -> MemberRbac {
    match (scope, grant) {
        (ResourceScope::Cluster, Grant::ClusterAdmin) => MemberRbac {
            cluster_roles: vec![cluster_role_pair(&names.role(), names, admin_rules())],
            roles: Vec::new(),
        },
        (ResourceScope::Cluster, Grant::Types(types)) => {
            let mut rules = type_rules(types);
            rules.extend(namespace_rule(types));
            rules.push(url_rule(HEALTH_URLS));
            MemberRbac {
                cluster_roles: vec![cluster_role_pair(&names.role(), names, rules)],
                roles: Vec::new(),
            }
        }
        (ResourceScope::Namespaced, grant) => {
            let namespaced_rules = match grant {
                Grant::ClusterAdmin => vec![rule(&["*"], &["*"], &["*"])],
                Grant::Types(types) => type_rules(
                    types
                        .iter()
                        .filter(|t| t.scope == ResourceScope::Namespaced),
                ),
            };
            let role_name = names.role();
            let role = Role {
                metadata: meta(&role_name, Some(&names.namespace)),
                rules: Some(namespaced_rules),
            };
            let binding = RoleBinding {
                metadata: meta(&role_name, Some(&names.namespace)),
                role_ref: RoleRef {
                    api_group: Some(RBAC_GROUP.to_owned()),
                    kind: "Role".to_owned(),
                    name: role_name.clone(),
                },
                subjects: Some(subject(names)),
            };
            let health_rules = vec![
                rule(&[""], &["namespaces"], &["get"]),
                url_rule(HEALTH_URLS),
            ];
            MemberRbac {
                cluster_roles: vec![cluster_role_pair(&names.health_role(), names, health_rules)],
                roles: vec![(role, binding)],
            }
        }
    }
}

/// What hubfed's multi-cluster services controller does in a member: it reads ServiceExports
/// and writes their status, reads Services and EndpointSlices and writes the derived ones and
/// the ServiceImports, watches namespaces (an import goes only where its namespace exists),
/// writes the ClusterProperties that name the member, and Events on ServiceExports.
fn mcs_rules() -> Vec<PolicyRule> {
    let mcs = hubfed_api::mcs::GROUP;
    vec![
        rule(&[mcs], &["serviceexports"], &["get", "list", "watch"]),
        rule(&[mcs], &["serviceimports"], OBJECT_VERBS),
        rule(
            &[mcs],
            &["serviceexports/status", "serviceimports/status"],
            &["get", "update", "patch"],
        ),
        rule(&[""], &["services"], OBJECT_VERBS),
        rule(&["discovery.k8s.io"], &["endpointslices"], OBJECT_VERBS),
        rule(&[""], &["namespaces"], &["get", "list", "watch"]),
        rule(
            &[hubfed_api::about::GROUP],
            &["clusterproperties"],
            &["get", "list", "watch", "create", "update", "patch"],
        ),
        rule(&["", "events.k8s.io"], &["events"], &["create", "patch"]),
    ]
}

/// `rbac` with the multi-cluster services controller's rules added to a cluster-scoped
/// least-privilege grant. A namespaced control plane takes no part in multi-cluster services
/// (a ClusterSet spans whole clusters), and `--cluster-admin` has every right already.
pub fn with_mcs(mut rbac: MemberRbac, scope: ResourceScope, grant: &Grant<'_>) -> MemberRbac {
    if scope == ResourceScope::Cluster
        && matches!(grant, Grant::Types(_))
        && let Some((role, _)) = rbac.cluster_roles.first_mut()
    {
        role.rules.get_or_insert_with(Vec::new).extend(mcs_rules());
    }
    rbac
}

/// `rbac` with read-only nodes added to a push member's least-privilege grant: the registry
/// fills `KubeFedCluster.status.region` and `zones` from their `topology.kubernetes.io`
/// labels, as KubeFed's cluster controller read them. A pull member's agent reads no nodes
/// (the hub never connects to its cluster), and `--cluster-admin` has every right already.
pub fn with_node_reads(mut rbac: MemberRbac, grant: &Grant<'_>) -> MemberRbac {
    if matches!(grant, Grant::Types(_))
        && let Some((role, _)) = rbac.cluster_roles.first_mut()
    {
        role.rules.get_or_insert_with(Vec::new).push(rule(
            &[""],
            &["nodes"],
            &["get", "list", "watch"],
        ));
    }
    rbac
}

/// The ServiceAccount hubfed acts as in the member; its token is only used from the hub.
pub fn service_account(names: &JoinNames) -> ServiceAccount {
    ServiceAccount {
        metadata: meta(&names.service_account, Some(&names.namespace)),
        automount_service_account_token: Some(false),
        ..ServiceAccount::default()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A target type for tests: `plural` in `group`/v1.
    pub(crate) fn resource(group: &str, plural: &str, scope: ResourceScope) -> ApiResource {
        ApiResource {
            group: group.into(),
            version: "v1".into(),
            kind: String::new(),
            plural_name: plural.into(),
            scope,
        }
    }

    fn names() -> JoinNames {
        JoinNames::new("kube-federation-system", "member1", "hub")
    }

    #[test]
    fn names_are_kubefedctls() {
        let names = names();
        assert_eq!(names.service_account, "member1-hub");
        assert_eq!(names.role(), "kubefed-controller-manager:member1-hub");
        assert_eq!(
            names.health_role(),
            "kubefed-controller-manager:kube-federation-system:healthcheck-member1-hub"
        );
    }

    #[test]
    fn least_privilege_covers_exactly_the_types() {
        let types = [
            resource("", "configmaps", ResourceScope::Namespaced),
            resource("apps", "deployments", ResourceScope::Namespaced),
            resource("", "secrets", ResourceScope::Namespaced),
            resource(RBAC_GROUP, "clusterroles", ResourceScope::Cluster),
        ];
        let rbac = member_rbac(&names(), ResourceScope::Cluster, Grant::Types(&types));
        assert!(rbac.roles.is_empty());
        let [(role, binding)] = rbac.cluster_roles.as_slice() else {
            panic!("one ClusterRole expected: {rbac:?}");
        };
        assert_eq!(
            binding.role_ref.name,
            "kubefed-controller-manager:member1-hub"
        );
        let subjects = binding.subjects.as_ref().unwrap();
        assert_eq!(subjects[0].name, "member1-hub");
        let rules = serde_json::to_value(role.rules.as_ref().unwrap()).unwrap();
        let verbs = serde_json::json!(OBJECT_VERBS);
        assert_eq!(
            rules,
            serde_json::json!([
                {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": verbs},
                {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": verbs},
                {"apiGroups": [RBAC_GROUP], "resources": ["clusterroles"], "verbs": verbs},
                {"apiGroups": [RBAC_GROUP], "resources": ["clusterroles"], "verbs": ["bind", "escalate"]},
                // Deployments are federated: the RSP scheduler reads their pods.
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
                {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
                {"nonResourceURLs": ["/healthz", "/version"], "verbs": ["get"]},
            ])
        );
        assert!(!rules.to_string().contains('*'));
    }

    #[test]
    fn pods_are_read_only_for_schedulable_workloads() {
        let pods_rule =
            serde_json::json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]});
        let rules_of = |types: &[ApiResource]| {
            let rbac = member_rbac(&names(), ResourceScope::Cluster, Grant::Types(types));
            serde_json::to_value(rbac.cluster_roles[0].0.rules.as_ref().unwrap()).unwrap()
        };
        let replicasets = [resource("apps", "replicasets", ResourceScope::Namespaced)];
        let rules = rules_of(&replicasets);
        assert!(rules.as_array().unwrap().contains(&pods_rule), "{rules}");
        let configmaps = [resource("", "configmaps", ResourceScope::Namespaced)];
        let rules = rules_of(&configmaps);
        assert!(!rules.to_string().contains("pods"), "{rules}");
        // Federated pods already grant more: no second rule.
        let both = [
            resource("apps", "deployments", ResourceScope::Namespaced),
            resource("", "pods", ResourceScope::Namespaced),
        ];
        let rules = rules_of(&both);
        assert!(!rules.as_array().unwrap().contains(&pods_rule), "{rules}");
    }

    #[test]
    fn push_members_read_nodes_for_their_region_and_zones() {
        let nodes = serde_json::json!({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]});
        let types = [resource("", "configmaps", ResourceScope::Namespaced)];
        for scope in [ResourceScope::Cluster, ResourceScope::Namespaced] {
            let grant = Grant::Types(&types);
            let rbac = with_node_reads(member_rbac(&names(), scope, grant), &grant);
            let cluster_rules = serde_json::to_value(&rbac.cluster_roles[0].0.rules).unwrap();
            assert!(
                cluster_rules.as_array().unwrap().contains(&nodes),
                "{scope:?}: {cluster_rules}"
            );
            let roles = serde_json::to_value(&rbac.roles).unwrap().to_string();
            assert!(!roles.contains("nodes"), "{roles}");
        }
        let admin = with_node_reads(
            member_rbac(&names(), ResourceScope::Cluster, Grant::ClusterAdmin),
            &Grant::ClusterAdmin,
        );
        let admin = serde_json::to_value(&admin.cluster_roles)
            .unwrap()
            .to_string();
        assert!(!admin.contains("nodes"), "{admin}");
    }

    #[test]
    fn federated_namespaces_need_no_extra_namespace_rule() {
        let types = [resource("", "namespaces", ResourceScope::Cluster)];
        let rbac = member_rbac(&names(), ResourceScope::Cluster, Grant::Types(&types));
        let rules = rbac.cluster_roles[0].0.rules.clone().unwrap();
        assert_eq!(rules.len(), 2, "{rules:?}");
    }

    #[test]
    fn mcs_rights_extend_only_a_cluster_scoped_least_privilege_grant() {
        let types = [resource("", "configmaps", ResourceScope::Namespaced)];
        let rules_of = |scope, grant| {
            let rbac = with_mcs(member_rbac(&names(), scope, grant), scope, &grant);
            serde_json::to_value((&rbac.cluster_roles, &rbac.roles))
                .unwrap()
                .to_string()
        };
        let rules = rules_of(ResourceScope::Cluster, Grant::Types(&types));
        for part in [
            "serviceexports/status",
            "serviceimports",
            "endpointslices",
            "clusterproperties",
        ] {
            assert!(rules.contains(part), "{part} missing: {rules}");
        }
        assert!(!rules.contains('*'), "{rules}");
        let namespaced = rules_of(ResourceScope::Namespaced, Grant::Types(&types));
        assert!(!namespaced.contains("serviceimports"), "{namespaced}");
        let admin = rules_of(ResourceScope::Cluster, Grant::ClusterAdmin);
        assert!(!admin.contains("serviceimports"), "{admin}");
    }

    #[test]
    fn cluster_admin_is_everything() {
        let rbac = member_rbac(&names(), ResourceScope::Cluster, Grant::ClusterAdmin);
        let rules = serde_json::to_value(rbac.cluster_roles[0].0.rules.as_ref().unwrap()).unwrap();
        assert_eq!(
            rules,
            serde_json::json!([
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["get"]},
            ])
        );
    }

    #[test]
    fn namespaced_scope_uses_a_role_and_a_health_cluster_role() {
        let types = [
            resource("", "configmaps", ResourceScope::Namespaced),
            resource(RBAC_GROUP, "clusterroles", ResourceScope::Cluster),
        ];
        let rbac = member_rbac(&names(), ResourceScope::Namespaced, Grant::Types(&types));
        let [(role, binding)] = rbac.roles.as_slice() else {
            panic!("one Role expected: {rbac:?}");
        };
        assert_eq!(
            role.metadata.namespace.as_deref(),
            Some("kube-federation-system")
        );
        assert_eq!(binding.role_ref.kind, "Role");
        let rules = role.rules.as_ref().unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].resources, Some(vec!["configmaps".to_owned()]));
        assert_eq!(
            rbac.cluster_roles[0].0.metadata.name.as_deref(),
            Some("kubefed-controller-manager:kube-federation-system:healthcheck-member1-hub")
        );
    }
}
