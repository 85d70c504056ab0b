//! The command line (clap derive). Flag names and defaults follow kubefedctl
//! (docs/kubefed-compatibility.md §3) where it has the flag.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
use hubfed_api::names::{DEFAULT_KUBEFED_NAMESPACE, TYPES_GROUP, TYPES_VERSION};

#[derive(Parser, Debug)]
#[command(
    name = "hubfedctl",
    version,
    about = "Manage a hubfed (KubeFed v1beta1-compatible) federation: join clusters, enable types, federate objects"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every command accepts.
#[derive(Args, Debug, Clone)]
pub struct GlobalArgs {
    /// Kubeconfig file; default: $KUBECONFIG (a list of files), then ~/.kube/config.
    #[arg(long, global = true, env = "HUBFED_KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Context of the hub (host) cluster; default: the current context.
    #[arg(
        long,
        global = true,
        env = "HUBFED_HOST_CLUSTER_CONTEXT",
        value_name = "CONTEXT"
    )]
    pub host_cluster_context: Option<String>,
    /// Namespace of the control plane in the hub (and of the join artifacts in members).
    #[arg(long, global = true, env = "HUBFED_KUBEFED_NAMESPACE", default_value = DEFAULT_KUBEFED_NAMESPACE, value_name = "NAMESPACE")]
    pub kubefed_namespace: String,
    /// Give up on a request that gets no answer for this long (e.g. 10s, 1m).
    #[arg(long, global = true, env = "HUBFED_REQUEST_TIMEOUT", default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub request_timeout: Duration,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Join a cluster to the federation: credentials in the member, KubeFedCluster in the hub.
    Join(JoinArgs),
    /// Remove a cluster from the federation, undoing what join did.
    Unjoin(UnjoinArgs),
    /// Federate a type: create its Federated<Kind> CRD and FederatedTypeConfig.
    Enable(EnableArgs),
    /// Stop federating a type: disable propagation, delete its FederatedTypeConfig.
    Disable(DisableArgs),
    /// Turn existing objects (or a file, offline) into federated objects.
    Federate(FederateArgs),
    /// Keep (orphan) or delete member copies when a federated object is deleted.
    #[command(subcommand)]
    OrphaningDeletion(OrphaningCommand),
    /// Per placed cluster: whether a federated object propagated, whether its copy is ready,
    /// its version and why not (KIND/NAME; or KIND for every object of the type).
    Status(StatusArgs),
    /// What applying a federated object (or a plain object with --placement) would do in
    /// every cluster: a server-side diff per cluster; nothing is written. Exit 0: no change,
    /// 1: changes, 2: error.
    Plan(PlanArgs),
    /// What the controller would change in every cluster for a federated object of the hub
    /// (KIND/NAME) now: a server-side diff per cluster. Exit 0: no change, 1: changes, 2: error.
    Diff(DiffArgs),
    /// Staged rollouts of a federated object (KIND/NAME): status, pause, resume, abort.
    #[command(subcommand)]
    Rollout(RolloutCommand),
    /// Show federation objects.
    #[command(subcommand)]
    Get(GetCommand),
    /// Take over a live KubeFed hub: check what changes, back up what `helm uninstall`
    /// deletes, upgrade the CRDs, narrow the members' grants (docs/migrating-from-kubefed.md).
    #[command(subcommand)]
    Migrate(MigrateStep),
    /// Print the version of hubfedctl.
    Version(VersionArgs),
    /// Print a shell completion script.
    Completion(CompletionArgs),
}

