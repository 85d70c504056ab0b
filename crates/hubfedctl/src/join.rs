//! `join CLUSTER` (docs/kubefed-compatibility.md §3): in the member, the kubefed namespace, a
//! ServiceAccount, its token Secret and RBAC; in the hub, a Secret with the token and the
//! KubeFedCluster. Then waits for the cluster to be `Ready`.

use std::collections::BTreeMap;
use std::time::Duration;

use hubfed_api::federatedtypeconfig::{ApiResource, ResourceScope};
use hubfed_api::kubefedcluster::{
    ClusterConditionType, KubeFedCluster, KubeFedClusterSpec, LocalSecretReference, SyncMode,
    TlsValidation,
};
use hubfed_api::names::CLUSTER_SECRET_TOKEN_KEY;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

use crate::cli::JoinArgs;
use crate::control_plane::{control_plane_scope, ensure_kubefed_installed, federated_targets};
use crate::error::{EXIT_NOT_READY, EXIT_OK, Error, Result};
use crate::kubeconfig::{ClusterEndpoint, Target};
use crate::ops::{self, FIELD_MANAGER};
use crate::rbac::{
    Grant, JoinNames, MemberRbac, member_rbac, service_account, with_mcs, with_node_reads,
};
use crate::session::Session;

/// Secret type the token controller fills with a token for the annotated ServiceAccount.
const SERVICE_ACCOUNT_TOKEN_TYPE: &str = "kubernetes.io/service-account-token";
const SERVICE_ACCOUNT_NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";
/// How long the member's token controller gets to fill the Secret (kubefedctl: 30s).
const TOKEN_WAIT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(250);
/// How long a terminating kubefed namespace gets to go away before join gives up.
const NAMESPACE_WAIT: Duration = Duration::from_secs(60);

/// Names of the hub and how to reach it, shared by join and unjoin.
pub struct HostCluster {
    pub target: Target,
    /// `--host-cluster-name`, else the host context's name.
    pub name: String,
}

/// The hub client and the hub's name, checked the way kubefedctl checks it.
pub async fn host_cluster(
    session: &mut Session<'_>,
    explicit: Option<&str>,
) -> Result<HostCluster> {
    let context = session.host_context()?;
    let name = match explicit {
        Some(name) => name.to_owned(),
        None if context.contains([':', '/']) => {
            return Err(Error::Usage(format!(
                "the host context name {context:?} contains ':' or '/', which object names cannot; name the hub with --host-cluster-name"
            )));
        }
        None => context,
    };
    let target = session.hub().await?;
    Ok(HostCluster { target, name })
}

/// The kubeconfig context of the member `cluster`: `--cluster-context`, else its name.
pub fn member_context(cluster: &str, explicit: Option<&str>) -> String {
    explicit.unwrap_or(cluster).to_owned()
}

/// A DNS-1123 subdomain (object names), as the API server checks it.
pub fn check_dns_subdomain(what: &str, name: &str) -> Result<()> {
    if hubfed_core::validation::is_dns1123_subdomain(name).is_empty() {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "{what} {name:?} is not a valid name: use lowercase letters, digits, '-' and '.'"
        )))
    }
}

/// `hubfedctl join CLUSTER` with `--mode push` (the default; `lib.rs` hands `--mode pull` to
/// [`crate::pull::join_pull`]).
pub async fn join(session: &mut Session<'_>, args: JoinArgs) -> Result<i32> {
    check_dns_subdomain("cluster name", &args.cluster)?;
    if args.output.is_some() {
        return Err(Error::Usage("--output is for --mode pull".to_owned()));
    }
    if args.hub_endpoint.is_some() {
        return Err(Error::Usage("--hub-endpoint is for --mode pull".to_owned()));
    }
    let join = PushJoin::prepare(session, &args).await?;
    let (token, secret_ca) = join.write_member_side(session).await?;
    join.write_hub_side(session, token, secret_ca).await?;
    let cluster = args.cluster.as_str();
    if args.dry_run {
        session.say(format_args!(
            "cluster {cluster:?} would be joined (dry run)"
        ))?;
        return Ok(EXIT_OK);
    }
    if args.wait.is_zero() {
        session.say(format_args!(
            "cluster {cluster:?} joined (not waiting for it to be Ready: --wait=0)"
        ))?;
        return Ok(EXIT_OK);
    }
    let hub_clusters: Api<KubeFedCluster> =
        Api::namespaced(join.hub.target.client.clone(), &join.ns);
    wait_until_ready(session, &join.hub.target, &hub_clusters, cluster, args.wait).await
}

