use hubfed_api::federated::Placement;
use serde_json::json;

use super::*;
use crate::desired::TargetType;
use crate::hub::HubNamespace;
use crate::placement::{ControlPlaneScope, NamespaceFederation};
use crate::status::{StatusInput, compute_status};
use crate::version::RecordedApply;

struct Fixture {
    object: FederatedObject,
    target: TargetType,
    clusters: Vec<ClusterInfo>,
    namespace_placement: Option<Option<Placement>>,
    scope: ControlPlaneScope,
    identities: BTreeMap<String, ClusterIdentity>,
    hub_namespace: HubNamespace<'static>,
    containing_namespace: ContainingNamespace<'static>,
    control_plane: Option<&'static str>,
    duplicates: BTreeMap<String, Vec<String>>,
    adopt_resources: bool,
    members: BTreeMap<String, MemberObservation>,
    recorded: BTreeMap<String, RecordedApply>,
}

impl Fixture {
    fn deployment(spec: Value) -> Self {
        Self {
            object: FederatedObject {
                name: "web".into(),
                namespace: Some("prod".into()),
                spec: serde_json::from_value(spec).unwrap(),
                ..FederatedObject::default()
            },
            target: TargetType {
                kind: "Deployment".into(),
                group: "apps".into(),
                version: "v1".into(),
                namespaced: true,
            },
            clusters: ["c1", "c2", "c3"]
                .into_iter()
                .map(|name| ClusterInfo {
                    name: name.into(),
                    labels: BTreeMap::from([("name".to_owned(), name.to_owned())]),
                    ready: true,
                })
                .collect(),
            namespace_placement: Some(Some(
                serde_json::from_value(json!({"clusterSelector": {}})).unwrap(),
            )),
            scope: ControlPlaneScope::Cluster,
            identities: ["c1", "c2", "c3"]
                .into_iter()
                .map(|c| (c.to_owned(), ClusterIdentity::NotHub))
                .collect(),
            hub_namespace: HubNamespace::Absent,
            containing_namespace: ContainingNamespace::Active,
            control_plane: None,
            duplicates: BTreeMap::new(),
            adopt_resources: true,
            members: BTreeMap::new(),
            recorded: BTreeMap::new(),
        }
    }

    fn namespace(name: &str, spec: Value) -> Self {
        let mut f = Self::deployment(spec);
        f.object.name = name.into();
        f.object.namespace = Some(name.into());
        f.target = TargetType {
            kind: "Namespace".into(),
            group: String::new(),
            version: "v1".into(),
            namespaced: false,
        };
        f.namespace_placement = None;
        f
    }

    fn member(mut self, cluster: &str, member: MemberObject) -> Self {
        self.members
            .insert(cluster.into(), MemberObservation::Present(member));
        self
    }

    fn plan(&self) -> Plan {
        let namespace = match &self.namespace_placement {
            None => NamespaceFederation::NotApplicable,
            Some(None) => NamespaceFederation::NotFederated,
            Some(Some(p)) => NamespaceFederation::Federated(Some(p)),
        };
        plan(&PlanInput {
            object: &self.object,
            target: &self.target,
            clusters: &self.clusters,
            namespace,
            scope: self.scope,
            kubefed_namespace: "kube-federation-system",
            control_plane: self.control_plane,
            duplicates: &self.duplicates,
            identities: &self.identities,
            hub_namespace: self.hub_namespace,
            containing_namespace: self.containing_namespace,
            adopt_resources: self.adopt_resources,
            members: &self.members,
            recorded: &self.recorded,
        })
    }
}

fn managed(version: &str) -> MemberObject {
    MemberObject {
        managed_label: Some("true".into()),
        version: version.into(),
        labels: BTreeMap::from([(MANAGED_LABEL.to_owned(), "true".to_owned())]),
        ..MemberObject::default()
    }
}

fn actions(plan: &Plan) -> Vec<(&str, &ClusterAction)> {
    plan.clusters
        .iter()
        .map(|c| (c.cluster.as_str(), &c.action))
        .collect()
}

fn apply(action: &ClusterAction) -> &ApplyAction {
    match action {
        ClusterAction::Apply(a) => a,
        other => panic!("expected Apply, got {other:?}"),
    }
}

fn blocked(action: &ClusterAction) -> (PropagationStatus, &str) {
    match action {
        ClusterAction::Blocked { status, message } => (*status, message.as_str()),
        other => panic!("expected Blocked, got {other:?}"),
    }
}

fn basic_spec() -> Value {
    json!({
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"replicas": 2}},
        "placement": {"clusters": [{"name": "c1"}, {"name": "c2"}, {"name": "ghost"}]},
        "overrides": [{"clusterName": "c2", "clusterOverrides": [{"path": "/spec/replicas", "value": 5}]}],
    })
}