#[derive(Args, Debug)]
pub struct JoinArgs {
    /// Name of the cluster in the federation (the KubeFedCluster's name).
    #[arg(value_name = "CLUSTER")]
    pub cluster: String,
    /// Context of the cluster to join; default: CLUSTER.
    #[arg(long, value_name = "CONTEXT")]
    pub cluster_context: Option<String>,
    /// Name of the hub in member-side object names; default: the hub context's name.
    #[arg(long, value_name = "NAME")]
    pub host_cluster_name: Option<String>,
    /// Name of the hub Secret holding the token; default: generated `<CLUSTER>-xxxxx`.
    #[arg(long, value_name = "NAME")]
    pub secret_name: Option<String>,
    /// Fail if the cluster is already joined; `--error-on-existing=false` updates instead.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    pub error_on_existing: bool,
    /// Grant hubfed every permission in the member (like kubefedctl), instead of only what
    /// the enabled federated types need.
    #[arg(long)]
    pub cluster_admin: bool,
    /// Multi-cluster services in the member: install the MCS and About CRDs (kept when
    /// another tool installed them) and grant hubfed's MCS controller (a pull member's agent)
    /// its rights there; `--mcs=false` leaves both out.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    pub mcs: bool,
    /// How long to wait for the cluster to be Ready; 0 to not wait.
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub wait: Duration,
    /// Print what would be done; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// `push`: the hub connects to the member with a token join puts in the hub (KubeFed's
    /// way). `pull`: an agent in the member pulls its work from the hub; the hub holds no
    /// credentials to the member and need not reach it.
    #[arg(long, value_enum, default_value_t = JoinMode::Push)]
    pub mode: JoinMode,
    /// With --mode pull: print the member side (the agent's ServiceAccount, RBAC and hub
    /// credentials) as manifests instead of applying it to the member; the hub side is
    /// written all the same.
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<OutputFormat>,
    /// With --mode pull: the hub API server's URL as the agent reaches it; default: the
    /// server of the hub context.
    #[arg(long, value_name = "URL")]
    pub hub_endpoint: Option<String>,
}

/// How a member receives its objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum JoinMode {
    Push,
    Pull,
}

