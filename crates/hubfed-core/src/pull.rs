//! Pull mode: where a pull-mode member's work lives in the hub, the names of its objects, and
//! what its agent's heartbeat says about its health.
//!
//! Every name here is a pure function of the cluster's and the object's names, so the hub
//! controller, `hubfedctl` and the agent find the same objects without any lookup.

use std::time::Duration;

mod mcs;
mod work;
pub use mcs::*;
pub use work::*;

/// Prefix of a pull-mode cluster's work namespace in the hub.
pub const WORK_NAMESPACE_PREFIX: &str = "hubfed-cluster-";

/// Longest Kubernetes label value / DNS-1123 label (a namespace name).
const MAX_LABEL: usize = 63;
/// Longest DNS-1123 subdomain (most object names).
const MAX_SUBDOMAIN: usize = 253;

/// The hub namespace holding cluster `cluster`'s work and its agent's heartbeat:
/// `hubfed-cluster-<cluster>`. A cluster name that is not a DNS-1123 label as it stands (dots,
/// or too long) gets a readable prefix and a hash of the whole name, so two clusters never
/// share a namespace.
pub fn cluster_namespace(cluster: &str) -> String {
    let plain = format!("{WORK_NAMESPACE_PREFIX}{cluster}");
    if plain.len() <= MAX_LABEL && is_label(&plain) {
        return plain;
    }
    bounded(&plain, cluster, MAX_LABEL, false)
}

/// The name of the [`Work`](hubfed_api::work::Work) holding one member object:
/// `<kind>.<namespace>.<name>-<hash>` (cluster-scoped: `<kind>.<name>-<hash>`), lowercased,
/// characters a name may not hold replaced by `-`, cut to fit, the hash over the group, kind,
/// namespace and name so that no two objects share a work.
pub fn work_name(group: &str, kind: &str, namespace: Option<&str>, name: &str) -> String {
    let readable = match namespace {
        Some(ns) => format!("{kind}.{ns}.{name}"),
        None => format!("{kind}.{name}"),
    };
    let key = format!("{group}/{kind}/{}/{name}", namespace.unwrap_or(""));
    bounded(&readable, &key, MAX_SUBDOMAIN, true)
}

/// `readable`, lowercased and sanitised (dots kept only when `dots`), cut so that
/// `-<16 hex digits of FNV-1a over key>` fits in `max`.
fn bounded(readable: &str, key: &str, max: usize, dots: bool) -> String {
    let hash = format!("{:016x}", fnv1a_64(key.as_bytes()));
    let mut out = String::with_capacity(max);
    for c in readable.chars().flat_map(char::to_lowercase) {
        let keep = c.is_ascii_alphanumeric() || c == '-' || (dots && c == '.');
        out.push(if keep { c } else { '-' });
    }
    out.truncate(max - hash.len() - 1);
    // A label may not end with `-` or `.`, and a subdomain's labels may not be empty.
    while out.ends_with(['-', '.']) {
        out.pop();
    }
    while dots && out.contains("..") {
        out = out.replace("..", ".");
    }
    if out.is_empty() {
        return format!("w-{hash}");
    }
    if !out.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        out.insert(0, 'w');
    }
    format!("{out}-{hash}")
}

fn is_label(value: &str) -> bool {
    !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-')
}

fn fnv1a_64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// What the hub last saw of an agent's heartbeat Lease: its `resourceVersion` and when (on
/// the controller's clock) that version was first seen. The agent's own `renewTime` is never
/// compared with the controller's clock: clocks of two machines may disagree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatSeen {
    pub resource_version: String,
    /// Milliseconds on the controller's monotonic clock.
    pub seen_at_ms: u64,
    /// Whether this version was seen to replace an earlier one. The first version a process
    /// sees proves nothing: after a restart, a dead agent's Lease is still there.
    pub renewed: bool,
}

/// Records a read of the heartbeat Lease at `now_ms`: a new `resourceVersion` is a renewal.
pub fn observe_heartbeat(
    previous: Option<&HeartbeatSeen>,
    resource_version: &str,
    now_ms: u64,
) -> HeartbeatSeen {
    match previous {
        Some(seen) if seen.resource_version == resource_version => seen.clone(),
        _ => HeartbeatSeen {
            resource_version: resource_version.to_owned(),
            seen_at_ms: now_ms,
            renewed: previous.is_some(),
        },
    }
}

/// The health an agent's heartbeat shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeartbeatVerdict {
    /// Renewed within the Lease's duration.
    Alive,
    /// Not renewed for longer than the Lease's duration, or there is no Lease: the reason,
    /// for the cluster's `Offline` condition. The text is stable while the silence lasts (a
    /// changing text would rewrite the status and repeat the warning at every probe).
    Silent(String),
    /// Only one version seen so far, less than a Lease duration ago: no verdict yet — what
    /// was published stands.
    Unsettled,
}