/// Everything a push join needs, read and checked before anything is written.
struct PushJoin {
    cluster: String,
    ns: String,
    dry_run: bool,
    hub: HostCluster,
    member: Target,
    names: JoinNames,
    endpoint: ClusterEndpoint,
    scope: ResourceScope,
    /// The target types to grant rights on; `None`: `--cluster-admin`.
    targets: Option<Vec<ApiResource>>,
    existing_cluster: Option<KubeFedCluster>,
    secret_name: Option<String>,
    /// `--mcs`: the MCS CRDs installed in the member, and the MCS controller's rights.
    mcs: bool,
}

impl PushJoin {
    /// Preflight: nothing is written unless the cluster can be joined as asked.
    async fn prepare(session: &mut Session<'_>, args: &JoinArgs) -> Result<Self> {
        let cluster = args.cluster.as_str();
        let member_context = member_context(cluster, args.cluster_context.as_deref());
        let ns = session.kubefed_namespace().to_owned();
        let hub = host_cluster(session, args.host_cluster_name.as_deref()).await?;
        let names = JoinNames::new(&ns, cluster, &hub.name);
        check_dns_subdomain("service account name", &names.service_account)?;
        let member_subject = format!("cluster {cluster:?}");
        let endpoint = session
            .kubeconfig()?
            .endpoint(&member_subject, &member_context)?;
        let member = session.member(cluster, &member_context).await?;
        let target = &hub.target;
        ensure_kubefed_installed(target, &ns).await?;
        let scope = control_plane_scope(target, &ns).await?;
        let targets = if args.cluster_admin {
            None
        } else {
            Some(federated_targets(target, &ns).await?)
        };
        let accounts: Api<ServiceAccount> = Api::namespaced(member.client.clone(), &ns);
        let existing_account = accounts
            .get_opt(&names.service_account)
            .await
            .map_err(|e| member.err(e))?;
        let hub_clusters: Api<KubeFedCluster> = Api::namespaced(target.client.clone(), &ns);
        let existing_cluster = hub_clusters
            .get_opt(cluster)
            .await
            .map_err(|e| target.err(e))?;
        if existing_cluster
            .as_ref()
            .is_some_and(|c| c.spec.sync_mode == SyncMode::Pull)
        {
            return Err(Error::Refused(format!(
                "cluster {cluster:?} is joined in pull mode; re-run join with --mode pull, or unjoin it first to join it in push mode"
            )));
        }
        if args.error_on_existing {
            if existing_cluster.is_some() {
                return Err(Error::Refused(format!(
                    "cluster {cluster:?} is already joined (KubeFedCluster {ns}/{cluster} exists); pass --error-on-existing=false to update it"
                )));
            }
            if existing_account.is_some() {
                return Err(Error::Refused(format!(
                    "{member_subject}: service account {ns}/{} already exists; pass --error-on-existing=false to reuse it",
                    names.service_account
                )));
            }
        }
        if targets.as_ref().is_some_and(Vec::is_empty) {
            session.warn(format_args!(
                "the hub has no FederatedTypeConfigs in {ns}: hubfed gets no object rights in {cluster}; enable types, then re-run join with --error-on-existing=false"
            ))?;
        }
        Ok(Self {
            cluster: cluster.to_owned(),
            ns,
            dry_run: args.dry_run,
            hub,
            member,
            names,
            endpoint,
            scope,
            targets,
            existing_cluster,
            secret_name: args.secret_name.clone(),
            mcs: args.mcs,
        })
    }