#[derive(Args, Debug)]
pub struct UnjoinArgs {
    /// Name of the cluster in the federation.
    #[arg(value_name = "CLUSTER")]
    pub cluster: String,
    /// Context of the cluster; default: CLUSTER.
    #[arg(long, value_name = "CONTEXT")]
    pub cluster_context: Option<String>,
    /// Name of the hub used at join; default: the hub context's name.
    #[arg(long, value_name = "NAME")]
    pub host_cluster_name: Option<String>,
    /// Also delete every object hubfed propagated to the cluster (labelled
    /// kubefed.io/managed=true, of the federated types).
    #[arg(long)]
    pub remove_managed_resources: bool,
    /// Clean up the hub even when the member cannot be reached or cleaned up.
    #[arg(long)]
    pub force: bool,
    /// How long to wait for removed managed objects to be gone.
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub wait: Duration,
    /// Print what would be done; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Args, Debug)]
pub struct EnableArgs {
    /// The type: plural, singular, kind, short name or plural.group (e.g. deployments.apps).
    #[arg(value_name = "TYPE", required_unless_present = "filename")]
    pub type_name: Option<String>,
    /// API version of the target type; default: the group's preferred version.
    #[arg(long, value_name = "VERSION")]
    pub version: Option<String>,
    /// API group of the federated type.
    #[arg(long, default_value = TYPES_GROUP, value_name = "GROUP")]
    pub federated_group: String,
    /// API version of the federated type.
    #[arg(long, default_value = TYPES_VERSION, value_name = "VERSION")]
    pub federated_version: String,
    /// A KubeFed EnableTypeDirective file instead of TYPE and the flags above.
    #[arg(short = 'f', long, value_name = "FILE", conflicts_with = "type_name")]
    pub filename: Option<PathBuf>,
    /// Print the CRD and FederatedTypeConfig instead of creating them.
    #[arg(short = 'o', long, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
    /// Print what would be done; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Args, Debug)]
pub struct DisableArgs {
    /// The federated type: its FederatedTypeConfig name, target plural, kind or plural.group.
    #[arg(value_name = "TYPE")]
    pub type_name: String,
    /// Also delete the Federated<Kind> CRD (refused while objects of it exist).
    #[arg(long)]
    pub delete_crd: bool,
    /// How long to wait for the controller to stop propagating the type.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub wait: Duration,
    /// Print what would be done; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Args, Debug)]
pub struct FederateArgs {
    /// The type of the object (plural, singular, kind, short name or plural.group).
    #[arg(value_name = "TYPE", required_unless_present = "filename")]
    pub type_name: Option<String>,
    /// The object to federate.
    #[arg(value_name = "NAME", required_unless_present = "filename")]
    pub name: Option<String>,
    /// Namespace of the object; default: the hub context's namespace.
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// For a namespace: also federate the objects in it of every enabled type.
    #[arg(short = 'c', long)]
    pub contents: bool,
    /// Enable the type first if it is not federated yet.
    #[arg(short = 't', long)]
    pub enable_type: bool,
    /// Convert the objects of this YAML file offline and print them (no cluster needed).
    #[arg(short = 'f', long, value_name = "FILE", conflicts_with_all = ["type_name", "name", "contents", "enable_type"])]
    pub filename: Option<PathBuf>,
    /// API group of federated types (for -f).
    #[arg(long, default_value = TYPES_GROUP, value_name = "GROUP")]
    pub federated_group: String,
    /// API version of federated types (for -f).
    #[arg(long, default_value = TYPES_VERSION, value_name = "VERSION")]
    pub federated_version: String,
    /// Print the federated objects instead of creating them.
    #[arg(short = 'o', long, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
    /// Print what would be done; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Subcommand, Debug)]
pub enum OrphaningCommand {
    /// Keep member copies when the federated object is deleted.
    Enable(OrphaningArgs),
    /// Delete member copies with the federated object (the default).
    Disable(OrphaningArgs),
    /// Print Enabled or Disabled.
    Status(OrphaningTarget),
}

#[derive(Args, Debug)]
pub struct OrphaningTarget {
    /// The type (target or federated: configmaps, FederatedConfigMap, ...).
    #[arg(value_name = "TYPE")]
    pub type_name: String,
    /// The federated object.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Namespace of the federated object; default: the hub context's namespace.
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

#[derive(Args, Debug)]
pub struct OrphaningArgs {
    #[command(flatten)]
    pub target: OrphaningTarget,
    /// Print what would be done; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Subcommand, Debug)]
pub enum MigrateCommand {
    /// List what the takeover changes in the hub and what stands in its way; changes
    /// nothing. Exit 0: ready, 3: blockers listed.
    Check,
    /// Keep a copy of the FederatedTypeConfigs and the KubeFedConfig (which `helm
    /// uninstall` of KubeFed's chart deletes) in ConfigMap hubfed-kubefed-backup.
    Backup(MigrateBackupArgs),
    /// Apply hubfed's CRDs, restore the backed-up objects that are missing, and replace each
    /// federated type's CRD with hubfed's. Refused while KubeFed's controller-manager runs.
    Upgrade(MigrateUpgradeArgs),
    /// The way back: mark the FederatedTypeConfigs and the KubeFedConfig KubeFed's chart
    /// installs for adoption by its Helm release, so `helm install` of KubeFed's chart takes
    /// them over. Refused while hubfed's controller or another release's copies of KubeFed's
    /// roles and webhooks remain.
    Rollback(MigrateRollbackArgs),
}

#[derive(Args, Debug)]
pub struct MigrateBackupArgs {
    /// Also write the backup to this file (multi-document YAML, for `kubectl apply -f`).
    #[arg(short = 'o', long = "output-file", value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
    /// Print what would be done; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Args, Debug)]
pub struct MigrateUpgradeArgs {
    /// Print what would be done; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Args, Debug)]
pub struct MigrateRollbackArgs {
    /// The Helm release name KubeFed's chart will be installed as.
    #[arg(long, default_value = "kubefed", value_name = "NAME")]
    pub release: String,
    /// Print what would be done; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// A `migrate` subcommand: a step in the hub, or a member's grant narrowed.
#[derive(Subcommand, Debug)]
pub enum MigrateStep {
    #[command(flatten)]
    Hub(MigrateCommand),
    /// Replace a push member's join grant (kubefedctl's: every right) with hubfed's least
    /// privilege, in place: the same ServiceAccount and token, the hub left as it is.
    LeastPrivilege(LeastPrivilegeArgs),
}

#[derive(Args, Debug)]
pub struct LeastPrivilegeArgs {
    /// Name of the cluster in the federation (the KubeFedCluster's name).
    #[arg(value_name = "CLUSTER")]
    pub cluster: String,
    /// Context of the cluster; default: CLUSTER.
    #[arg(long, value_name = "CONTEXT")]
    pub cluster_context: Option<String>,
    /// Name of the hub used at join; default: the hub context's name.
    #[arg(long, value_name = "NAME")]
    pub host_cluster_name: Option<String>,
    /// The multi-cluster services controller's rights, as `join --mcs` grants them;
    /// `--mcs=false` leaves them out.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    pub mcs: bool,
    /// Print what would be done; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Subcommand, Debug)]
pub enum GetCommand {
    /// Joined clusters: name, readiness, Kubernetes version, age.
    #[command(visible_alias = "cluster", visible_alias = "kubefedclusters")]
    Clusters(GetClustersArgs),
    /// Multi-cluster services: each member's ServiceExports and ServiceImports, read in the
    /// members, with their conditions.
    #[command(visible_alias = "serviceexport", visible_alias = "svcex")]
    Serviceexports(GetServiceExportsArgs),
}

#[derive(Args, Debug)]
pub struct GetServiceExportsArgs {
    /// Only services with these names.
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
    /// Only this namespace; default: every namespace.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// The kubeconfig context of a member (`CLUSTER=CONTEXT`, repeatable); by default the
    /// context named like the cluster, as `join` assumes.
    #[arg(long = "cluster-context", value_name = "CLUSTER=CONTEXT", value_parser = parse_cluster_context)]
    pub cluster_contexts: Vec<(String, String)>,
    /// Print as YAML or JSON instead of a table.
    #[arg(short = 'o', long, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
}

fn parse_cluster_context(value: &str) -> std::result::Result<(String, String), String> {
    match value.split_once('=') {
        Some((cluster, context)) if !cluster.is_empty() && !context.is_empty() => {
            Ok((cluster.to_owned(), context.to_owned()))
        }
        _ => Err(format!("{value:?} is not CLUSTER=CONTEXT")),
    }
}

#[derive(Args, Debug)]
pub struct GetClustersArgs {
    /// Only these clusters.
    #[arg(value_name = "CLUSTER")]
    pub names: Vec<String>,
    /// Print the KubeFedClusters as YAML or JSON instead of a table.
    #[arg(short = 'o', long, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// `KIND/NAME` (KIND: a federated or target type name, plural, singular or short, e.g.
    /// `deployments/web`, `federateddeployment/web`), or `KIND` for every object of the type.
    #[arg(value_name = "KIND[/NAME]")]
    pub target: String,
    /// Namespace of the object(s); default: `default`.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Every namespace (with KIND only).
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Print as YAML or JSON instead of tables.
    #[arg(short = 'o', long, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
}

#[derive(Subcommand, Debug)]
pub enum RolloutCommand {
    /// Where the rollout stands: revision, stage, phase, which clusters have it.
    Status(RolloutArgs),
    /// Freeze the rollout: no cluster gets a new revision until it is resumed.
    Pause(RolloutArgs),
    /// Continue a paused rollout; after an abort, start the revision over at the first stage.
    Resume(RolloutArgs),
    /// Send every cluster back to the stable revision (until resumed, or a new revision).
    Abort(RolloutArgs),
}

#[derive(Args, Debug)]
pub struct RolloutArgs {
    /// `KIND/NAME` of a federated object, e.g. `deployments/web`.
    #[arg(value_name = "KIND/NAME")]
    pub target: String,
    /// Namespace of the object; default: the context's.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
}

#[derive(Args, Debug)]
pub struct PlanArgs {
    /// A federated object, or a plain object (with --placement), as YAML or JSON; `-` reads
    /// standard input.
    #[arg(short = 'f', long, value_name = "FILE")]
    pub file: std::path::PathBuf,
    /// For a plain object: the clusters to place it in (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "CLUSTERS")]
    pub placement: Vec<String>,
    /// Namespace when the object names none; default: the context's.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub dry_runs: DryRunArgs,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// `KIND/NAME` of a federated object in the hub, e.g. `deployments/web`.
    #[arg(value_name = "KIND/NAME")]
    pub target: String,
    /// Namespace of the object; default: the context's.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub dry_runs: DryRunArgs,
}

/// What `plan` and `diff` share: how members are reached for the dry runs, how the answers
/// are shown.
#[derive(Args, Debug)]
pub struct DryRunArgs {
    /// The kubeconfig context of a member cluster (repeatable); default: the cluster's name.
    #[arg(long, value_name = "CLUSTER=CONTEXT")]
    pub cluster_context: Vec<String>,
    /// Print, per cluster, the change and the object after it (the dry run's answer) as YAML
    /// or JSON instead of diffs.
    #[arg(short = 'o', long, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
}

#[derive(Args, Debug)]
pub struct VersionArgs {
    /// Print as YAML or JSON.
    #[arg(short = 'o', long, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
}

#[derive(Args, Debug)]
pub struct CompletionArgs {
    /// The shell.
    #[arg(value_name = "SHELL")]
    pub shell: CompletionShell,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Yaml,
    Json,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

/// Go-style durations (`30s`, `1m30s`, `500ms`) and bare seconds (`30`).
pub fn parse_duration(value: &str) -> Result<Duration, String> {
    if let Ok(seconds) = value.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    hubfed_api::duration::parse_go_duration(value).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn error_on_existing_takes_an_explicit_value() {
        let parse = |args: &[&str]| {
            let cli = Cli::try_parse_from(args).unwrap();
            match cli.command {
                Command::Join(join) => join.error_on_existing,
                other => panic!("{other:?}"),
            }
        };
        assert!(parse(&["hubfedctl", "join", "m1"]));
        assert!(parse(&["hubfedctl", "join", "m1", "--error-on-existing"]));
        assert!(!parse(&[
            "hubfedctl",
            "join",
            "m1",
            "--error-on-existing=false"
        ]));
    }

    #[test]
    fn migrate_holds_the_hub_steps_and_least_privilege() {
        let parse = |args: &[&str]| match Cli::try_parse_from(args).unwrap().command {
            Command::Migrate(step) => step,
            other => panic!("{other:?}"),
        };
        assert!(matches!(
            parse(&["hubfedctl", "migrate", "check"]),
            MigrateStep::Hub(MigrateCommand::Check)
        ));
        match parse(&["hubfedctl", "migrate", "least-privilege", "m1", "--dry-run"]) {
            MigrateStep::LeastPrivilege(args) => {
                assert_eq!((args.cluster.as_str(), args.dry_run), ("m1", true));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn durations_accept_go_syntax_and_seconds() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn federate_needs_type_and_name_unless_given_a_file() {
        assert!(Cli::try_parse_from(["hubfedctl", "federate", "configmaps"]).is_err());
        assert!(Cli::try_parse_from(["hubfedctl", "federate", "-f", "x.yaml"]).is_ok());
        assert!(Cli::try_parse_from(["hubfedctl", "federate", "-f", "x.yaml", "cm", "x"]).is_err());
    }
}
