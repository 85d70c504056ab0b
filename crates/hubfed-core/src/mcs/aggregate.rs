//! The ServiceImport one exported name yields, and each ServiceExport's conditions.

use std::collections::BTreeMap;

use hubfed_api::mcs::{ServiceExportConditionReason as Reason, ServiceImportType};
use k8s_openapi::api::core::v1::{ServiceSpec, SessionAffinityConfig};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::ports::merge_ports;

/// One member's ServiceExport of the `namespace/name` being aggregated.
#[derive(Clone, Copy, Debug)]
pub struct ExportInput<'a> {
    /// The member's cluster id ([`super::cluster_ids`]).
    pub cluster: &'a str,
    /// The ServiceExport's `metadata.creationTimestamp`: the oldest export wins conflicts.
    pub created: &'a Time,
    /// The spec of the member's Service of the same namespace and name, if it exists.
    pub service: Option<&'a ServiceSpec>,
}

/// A ServiceImport's port (upstream's `ServicePort`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportPort {
    /// Empty for the unnamed port of a single-port Service.
    pub name: String,
    /// `TCP` when the Service did not say.
    pub protocol: String,
    pub app_protocol: Option<String>,
    pub port: i32,
}

/// The ServiceImport's spec and `status.clusters`.
///
/// They are the same in every importing member, except `ips`, which each member allocates
/// ([`super::import_ips`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ImportSpec {
    pub type_: ServiceImportType,
    pub ports: Vec<ImportPort>,
    pub session_affinity: Option<String>,
    pub session_affinity_config: Option<SessionAffinityConfig>,
    pub ip_families: Vec<String>,
    pub internal_traffic_policy: Option<String>,
    pub traffic_distribution: Option<String>,
    /// The ids of the clusters with a valid export, sorted.
    pub clusters: Vec<String>,
}

/// Why a ServiceExport is valid or not (its `Valid` condition's reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValidReason {
    Valid,
    /// No Service of the export's namespace and name.
    NoService,
    /// An ExternalName Service (or a type the KEP does not know).
    InvalidServiceType,
}

impl ValidReason {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Valid => Reason::Valid,
            Self::NoService => Reason::NoService,
            Self::InvalidServiceType => Reason::InvalidServiceType,
        }
        .as_str()
    }
}

/// A property on which the valid exports disagree (a `Conflict` condition's reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConflictReason {
    Port,
    Type,
    SessionAffinity,
    SessionAffinityConfig,
    InternalTrafficPolicy,
    TrafficDistribution,
    IpFamily,
}

impl ConflictReason {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Port => Reason::PortConflict,
            Self::Type => Reason::TypeConflict,
            Self::SessionAffinity => Reason::SessionAffinityConflict,
            Self::SessionAffinityConfig => Reason::SessionAffinityConfigConflict,
            Self::InternalTrafficPolicy => Reason::InternalTrafficPolicyConflict,
            Self::TrafficDistribution => Reason::TrafficDistributionConflict,
            Self::IpFamily => Reason::IpFamilyConflict,
        }
        .as_str()
    }
}

/// One condition of a ServiceExport's status (its type is the field holding it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportCondition {
    /// `True` or `False`.
    pub status: bool,
    /// A single reason, or several joined by commas (`PortConflict,TypeConflict`).
    pub reason: String,
    pub message: String,
}

/// The conditions the controller sets on one ServiceExport.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportStatus {
    pub valid: ExportCondition,
    pub conflict: ExportCondition,
}

/// What [`aggregate`] decides for one exported name.
#[derive(Clone, Debug, PartialEq)]
pub struct Aggregate {
    /// None when no export is valid: the ServiceImport is deleted everywhere.
    pub import: Option<ImportSpec>,
    /// Every export's conditions, by cluster id.
    pub exports: BTreeMap<String, ExportStatus>,
    /// The properties in conflict, in the order of [`ConflictReason`].
    pub conflicts: Vec<ConflictReason>,
}

/// A valid export.
struct Constituent<'a> {
    cluster: &'a str,
    spec: &'a ServiceSpec,
    type_: ServiceImportType,
}

