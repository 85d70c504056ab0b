//! `migrate least-privilege CLUSTER`: a push member's join grant narrowed in place.
//!
//! The grant becomes the one `join` gives (`rbac.rs`) while hubfed keeps working. The
//! ServiceAccount, its token and everything in the hub stay as they are: the hub's
//! KubeFedCluster and Secret are read, never written, so the controller keeps its member
//! clients. Only the roles and bindings with join's names change (decided in `plan.rs`),
//! each role in one write, so the account goes from its old rules straight to join's.
//! Before writing, a TokenReview in the member checks that the token the hub holds is that
//! ServiceAccount's: narrowing any other account would leave hubfed's grant as it was.

mod plan;

use hubfed_api::federatedtypeconfig::{ApiResource, ResourceScope};
use hubfed_api::kubefedcluster::{KubeFedCluster, SyncMode};
use hubfed_api::names::CLUSTER_SECRET_TOKEN_KEY;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, ListParams, PostParams};

use crate::cli::LeastPrivilegeArgs;
use crate::control_plane::{control_plane_scope, ensure_kubefed_installed, federated_targets};
use crate::error::{EXIT_OK, Error, Result};
use crate::join::{HostCluster, check_dns_subdomain, host_cluster, member_context};
use crate::kubeconfig::Target;
use crate::ops;
use crate::rbac::{Grant, JoinNames, member_rbac, with_mcs, with_node_reads};
use crate::session::Session;

use plan::{GrantPlan, LiveRbac, RbacObject, Step, plan_grant};

/// `hubfedctl migrate least-privilege CLUSTER`.
pub async fn least_privilege(session: &mut Session<'_>, args: LeastPrivilegeArgs) -> Result<i32> {
    check_dns_subdomain("cluster name", &args.cluster)?;
    let swap = GrantSwap::prepare(session, &args).await?;
    swap.check_hub_token().await?;
    let live = swap.read_live().await?;
    let grant = Grant::Types(&swap.targets);
    let mut desired = with_node_reads(member_rbac(&swap.names, swap.scope, grant), &grant);
    if args.mcs {
        desired = with_mcs(desired, swap.scope, &grant);
    }
    let plan = plan_grant(&swap.names, &desired, &live)
        .map_err(|reason| Error::Refused(format!("{}: {reason}", swap.member.subject)))?;
    swap.carry_out(session, &plan).await?;
    swap.summarise(session, &plan)?;
    Ok(EXIT_OK)
}

/// Everything the swap needs, read and checked before anything is written.
struct GrantSwap {
    cluster: String,
    dry_run: bool,
    hub: HostCluster,
    member: Target,
    names: JoinNames,
    scope: ResourceScope,
    targets: Vec<ApiResource>,
    /// The hub Secret holding the token hubfed reaches the member with.
    secret_name: String,
}

impl GrantSwap {
    async fn prepare(session: &mut Session<'_>, args: &LeastPrivilegeArgs) -> Result<Self> {
        let cluster = args.cluster.as_str();
        let context = member_context(cluster, args.cluster_context.as_deref());
        let ns = session.kubefed_namespace().to_owned();
        let hub = host_cluster(session, args.host_cluster_name.as_deref()).await?;
        let names = JoinNames::new(&ns, cluster, &hub.name);
        check_dns_subdomain("service account name", &names.service_account)?;
        let member = session.member(cluster, &context).await?;
        let target = &hub.target;
        ensure_kubefed_installed(target, &ns).await?;
        let clusters: Api<KubeFedCluster> = Api::namespaced(target.client.clone(), &ns);
        let registered = clusters.get_opt(cluster).await.map_err(|e| target.err(e))?;
        let Some(registered) = registered else {
            return Err(Error::Refused(format!(
                "cluster {cluster:?} is not joined (no KubeFedCluster {ns}/{cluster} in the hub)"
            )));
        };
        if registered.spec.sync_mode == SyncMode::Pull {
            return Err(Error::Refused(format!(
                "cluster {cluster:?} is joined in pull mode: the hub holds no credentials to it, and its agent's grant is join --mode pull's"
            )));
        }
        let scope = control_plane_scope(target, &ns).await?;
        let targets = federated_targets(target, &ns).await?;
        if targets.is_empty() {
            return Err(Error::Refused(format!(
                "the hub has no FederatedTypeConfigs in {ns}: the least-privilege grant would give hubfed no object rights in {cluster}; enable types first"
            )));
        }
        Ok(Self {
            cluster: cluster.to_owned(),
            dry_run: args.dry_run,
            hub,
            member,
            names,
            scope,
            targets,
            secret_name: registered.spec.secret_ref.name,
        })
    }