    fn grant(&self) -> Grant<'_> {
        match &self.targets {
            None => Grant::ClusterAdmin,
            Some(targets) => Grant::Types(targets),
        }
    }

    /// The kubefed namespace, the ServiceAccount, its token Secret and the RBAC in the
    /// member; returns the token and the CA the token controller put beside it.
    async fn write_member_side(
        &self,
        session: &mut Session<'_>,
    ) -> Result<(Vec<u8>, Option<Vec<u8>>)> {
        let (member, ns) = (&self.member, &self.ns);
        let namespaces: Api<Namespace> = Api::all(member.client.clone());
        wait_namespace_not_terminating(session, member, &namespaces, ns).await?;
        let mut writes = ops::Writer::new(session, &self.cluster, member, self.dry_run);
        writes
            .create_if_missing(&namespaces, &namespace_object(ns))
            .await?;
        if self.mcs {
            crate::mcs_crds::install(&mut writes).await?;
        }
        let accounts: Api<ServiceAccount> = Api::namespaced(member.client.clone(), ns);
        writes
            .apply(&accounts, &service_account(&self.names))
            .await?;
        let secrets: Api<Secret> = Api::namespaced(member.client.clone(), ns);
        let account = &self.names.service_account;
        let token_secret = service_account_token_secret(ns, account, account);
        writes.apply(&secrets, &token_secret).await?;
        let mut rbac = with_node_reads(
            member_rbac(&self.names, self.scope, self.grant()),
            &self.grant(),
        );
        if self.mcs {
            rbac = with_mcs(rbac, self.scope, &self.grant());
        }
        write_rbac(&mut writes, ns, &rbac).await?;
        if self.dry_run {
            return Ok((Vec::new(), None));
        }
        wait_for_token(member, &secrets, &self.names.service_account).await
    }

    /// The kubefed namespace, the token Secret and the KubeFedCluster in the hub.
    async fn write_hub_side(
        &self,
        session: &mut Session<'_>,
        token: Vec<u8>,
        secret_ca: Option<Vec<u8>>,
    ) -> Result<()> {
        let (hub, ns) = (&self.hub.target, &self.ns);
        let mut writes = ops::Writer::new(session, &self.hub.name, hub, self.dry_run);
        let hub_namespaces: Api<Namespace> = Api::all(hub.client.clone());
        writes
            .create_if_missing(&hub_namespaces, &namespace_object(ns))
            .await?;
        let secret_name = self
            .existing_cluster
            .as_ref()
            .map(|c| c.spec.secret_ref.name.clone())
            .filter(|name| !name.is_empty())
            .or(self.secret_name.clone());
        let hub_secrets: Api<Secret> = Api::namespaced(hub.client.clone(), ns);
        let secret_name =
            write_hub_secret(&mut writes, &hub_secrets, &self.cluster, secret_name, token).await?;
        let endpoint = &self.endpoint;
        let ca_bundle = endpoint.ca_pem.clone().or(secret_ca);
        let mut object = KubeFedCluster::new(
            &self.cluster,
            KubeFedClusterSpec {
                api_endpoint: endpoint.server.clone(),
                ca_bundle: ca_bundle.map(ByteString),
                secret_ref: LocalSecretReference { name: secret_name },
                disabled_tls_validations: if endpoint.insecure_skip_tls_verify {
                    vec![TlsValidation::All]
                } else {
                    Vec::new()
                },
                proxy_url: endpoint.proxy_url.clone().unwrap_or_default(),
                sync_mode: SyncMode::Push,
            },
        );
        object.metadata.namespace = Some(ns.clone());
        let hub_clusters: Api<KubeFedCluster> = Api::namespaced(hub.client.clone(), ns);
        writes.apply(&hub_clusters, &object).await?;
        Ok(())
    }
}

/// The namespace `name`, as join creates it.
pub(crate) fn namespace_object(name: &str) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

