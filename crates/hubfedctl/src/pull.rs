//! `join CLUSTER --mode pull`: the hub side of a pull-mode member — its work namespace
//! `hubfed-cluster-<cluster>`, the agent's ServiceAccount there with rights on that namespace
//! alone, a token for it, and the KubeFedCluster with `syncMode: Pull` — and the member side —
//! the agent's ServiceAccount and object rights (the same least-privilege rules as a push
//! join, with `--mcs` the multi-cluster services rights too), the MCS and About CRDs with
//! `--mcs`, and a Secret with its hub kubeconfig — applied to the member, or printed with
//! `-o yaml` for GitOps (then nothing reaches the member from here, and the CRDs are not
//! printed).
//!
//! The hub holds no credentials to the member: nothing of the member's is written to the hub.

use std::collections::BTreeMap;

use hubfed_api::federatedtypeconfig::ResourceScope;
use hubfed_api::kubefedcluster::{
    KubeFedCluster, KubeFedClusterSpec, LocalSecretReference, SyncMode,
};
use hubfed_api::pull_mcs::CLUSTER_REPORT_NAME;
use hubfed_api::work::{AGENT_LEASE_NAME, AGENT_SERVICE_ACCOUNT, PULL_GROUP, WORK_CLUSTER_LABEL};
use hubfed_core::pull::cluster_namespace;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::{Value, json};

use crate::cli::JoinArgs;
use crate::control_plane::{
    control_plane_id, control_plane_scope, ensure_kubefed_installed, federated_targets,
};
use crate::error::{EXIT_OK, Error, Result};
use crate::join::{
    check_dns_subdomain, host_cluster, member_context, namespace_object,
    service_account_token_secret, wait_for_token, wait_namespace_not_terminating, write_rbac,
};
use crate::kubeconfig::Target;
use crate::ops;
use crate::rbac::{Grant, JoinNames, MemberRbac, member_rbac, service_account, with_mcs};
use crate::session::Session;

/// The hub Secret holding the agent's token, in the cluster's work namespace.
pub const AGENT_TOKEN_SECRET: &str = "hubfed-agent-token";
/// The member Secret holding the agent's hub kubeconfig (`kubeconfig`) and its cluster name
/// (`cluster`), in the member's KubeFed namespace.
pub const AGENT_HUB_SECRET: &str = "hubfed-agent-hub";
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// `hubfedctl join CLUSTER --mode pull`.
pub async fn join_pull(session: &mut Session<'_>, args: JoinArgs) -> Result<i32> {
    check_dns_subdomain("cluster name", &args.cluster)?;
    let cluster = args.cluster.as_str();
    let ns = session.kubefed_namespace().to_owned();
    let dry_run = args.dry_run;
    let host = host_cluster(session, args.host_cluster_name.as_deref()).await?;
    let hub = &host.target;
    ensure_kubefed_installed(hub, &ns).await?;
    let scope = control_plane_scope(hub, &ns).await?;
    let targets = if args.cluster_admin {
        Vec::new()
    } else {
        federated_targets(hub, &ns).await?
    };
    let grant = if args.cluster_admin {
        Grant::ClusterAdmin
    } else {
        Grant::Types(&targets)
    };
    let clusters: Api<KubeFedCluster> = Api::namespaced(hub.client.clone(), &ns);
    let existing = clusters.get_opt(cluster).await.map_err(|e| hub.err(e))?;
    check_existing(existing.as_ref(), &args, &ns)?;
    let (member, member_endpoint, hub_endpoint) = reach(session, &args, hub).await?;

    let work_ns = cluster_namespace(cluster);
    let hub_place = host.name.clone();
    let mut writes = ops::Writer::new(session, &hub_place, hub, dry_run);
    let (token, ca) = write_hub_side(&mut writes, cluster, &work_ns).await?;
    let object = pull_cluster(&ns, cluster, member_endpoint);
    writes.apply(&clusters, &object).await?;

    let names = JoinNames {
        namespace: ns.clone(),
        service_account: AGENT_SERVICE_ACCOUNT.to_owned(),
    };
    let kubeconfig = agent_kubeconfig(&hub_endpoint, ca.as_deref(), &token, &work_ns);
    // Copies that carry the control plane's identity and have no work are the agent's to
    // delete.
    let control_plane = control_plane_id(hub, &ns).await?;
    let member_side = MemberSide {
        namespace: &ns,
        account: service_account(&names),
        rbac: agent_member_rbac(&names, scope, grant, args.mcs),
        mcs_crds: args.mcs,
        hub_secret: hub_secret(&ns, cluster, &control_plane, &kubeconfig),
    };
    match (args.output, member) {
        (Some(format), _) => {
            let text = ops::render(&member_side.manifests()?, format)?;
            session.print(&text)?;
            if args.mcs {
                // join keeps a CRD another tool installed; a manifest cannot say "only when
                // absent or hubfed's", so it is not printed.
                session.note(format_args!(
                    "the MCS and About CRDs are not printed: apply crds/mcs.yaml and crds/about.yaml of this hubfed release to {cluster} unless another tool installed them (--mcs=false leaves multi-cluster services out)"
                ))?;
            }
        }
        (None, Some(member)) => {
            member_side
                .apply(session, cluster, &member, dry_run)
                .await?;
            let suffix = if dry_run { " (dry run)" } else { "" };
            session.say(format_args!(
                "cluster {cluster:?} joined in pull mode{suffix}: it turns Ready when its agent runs (hub credentials in secret {ns}/{AGENT_HUB_SECRET} of the member)"
            ))?;
        }
        (None, None) => {}
    }
    Ok(EXIT_OK)
}

