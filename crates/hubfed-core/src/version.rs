//! Versions: KubeFed's template/overrides hashes, per-cluster object versions and the
//! `PropagatedVersion` status (docs/kubefed-compatibility.md §1.7, KubeFed `sync/resource.go`,
//! `sync/version/*`, `util/propagatedversion.go`), plus hubfed's decision whether a member needs an
//! apply.
//!
//! The hashes are byte-identical to KubeFed's, so PropagatedVersions written by either agree:
//! `templateVersion = hex(md5(E(spec.template)))`, `overridesVersion =
//! hex(md5(E({"overrides": OV})))` where `E` is [`go_json_encode`] and `OV` is the overrides
//! in KubeFed's Go struct shape (field order `clusterName`, `clusterOverrides`; `op`, `path`,
//! `value`; empty fields omitted; every number a `float64`).

use std::collections::{BTreeMap, BTreeSet};

use hubfed_api::federated::ClusterOverrides;
use md5::{Digest, Md5};
use serde_json::Value;

pub use crate::gojson::go_json_encode;
use crate::gojson::{NumberMode, write_string, write_value};

const GENERATION_PREFIX: &str = "gen:";
const RESOURCE_VERSION_PREFIX: &str = "rv:";

fn md5_hex(bytes: &[u8]) -> String {
    hex::encode(Md5::digest(bytes))
}

/// `templateVersion`: md5 of the Go encoding of `spec.template`; `""` when there is none.
pub fn template_version(template: Option<&Value>) -> String {
    template.map_or_else(String::new, |t| md5_hex(go_json_encode(t).as_bytes()))
}

/// `overridesVersion`: md5 of the Go encoding of `{"overrides": spec.overrides}`. Absent
/// overrides hash as `{"overrides":null}`, an empty list as `{"overrides":[]}`.
///
/// (KubeFed returns `""` when `spec` itself is absent; `spec` is required by every federated
/// CRD, so callers never have that case.)
pub fn overrides_version(overrides: Option<&[ClusterOverrides]>) -> String {
    md5_hex(encode_overrides(overrides).as_bytes())
}

/// The exact bytes KubeFed hashes for `overridesVersion`.
fn encode_overrides(overrides: Option<&[ClusterOverrides]>) -> String {
    let mut out = String::from("{\"overrides\":");
    match overrides {
        None => out.push_str("null"),
        Some(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str("{\"clusterName\":");
                write_string(&mut out, &item.cluster_name);
                if !item.cluster_overrides.is_empty() {
                    out.push_str(",\"clusterOverrides\":[");
                    for (j, o) in item.cluster_overrides.iter().enumerate() {
                        if j > 0 {
                            out.push(',');
                        }
                        out.push('{');
                        if !o.op.is_empty() {
                            out.push_str("\"op\":");
                            write_string(&mut out, &o.op);
                            out.push(',');
                        }
                        out.push_str("\"path\":");
                        write_string(&mut out, &o.path);
                        // `interface{}` with omitempty: only nil (JSON null) is omitted.
                        if let Some(value) = o.value.as_ref().filter(|v| !v.is_null()) {
                            out.push_str(",\"value\":");
                            write_value(&mut out, value, NumberMode::Float64);
                        }
                        out.push('}');
                    }
                    out.push(']');
                }
                out.push('}');
            }
            out.push(']');
        }
    }
    out.push_str("}\n");
    out
}

/// hubfed's hash of a desired member object (md5 of its Go encoding), recorded after an apply
/// so a change of the desired state is noticed even when template and overrides hashes match
/// (e.g. `retainReplicas` toggled, or a hubfed upgrade that builds objects differently).
pub fn desired_hash(desired: &Value) -> String {
    md5_hex(go_json_encode(desired).as_bytes())
}

/// `ObjectVersion`: `gen:<generation>` when the generation is non-zero, else
/// `rv:<resourceVersion>`.
pub fn object_version(generation: i64, resource_version: &str) -> String {
    if generation != 0 {
        format!("{GENERATION_PREFIX}{generation}")
    } else {
        format!("{RESOURCE_VERSION_PREFIX}{resource_version}")
    }
}

/// [`object_version`] of a member object, read from its metadata.
pub fn object_version_of(object: &Value) -> String {
    let generation = object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let resource_version = object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    object_version(generation, resource_version)
}

/// The (Cluster)PropagatedVersion types and naming are the API's; decisions here fill them.
pub use hubfed_api::propagatedversion::{
    ClusterObjectVersion, PropagatedVersionStatus, propagated_version_name,
};