/// Applies the member's roles and bindings, cluster-wide ones first, each role before its
/// binding; namespaced ones in `ns`.
pub(crate) async fn write_rbac(
    writes: &mut ops::Writer<'_, '_>,
    ns: &str,
    rbac: &MemberRbac,
) -> Result<()> {
    let client = &writes.target.client;
    for (role, binding) in &rbac.cluster_roles {
        let roles: Api<ClusterRole> = Api::all(client.clone());
        let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
        writes.apply(&roles, role).await?;
        writes.apply(&bindings, binding).await?;
    }
    for (role, binding) in &rbac.roles {
        let roles: Api<Role> = Api::namespaced(client.clone(), ns);
        let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), ns);
        writes.apply(&roles, role).await?;
        writes.apply(&bindings, binding).await?;
    }
    Ok(())
}

/// A Secret `name` the token controller fills with a token of ServiceAccount `account`.
pub(crate) fn service_account_token_secret(ns: &str, name: &str, account: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            annotations: Some(BTreeMap::from([(
                SERVICE_ACCOUNT_NAME_ANNOTATION.to_owned(),
                account.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some(SERVICE_ACCOUNT_TOKEN_TYPE.to_owned()),
        ..Secret::default()
    }
}

/// A namespace being deleted (e.g. by an unjoin a moment ago) accepts no new objects: wait
/// until it is gone.
pub(crate) async fn wait_namespace_not_terminating(
    session: &mut Session<'_>,
    member: &Target,
    namespaces: &Api<Namespace>,
    name: &str,
) -> Result<()> {
    let terminating = |ns: &Option<Namespace>| {
        ns.as_ref()
            .is_some_and(|ns| ns.metadata.deletion_timestamp.is_some())
    };
    if !terminating(&namespaces.get_opt(name).await.map_err(|e| member.err(e))?) {
        return Ok(());
    }
    session.note(format_args!(
        "{}: namespace {name} is being deleted; waiting until it is gone",
        member.subject
    ))?;
    let gone = ops::poll(NAMESPACE_WAIT, POLL, async || {
        let current = namespaces.get_opt(name).await.map_err(|e| member.err(e))?;
        Ok((!terminating(&current)).then_some(()))
    })
    .await?;
    gone.ok_or_else(|| {
        Error::Timeout(format!(
            "{}: namespace {name} is still being deleted after {}s",
            member.subject,
            NAMESPACE_WAIT.as_secs()
        ))
    })
}

/// Waits for the token controller to fill the Secret; returns the token and `ca.crt`.
pub(crate) async fn wait_for_token(
    member: &Target,
    secrets: &Api<Secret>,
    name: &str,
) -> Result<(Vec<u8>, Option<Vec<u8>>)> {
    let filled = ops::poll(TOKEN_WAIT, POLL, async || {
        let secret = secrets.get_opt(name).await.map_err(|e| member.err(e))?;
        let data = secret.and_then(|s| s.data).unwrap_or_default();
        Ok(data
            .get(CLUSTER_SECRET_TOKEN_KEY)
            .filter(|token| !token.0.is_empty())
            .map(|token| (token.0.clone(), data.get("ca.crt").map(|ca| ca.0.clone()))))
    })
    .await?;
    filled.ok_or_else(|| {
        Error::Timeout(format!(
            "{}: the token controller did not fill secret {name} within {}s; is kube-controller-manager running there?",
            member.subject,
            TOKEN_WAIT.as_secs()
        ))
    })
}

/// Creates or updates the hub Secret holding the member token; returns its name. Without a
/// name, the API server generates one (`<cluster>-xxxxx`), as kubefedctl does.
async fn write_hub_secret(
    writes: &mut ops::Writer<'_, '_>,
    secrets: &Api<Secret>,
    cluster: &str,
    name: Option<String>,
    token: Vec<u8>,
) -> Result<String> {
    let namespace = secrets_namespace(secrets);
    let data = Some(BTreeMap::from([(
        CLUSTER_SECRET_TOKEN_KEY.to_owned(),
        ByteString(token),
    )]));
    if let Some(name) = name {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace),
                ..ObjectMeta::default()
            },
            data,
            ..Secret::default()
        };
        writes.apply(secrets, &secret).await?;
        return Ok(name);
    }
    let generate_name = format!("{cluster}-");
    if writes.dry_run {
        let name = format!("{generate_name}xxxxx");
        writes.report(&format!("secret {namespace}/{name}"), "created")?;
        return Ok(name);
    }
    let secret = Secret {
        metadata: ObjectMeta {
            generate_name: Some(generate_name),
            namespace: Some(namespace.clone()),
            ..ObjectMeta::default()
        },
        data,
        ..Secret::default()
    };
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    let created = secrets
        .create(&params, &secret)
        .await
        .map_err(|e| writes.target.err(e))?;
    let name = created.metadata.name.unwrap_or_default();
    writes.report(&format!("secret {namespace}/{name}"), "created")?;
    Ok(name)
}