/// Aggregates the ServiceExports of one `namespace/name`, one per cluster.
///
/// The exports are ranked by `creationTimestamp`, oldest first, then by cluster id, so equal
/// timestamps still give one answer. An export is valid when its Service exists and is not
/// an ExternalName; invalid exports contribute nothing. Every property of the import is the
/// oldest valid export's, except the ports, which are the union ([`merge_ports`]). When any
/// valid export disagrees with the import, every export of the name gets `Conflict=True`
/// (the KEP recommends all), with one sentence per property naming the winning cluster and
/// how many of the valid exports disagree; IP families disagree only when an export lacks a
/// family of the import's, so that some traffic would miss its backends.
pub fn aggregate(exports: &[ExportInput<'_>]) -> Aggregate {
    let mut ranked: Vec<&ExportInput<'_>> = exports.iter().collect();
    ranked.sort_by(|a, b| a.created.cmp(b.created).then(a.cluster.cmp(b.cluster)));

    let mut valid = BTreeMap::new();
    let mut constituents = Vec::new();
    for export in ranked {
        let condition = match classify(export.service) {
            Ok((type_, spec)) => {
                constituents.push(Constituent {
                    cluster: export.cluster,
                    spec,
                    type_,
                });
                ExportCondition {
                    status: true,
                    reason: ValidReason::Valid.as_str().to_owned(),
                    message: format!("The Service is exported as a {} service.", type_.as_str()),
                }
            }
            Err((reason, message)) => ExportCondition {
                status: false,
                reason: reason.as_str().to_owned(),
                message,
            },
        };
        valid.insert(export.cluster.to_owned(), condition);
    }

    let (import, conflicts) = match import_and_conflicts(&constituents) {
        Some((import, conflicts)) => (Some(import), conflicts),
        None => (None, Vec::new()),
    };
    let conflict = conflict_condition(&conflicts, constituents.len());
    Aggregate {
        import,
        exports: valid
            .into_iter()
            .map(|(cluster, valid)| {
                let conflict = conflict.clone();
                (cluster, ExportStatus { valid, conflict })
            })
            .collect(),
        conflicts: conflicts.iter().map(|(reason, _)| *reason).collect(),
    }
}

fn classify(
    service: Option<&ServiceSpec>,
) -> Result<(ServiceImportType, &ServiceSpec), (ValidReason, String)> {
    let Some(spec) = service else {
        return Err((
            ValidReason::NoService,
            "No Service of this namespace and name exists in this cluster.".to_owned(),
        ));
    };
    match spec.type_.as_deref().unwrap_or("ClusterIP") {
        "ClusterIP" | "NodePort" | "LoadBalancer" => {
            let headless = spec.cluster_ip.as_deref() == Some("None");
            let type_ = if headless {
                ServiceImportType::Headless
            } else {
                ServiceImportType::ClusterSetIp
            };
            Ok((type_, spec))
        }
        other => Err((
            ValidReason::InvalidServiceType,
            format!("The Service is of type {other:?}, which cannot be exported."),
        )),
    }
}

/// A conflicting property and its sentence.
type Conflict = (ConflictReason, String);

/// The import of the ranked valid exports, and their conflicts; None without any.
fn import_and_conflicts(constituents: &[Constituent<'_>]) -> Option<(ImportSpec, Vec<Conflict>)> {
    let oldest = constituents.first()?;
    let port_lists: Vec<(&str, &[_])> = constituents
        .iter()
        .map(|c| (c.cluster, c.spec.ports.as_deref().unwrap_or_default()))
        .collect();
    let ports = merge_ports(&port_lists);

    let mut conflicts = Vec::new();
    if ports.disagreeing > 0 {
        let mut message = sentence(
            "ports",
            "the union of ports, starting",
            oldest.cluster,
            ports.disagreeing,
            constituents.len(),
        );
        for dropped in &ports.dropped {
            message.push(' ');
            message.push_str(dropped);
        }
        conflicts.push((ConflictReason::Port, message));
    }
    conflicts.extend(property_conflicts(constituents));

    let mut clusters: Vec<String> = constituents.iter().map(|c| c.cluster.to_owned()).collect();
    clusters.sort();
    let spec = oldest.spec;
    let import = ImportSpec {
        type_: oldest.type_,
        ports: ports.ports,
        session_affinity: spec.session_affinity.clone(),
        session_affinity_config: spec.session_affinity_config.clone(),
        ip_families: spec.ip_families.clone().unwrap_or_default(),
        internal_traffic_policy: spec.internal_traffic_policy.clone(),
        traffic_distribution: spec.traffic_distribution.clone(),
        clusters,
    };
    Some((import, conflicts))
}

/// The conflicts of every property but the ports, in the order of [`ConflictReason`].
fn property_conflicts(constituents: &[Constituent<'_>]) -> Vec<Conflict> {
    let Some(oldest) = constituents.first() else {
        return Vec::new();
    };
    let total = constituents.len();
    let count = |differs: &dyn Fn(&Constituent<'_>) -> bool| -> usize {
        constituents.iter().filter(|c| differs(c)).count()
    };

    let checks: [(ConflictReason, &str, String, usize); 6] = [
        (
            ConflictReason::Type,
            "type",
            format!("{:?}", oldest.type_.as_str()),
            count(&|c| c.type_ != oldest.type_),
        ),
        (
            ConflictReason::SessionAffinity,
            "session affinity",
            format!("{:?}", affinity(oldest)),
            count(&|c| affinity(c) != affinity(oldest)),
        ),
        (
            ConflictReason::SessionAffinityConfig,
            "session affinity config",
            affinity_config(oldest.spec.session_affinity_config.as_ref()),
            count(&|c| {
                affinity(c) == affinity(oldest)
                    && c.spec.session_affinity_config != oldest.spec.session_affinity_config
            }),
        ),
        (
            ConflictReason::InternalTrafficPolicy,
            "internal traffic policy",
            format!("{:?}", itp(oldest)),
            count(&|c| itp(c) != itp(oldest)),
        ),
        (
            ConflictReason::TrafficDistribution,
            "traffic distribution",
            distribution(oldest).map_or_else(|| "none".to_owned(), |d| format!("{d:?}")),
            count(&|c| distribution(c) != distribution(oldest)),
        ),
        (
            ConflictReason::IpFamily,
            "IP families",
            format!("{:?}", families(oldest)),
            count(&|c| {
                let own = families(c);
                !own.is_empty() && families(oldest).iter().any(|f| !own.contains(f))
            }),
        ),
    ];
    checks
        .into_iter()
        .filter(|(_, _, _, disagreeing)| *disagreeing > 0)
        .map(|(reason, what, value, disagreeing)| {
            let message = sentence(what, &value, oldest.cluster, disagreeing, total);
            (reason, message)
        })
        .collect()
}

/// The session affinity, `None` when unset (the API server's default).
fn affinity<'s>(c: &Constituent<'s>) -> &'s str {
    c.spec.session_affinity.as_deref().unwrap_or("None")
}

/// The internal traffic policy, `Cluster` when unset (the API server's default).
fn itp<'s>(c: &Constituent<'s>) -> &'s str {
    c.spec
        .internal_traffic_policy
        .as_deref()
        .unwrap_or("Cluster")
}