/// The per-cluster versions recorded for the current template and overrides (KubeFed
/// `VersionManager.Get`): empty when nothing is stored or the stored hashes are stale, so a
/// template or overrides change makes every cluster need an update.
pub fn recorded_cluster_versions(
    stored: Option<&PropagatedVersionStatus>,
    template_version: &str,
    overrides_version: &str,
) -> BTreeMap<String, String> {
    match stored {
        Some(s)
            if s.template_version == template_version
                && s.override_version == overrides_version =>
        {
            s.cluster_versions
                .iter()
                .map(|v| (v.cluster_name.clone(), v.version.clone()))
                .collect()
        }
        _ => BTreeMap::new(),
    }
}

/// The PropagatedVersion status to write after a reconcile, or `None` when the stored one is
/// already equal (KubeFed `VersionManager.Update`).
///
/// `new_versions` are the object versions returned by this reconcile's successful writes.
/// Stored versions of still-selected clusters without a new write are kept when the stored
/// hashes match the current ones; all others are dropped. Empty versions are dropped; entries
/// are sorted by cluster name.
pub fn update_propagated_version(
    stored: Option<&PropagatedVersionStatus>,
    template_version: &str,
    overrides_version: &str,
    selected: &BTreeSet<String>,
    new_versions: &BTreeMap<String, String>,
) -> Option<PropagatedVersionStatus> {
    let mut merged = new_versions.clone();
    for (cluster, version) in recorded_cluster_versions(stored, template_version, overrides_version)
    {
        if selected.contains(&cluster) {
            merged.entry(cluster).or_insert(version);
        }
    }
    let status = PropagatedVersionStatus {
        template_version: template_version.to_owned(),
        override_version: overrides_version.to_owned(),
        cluster_versions: merged
            .into_iter()
            .filter(|(_, version)| !version.is_empty())
            .map(|(cluster_name, version)| ClusterObjectVersion {
                cluster_name,
                version,
            })
            .collect(),
    };
    (stored != Some(&status)).then_some(status)
}

/// KubeFed's `ObjectNeedsUpdate(desired, clusterObj, recordedVersion)`, kept for reference and
/// for callers holding whole objects: update when the member's version differs from the
/// recorded one, or when the version is generation-based (metadata changes do not bump the
/// generation) and name, namespace, labels or annotations differ.
pub fn object_needs_update(desired: &Value, member: &Value, recorded_version: &str) -> bool {
    let current = object_version_of(member);
    if recorded_version != current {
        return true;
    }
    let meta_equal = ["/metadata/name", "/metadata/namespace"]
        .iter()
        .all(|p| string_at(desired, p) == string_at(member, p))
        && ["/metadata/labels", "/metadata/annotations"]
            .iter()
            .all(|p| string_map_at(desired, p) == string_map_at(member, p));
    current.starts_with(GENERATION_PREFIX) && !meta_equal
}

/// What hubfed remembers about its last successful apply to one cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordedApply {
    /// [`object_version`] of the member object returned by the apply (from the
    /// PropagatedVersion via [`recorded_cluster_versions`]).
    pub version: String,
    /// [`desired_hash`] of the object applied, when known (hubfed extension; `None` after a
    /// restart if the controller keeps it in memory, or for objects last written by KubeFed).
    pub desired_hash: Option<String>,
}

/// Whether the desired object must be applied to a member that already carries the managed
/// label (hubfed's `ObjectNeedsUpdate`).
///
/// Apply when nothing is recorded, when the member's `current_version` differs from the
/// recorded one (someone else changed it since), when the recorded desired hash differs from
/// `desired_hash`, or when the version is generation-based and a desired label or annotation
/// is missing or different on the member. Unlike KubeFed, extra member labels and annotations
/// are fine: with server-side apply they belong to other managers.
pub fn needs_apply(
    recorded: Option<&RecordedApply>,
    current_version: &str,
    desired: &Value,
    desired_hash: &str,
    member_labels: &BTreeMap<String, String>,
    member_annotations: &BTreeMap<String, String>,
) -> bool {
    let Some(recorded) = recorded else {
        return true;
    };
    if recorded.version != current_version {
        return true;
    }
    if recorded
        .desired_hash
        .as_deref()
        .is_some_and(|h| h != desired_hash)
    {
        return true;
    }
    let contained = |pointer: &str, member: &BTreeMap<String, String>| {
        string_map_at(desired, pointer)
            .iter()
            .all(|(k, v)| member.get(k) == Some(v))
    };
    current_version.starts_with(GENERATION_PREFIX)
        && !(contained("/metadata/labels", member_labels)
            && contained("/metadata/annotations", member_annotations))
}

fn string_at<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// A `map[string]string` field; non-string values are ignored.
pub(crate) fn string_map_at(object: &Value, pointer: &str) -> BTreeMap<String, String> {
    object
        .pointer(pointer)
        .and_then(Value::as_object)
        .map(|map| {
            map.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