/// A cluster already joined is updated only with `--error-on-existing=false`, and only when
/// it was joined in pull mode.
fn check_existing(existing: Option<&KubeFedCluster>, args: &JoinArgs, ns: &str) -> Result<()> {
    let cluster = &args.cluster;
    match existing {
        Some(_) if args.error_on_existing => Err(Error::Refused(format!(
            "cluster {cluster:?} is already joined (KubeFedCluster {ns}/{cluster} exists); pass --error-on-existing=false to update it"
        ))),
        Some(c) if c.spec.sync_mode != SyncMode::Pull => Err(Error::Refused(format!(
            "cluster {cluster:?} is joined in push mode; unjoin it first to join it in pull mode"
        ))),
        _ => Ok(()),
    }
}

/// The member (not reached with `-o`: its side is printed then), the member's endpoint for
/// people (from its context, when the kubeconfig has it) and the hub's endpoint for the
/// agent.
async fn reach(
    session: &mut Session<'_>,
    args: &JoinArgs,
    hub: &Target,
) -> Result<(Option<Target>, String, String)> {
    let cluster = args.cluster.as_str();
    let member_context = member_context(cluster, args.cluster_context.as_deref());
    let member = match args.output {
        Some(_) => None,
        None => Some(session.member(cluster, &member_context).await?),
    };
    let member_endpoint = session
        .kubeconfig()?
        .endpoint(&format!("cluster {cluster:?}"), &member_context)
        .map(|e| e.server)
        .unwrap_or_default();
    let hub_endpoint = match &args.hub_endpoint {
        Some(url) => url.clone(),
        None => {
            let context = session.host_context()?;
            session
                .kubeconfig()?
                .endpoint(&hub.subject, &context)?
                .server
        }
    };
    Ok((member, member_endpoint, hub_endpoint))
}

/// The KubeFedCluster of a pull member: no credentials, the endpoint for people only.
fn pull_cluster(ns: &str, cluster: &str, member_endpoint: String) -> KubeFedCluster {
    let mut object = KubeFedCluster::new(
        cluster,
        KubeFedClusterSpec {
            api_endpoint: member_endpoint,
            ca_bundle: None,
            secret_ref: LocalSecretReference::default(),
            disabled_tls_validations: Vec::new(),
            proxy_url: String::new(),
            sync_mode: SyncMode::Pull,
        },
    );
    object.metadata.namespace = Some(ns.to_owned());
    object
}