fn distribution<'s>(c: &Constituent<'s>) -> Option<&'s str> {
    c.spec.traffic_distribution.as_deref()
}

fn families<'s>(c: &Constituent<'s>) -> &'s [String] {
    c.spec.ip_families.as_deref().unwrap_or_default()
}

/// The KEP's sentence for one conflicting property.
///
/// `Conflicting type. Using "ClusterSetIP" from oldest service export in "cluster-1". 2/5
/// clusters disagree.`
fn sentence(what: &str, value: &str, oldest: &str, disagreeing: usize, total: usize) -> String {
    format!(
        "Conflicting {what}. Using {value} from oldest service export in {oldest:?}. \
         {disagreeing}/{total} clusters disagree."
    )
}

fn affinity_config(config: Option<&SessionAffinityConfig>) -> String {
    match config
        .and_then(|c| c.client_ip.as_ref())
        .and_then(|c| c.timeout_seconds)
    {
        Some(seconds) => format!("clientIP timeoutSeconds {seconds}"),
        None => "none".to_owned(),
    }
}

fn conflict_condition(conflicts: &[Conflict], valid: usize) -> ExportCondition {
    if conflicts.is_empty() {
        let message = match valid {
            0 => "No valid service export to compare.".to_owned(),
            1 => "No conflicts: one cluster exports a valid service.".to_owned(),
            n => format!("No conflicts among the {n} clusters exporting a valid service."),
        };
        return ExportCondition {
            status: false,
            reason: Reason::NoConflicts.as_str().to_owned(),
            message,
        };
    }
    let reasons: Vec<&str> = conflicts
        .iter()
        .map(|(reason, _)| reason.as_str())
        .collect();
    let messages: Vec<&str> = conflicts
        .iter()
        .map(|(_, message)| message.as_str())
        .collect();
    ExportCondition {
        status: true,
        reason: reasons.join(","),
        message: messages.join(" "),
    }
}