#[test]
fn clusters_without_overrides_of_their_own_share_one_body() {
    let f = Fixture::deployment(json!({
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"replicas": 2}},
        "placement": {"clusters": [{"name": "c1"}, {"name": "c2"}, {"name": "c3"}]},
        "overrides": [{"clusterName": "c2", "clusterOverrides": [{"path": "/spec/replicas", "value": 5}]}],
    }));
    let p = f.plan();
    let a = actions(&p);
    let (c1, c2, c3) = (apply(a[0].1), apply(a[1].1), apply(a[2].1));
    // c1 and c3 get the same object: one copy in memory, not one per cluster.
    assert_eq!(c1.desired_hash, c3.desired_hash);
    assert!(c1.object.same(&c3.object));
    // Encoded once for both: the same bytes, and the JSON of the object.
    assert!(std::sync::Arc::ptr_eq(&c1.object.json(), &c3.object.json()));
    let decoded: Value = serde_json::from_slice(&c1.object.json()).unwrap();
    assert_eq!(decoded, *c1.object);
    // c2's override makes its own.
    assert_ne!(c1.desired_hash, c2.desired_hash);
    assert!(!c1.object.same(&c2.object));
    assert_eq!(c2.object["spec"]["replicas"], 5);
    assert_eq!(c3.object["spec"]["replicas"], 2);
}

