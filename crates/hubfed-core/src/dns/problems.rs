//! What keeps a record's DNS names from being written, and the record condition that says so.

use std::fmt;

/// The record condition type: `True` when every member's records are written.
pub const RECORDS_COMPLETE_CONDITION: &str = "RecordsComplete";
/// `RecordsComplete=True`.
pub const REASON_COMPLETE: &str = "Complete";
/// A member has no region: only its global record is written.
pub const REASON_NO_REGION: &str = "ClusterWithoutRegion";
/// A member has a region but no zones: no zone records for it.
pub const REASON_NO_ZONES: &str = "ClusterWithoutZones";
/// A load balancer's host name does not resolve: it is left out.
pub const REASON_HOSTNAME_NOT_RESOLVED: &str = "HostnameNotResolved";
/// The ServiceDNSRecord's `domainRef` names no Domain: nothing is written.
pub const REASON_DOMAIN_NOT_FOUND: &str = "DomainNotFound";

/// Why some of a member's records are not written. The member's other records, and every
/// other member's, are.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DnsProblem {
    /// The member has no region, so neither region nor zone names: only its global record.
    NoRegion {
        cluster: String,
        /// Whether it has zones (which cannot be named without a region).
        has_zones: bool,
    },
    /// The member has a region but no zones: its region and global records, no zone records.
    NoZones { cluster: String },
    /// A host name of the member's load balancer does not resolve; it is left out of the
    /// records.
    HostnameNotResolved {
        cluster: String,
        hostname: String,
        error: String,
    },
}

impl DnsProblem {
    /// The member the problem is about.
    pub fn cluster(&self) -> &str {
        match self {
            Self::NoRegion { cluster, .. }
            | Self::NoZones { cluster }
            | Self::HostnameNotResolved { cluster, .. } => cluster,
        }
    }

    /// The condition and Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NoRegion { .. } => REASON_NO_REGION,
            Self::NoZones { .. } => REASON_NO_ZONES,
            Self::HostnameNotResolved { .. } => REASON_HOSTNAME_NOT_RESOLVED,
        }
    }
}

impl fmt::Display for DnsProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoRegion {
                cluster,
                has_zones: false,
            } => write!(
                f,
                "cluster {cluster:?} has no region and no zones: only its global record is written"
            ),
            Self::NoRegion {
                cluster,
                has_zones: true,
            } => write!(
                f,
                "cluster {cluster:?} has zones but no region: only its global record is written"
            ),
            Self::NoZones { cluster } => write!(
                f,
                "cluster {cluster:?} has no zones: its region and global records are written, \
                 no zone records"
            ),
            Self::HostnameNotResolved {
                cluster,
                hostname,
                error,
            } => write!(
                f,
                "cluster {cluster:?}: load balancer host name {hostname:?} does not resolve \
                 ({error}): left out of the records"
            ),
        }
    }
}

/// The `RecordsComplete` condition of a record, from its problems.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordsCondition {
    /// `true` when there is no problem.
    pub complete: bool,
    /// [`REASON_COMPLETE`], or the first problem's reason.
    pub reason: &'static str,
    /// Every problem, in cluster order, joined by `"; "`; empty when complete.
    pub message: String,
}

/// The `RecordsComplete` condition of a record with `problems`.
pub fn records_condition(problems: &[DnsProblem]) -> RecordsCondition {
    let mut sorted: Vec<&DnsProblem> = problems.iter().collect();
    sorted.sort_by(|a, b| (a.cluster(), a).cmp(&(b.cluster(), b)));
    let message: Vec<String> = sorted.iter().map(ToString::to_string).collect();
    RecordsCondition {
        complete: sorted.is_empty(),
        reason: sorted.first().map_or(REASON_COMPLETE, |p| p.reason()),
        message: message.join("; "),
    }
}

/// The message of a ServiceDNSRecord whose `domainRef` names no Domain in `namespace` (the
/// KubeFed namespace).
pub fn domain_not_found_message(domain_ref: &str, namespace: &str) -> String {
    format!("Domain {domain_ref:?} not found in namespace {namespace:?}: no records are written")
}