    /// Fails unless the member takes the hub's token as the join's ServiceAccount.
    async fn check_hub_token(&self) -> Result<()> {
        let (hub, ns) = (&self.hub.target, &self.names.namespace);
        let secrets: Api<Secret> = Api::namespaced(hub.client.clone(), ns);
        let secret = secrets
            .get_opt(&self.secret_name)
            .await
            .map_err(|e| hub.err(e))?;
        let token = secret
            .and_then(|s| s.data)
            .and_then(|mut data| data.remove(CLUSTER_SECRET_TOKEN_KEY))
            .and_then(|token| String::from_utf8(token.0).ok())
            .filter(|token| !token.is_empty());
        let Some(token) = token else {
            return Err(Error::Refused(format!(
                "{}: secret {ns}/{} holds no token for cluster {:?}",
                hub.subject, self.secret_name, self.cluster
            )));
        };
        let review = TokenReview {
            spec: TokenReviewSpec {
                token,
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let member = &self.member;
        let reviews: Api<TokenReview> = Api::all(member.client.clone());
        let status = reviews
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| member.err(e))?
            .status
            .unwrap_or_default();
        let account = format!("system:serviceaccount:{ns}:{}", self.names.service_account);
        let user = status.user.and_then(|u| u.username).unwrap_or_default();
        match status.authenticated {
            Some(true) if user == account => Ok(()),
            Some(true) => Err(Error::Refused(format!(
                "{}: the hub's token (secret {ns}/{}) is {user:?}'s, not ServiceAccount {ns}/{}'s that join names for hub {:?}; pass --host-cluster-name as at join",
                member.subject, self.secret_name, self.names.service_account, self.hub.name
            ))),
            _ => Err(Error::Refused(format!(
                "{}: the member does not accept the hub's token (secret {ns}/{}): {}",
                member.subject,
                self.secret_name,
                status
                    .error
                    .unwrap_or_else(|| "not authenticated".to_owned())
            ))),
        }
    }

    /// The roles with join's names and every binding of the member.
    async fn read_live(&self) -> Result<LiveRbac> {
        let (member, client) = (&self.member, &self.member.client);
        let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
        let mut live = LiveRbac::default();
        for name in [self.names.role(), self.names.health_role()] {
            let role = cluster_roles.get_opt(&name).await;
            live.cluster_roles.extend(role.map_err(|e| member.err(e))?);
        }
        let roles: Api<Role> = Api::namespaced(client.clone(), &self.names.namespace);
        let role = roles.get_opt(&self.names.role()).await;
        live.roles.extend(role.map_err(|e| member.err(e))?);
        let all = ListParams::default();
        let cluster_bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
        let list = cluster_bindings.list(&all).await;
        live.cluster_role_bindings = list.map_err(|e| member.err(e))?.items;
        let bindings: Api<RoleBinding> = Api::all(client.clone());
        let list = bindings.list(&all).await;
        live.role_bindings = list.map_err(|e| member.err(e))?.items;
        Ok(live)
    }

    /// The plan's steps, each reported on one line.
    async fn carry_out(&self, session: &mut Session<'_>, plan: &GrantPlan) -> Result<()> {
        let mut writes = ops::Writer::new(session, &self.cluster, &self.member, self.dry_run);
        for step in &plan.steps {
            match step {
                Step::Unchanged(object) => writes.report(&object.describe(), "unchanged")?,
                Step::Apply(object) => apply(&mut writes, object).await?,
                Step::Delete(object) => delete(&mut writes, object).await?,
            }
        }
        Ok(())
    }

    /// The closing line, and a warning per binding join did not write.
    fn summarise(&self, session: &mut Session<'_>, plan: &GrantPlan) -> Result<()> {
        let account = format!(
            "ServiceAccount {}/{}",
            self.names.namespace, self.names.service_account
        );
        for binding in &plan.other_bindings {
            session.warn(format_args!(
                "{}: {binding} also grants {account} rights and is left as it is (join did not write it); delete it for least privilege",
                self.member.subject
            ))?;
        }
        let changes = plan.changes();
        let cluster = &self.cluster;
        if self.dry_run {
            session.say(format_args!(
                "cluster {cluster:?}: {changes} object(s) would change for {account} to hold hubfed's least-privilege grant (dry run)"
            ))
        } else if changes == 0 {
            session.say(format_args!(
                "cluster {cluster:?}: {account} holds hubfed's least-privilege grant; nothing changed"
            ))
        } else {
            session.say(format_args!(
                "cluster {cluster:?}: {account} holds hubfed's least-privilege grant now ({changes} object(s) changed; its token and the hub's KubeFedCluster unchanged)"
            ))
        }
    }
}

/// Server-side applies `object` (reported by the writer).
async fn apply(writes: &mut ops::Writer<'_, '_>, object: &RbacObject) -> Result<()> {
    let client = writes.target.client.clone();
    match object {
        RbacObject::ClusterRole(o) => writes.apply(&Api::all(client), o).await.map(drop),
        RbacObject::ClusterRoleBinding(o) => writes.apply(&Api::all(client), o).await.map(drop),
        RbacObject::Role(o) => writes.apply(&namespaced(client, o), o).await.map(drop),
        RbacObject::RoleBinding(o) => writes.apply(&namespaced(client, o), o).await.map(drop),
    }
}

/// Deletes `object` (reported by the writer; nothing when it is gone already).
async fn delete(writes: &mut ops::Writer<'_, '_>, object: &RbacObject) -> Result<()> {
    let client = writes.target.client.clone();
    let name = object.name();
    match object {
        RbacObject::ClusterRole(_) => {
            let api: Api<ClusterRole> = Api::all(client);
            writes.delete(&api, name).await.map(drop)
        }
        RbacObject::ClusterRoleBinding(_) => {
            let api: Api<ClusterRoleBinding> = Api::all(client);
            writes.delete(&api, name).await.map(drop)
        }
        RbacObject::Role(o) => writes.delete(&namespaced(client, o), name).await.map(drop),
        RbacObject::RoleBinding(o) => writes.delete(&namespaced(client, o), name).await.map(drop),
    }
}

/// The API of a namespaced object's kind in its namespace.
fn namespaced<K>(client: kube::Client, object: &K) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    Api::namespaced(
        client,
        object.meta().namespace.as_deref().unwrap_or_default(),
    )
}