#[test]
fn creates_in_selected_clusters() {
    let f = Fixture::deployment(basic_spec());
    let p = f.plan();
    assert_eq!(p.disposition, Disposition::Sync);
    assert_eq!(p.finalizer, FinalizerAction::Ensure);
    assert_eq!(p.reason, AggregateReason::Success);
    assert_eq!(p.placement.unknown_clusters, ["ghost"]);
    let a = actions(&p);
    assert_eq!(a.len(), 2);
    let c1 = apply(a[0].1);
    assert_eq!(a[0].0, "c1");
    assert!(c1.creates && !c1.create_only && !c1.adopts);
    assert_eq!(c1.object["spec"]["replicas"], 2);
    assert_eq!(c1.object["metadata"]["namespace"], "prod");
    let mut hashed = (*c1.object).clone();
    // The template has no annotations: the hash annotation is the only one.
    hashed["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    assert_eq!(c1.desired_hash, desired_hash(&hashed));
    assert_eq!(
        c1.object["metadata"]["annotations"][DESIRED_HASH_ANNOTATION],
        c1.desired_hash.as_str(),
        "the copy carries the hash of what was applied"
    );
    assert_eq!(apply(a[1].1).object["spec"]["replicas"], 5);
    assert_eq!(
        p.template_version,
        template_version(f.object.spec.template.as_ref())
    );
    assert_eq!(
        p.overrides_version,
        overrides_version(f.object.spec.overrides.as_deref())
    );
}

#[test]
fn adoption_disabled_creates_only() {
    let mut f = Fixture::deployment(basic_spec());
    f.adopt_resources = false;
    let p = f.plan();
    assert!(apply(&p.clusters[0].action).create_only);

    let f = f.member(
        "c1",
        MemberObject {
            version: "gen:1".into(),
            ..MemberObject::default()
        },
    );
    let p = f.plan();
    assert_eq!(
        blocked(&p.clusters[0].action),
        (
            PropagationStatus::AlreadyExists,
            "Resource pre-exist in cluster"
        )
    );
}

#[test]
fn adoption_enabled_takes_over_unmanaged_objects() {
    let f = Fixture::deployment(basic_spec()).member(
        "c1",
        MemberObject {
            version: "gen:1".into(),
            ..MemberObject::default()
        },
    );
    let a = apply(&f.plan().clusters[0].action).clone();
    assert!(a.adopts && !a.creates && !a.create_only);
}

#[test]
fn managed_label_false_is_refused() {
    let f = Fixture::deployment(basic_spec()).member(
        "c1",
        MemberObject {
            managed_label: Some("false".into()),
            version: "gen:1".into(),
            ..MemberObject::default()
        },
    );
    assert_eq!(
        blocked(&f.plan().clusters[0].action),
        (
            PropagationStatus::ManagedLabelFalse,
            "Unable to manage the object which has label kubefed.io/managed: false"
        )
    );
}

#[test]
fn current_members_are_left_alone_and_drift_is_corrected() {
    let f = Fixture::deployment(basic_spec());
    let created = f.plan();
    let desired = apply(&created.clusters[0].action).clone();

    let mut member = managed("gen:1");
    member.labels.insert("app".into(), "web".into());
    member
        .annotations
        .insert(DESIRED_HASH_ANNOTATION.into(), desired.desired_hash.clone());
    let mut f = f.member("c1", member);
    f.recorded.insert(
        "c1".into(),
        RecordedApply {
            version: "gen:1".into(),
            desired_hash: Some(desired.desired_hash.clone()),
        },
    );
    assert_eq!(f.plan().clusters[0].action, ClusterAction::UpToDate);

    // Issue 9 (6): after a restart only the PropagatedVersion is left (no hash recorded)
    // and a change outside template and overrides (retainReplicas) changed the desired
    // object: the hash stored on the copy says so.
    f.recorded.insert(
        "c1".into(),
        RecordedApply {
            version: "gen:1".into(),
            desired_hash: None,
        },
    );
    assert_eq!(f.plan().clusters[0].action, ClusterAction::UpToDate);
    f.object.spec.retain_replicas = Some(true);
    let a = apply(&f.plan().clusters[0].action).clone();
    assert!(a.released_fields.contains(&"/spec/replicas".to_owned()));
    f.object.spec.retain_replicas = None;

    // Someone edited the member: its generation moved past the recorded one.
    if let Some(MemberObservation::Present(m)) = f.members.get_mut("c1") {
        m.version = "gen:2".into();
    }
    let a = apply(&f.plan().clusters[0].action).clone();
    assert!(!a.creates && !a.adopts);
}

#[test]
fn not_ready_selected_clusters_are_reported_others_skipped() {
    let mut f = Fixture::deployment(basic_spec());
    f.clusters[0].ready = false;
    f.clusters[2].ready = false;
    let f = f.member("c3", managed("gen:1"));
    let p = f.plan();
    let a = actions(&p);
    assert_eq!(a.len(), 2);
    assert_eq!(a[0].0, "c1");
    assert_eq!(
        blocked(a[0].1),
        (PropagationStatus::ClusterNotReady, "Cluster not ready")
    );
    assert_eq!(a[1].0, "c2");
}

#[test]
fn unselected_members_are_deleted_with_options() {
    let mut f = Fixture::deployment(basic_spec()).member("c3", managed("gen:1"));
    f.object.annotations.insert(
        DELETE_OPTION_ANNOTATION.into(),
        r#"{"propagationPolicy":"Foreground","gracePeriodSeconds":5}"#.into(),
    );
    let p = f.plan();
    let (cluster, action) = actions(&p)[2];
    assert_eq!(cluster, "c3");
    match action {
        ClusterAction::Delete(d) => {
            let o = d.options.as_ref().unwrap();
            assert_eq!(o.propagation_policy.as_deref(), Some("Foreground"));
            assert_eq!(o.grace_period_seconds, Some(5));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn invalid_delete_options_block_deletion() {
    let mut f = Fixture::deployment(basic_spec()).member("c3", managed("gen:1"));
    f.object
        .annotations
        .insert(DELETE_OPTION_ANNOTATION.into(), "{not json".into());
    let p = f.plan();
    let (status, message) = blocked(&p.clusters[2].action);
    assert_eq!(status, PropagationStatus::DeletionFailed);
    assert!(message.contains("kubefed.io/deleteoption"), "{message}");
}

#[test]
fn unselected_terminating_or_unmanaged_members() {
    let mut terminating = managed("gen:1");
    terminating.terminating = true;
    let unmanaged = MemberObject {
        version: "gen:1".into(),
        ..MemberObject::default()
    };
    let mut f = Fixture::deployment(basic_spec()).member("c3", terminating);
    assert_eq!(f.plan().clusters[2].action, ClusterAction::WaitForRemoval);
    f = f.member("c3", unmanaged);
    assert_eq!(f.plan().clusters.len(), 2);
}

#[test]
fn cache_failures_are_reported_where_placed_only() {
    let mut f = Fixture::deployment(basic_spec());
    for cluster in ["c2", "c3"] {
        f.members.insert(
            cluster.into(),
            MemberObservation::RetrievalFailed("informer not synced".into()),
        );
    }
    let p = f.plan();
    assert_eq!(
        actions(&p).iter().map(|(c, _)| *c).collect::<Vec<_>>(),
        ["c1", "c2"],
        "c3 is not placed: no entry"
    );
    assert_eq!(
        blocked(&p.clusters[1].action),
        (
            PropagationStatus::CachedRetrievalFailed,
            "informer not synced"
        )
    );
}

/// Issue 9 (3): a type not served in one cluster blocks only objects placed there, with a
/// message that says so; deletions do not wait for it.
#[test]
fn an_unserved_type_blocks_only_where_placed() {
    let mut f = Fixture::deployment(basic_spec());
    f.members.insert("c2".into(), MemberObservation::NotServed);
    f.members.insert("c3".into(), MemberObservation::NotServed);
    let p = f.plan();
    assert_eq!(p.clusters.len(), 2);
    let (status, message) = blocked(&p.clusters[1].action);
    assert_eq!(status, PropagationStatus::CachedRetrievalFailed);
    assert!(message.contains("does not serve Deployment"), "{message}");

    let mut f = deleting(f).member("c1", managed("gen:1"));
    f.members.insert(
        "c3".into(),
        MemberObservation::RetrievalFailed("403".into()),
    );
    let p = f.plan();
    assert_eq!(
        actions(&p),
        [(
            "c1",
            &ClusterAction::Delete(DeleteAction {
                options: None,
                uid: None
            })
        )]
    );
    f.members.remove("c1");
    let p = f.plan();
    assert_eq!(p.finalizer, FinalizerAction::RemoveAfterVerification);
    assert_eq!(
        p.verify_absent_in,
        ["c1"],
        "c2 does not serve it, c3's cache fails"
    );
    // A placed cluster whose cache fails may hold a copy: wait.
    f.members.insert(
        "c2".into(),
        MemberObservation::RetrievalFailed("403".into()),
    );
    assert_eq!(f.plan().finalizer, FinalizerAction::Keep);
}

/// Issue 9 (5): an orphaning deletion does not release the finalizer while a placed
/// cluster's cache has not shown whether it holds a copy to unlabel.
#[test]
fn orphaning_waits_for_placed_caches() {
    let mut f = deleting(Fixture::deployment(basic_spec())).member("c1", managed("gen:1"));
    f.object
        .annotations
        .insert(ORPHAN_ANNOTATION.into(), "true".into());
    f.members.insert(
        "c2".into(),
        MemberObservation::RetrievalFailed("not synced".into()),
    );
    f.members.insert(
        "c3".into(),
        MemberObservation::RetrievalFailed("not synced".into()),
    );
    let p = f.plan();
    assert_eq!(p.finalizer, FinalizerAction::Keep);
    assert_eq!(p.clusters[0].action, ClusterAction::RemoveManagedLabel);
    assert_eq!(
        blocked(&p.clusters[1].action).0,
        PropagationStatus::CachedRetrievalFailed
    );
    assert_eq!(p.clusters.len(), 2, "c3 is not placed");
    f.members.insert("c2".into(), MemberObservation::Absent);
    assert_eq!(f.plan().finalizer, FinalizerAction::Remove);
}

#[test]
fn orphaning_unlabels_a_written_copy_the_cache_does_not_show_yet() {
    let mut f = deleting(Fixture::deployment(basic_spec())).member("c1", managed("gen:1"));
    f.object
        .annotations
        .insert(ORPHAN_ANNOTATION.into(), "true".into());
    f.members.insert("c2".into(), MemberObservation::Absent);
    // Never written to c2: nothing to unlabel there.
    assert_eq!(
        actions(&f.plan()),
        [("c1", &ClusterAction::RemoveManagedLabel)]
    );
    // Written to c2, whose cache has not caught up: unlabelled all the same.
    f.recorded.insert(
        "c2".into(),
        RecordedApply {
            version: "gen:1".into(),
            desired_hash: None,
        },
    );
    let p = f.plan();
    assert_eq!(
        actions(&p),
        [
            ("c1", &ClusterAction::RemoveManagedLabel),
            ("c2", &ClusterAction::RemoveManagedLabel)
        ]
    );
    assert_eq!(p.finalizer, FinalizerAction::Remove);
}

#[test]
fn bad_overrides_block_only_their_cluster() {
    let f = Fixture::deployment(json!({
        "template": {"spec": {}},
        "placement": {"clusterSelector": {}},
        "overrides": [{"clusterName": "c2", "clusterOverrides": [{"path": "/kind", "value": "Pod"}]}],
    }));
    let p = f.plan();
    let a = actions(&p);
    assert!(matches!(a[0].1, ClusterAction::Apply(_)));
    let (status, message) = blocked(a[1].1);
    assert_eq!(status, PropagationStatus::ApplyOverridesFailed);
    assert!(message.contains("/kind"), "{message}");
    assert!(matches!(a[2].1, ClusterAction::Apply(_)));
}

#[test]
fn invalid_template_is_compute_resource_failed() {
    let f = Fixture::deployment(json!({"template": [], "placement": {"clusterSelector": {}}}));
    let p = f.plan();
    assert_eq!(
        blocked(&p.clusters[0].action).0,
        PropagationStatus::ComputeResourceFailed
    );
}

#[test]
fn invalid_placement_plans_nothing() {
    let f = Fixture::deployment(json!({
        "placement": {"clusterSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
    }))
    .member("c1", managed("gen:1"));
    let p = f.plan();
    assert_eq!(p.reason, AggregateReason::ComputePlacementFailed);
    assert!(
        p.reason_message
            .unwrap()
            .contains("invalid cluster selector")
    );
    assert!(p.clusters.is_empty());
    assert_eq!(p.finalizer, FinalizerAction::Ensure);
}

#[test]
fn namespace_not_federated_removes_everything() {
    let mut f = Fixture::deployment(basic_spec()).member("c1", managed("gen:1"));
    f.namespace_placement = Some(None);
    let p = f.plan();
    assert_eq!(p.reason, AggregateReason::NamespaceNotFederated);
    assert!(p.placement.clusters.is_empty());
    assert_eq!(
        actions(&p),
        [(
            "c1",
            &ClusterAction::Delete(DeleteAction {
                options: None,
                uid: None
            })
        )]
    );

    f.scope = ControlPlaneScope::Namespaced;
    let p = f.plan();
    assert_eq!(p.reason, AggregateReason::Success);
    assert_eq!(p.clusters.len(), 2);
}

/// The hub's namespace is being deleted and its FederatedNamespace went first: the objects
/// still in it read as "namespace not federated", but their copies are not deleted on the
/// way — their own deletion, with `kubefed.io/orphan`, decides (an orphaned copy was once
/// deleted this way). Until the namespace is read, or when it cannot be, nothing is deleted.
#[test]
fn no_copy_is_deleted_while_the_hub_namespace_is_being_deleted() {
    let mut f = Fixture::deployment(basic_spec())
        .member("c1", managed("gen:1"))
        .member("c2", managed("gen:1"));
    f.object
        .annotations
        .insert(ORPHAN_ANNOTATION.into(), "true".into());
    f.namespace_placement = Some(None);
    let deletes = |p: &Plan| {
        p.clusters
            .iter()
            .filter(|c| matches!(c.action, ClusterAction::Delete(_)))
            .count()
    };

    f.containing_namespace = ContainingNamespace::NotRead;
    let p = f.plan();
    assert!(p.needs_containing_namespace);
    assert_eq!(deletes(&p), 0);
    assert!(p.clusters.iter().all(|c| matches!(
        &c.action,
        ClusterAction::Blocked { status: PropagationStatus::RetrievalFailed, message }
            if message.contains("\"prod\" has not been read")
    )));

    f.containing_namespace = ContainingNamespace::Deleting;
    let p = f.plan();
    assert_eq!(
        p.disposition,
        Disposition::Ignore(IgnoreReason::NamespaceDeleting)
    );
    assert_eq!(p.finalizer, FinalizerAction::Untouched);
    assert!(p.clusters.is_empty());
    assert!(!p.needs_containing_namespace);

    f.containing_namespace = ContainingNamespace::Unreadable("503 Service Unavailable");
    let p = f.plan();
    assert_eq!(deletes(&p), 0);
    assert_eq!(
        p.clusters[0].action.status_on_success(),
        Some(PropagationStatus::RetrievalFailed)
    );

    f.containing_namespace = ContainingNamespace::Active;
    assert_eq!(deletes(&f.plan()), 2, "a live namespace: KubeFed's rule");

    // Its own deletion then orphans: the copies are unlabelled, not deleted.
    f.containing_namespace = ContainingNamespace::Deleting;
    let p = deleting(f).plan();
    assert_eq!(p.disposition, Disposition::Delete);
    assert_eq!(
        actions(&p),
        [
            ("c1", &ClusterAction::RemoveManagedLabel),
            ("c2", &ClusterAction::RemoveManagedLabel)
        ]
    );
}

/// Only deletions need the namespace: applies and a plan without deletions never read it.
#[test]
fn the_hub_namespace_is_read_only_for_deletions() {
    let mut f = Fixture::deployment(basic_spec()).member("c1", managed("gen:1"));
    f.containing_namespace = ContainingNamespace::NotRead;
    let p = f.plan();
    assert!(!p.needs_containing_namespace);
    assert_eq!(p.disposition, Disposition::Sync);
    assert!(
        p.clusters
            .iter()
            .all(|c| matches!(c.action, ClusterAction::Apply(_) | ClusterAction::UpToDate))
    );
    // A cluster-scoped object has no containing namespace.
    let mut f = Fixture::namespace("team", json!({"placement": {"clusters": []}}))
        .member("c1", managed("gen:1"));
    f.object.namespace = None;
    f.target.kind = "ClusterRole".into();
    f.target.group = "rbac.authorization.k8s.io".into();
    f.containing_namespace = ContainingNamespace::NotRead;
    let p = f.plan();
    assert!(!p.needs_containing_namespace);
    assert!(matches!(p.clusters[0].action, ClusterAction::Delete(_)));
}

#[test]
fn federated_namespace_placement_limits_resources() {
    let mut f = Fixture::deployment(basic_spec());
    f.namespace_placement = Some(Some(
        serde_json::from_value(json!({"clusters": [{"name": "c2"}]})).unwrap(),
    ));
    let p = f.plan();
    assert_eq!(p.clusters.len(), 1);
    assert_eq!(p.clusters[0].cluster, "c2");
}

#[test]
fn system_and_misnamed_namespaces_are_ignored() {
    for name in [
        "kube-system",
        "default",
        "kube-federation-system",
        "kube-node-lease",
    ] {
        let p = Fixture::namespace(name, json!({"placement": {"clusterSelector": {}}})).plan();
        assert_eq!(
            p.disposition,
            Disposition::Ignore(IgnoreReason::SystemNamespace)
        );
        assert_eq!(p.finalizer, FinalizerAction::Untouched);
        assert!(p.clusters.is_empty());
    }
    let mut f = Fixture::namespace("team", json!({"placement": {"clusterSelector": {}}}));
    f.object.namespace = Some("other".into());
    let p = f.plan();
    assert_eq!(
        p.disposition,
        Disposition::Ignore(IgnoreReason::InvalidNamespaceName)
    );
    assert_eq!(p.warnings[0].reason, "InvalidName");
}

#[test]
fn hub_namespace_is_unlabelled_never_deleted() {
    let mut f = Fixture::namespace("team", json!({"placement": {"clusters": [{"name": "c2"}]}}))
        .member("c1", managed("rv:3"));
    f.identities.insert("c1".into(), ClusterIdentity::Hub);
    f.adopt_resources = false;
    let p = f.plan();
    assert_eq!(p.clusters[0].cluster, "c1");
    assert_eq!(p.clusters[0].action, ClusterAction::RemoveManagedLabel);
    assert_eq!(p.clusters[1].cluster, "c2");
    let c2 = apply(&p.clusters[1].action);
    assert!(c2.create_only);
    assert_eq!(c2.object["metadata"].get("namespace"), None);

    // Selected hub namespace without the label: adopted even with adoption disabled.
    f.object.spec.placement =
        Some(serde_json::from_value(json!({"clusters": [{"name": "c1"}]})).unwrap());
    f.members.insert(
        "c1".into(),
        MemberObservation::Present(MemberObject {
            version: "rv:3".into(),
            ..MemberObject::default()
        }),
    );
    let a = apply(&f.plan().clusters[0].action).clone();
    assert!(a.adopts);
    f.members.clear();
    let a = apply(&f.plan().clusters[0].action).clone();
    assert!(a.creates && !a.create_only);
}

#[test]
fn retain_replicas_releases_field_for_existing_members() {
    let f = Fixture::deployment(json!({
        "template": {"spec": {"replicas": 4}},
        "placement": {"clusters": [{"name": "c1"}, {"name": "c2"}]},
        "retainReplicas": true,
    }))
    .member("c1", managed("gen:1"));
    let p = f.plan();
    let existing = apply(&p.clusters[0].action);
    assert_eq!(existing.released_fields, ["/spec/replicas"]);
    assert_eq!(existing.object["spec"].get("replicas"), None);
    let created = apply(&p.clusters[1].action);
    assert!(created.released_fields.is_empty());
    assert_eq!(created.object["spec"]["replicas"], 4);
}

fn deleting(mut f: Fixture) -> Fixture {
    f.object.deleting = true;
    f.object.has_sync_finalizer = true;
    f
}

#[test]
fn deletion_deletes_managed_members_everywhere() {
    let mut terminating = managed("gen:1");
    terminating.terminating = true;
    let f = deleting(Fixture::deployment(basic_spec()))
        .member("c1", managed("gen:1"))
        .member("c3", terminating);
    let p = f.plan();
    assert_eq!(p.disposition, Disposition::Delete);
    assert_eq!(p.finalizer, FinalizerAction::Keep);
    assert_eq!(
        actions(&p),
        [
            (
                "c1",
                &ClusterAction::Delete(DeleteAction {
                    options: None,
                    uid: None
                })
            ),
            ("c3", &ClusterAction::WaitForRemoval),
        ]
    );
}

#[test]
fn deletion_finishes_when_nothing_remains() {
    let unmanaged = MemberObject {
        version: "gen:1".into(),
        ..MemberObject::default()
    };
    let p = deleting(Fixture::deployment(basic_spec()))
        .member("c2", unmanaged)
        .plan();
    assert!(p.clusters.is_empty());
    assert_eq!(p.finalizer, FinalizerAction::RemoveAfterVerification);
}

#[test]
fn deletion_never_waits_on_unready_clusters_but_records_them() {
    let mut f = deleting(Fixture::deployment(basic_spec())).member("c1", managed("gen:1"));
    f.clusters[1].ready = false; // c2 is placed
    f.clusters[2].ready = false; // c3 is neither placed nor known to hold anything
    let p = f.plan();
    assert_eq!(
        actions(&p),
        [(
            "c1",
            &ClusterAction::Delete(DeleteAction {
                options: None,
                uid: None
            })
        )]
    );
    assert_eq!(p.leftovers, ["c2"]);
    f.members.remove("c1");
    let p = f.plan();
    assert_eq!(p.finalizer, FinalizerAction::RemoveAfterVerification);
    assert_eq!(p.leftovers, ["c2"]);
    assert_eq!(p.verify_absent_in, ["c1"]);

    // Orphaning: the same clusters are recorded, to be unlabelled later.
    f.object
        .annotations
        .insert(ORPHAN_ANNOTATION.into(), "true".into());
    assert_eq!(f.plan().leftovers, ["c2"]);
}

#[test]
fn desired_objects_carry_the_proof_of_ownership() {
    let mut f = Fixture::deployment(basic_spec());
    let p = f.plan();
    let annotations = &apply(&p.clusters[0].action).object["metadata"]["annotations"];
    assert!(annotations.get(OWNER_ANNOTATION).is_none());
    f.control_plane = Some("plane");
    f.object.uid = Some("fed-uid".into());
    let p = f.plan();
    let object = &apply(&p.clusters[0].action).object;
    assert_eq!(
        object["metadata"]["annotations"][OWNER_ANNOTATION],
        "plane/fed-uid"
    );
    assert_eq!(object["metadata"]["labels"]["app"], "web", "template kept");
}

#[test]
fn deletion_without_finalizer_is_ignored() {
    let mut f = deleting(Fixture::deployment(basic_spec())).member("c1", managed("gen:1"));
    f.object.has_sync_finalizer = false;
    let p = f.plan();
    assert_eq!(
        p.disposition,
        Disposition::Ignore(IgnoreReason::FinalizerAbsent)
    );
    assert!(p.clusters.is_empty());
}

#[test]
fn orphaning_deletion_unlabels() {
    let mut f = deleting(Fixture::deployment(basic_spec()))
        .member("c1", managed("gen:1"))
        .member("c3", managed("gen:2"));
    f.clusters[2].ready = false;
    f.object
        .annotations
        .insert(ORPHAN_ANNOTATION.into(), "true".into());
    let p = f.plan();
    assert_eq!(p.finalizer, FinalizerAction::Remove);
    assert_eq!(actions(&p), [("c1", &ClusterAction::RemoveManagedLabel)]);
}

#[test]
fn deleting_a_federated_namespace_keeps_the_hub_namespace() {
    let mut f = deleting(Fixture::namespace(
        "team",
        json!({"placement": {"clusterSelector": {}}}),
    ))
    .member("c1", managed("rv:1"))
    .member("c2", managed("rv:1"));
    f.identities.insert("c1".into(), ClusterIdentity::Hub);
    let p = f.plan();
    assert_eq!(
        actions(&p),
        [
            ("c1", &ClusterAction::RemoveManagedLabel),
            (
                "c2",
                &ClusterAction::Delete(DeleteAction {
                    options: None,
                    uid: None
                })
            ),
        ]
    );

    // The hub namespace itself is terminating: nothing to wait for there.
    if let Some(MemberObservation::Present(m)) = f.members.get_mut("c1") {
        m.terminating = true;
    }
    f.members.remove("c2");
    let p = f.plan();
    assert!(p.clusters.is_empty());
    assert_eq!(p.finalizer, FinalizerAction::RemoveAfterVerification);
}

fn with_uid(mut member: MemberObject, uid: &str) -> MemberObject {
    member.uid = Some(uid.into());
    member
}

/// Issue 17: the hub joined as `c1` with a member credential that may not read
/// `kube-system`; its namespace leaves the placement, or the FederatedNamespace is deleted.
#[test]
fn an_unknown_identity_never_deletes_a_namespace() {
    for deleting_object in [false, true] {
        let mut f = Fixture::namespace(
            "victim",
            json!({"placement": {"clusters": [{"name": "c2"}]}}),
        )
        .member("c1", with_uid(managed("rv:3"), "u-hub"))
        .member("c2", with_uid(managed("rv:3"), "u-c2"));
        if deleting_object {
            f = deleting(f);
        }
        f.identities.insert(
            "c1".into(),
            ClusterIdentity::Unknown("403 Forbidden".into()),
        );
        for hub_namespace in [
            HubNamespace::NotRead,
            HubNamespace::Absent,
            HubNamespace::Unreadable("500 Internal Server Error"),
            HubNamespace::Uid("u-other"),
        ] {
            f.hub_namespace = hub_namespace;
            let p = f.plan();
            let (status, message) = blocked(&p.clusters[0].action);
            assert_eq!(status, PropagationStatus::ClusterIdentityUnknown);
            assert!(!message.is_empty());
            if deleting_object {
                assert_eq!(p.finalizer, FinalizerAction::Keep, "{hub_namespace:?}");
            }
        }
        // The same namespace object as the hub's: unlabelled, whatever the identity says.
        f.hub_namespace = HubNamespace::Uid("u-hub");
        let p = f.plan();
        assert_eq!(p.clusters[0].action, ClusterAction::RemoveManagedLabel);
        assert_eq!(p.hub_namespace_in, ["c1"]);
    }
}

#[test]
fn a_namespace_is_deleted_only_after_comparing_it_with_the_hubs() {
    let mut f = Fixture::namespace("team", json!({"placement": {"clusters": [{"name": "c2"}]}}))
        .member("c1", with_uid(managed("rv:3"), "u-c1"));
    f.hub_namespace = HubNamespace::NotRead;
    let p = f.plan();
    assert!(p.needs_hub_namespace);
    assert_eq!(
        blocked(&p.clusters[0].action).0,
        PropagationStatus::ClusterIdentityUnknown
    );

    f.hub_namespace = HubNamespace::Uid("u-hub");
    let p = f.plan();
    assert!(!p.needs_hub_namespace);
    assert_eq!(
        p.clusters[0].action,
        ClusterAction::Delete(DeleteAction {
            options: None,
            uid: Some("u-c1".into())
        }),
        "the delete carries the observed copy's UID as precondition"
    );

    // The identity check said "not the hub" but the namespace is the hub's own object.
    f.hub_namespace = HubNamespace::Uid("u-c1");
    assert_eq!(
        f.plan().clusters[0].action,
        ClusterAction::RemoveManagedLabel
    );

    // Other targets never need the hub's namespace.
    let mut f = Fixture::deployment(basic_spec()).member("c3", managed("gen:1"));
    f.identities.clear();
    f.hub_namespace = HubNamespace::NotRead;
    let p = f.plan();
    assert!(!p.needs_hub_namespace);
    assert!(p.clusters.iter().any(|c| c.cluster == "c3"
        && c.action
            == ClusterAction::Delete(DeleteAction {
                options: None,
                uid: None
            })));
}

/// Issue 16: the hub's namespace is being deleted, which deletes the FederatedNamespace
/// with it; its copy is neither waited for nor verified absent.
#[test]
fn a_terminating_hub_namespace_is_not_waited_for() {
    let mut f = deleting(Fixture::namespace(
        "team",
        json!({"placement": {"clusterSelector": {}}}),
    ))
    .member("c1", with_uid(managed("rv:1"), "u-hub"));
    if let Some(MemberObservation::Present(m)) = f.members.get_mut("c1") {
        m.terminating = true;
    }
    f.identities
        .insert("c1".into(), ClusterIdentity::Unknown("timeout".into()));
    f.hub_namespace = HubNamespace::NotRead;
    // Unknown: wait (never release a finalizer on a guess) …
    let p = f.plan();
    assert_eq!(p.finalizer, FinalizerAction::Keep);
    // … until the UIDs match.
    f.hub_namespace = HubNamespace::Uid("u-hub");
    let p = f.plan();
    assert!(p.clusters.is_empty());
    assert_eq!(p.finalizer, FinalizerAction::RemoveAfterVerification);
    assert_eq!(p.hub_namespace_in, ["c1"]);
    assert_eq!(
        p.verify_absent_in,
        ["c2", "c3"],
        "the hub's namespace is not verified"
    );
}

/// Issue 9 (9): a namespaced control plane propagates from its own namespace; there, on
/// the hub joined as a member nothing is written, and in members the join's credentials
/// are never overwritten nor deleted.
#[test]
fn the_control_planes_own_objects_are_protected() {
    let secret = |name: &str| {
        let mut f = Fixture::deployment(json!({
            "template": {"data": {"k": "dg=="}},
            "placement": {"clusters": [{"name": "c1"}, {"name": "c2"}, {"name": "c3"}]},
        }));
        f.target = TargetType {
            kind: "Secret".into(),
            group: String::new(),
            version: "v1".into(),
            namespaced: true,
        };
        f.scope = ControlPlaneScope::Namespaced;
        f.namespace_placement = None;
        f.object.namespace = Some("kube-federation-system".into());
        f.object.name = name.into();
        f
    };
    let mut f = secret("app-credentials");
    f.identities.insert("c1".into(), ClusterIdentity::Hub);
    f.identities
        .insert("c2".into(), ClusterIdentity::Unknown("403".into()));
    let p = f.plan();
    assert_eq!(
        blocked(&p.clusters[0].action).0,
        PropagationStatus::Protected
    );
    assert_eq!(
        blocked(&p.clusters[1].action).0,
        PropagationStatus::ClusterIdentityUnknown
    );
    assert!(matches!(p.clusters[2].action, ClusterAction::Apply(_)));

    // c3's join credentials: neither written nor, when no longer placed, deleted.
    let p = secret("c3-hub").plan();
    assert_eq!(
        blocked(&p.clusters[2].action).0,
        PropagationStatus::Protected
    );
    assert!(matches!(p.clusters[1].action, ClusterAction::Apply(_)));
    let p = deleting(secret("c3-hub").member("c3", managed("rv:1"))).plan();
    assert!(!p.clusters.iter().any(|c| c.cluster == "c3"), "{p:?}");
    assert!(!p.verify_absent_in.contains(&"c3".to_owned()));

    // Outside the control plane's namespace nothing is protected.
    let mut f = secret("c3-hub");
    f.object.namespace = Some("team".into());
    assert!(matches!(
        f.plan().clusters[2].action,
        ClusterAction::Apply(_)
    ));
}

/// Issue 9 (10): two names for one API server never delete what the other placed.
#[test]
fn clusters_joined_twice_are_neither_written_nor_deleted() {
    let mut f = Fixture::deployment(basic_spec()).member("c3", managed("gen:1"));
    f.duplicates.insert("c1".into(), vec!["c3".into()]);
    f.duplicates.insert("c3".into(), vec!["c1".into()]);
    let p = f.plan();
    let (status, message) = blocked(&p.clusters[0].action);
    assert_eq!(status, PropagationStatus::DuplicateCluster);
    assert!(message.contains("c3"), "{message}");
    assert!(
        !p.clusters.iter().any(|c| c.cluster == "c3"),
        "c3's copy (placed through c1) is not deleted: {p:?}"
    );
    let p = deleting(f).plan();
    assert!(p.clusters.iter().all(|c| c.cluster == "c2"), "{p:?}");
    assert_eq!(p.leftovers, ["c1", "c3"]);
}

#[test]
fn action_statuses() {
    let create = ClusterAction::Apply(ApplyAction {
        object: json!({}).into(),
        desired_hash: String::new(),
        creates: true,
        create_only: false,
        adopts: false,
        released_fields: Vec::new(),
    });
    assert_eq!(create.status_on_success(), Some(PropagationStatus::Ok));
    assert_eq!(
        create.status_on_failure(),
        Some(PropagationStatus::CreationFailed)
    );
    assert_eq!(
        create.status_on_timeout(),
        Some(PropagationStatus::CreationTimedOut)
    );
    let delete = ClusterAction::Delete(DeleteAction {
        options: None,
        uid: None,
    });
    assert_eq!(
        delete.status_on_success(),
        Some(PropagationStatus::WaitingForRemoval)
    );
    assert_eq!(
        delete.status_on_failure(),
        Some(PropagationStatus::DeletionFailed)
    );
    let unlabel = ClusterAction::RemoveManagedLabel;
    assert_eq!(unlabel.status_on_success(), None);
    assert_eq!(
        unlabel.status_on_timeout(),
        Some(PropagationStatus::LabelRemovalTimedOut)
    );
    assert_eq!(
        not_ready().status_on_failure(),
        Some(PropagationStatus::ClusterNotReady)
    );
}

#[test]
fn plan_to_status_end_to_end() {
    let mut f = Fixture::deployment(basic_spec()).member("c3", managed("gen:1"));
    f.clusters[0].ready = false;
    let p = f.plan();
    let outcomes = p.expected_outcomes();
    let status = compute_status(
        None,
        &StatusInput {
            generation: 3,
            reason: p.reason,
            reason_message: p.reason_message.as_deref(),
            outcomes: &outcomes,
            resources_updated: true,
            unknown_clusters: &p.placement.unknown_clusters,
            now: "2024-01-01T00:00:00Z",
            ..StatusInput::default()
        },
    )
    .status;
    assert_eq!(
        serde_json::to_value(&status).unwrap(),
        json!({
            "observedGeneration": 3,
            "conditions": [{
                "type": "Propagation",
                "status": "False",
                "reason": "CheckClusters",
                "message": "2 of 3 clusters need attention: c1 (ClusterNotReady), c3 (WaitingForRemoval); placement names clusters that are not joined: ghost",
                "lastUpdateTime": "2024-01-01T00:00:00Z",
                "lastTransitionTime": "2024-01-01T00:00:00Z",
            }],
            "clusters": [
                {"name": "c1", "status": "ClusterNotReady", "message": "Cluster not ready"},
                {"name": "c2"},
                {"name": "c3", "status": "WaitingForRemoval"},
            ],
        })
    );
}

#[test]
fn orphan_and_delete_option_annotations() {
    let mut a = BTreeMap::new();
    assert!(!is_orphaning(&a));
    assert_eq!(delete_options(&a).unwrap(), None);
    a.insert(ORPHAN_ANNOTATION.to_owned(), "True".to_owned());
    assert!(!is_orphaning(&a));
    a.insert(ORPHAN_ANNOTATION.to_owned(), "true".to_owned());
    assert!(is_orphaning(&a));
    a.insert(
        DELETE_OPTION_ANNOTATION.to_owned(),
        r#"{"preconditions":{"uid":"u1"},"unknownField":1}"#.to_owned(),
    );
    let o = delete_options(&a).unwrap().unwrap();
    assert_eq!(o.preconditions.unwrap().uid.as_deref(), Some("u1"));
}