/// The hub side: work namespace, agent ServiceAccount, Role and RoleBinding on that namespace
/// alone, token Secret. Returns the token and the CA the token controller put beside it.
async fn write_hub_side(
    writes: &mut ops::Writer<'_, '_>,
    cluster: &str,
    work_ns: &str,
) -> Result<(Vec<u8>, Option<Vec<u8>>)> {
    let hub = writes.target;
    let namespaces: Api<Namespace> = Api::all(hub.client.clone());
    wait_namespace_not_terminating(writes.session, hub, &namespaces, work_ns).await?;
    // The agent gets rights in this namespace: never in one that is not this cluster's.
    if let Some(existing) = namespaces.get_opt(work_ns).await.map_err(|e| hub.err(e))?
        && existing
            .labels()
            .get(WORK_CLUSTER_LABEL)
            .map(String::as_str)
            != Some(cluster)
    {
        return Err(Error::Refused(format!(
            "{}: namespace {work_ns} exists and is not {cluster:?}'s work namespace (label {WORK_CLUSTER_LABEL}={cluster} missing); remove or relabel it first",
            hub.subject
        )));
    }
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(work_ns.to_owned()),
            labels: Some(BTreeMap::from([(
                WORK_CLUSTER_LABEL.to_owned(),
                cluster.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    writes.create_if_missing(&namespaces, &namespace).await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(hub.client.clone(), work_ns);
    let names = JoinNames {
        namespace: work_ns.to_owned(),
        service_account: AGENT_SERVICE_ACCOUNT.to_owned(),
    };
    writes.apply(&accounts, &service_account(&names)).await?;
    let (role, binding) = agent_hub_role(work_ns);
    let roles: Api<Role> = Api::namespaced(hub.client.clone(), work_ns);
    let bindings: Api<RoleBinding> = Api::namespaced(hub.client.clone(), work_ns);
    writes.apply(&roles, &role).await?;
    writes.apply(&bindings, &binding).await?;
    let secrets: Api<Secret> = Api::namespaced(hub.client.clone(), work_ns);
    let token_secret =
        service_account_token_secret(work_ns, AGENT_TOKEN_SECRET, AGENT_SERVICE_ACCOUNT);
    writes.apply(&secrets, &token_secret).await?;
    if writes.dry_run {
        return Ok((Vec::new(), None));
    }
    wait_for_token(hub, &secrets, AGENT_TOKEN_SECRET).await
}

/// `unjoin --remove-managed-resources` of a pull member, through its agent (which reaches
/// the member when nothing else does): every work whose agent reported a managed copy becomes
/// the deletion of exactly that copy ([`hubfed_core::pull::removal_request`]); the others go
/// at once. Waits up to `wait` for the agent to carry the deletions out, then deletes the
/// works. Call it after the KubeFedCluster is gone (the controller no longer writes works
/// for the cluster) and before the work namespace is (the agent's hub credentials live
/// there).
pub async fn remove_through_agent(
    session: &mut Session<'_>,
    hub: &Target,
    place: &str,
    cluster: &str,
    wait: std::time::Duration,
    dry_run: bool,
) -> Result<()> {
    use hubfed_api::work::Work;
    use hubfed_core::pull::{removal_done, removal_request};
    use kube::api::{DeleteParams, ListParams, Patch, PatchParams};

    let work_ns = cluster_namespace(cluster);
    let works: Api<Work> = Api::namespaced(hub.client.clone(), &work_ns);
    let listed = match works.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
        Err(e) => return Err(hub.err(e)),
    };
    let mut requested = Vec::new();
    for work in &listed {
        let name = work.name_any();
        match removal_request(work) {
            Some(spec) if !dry_run => {
                let patch = json!({ "spec": spec });
                works
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(|e| hub.err(e))?;
                requested.push(name);
            }
            Some(_) => requested.push(name),
            None => {}
        }
    }
    let what = format!("{} managed copies (through the agent)", requested.len());
    ops::report(session, cluster, &what, "deleted", dry_run)?;
    if dry_run {
        return Ok(());
    }
    let started = std::time::Instant::now();
    let mut left = requested.clone();
    while !left.is_empty() {
        let mut still = Vec::new();
        for name in &left {
            match works.get_opt(name).await.map_err(|e| hub.err(e))? {
                Some(work) if !removal_done(&work) => still.push(name.clone()),
                _ => {}
            }
        }
        left = still;
        if left.is_empty() {
            break;
        }
        if started.elapsed() >= wait {
            return Err(Error::Refused(format!(
                "the agent of {cluster:?} did not remove {} of {} managed copies within {}s (is it running? its KubeFedCluster said whether it was Ready); pass --force to unjoin anyway, leaving them",
                left.len(),
                requested.len(),
                wait.as_secs()
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    for work in &listed {
        match works
            .delete(&work.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(hub.err(e)),
        }
    }
    let _ = place;
    Ok(())
}

/// What an agent may do in the hub: read its cluster's works and write their status, keep
/// its heartbeat Lease, write its multi-cluster services reports (a ServiceExportReport per
/// exported name, its one ClusterReport) and read its ServiceImportWorks and write their
/// status — in its work namespace only. Nothing cluster-wide, nothing in any other namespace,
/// no federated object, no Secret, no other cluster's report.
pub fn agent_hub_role(work_ns: &str) -> (Role, RoleBinding) {
    let rule = |groups: &[&str], resources: &[&str], names: &[&str], verbs: &[&str]| {
        let owned = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        PolicyRule {
            api_groups: Some(owned(groups)),
            resources: Some(owned(resources)),
            resource_names: (!names.is_empty()).then(|| owned(names)),
            verbs: owned(verbs),
            non_resource_urls: None,
        }
    };
    let meta = ObjectMeta {
        name: Some(AGENT_SERVICE_ACCOUNT.to_owned()),
        namespace: Some(work_ns.to_owned()),
        ..ObjectMeta::default()
    };
    let role = Role {
        metadata: meta.clone(),
        rules: Some(vec![
            rule(&[PULL_GROUP], &["works"], &[], &["get", "list", "watch"]),
            rule(
                &[PULL_GROUP],
                &["works/status"],
                &[],
                &["get", "patch", "update"],
            ),
            // `create` cannot be limited to a name; the namespace limits it.
            rule(&["coordination.k8s.io"], &["leases"], &[], &["create"]),
            rule(
                &["coordination.k8s.io"],
                &["leases"],
                &[AGENT_LEASE_NAME],
                &["get", "update", "patch"],
            ),
            // Multi-cluster services: the agent reports its member's exports and the member
            // itself, and carries out the imports the hub delivers.
            rule(
                &[PULL_GROUP],
                &["serviceexportreports"],
                &[],
                &[
                    "get", "list", "watch", "create", "update", "patch", "delete",
                ],
            ),
            // `create` cannot be limited to a name; the namespace limits it.
            rule(&[PULL_GROUP], &["clusterreports"], &[], &["create"]),
            rule(
                &[PULL_GROUP],
                &["clusterreports"],
                &[CLUSTER_REPORT_NAME],
                &["get", "update", "patch", "delete"],
            ),
            rule(&[PULL_GROUP], &["clusterreports"], &[], &["list", "watch"]),
            rule(
                &[PULL_GROUP],
                &["serviceimportworks"],
                &[],
                &["get", "list", "watch"],
            ),
            rule(
                &[PULL_GROUP],
                &["serviceimportworks/status"],
                &[],
                &["get", "patch", "update"],
            ),
        ]),
    };
    let binding = RoleBinding {
        metadata: meta,
        role_ref: RoleRef {
            api_group: Some(RBAC_GROUP.to_owned()),
            kind: "Role".to_owned(),
            name: AGENT_SERVICE_ACCOUNT.to_owned(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name: AGENT_SERVICE_ACCOUNT.to_owned(),
            namespace: Some(work_ns.to_owned()),
            ..Subject::default()
        }]),
    };
    (role, binding)
}

/// The agent's rights in its member: a push join's least-privilege object rights (no node
/// reads: the hub never connects to the member) and, with `--mcs`, what the multi-cluster
/// services controller does in a push member, which the agent does in a pull member.
fn agent_member_rbac(
    names: &JoinNames,
    scope: ResourceScope,
    grant: Grant<'_>,
    mcs: bool,
) -> MemberRbac {
    let rbac = member_rbac(names, scope, grant);
    if mcs {
        with_mcs(rbac, scope, &grant)
    } else {
        rbac
    }
}

/// The agent's kubeconfig for the hub: its token, bound to its work namespace.
pub fn agent_kubeconfig(server: &str, ca: Option<&[u8]>, token: &[u8], work_ns: &str) -> Value {
    use base64::Engine as _;
    let mut cluster = json!({ "server": server });
    if let Some(ca) = ca {
        cluster["certificate-authority-data"] =
            json!(base64::engine::general_purpose::STANDARD.encode(ca));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "hub", "cluster": cluster }],
        "users": [{ "name": AGENT_SERVICE_ACCOUNT, "user": { "token": String::from_utf8_lossy(token) } }],
        "contexts": [{ "name": "hub", "context": { "cluster": "hub", "user": AGENT_SERVICE_ACCOUNT, "namespace": work_ns } }],
        "current-context": "hub",
    })
}

fn hub_secret(ns: &str, cluster: &str, control_plane: &str, kubeconfig: &Value) -> Secret {
    let text = serde_yaml_ng::to_string(kubeconfig).unwrap_or_default();
    Secret {
        metadata: ObjectMeta {
            name: Some(AGENT_HUB_SECRET.to_owned()),
            namespace: Some(ns.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([
            ("kubeconfig".to_owned(), ByteString(text.into_bytes())),
            (
                "cluster".to_owned(),
                ByteString(cluster.as_bytes().to_vec()),
            ),
            (
                "control-plane".to_owned(),
                ByteString(control_plane.as_bytes().to_vec()),
            ),
        ])),
        ..Secret::default()
    }
}

/// The member side of a pull join.
struct MemberSide<'a> {
    namespace: &'a str,
    account: ServiceAccount,
    rbac: MemberRbac,
    /// `--mcs`: the MCS and About CRDs are installed (applied only, never printed).
    mcs_crds: bool,
    hub_secret: Secret,
}

impl MemberSide<'_> {
    /// Every object as a manifest, in the order to apply them.
    fn manifests(&self) -> Result<Vec<Value>> {
        let mut out = vec![
            with_type(
                ops::to_value(&namespace_object(self.namespace))?,
                "v1",
                "Namespace",
            ),
            with_type(ops::to_value(&self.account)?, "v1", "ServiceAccount"),
        ];
        let rbac = format!("{RBAC_GROUP}/v1");
        for (role, binding) in &self.rbac.cluster_roles {
            out.push(with_type(ops::to_value(role)?, &rbac, "ClusterRole"));
            out.push(with_type(
                ops::to_value(binding)?,
                &rbac,
                "ClusterRoleBinding",
            ));
        }
        for (role, binding) in &self.rbac.roles {
            out.push(with_type(ops::to_value(role)?, &rbac, "Role"));
            out.push(with_type(ops::to_value(binding)?, &rbac, "RoleBinding"));
        }
        out.push(with_type(ops::to_value(&self.hub_secret)?, "v1", "Secret"));
        Ok(out)
    }

    async fn apply(
        &self,
        session: &mut Session<'_>,
        place: &str,
        member: &Target,
        dry_run: bool,
    ) -> Result<()> {
        let client = &member.client;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        wait_namespace_not_terminating(session, member, &namespaces, self.namespace).await?;
        let mut writes = ops::Writer::new(session, place, member, dry_run);
        writes
            .create_if_missing(&namespaces, &namespace_object(self.namespace))
            .await?;
        if self.mcs_crds {
            crate::mcs_crds::install(&mut writes).await?;
        }
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), self.namespace);
        writes.apply(&accounts, &self.account).await?;
        write_rbac(&mut writes, self.namespace, &self.rbac).await?;
        let secrets: Api<Secret> = Api::namespaced(client.clone(), self.namespace);
        writes.apply(&secrets, &self.hub_secret).await?;
        Ok(())
    }
}

/// `to_value` of a typed object lacks `apiVersion`/`kind` only when they were never set.
fn with_type(mut value: Value, api_version: &str, kind: &str) -> Value {
    if let Some(object) = value.as_object_mut() {
        object.insert("apiVersion".to_owned(), json!(api_version));
        object.insert("kind".to_owned(), json!(kind));
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rbac::tests::resource;
    use hubfed_api::pull_mcs::{ClusterReport, ServiceExportReport, ServiceImportWork};
    use hubfed_api::work::Work;
    use kube::Resource as _;

    #[test]
    fn the_agent_may_touch_its_own_work_namespace_only() {
        let (role, binding) = agent_hub_role("hubfed-cluster-a");
        assert_eq!(role.metadata.namespace.as_deref(), Some("hubfed-cluster-a"));
        assert_eq!(
            binding.metadata.namespace.as_deref(),
            Some("hubfed-cluster-a")
        );
        let rules = role.rules.unwrap_or_default();
        for rule in &rules {
            let groups = rule.api_groups.clone().unwrap_or_default();
            let resources = rule.resources.clone().unwrap_or_default();
            assert!(!groups.iter().any(|g| g == "*" || g.is_empty()), "{rule:?}");
            assert!(
                !resources.iter().any(|r| r == "*" || r == "secrets"),
                "{rule:?}"
            );
            assert!(!rule.verbs.iter().any(|v| v == "*"), "{rule:?}");
            for verb in ["deletecollection", "escalate", "bind", "impersonate"] {
                assert!(!rule.verbs.iter().any(|v| v == verb), "{rule:?}");
            }
            // The only deletes: its own reports, and of ClusterReports only its one.
            if rule.verbs.iter().any(|v| v == "delete") {
                let names = rule.resource_names.as_deref();
                let own = resources == ["serviceexportreports"]
                    || (resources == ["clusterreports"]
                        && names == Some(&[CLUSTER_REPORT_NAME.to_owned()][..]));
                assert!(own, "{rule:?}");
            }
            // Works and import works are read, never written; only their status is.
            if resources == ["works"] || resources == ["serviceimportworks"] {
                assert_eq!(rule.verbs, ["get", "list", "watch"]);
            }
        }
        // Every resource named is one of the pull kinds (or the Lease), spelt as they are.
        let plurals = [
            Work::plural(&()).into_owned(),
            format!("{}/status", Work::plural(&())),
            ServiceExportReport::plural(&()).into_owned(),
            ClusterReport::plural(&()).into_owned(),
            ServiceImportWork::plural(&()).into_owned(),
            format!("{}/status", ServiceImportWork::plural(&())),
        ];
        for rule in &rules {
            let groups = rule.api_groups.clone().unwrap_or_default();
            for resource in rule.resources.iter().flatten() {
                if groups == [PULL_GROUP] {
                    assert!(plurals.contains(resource), "{rule:?}");
                } else {
                    assert_eq!(groups, ["coordination.k8s.io"], "{rule:?}");
                    assert_eq!(resource, "leases", "{rule:?}");
                }
            }
        }
        let verbs_on = |resource: &str, names: Option<&[&str]>| {
            let mut verbs: Vec<String> = rules
                .iter()
                .filter(|r| r.resources.as_deref() == Some(&[resource.to_owned()][..]))
                .filter(|r| {
                    r.resource_names.as_deref().map(|n| n.to_vec())
                        == names.map(|n| n.iter().map(|s| (*s).to_owned()).collect())
                })
                .flat_map(|r| r.verbs.clone())
                .collect();
            verbs.sort();
            verbs
        };
        assert_eq!(
            verbs_on("serviceexportreports", None),
            [
                "create", "delete", "get", "list", "patch", "update", "watch"
            ]
        );
        assert_eq!(
            verbs_on("clusterreports", None),
            ["create", "list", "watch"]
        );
        assert_eq!(
            verbs_on("clusterreports", Some(&[CLUSTER_REPORT_NAME])),
            ["delete", "get", "patch", "update"]
        );
        assert_eq!(
            verbs_on("serviceimportworks", None),
            ["get", "list", "watch"]
        );
        assert_eq!(
            verbs_on("serviceimportworks/status", None),
            ["get", "patch", "update"]
        );
        let lease_updates = rules
            .iter()
            .find(|r| {
                r.verbs.contains(&"update".to_owned())
                    && r.resources.as_deref() == Some(&["leases".to_owned()][..])
            })
            .map(|r| r.resource_names.clone());
        assert_eq!(lease_updates, Some(Some(vec![AGENT_LEASE_NAME.to_owned()])));
    }

    /// With `--mcs` the member side, applied or printed, carries the multi-cluster services
    /// rights; without it, or for a namespaced control plane, it does not.
    #[test]
    fn the_member_side_carries_the_mcs_rights_with_mcs() {
        let names = JoinNames {
            namespace: "kube-federation-system".to_owned(),
            service_account: AGENT_SERVICE_ACCOUNT.to_owned(),
        };
        let types = [resource("", "configmaps", ResourceScope::Namespaced)];
        let printed = |scope, mcs| {
            let side = MemberSide {
                namespace: "kube-federation-system",
                account: service_account(&names),
                rbac: agent_member_rbac(&names, scope, Grant::Types(&types), mcs),
                mcs_crds: mcs,
                hub_secret: Secret::default(),
            };
            let manifests = side.manifests().expect("manifests");
            assert!(
                !manifests
                    .iter()
                    .any(|m| m["kind"] == "CustomResourceDefinition"),
                "the CRDs are not printed"
            );
            serde_json::to_string(&manifests).expect("json")
        };
        let with = printed(ResourceScope::Cluster, true);
        for part in [
            "serviceexports/status",
            "serviceimports",
            "endpointslices",
            "clusterproperties",
            "events",
        ] {
            assert!(with.contains(part), "{part} missing: {with}");
        }
        assert!(!with.contains("nodes"), "the agent reads no nodes: {with}");
        let without = printed(ResourceScope::Cluster, false);
        assert!(!without.contains("serviceimports"), "{without}");
        let namespaced = printed(ResourceScope::Namespaced, true);
        assert!(!namespaced.contains("serviceimports"), "{namespaced}");
    }

    #[test]
    fn the_agent_kubeconfig_is_bound_to_its_namespace() {
        let config = agent_kubeconfig("https://hub:6443", Some(b"PEM"), b"tok", "hubfed-cluster-a");
        assert_eq!(
            config["contexts"][0]["context"]["namespace"],
            "hubfed-cluster-a"
        );
        assert_eq!(config["users"][0]["user"]["token"], "tok");
        assert_eq!(
            config["clusters"][0]["cluster"]["server"],
            "https://hub:6443"
        );
        assert_eq!(
            config["clusters"][0]["cluster"]["certificate-authority-data"],
            "UEVN"
        );
        let parsed: kube::config::Kubeconfig =
            serde_json::from_value(config).expect("a kubeconfig kube can read");
        assert_eq!(parsed.current_context.as_deref(), Some("hub"));
    }
}