/// Whether an agent is alive: its Lease was renewed (a new `resourceVersion` seen) within
/// `lease_duration` before `now_ms`. `seen` is `None` when there is no Lease.
pub fn heartbeat_verdict(
    seen: Option<&HeartbeatSeen>,
    lease_duration: Duration,
    now_ms: u64,
) -> HeartbeatVerdict {
    let Some(seen) = seen else {
        return HeartbeatVerdict::Silent("no heartbeat from the cluster's agent yet".to_owned());
    };
    let silent_ms = now_ms.saturating_sub(seen.seen_at_ms);
    match (
        u128::from(silent_ms) <= lease_duration.as_millis(),
        seen.renewed,
    ) {
        (true, true) => HeartbeatVerdict::Alive,
        (true, false) => HeartbeatVerdict::Unsettled,
        (false, _) => HeartbeatVerdict::Silent(format!(
            "the cluster's agent has not renewed its heartbeat within its lease duration ({}s)",
            lease_duration.as_secs()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::{is_dns1035_label, is_dns1123_subdomain};

    #[test]
    fn plain_cluster_names_give_readable_namespaces() {
        assert_eq!(cluster_namespace("member1"), "hubfed-cluster-member1");
        assert_eq!(cluster_namespace("eu-west-1"), "hubfed-cluster-eu-west-1");
    }

    #[test]
    fn every_cluster_name_gives_a_valid_distinct_namespace() {
        let long = "c".repeat(253);
        let names = [
            "a.b",
            "a-b",
            "prod.eu.example.com",
            long.as_str(),
            "x",
            "0",
            "member1",
        ];
        let mut seen = std::collections::BTreeSet::new();
        for cluster in names {
            let ns = cluster_namespace(cluster);
            assert!(
                is_dns1035_label(&ns).is_empty(),
                "{cluster:?} gave {ns:?}: {:?}",
                is_dns1035_label(&ns)
            );
            assert!(ns.starts_with(WORK_NAMESPACE_PREFIX), "{ns}");
            assert!(seen.insert(ns.clone()), "{cluster:?} shares {ns:?}");
        }
        // Dots are not kept as they are: "a.b" and "a-b" must not collide.
        assert_ne!(cluster_namespace("a.b"), cluster_namespace("a-b"));
    }

    #[test]
    fn work_names_are_valid_subdomains_and_never_shared() {
        let long = "n".repeat(253);
        let cases = [
            ("", "ConfigMap", Some("default"), "web"),
            ("", "ConfigMap", Some("default"), "web.v2"),
            ("apps", "Deployment", Some("default"), "web"),
            ("", "ConfigMap", Some("other"), "web"),
            (
                "rbac.authorization.k8s.io",
                "ClusterRole",
                None,
                "system:aggregate-to-edit",
            ),
            (
                "rbac.authorization.k8s.io",
                "ClusterRole",
                None,
                "system-aggregate-to-edit",
            ),
            ("", "Namespace", None, "default"),
            ("", "ConfigMap", Some("default"), long.as_str()),
            ("", "ConfigMap", Some("default"), "..--"),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for (group, kind, ns, name) in cases {
            let work = work_name(group, kind, ns, name);
            assert!(
                is_dns1123_subdomain(&work).is_empty(),
                "{kind} {ns:?}/{name:?} gave {work:?}: {:?}",
                is_dns1123_subdomain(&work)
            );
            assert!(seen.insert(work.clone()), "{work} is shared");
        }
        let web = work_name("", "ConfigMap", Some("default"), "web");
        assert!(web.starts_with("configmap.default.web-"), "{web}");
        // Deterministic: the hub and the agent compute the same name.
        assert_eq!(web, work_name("", "ConfigMap", Some("default"), "web"));
    }

    #[test]
    fn a_heartbeat_is_a_new_resource_version_on_the_controllers_clock() {
        let first = observe_heartbeat(None, "10", 1_000);
        assert_eq!(first.seen_at_ms, 1_000);
        assert!(!first.renewed, "the first version seen is no renewal");
        // The same version read later is no renewal.
        let same = observe_heartbeat(Some(&first), "10", 30_000);
        assert_eq!(same, first);
        let renewed = observe_heartbeat(Some(&same), "11", 31_000);
        assert_eq!(renewed.seen_at_ms, 31_000);
        assert!(renewed.renewed);
    }

    #[test]
    fn an_agent_is_alive_while_it_renews_within_the_lease_duration() {
        let lease = Duration::from_secs(40);
        let seen = HeartbeatSeen {
            resource_version: "7".to_owned(),
            seen_at_ms: 10_000,
            renewed: true,
        };
        assert_eq!(
            heartbeat_verdict(Some(&seen), lease, 50_000),
            HeartbeatVerdict::Alive
        );
        let HeartbeatVerdict::Silent(reason) = heartbeat_verdict(Some(&seen), lease, 50_001) else {
            panic!("silent past the lease duration")
        };
        assert!(reason.contains("40s"), "{reason}");
        // The reason does not change while the silence goes on.
        assert_eq!(
            heartbeat_verdict(Some(&seen), lease, 90_000),
            HeartbeatVerdict::Silent(reason)
        );
        assert!(matches!(
            heartbeat_verdict(None, lease, 0),
            HeartbeatVerdict::Silent(r) if r.contains("no heartbeat")
        ));
        // A clock that went backwards (a restarted controller's monotonic clock) is no
        // silence.
        assert_eq!(
            heartbeat_verdict(Some(&seen), lease, 5_000),
            HeartbeatVerdict::Alive
        );
    }

    #[test]
    fn a_lease_seen_once_proves_nothing_until_it_changes_or_expires() {
        // A controller (re)started next to a dead agent's Lease: no verdict for a lease
        // duration, then silent; never alive.
        let lease = Duration::from_secs(40);
        let first = observe_heartbeat(None, "7", 0);
        assert_eq!(
            heartbeat_verdict(Some(&first), lease, 1_000),
            HeartbeatVerdict::Unsettled
        );
        assert!(matches!(
            heartbeat_verdict(Some(&first), lease, 40_001),
            HeartbeatVerdict::Silent(_)
        ));
        // A live agent renews within the duration: alive from its first renewal on.
        let renewed = observe_heartbeat(Some(&first), "8", 10_000);
        assert_eq!(
            heartbeat_verdict(Some(&renewed), lease, 10_000),
            HeartbeatVerdict::Alive
        );
    }
}
