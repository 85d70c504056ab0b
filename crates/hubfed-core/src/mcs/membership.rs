//! The ClusterSet's members: ids, which of them get an import, offline members' endpoints.

use std::collections::BTreeMap;
use std::time::Duration;

use hubfed_api::about::CLUSTER_ID_PROPERTY as ID_PROPERTY;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Longest cluster id: it is a label value, and a DNS label in `status.clusters`.
const MAX_ID_LENGTH: usize = 63;

/// One member of the ClusterSet, as its id is decided.
#[derive(Clone, Copy, Debug)]
pub struct MemberId<'a> {
    /// The KubeFedCluster's name.
    pub cluster: &'a str,
    /// The value of the member's ClusterProperty `cluster.clusterset.k8s.io`, if it has one.
    pub property: Option<&'a str>,
}

/// Where a member's cluster id comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdSource {
    /// The member's existing ClusterProperty: hubfed never rewrites it.
    Property,
    /// The KubeFedCluster name: hubfed creates the ClusterProperty with it.
    ClusterName,
}

/// Why a member's id is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterIdRefusal {
    /// Not an RFC 1123 label of at most 63 characters.
    Invalid,
    /// Another member has the same id.
    Duplicate,
}

impl ClusterIdRefusal {
    /// The reason of the condition that reports it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Invalid => "InvalidClusterID",
            Self::Duplicate => "DuplicateClusterID",
        }
    }
}

/// A member's cluster id, or why it has none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterIdDecision {
    /// The member takes part in multi-cluster services under `id`.
    Member { id: String, source: IdSource },
    /// The member takes no part (no exports read, no import written) until this is fixed.
    Refused {
        id: String,
        refusal: ClusterIdRefusal,
        message: String,
    },
}

/// Decides every member's cluster id, by KubeFedCluster name.
///
/// A member's existing ClusterProperty is respected, else its KubeFedCluster name is the id.
/// An id must be an RFC 1123 label of at most 63 characters, since it is a label value
/// (`multicluster.kubernetes.io/source-cluster`) and a DNS label in the ServiceImport's
/// `status.clusters` (KEP-2149 allows longer ids; hubfed does not). Two members never share
/// an id: an id a member already holds as its ClusterProperty stays its own, and a member that
/// would take it from its name is refused; when several members hold it as their
/// ClusterProperty, all of them are refused. Refusals name the other members.
pub fn cluster_ids(members: &[MemberId<'_>]) -> BTreeMap<String, ClusterIdDecision> {
    let mut decisions = BTreeMap::new();
    let mut holders: BTreeMap<&str, Vec<(&str, IdSource)>> = BTreeMap::new();
    for member in members {
        let (id, source) = match member.property {
            Some(property) => (property, IdSource::Property),
            None => (member.cluster, IdSource::ClusterName),
        };
        if let Some(problem) = label_problem(id) {
            let message = format!(
                "The cluster id {id:?} ({}) is not valid: {problem}. Set the member's \
                 ClusterProperty {ID_PROPERTY:?} to an RFC 1123 label of at most \
                 {MAX_ID_LENGTH} characters.",
                origin(source)
            );
            let refusal = ClusterIdRefusal::Invalid;
            let id = id.to_owned();
            decisions.insert(
                member.cluster.to_owned(),
                ClusterIdDecision::Refused {
                    id,
                    refusal,
                    message,
                },
            );
        } else {
            holders
                .entry(id)
                .or_default()
                .push((member.cluster, source));
        }
    }
    for (id, holders) in holders {
        decide_holders(id, &holders, &mut decisions);
    }
    decisions
}

/// Decides for the members whose valid candidate id is `id`.
fn decide_holders(
    id: &str,
    holders: &[(&str, IdSource)],
    decisions: &mut BTreeMap<String, ClusterIdDecision>,
) {
    let by_property: Vec<&str> = holders
        .iter()
        .filter(|(_, source)| *source == IdSource::Property)
        .map(|(cluster, _)| *cluster)
        .collect();
    let keeper = match (holders, by_property.as_slice()) {
        ([_], _) => holders.first().map(|(cluster, _)| *cluster),
        (_, [only]) => Some(*only),
        _ => None,
    };
    for (cluster, source) in holders {
        let decision = if Some(*cluster) == keeper {
            ClusterIdDecision::Member {
                id: id.to_owned(),
                source: *source,
            }
        } else {
            let others: Vec<&str> = holders
                .iter()
                .map(|(other, _)| *other)
                .filter(|other| other != cluster)
                .collect();
            ClusterIdDecision::Refused {
                id: id.to_owned(),
                refusal: ClusterIdRefusal::Duplicate,
                message: format!(
                    "The cluster id {id:?} ({}) is also the id of {others:?}. Give the member's \
                     ClusterProperty {ID_PROPERTY:?} an id of its own.",
                    origin(*source)
                ),
            }
        };
        decisions.insert((*cluster).to_owned(), decision);
    }
}

fn origin(source: IdSource) -> String {
    match source {
        IdSource::Property => format!("the member's ClusterProperty {ID_PROPERTY:?}"),
        IdSource::ClusterName => "the KubeFedCluster's name".to_owned(),
    }
}

/// What is wrong with `id` as an RFC 1123 label (apimachinery's `IsDNS1123Label`).
fn label_problem(id: &str) -> Option<String> {
    if id.len() > MAX_ID_LENGTH {
        return Some(format!("must be no more than {MAX_ID_LENGTH} characters"));
    }
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = id.as_bytes();
    let valid = bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
        && bytes.iter().all(|b| alnum(b) || *b == b'-');
    (!valid).then(|| {
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', \
         and must start and end with an alphanumeric character"
            .to_owned()
    })
}

/// Whether a member's namespace of the exported Service exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamespaceState {
    Active,
    /// Being deleted: nothing can be created in it, and what it holds goes with it.
    Terminating,
    Absent,
    /// The member's namespaces have not been read (or cannot be).
    Unknown,
}