fn secrets_namespace(secrets: &Api<Secret>) -> String {
    secrets.namespace().unwrap_or_default().to_owned()
}

async fn wait_until_ready(
    session: &mut Session<'_>,
    hub: &Target,
    clusters: &Api<KubeFedCluster>,
    cluster: &str,
    wait: Duration,
) -> Result<i32> {
    let mut last: Option<KubeFedCluster> = None;
    let ready = ops::poll(wait, Duration::from_millis(500), async || {
        let current = clusters.get_opt(cluster).await.map_err(|e| hub.err(e))?;
        let ready = current.as_ref().is_some_and(KubeFedCluster::is_ready);
        last.clone_from(&current);
        Ok(current.filter(|_| ready))
    })
    .await?;
    if let Some(ready) = ready {
        let version = ready
            .status
            .and_then(|s| s.kubernetes_version)
            .map(|v| format!(" (Kubernetes {v})"))
            .unwrap_or_default();
        session.say(format_args!(
            "cluster {cluster:?} joined and Ready{version}"
        ))?;
        return Ok(EXIT_OK);
    }
    let why = not_ready_reason(last.as_ref());
    session.say(format_args!("cluster {cluster:?} joined"))?;
    session.warn(format_args!(
        "cluster {cluster:?} is not Ready after {}s: {why}",
        wait.as_secs()
    ))?;
    Ok(EXIT_NOT_READY)
}

/// Why a KubeFedCluster is not ready, from its conditions.
pub fn not_ready_reason(cluster: Option<&KubeFedCluster>) -> String {
    let conditions = cluster
        .and_then(|c| c.status.as_ref())
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    if conditions.is_empty() {
        return "no health report yet; is hubfed-controller running against this hub?".to_owned();
    }
    let shown: Vec<String> = conditions
        .iter()
        .filter(|c| c.status == "True" || c.type_ == ClusterConditionType::Ready.as_str())
        .map(|c| {
            let message = c.message.as_deref().unwrap_or_default();
            format!("{}={} {message}", c.type_, c.status)
                .trim_end()
                .to_owned()
        })
        .collect();
    shown.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use hubfed_api::kubefedcluster::{ClusterCondition, KubeFedClusterStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn dns_subdomains_are_checked() {
        for good in ["member1", "a.b-c", "x"] {
            assert!(check_dns_subdomain("n", good).is_ok(), "{good}");
        }
        for bad in ["", "Member1", "a_b", "-a", "a-", "a..b", "ctx:hub"] {
            assert!(check_dns_subdomain("n", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn not_ready_reasons_name_the_condition() {
        assert!(not_ready_reason(None).contains("is hubfed-controller running"));
        let mut cluster = KubeFedCluster::new(
            "m",
            KubeFedClusterSpec {
                api_endpoint: String::new(),
                ca_bundle: None,
                secret_ref: LocalSecretReference::default(),
                disabled_tls_validations: Vec::new(),
                proxy_url: String::new(),
                sync_mode: SyncMode::Push,
            },
        );
        cluster.status = Some(KubeFedClusterStatus {
            conditions: vec![ClusterCondition {
                type_: "Offline".into(),
                status: "True".into(),
                last_probe_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
                last_transition_time: None,
                reason: Some("ClusterNotReachable".into()),
                message: Some("cluster is not reachable: refused".into()),
            }],
            ..KubeFedClusterStatus::default()
        });
        assert_eq!(
            not_ready_reason(Some(&cluster)),
            "Offline=True cluster is not reachable: refused"
        );
    }
}