/// Which members get a ServiceImport of one exported name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportMembers {
    /// The import (and its derived objects) are written there, exporters included.
    pub import: Vec<String>,
    /// No import: the namespace is absent or being deleted.
    pub none: Vec<String>,
    /// Not known yet: nothing is written there, and nothing removed.
    pub unknown: Vec<String>,
}

/// Sorts the ClusterSet's members (by cluster id) by whether they get an import.
///
/// Every member whose namespace exists gets it, exporters included, and none where it is
/// missing (namespace sameness: an import never creates a namespace).
pub fn import_members<'a>(
    members: impl IntoIterator<Item = (&'a str, NamespaceState)>,
) -> ImportMembers {
    let mut result = ImportMembers::default();
    for (cluster, namespace) in members {
        let list = match namespace {
            NamespaceState::Active => &mut result.import,
            NamespaceState::Terminating | NamespaceState::Absent => &mut result.none,
            NamespaceState::Unknown => &mut result.unknown,
        };
        list.push(cluster.to_owned());
    }
    for list in [&mut result.import, &mut result.none, &mut result.unknown] {
        list.sort();
    }
    result
}

/// How long an offline source cluster's endpoints stay (the KEP's endpoint TTL): 5 minutes.
///
/// The endpoints stay in every importing member. Kubernetes answers the same question for a node
/// this way: its DefaultTolerationSeconds admission plugin keeps Pods bound to an unreachable node
/// for 300 s before they are evicted. An Offline member usually still serves its clients: the hub
/// lost it, which a network blip between hub and member or a slow API server also causes.
/// Withdrawing its endpoints at once would turn each such blip into a cross-cluster outage; keeping
/// them for ever would send traffic to a cluster that may be gone. The kept endpoints keep their
/// last known conditions.
pub const DEFAULT_ENDPOINT_TTL: Duration = Duration::from_secs(300);

/// Whether a source cluster can still be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourcePresence<'a> {
    Online,
    /// Offline (not Ready) since its KubeFedCluster `Ready` condition's `lastTransitionTime`.
    Offline {
        since: &'a Time,
    },
    /// Unjoined, or refused a cluster id: no longer a member.
    Unjoined,
}

/// What happens to a source cluster's derived EndpointSlices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndpointFate {
    Keep,
    /// Kept (as last seen) until this time: look again then.
    KeepUntil(Time),
    /// Withdrawn from every importing member.
    ///
    /// The cluster's export is then left out of [`super::aggregate`] too.
    Withdraw,
}

/// Decides whether a source cluster's endpoints stay in the importing members.
///
/// An unjoined cluster's are withdrawn at once, an offline one's `ttl`
/// ([`DEFAULT_ENDPOINT_TTL`]) after it went offline.
pub fn source_endpoints(presence: SourcePresence<'_>, now: &Time, ttl: Duration) -> EndpointFate {
    match presence {
        SourcePresence::Online => EndpointFate::Keep,
        SourcePresence::Unjoined => EndpointFate::Withdraw,
        SourcePresence::Offline { since } => match since.0.checked_add(ttl) {
            Ok(deadline) if now.0 >= deadline => EndpointFate::Withdraw,
            Ok(deadline) => EndpointFate::KeepUntil(Time(deadline)),
            // A deadline past the end of time never comes.
            Err(_) => EndpointFate::Keep,
        },
    }
}
