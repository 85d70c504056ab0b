//! Drift: changes made to a member copy behind hubfed's back, and which of them are taken back.
//!
//! hubfed writes copies with server-side apply, so the member's `managedFields` say who set
//! what. The policy follows GitOps practice: **changes made by people are reverted, changes
//! made by controllers are kept**. People are the field managers of [`DEFAULT_PEOPLE`] (kubectl
//! and its subcommands), a list the controller's flag
//! `--drift-revert-managers` replaces; every other manager is a controller (an HPA scaling a
//! Deployment, a webhook injecting a sidecar, an API server defaulting a field).
//!
//! Two ways a copy drifts, both seen without an extra request:
//! - a field hubfed applies was changed by another manager: hubfed's apply (not forced) is
//!   refused with a conflict naming the manager and the field ([`conflict_manager`]). People's
//!   fields are applied again with force (reverted); controllers' fields are left out of the
//!   apply to that cluster from then on ([`remove_field`]), so hubfed and the controller do
//!   not fight;
//! - a field hubfed does not apply was added by a person (a key added to a ConfigMap with
//!   `kubectl edit`): the applied object's `managedFields` show it ([`people_fields`]). hubfed
//!   takes the person's ownership over ([`take_over_patch`], as client-go's `csaupgrade` does)
//!   and applies again: server-side apply then removes what hubfed owns and no longer sends.
//!
//! Per federated object the annotation [`DRIFT_ANNOTATION`] chooses: `revert` (the default,
//! as above), `report` (nothing is taken back, drift is only reported) or `revert-all`
//! (KubeFed's behaviour: every field hubfed applies is forced back, whoever changed it).

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The annotation on a federated object choosing its [`DriftMode`].
pub const DRIFT_ANNOTATION: &str = "hubfed.io/drift";

/// Field managers whose changes are people's (a trailing `*` matches any suffix).
/// (`before-first-apply` is not among them: it owns every field an object had before its first
/// server-side apply, defaulted and immutable ones included.)
pub const DEFAULT_PEOPLE: [&str; 2] = ["kubectl", "kubectl-*"];

/// What is done about drift (see the module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DriftMode {
    /// People's changes are reverted, controllers' kept.
    #[default]
    Revert,
    /// Nothing is reverted; drift is reported.
    Report,
    /// Everything hubfed applies is forced back, whoever changed it (KubeFed's behaviour).
    RevertAll,
}

/// The mode an annotation value asks for; `Err` names the values allowed.
pub fn drift_mode(annotation: Option<&str>) -> Result<DriftMode, String> {
    match annotation {
        None | Some("revert") => Ok(DriftMode::Revert),
        Some("report") => Ok(DriftMode::Report),
        Some("revert-all") => Ok(DriftMode::RevertAll),
        Some(other) => Err(format!(
            "annotation {DRIFT_ANNOTATION}: {other:?} is not one of \"revert\", \"report\", \"revert-all\""
        )),
    }
}

/// Whether `manager` is a person's, by `people` (patterns; a trailing `*` matches any suffix).
pub fn is_person(manager: &str, people: &[String]) -> bool {
    people
        .iter()
        .any(|pattern| match pattern.strip_suffix('*') {
            Some(prefix) => manager.starts_with(prefix),
            None => manager == pattern,
        })
}

/// One field another manager set, as the API server names it (`.data.k`,
/// `.spec.containers[name="app"].image`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FieldChange {
    pub manager: String,
    pub field: String,
}

/// The manager a server-side apply conflict names: `conflict with "kubectl-edit" using v1`.
pub fn conflict_manager(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("conflict with \"")?;
    rest.split_once('"').map(|(manager, _)| manager)
}

/// What to do about the fields an apply conflicted on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConflictDecision {
    /// Taken back: the apply is forced.
    pub revert: Vec<FieldChange>,
    /// Not drift: hubfed still co-owns the field with the other manager (both set the same
    /// value, e.g. KubeFed's manager on a copy it wrote, or whoever created an adopted copy),
    /// and the template now changes it. Forced, not reported.
    pub stale: Vec<FieldChange>,
    /// Left to their (controller) owner: left out of the apply.
    pub keep: Vec<FieldChange>,
    /// People's changes left in place because the object asks for `report`.
    pub reported: Vec<FieldChange>,
}

impl ConflictDecision {
    /// Fields to leave out of the apply.
    pub fn left_out(&self) -> impl Iterator<Item = &FieldChange> {
        self.keep.iter().chain(&self.reported)
    }
}

/// Sorts the conflicts of an apply by the policy. `hubfed_owns` says whether hubfed's own
/// `Apply` entry still holds a field (see [`fields_v1_contains`]): then the other manager only
/// co-owns it from before, and the conflict is the template's change, not drift.
pub fn resolve_conflicts(
    conflicts: Vec<FieldChange>,
    mode: DriftMode,
    people: &[String],
    hubfed_owns: impl Fn(&str) -> bool,
) -> ConflictDecision {
    let mut decision = ConflictDecision::default();
    for change in conflicts {
        if hubfed_owns(&change.field) {
            decision.stale.push(change);
            continue;
        }
        let person = is_person(&change.manager, people);
        match mode {
            DriftMode::RevertAll => decision.revert.push(change),
            DriftMode::Revert if person => decision.revert.push(change),
            DriftMode::Report if person => decision.reported.push(change),
            DriftMode::Revert | DriftMode::Report => decision.keep.push(change),
        }
    }
    decision
}

/// Removes the field named like the API server names it (`.a.b`, `.list[key="v"].c`,
/// `.list[2]`, `.set[="v"]`) from an apply body; whether it was there. A field name may hold
/// dots itself (`.data.app.properties`, `.metadata.labels.app.kubernetes.io/name`): names are
/// matched against the keys the body has, longest first.
pub fn remove_field(body: &mut Value, field: &str) -> bool {
    remove_in(body, field)
}

fn remove_in(node: &mut Value, rest: &str) -> bool {
    if let Some(after) = rest.strip_prefix('.') {
        let Some(map) = node.as_object_mut() else {
            return false;
        };
        for key in names_at(map.keys(), after) {
            let remainder = &after[key.len()..];
            if remainder.is_empty() {
                return map.remove(&key).is_some();
            }
            if map
                .get_mut(&key)
                .is_some_and(|child| remove_in(child, remainder))
            {
                return true;
            }
        }
        false
    } else if rest.starts_with('[') {
        let Some((element, remainder)) = list_element(rest) else {
            return false;
        };
        let Some(items) = node.as_array_mut() else {
            return false;
        };
        let Some(at) = element.position(items) else {
            return false;
        };
        if remainder.is_empty() {
            items.remove(at);
            true
        } else {
            remove_in(&mut items[at], remainder)
        }
    } else {
        false
    }
}

/// The keys `rest` (after a `.`) may start with — followed by its end, `.` or `[` — longest
/// first.
fn names_at<'a>(keys: impl Iterator<Item = &'a String>, rest: &str) -> Vec<String> {
    let mut names: Vec<String> = keys
        .filter(|key| {
            rest.strip_prefix(key.as_str())
                .is_some_and(|r| r.is_empty() || r.starts_with(['.', '[']))
        })
        .cloned()
        .collect();
    names.sort_by_key(|k| std::cmp::Reverse(k.len()));
    names
}

/// Whether a `fieldsV1` set holds the field named like the API server names it.
pub fn fields_v1_contains(fields: &Value, field: &str) -> bool {
    let Some(map) = fields.as_object() else {
        return false;
    };
    if let Some(after) = field.strip_prefix('.') {
        let names: Vec<String> = map
            .keys()
            .filter_map(|k| k.strip_prefix("f:").map(str::to_owned))
            .collect();
        names_at(names.iter(), after).into_iter().any(|name| {
            let remainder = &after[name.len()..];
            let child = &map[&format!("f:{name}")];
            remainder.is_empty() || fields_v1_contains(child, remainder)
        })
    } else if field.starts_with('[') {
        let Some((element, remainder)) = list_element(field) else {
            return false;
        };
        map.iter()
            .filter(|(key, _)| element.names(key))
            .any(|(_, child)| remainder.is_empty() || fields_v1_contains(child, remainder))
    } else {
        false
    }
}

/// One `[...]` of a field path.
#[derive(Debug, PartialEq)]
enum Element {
    /// `[3]`
    Index(usize),
    /// `[k="v",n=1]`: the element of a list keyed by these members.
    Key(Map<String, Value>),
    /// `[="v"]`: the element of a set with this value.
    Value(Value),
}

impl Element {
    fn position(&self, items: &[Value]) -> Option<usize> {
        match self {
            Element::Index(at) => (*at < items.len()).then_some(*at),
            Element::Key(keys) => items
                .iter()
                .position(|item| keys.iter().all(|(k, v)| item.get(k) == Some(v))),
            Element::Value(value) => items.iter().position(|item| item == value),
        }
    }

    /// Whether a `fieldsV1` key (`i:3`, `k:{...}`, `v:...`) names this element.
    fn names(&self, key: &str) -> bool {
        match self {
            Element::Index(at) => key.strip_prefix("i:") == Some(at.to_string().as_str()),
            Element::Key(keys) => key
                .strip_prefix("k:")
                .and_then(|k| serde_json::from_str::<Map<String, Value>>(k).ok())
                .is_some_and(|k| &k == keys),
            Element::Value(value) => key
                .strip_prefix("v:")
                .and_then(|v| serde_json::from_str::<Value>(v).ok())
                .is_some_and(|v| &v == value),
        }
    }
}

/// The `[...]` at the start of `rest`, and what follows it.
fn list_element(rest: &str) -> Option<(Element, &str)> {
    let inside_and_more = rest.strip_prefix('[')?;
    let end = closing_bracket(inside_and_more)?;
    let inside = &inside_and_more[..end];
    let element = if let Some(value) = inside.strip_prefix('=') {
        Element::Value(serde_json::from_str(value).ok()?)
    } else if let Ok(at) = inside.parse::<usize>() {
        Element::Index(at)
    } else {
        Element::Key(parse_keys(inside)?)
    };
    Some((element, &inside_and_more[end + 1..]))
}

/// The `]` closing a bracket, skipping quoted strings.
fn closing_bracket(text: &str) -> Option<usize> {
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            ']' if !in_string => return Some(i),
            _ => {}
        }
    }
    None
}

/// `k="v",n=1` into a map; values are JSON.
fn parse_keys(inside: &str) -> Option<Map<String, Value>> {
    let mut keys = Map::new();
    let mut rest = inside;
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let mut stream = serde_json::Deserializer::from_str(after).into_iter::<Value>();
        let value = stream.next()?.ok()?;
        let used = stream.byte_offset();
        keys.insert(key.to_owned(), value);
        rest = after[used..].strip_prefix(',').unwrap_or(&after[used..]);
    }
    Some(keys)
}

/// Fields that are the member's, whoever sets them, as KubeFed retained them: annotations
/// (but those the template sets), finalizers and owner references.
pub const MEMBER_FIELDS: [&str; 3] = [
    ".metadata.annotations",
    ".metadata.finalizers",
    ".metadata.ownerReferences",
];

/// The member's fields of one copy: [`MEMBER_FIELDS`] and the fields hubfed leaves to the
/// member (`retainReplicas`), given as JSON pointers.
pub fn member_fields(released: &[String]) -> Vec<String> {
    MEMBER_FIELDS
        .iter()
        .map(|f| (*f).to_owned())
        .chain(released.iter().map(|pointer| pointer.replace('/', ".")))
        .collect()
}

/// `fields` (a `fieldsV1` set) split into what lies outside the `member` fields (dotted paths)
/// and what lies inside them.
fn split_member_fields(fields: &Value, member: &[String]) -> (Value, Value) {
    let mut outside = fields.clone();
    let mut inside = json!({});
    for path in member {
        let keys: Vec<String> = path
            .trim_start_matches('.')
            .split('.')
            .map(|name| format!("f:{name}"))
            .collect();
        if let Some(subtree) = take_subtree(&mut outside, &keys) {
            let nested = keys
                .iter()
                .rev()
                .fold(subtree, |inner, key| json!({ key: inner }));
            union(&mut inside, &nested);
        }
    }
    (outside, inside)
}

/// Removes the subtree at `keys`, and the parents it leaves empty (they were owned only
/// through it; a leaf field is an empty object, so emptiness is judged only after a removal).
fn take_subtree(node: &mut Value, keys: &[String]) -> Option<Value> {
    let (first, rest) = keys.split_first()?;
    let map = node.as_object_mut()?;
    if rest.is_empty() {
        return map.remove(first);
    }
    let child = map.get_mut(first)?;
    let taken = take_subtree(child, rest)?;
    if child.as_object().is_some_and(Map::is_empty) {
        map.remove(first);
    }
    Some(taken)
}

/// Fields of the main resource that people own, by manager, read from `managedFields`
/// (hubfed's own manager, subresources and the `member` fields — see [`member_fields`] —
/// aside).
pub fn people_fields(
    managed_fields: &[ManagedFieldsEntry],
    hubfed: &str,
    people: &[String],
    member: &[String],
) -> Vec<FieldChange> {
    let mut changes = BTreeSet::new();
    for entry in people_entries(managed_fields, hubfed, people) {
        let manager = entry.manager.clone().unwrap_or_default();
        if let Some(fields) = &entry.fields_v1 {
            let (outside, _) = split_member_fields(&fields.0, member);
            for field in fields_v1_leaves(&outside) {
                changes.insert(FieldChange {
                    manager: manager.clone(),
                    field,
                });
            }
        }
    }
    changes.into_iter().collect()
}

fn people_entries<'a>(
    managed_fields: &'a [ManagedFieldsEntry],
    hubfed: &'a str,
    people: &'a [String],
) -> impl Iterator<Item = &'a ManagedFieldsEntry> {
    managed_fields.iter().filter(move |entry| {
        let manager = entry.manager.as_deref().unwrap_or_default();
        manager != hubfed
            && is_person(manager, people)
            && entry.subresource.as_deref().unwrap_or_default().is_empty()
            && entry
                .fields_v1
                .as_ref()
                .is_some_and(|f| f.0.as_object().is_some_and(|o| !o.is_empty()))
    })
}

/// The leaves of a `fieldsV1` set as paths (`.data.k`, `.spec.ports[port=80]`).
pub fn fields_v1_leaves(fields: &Value) -> Vec<String> {
    let mut leaves = Vec::new();
    collect_leaves(fields, String::new(), &mut leaves);
    leaves
}

fn collect_leaves(node: &Value, path: String, leaves: &mut Vec<String>) {
    let Some(map) = node.as_object() else {
        return;
    };
    let children: Vec<(&String, &Value)> = map.iter().filter(|(k, _)| *k != ".").collect();
    if children.is_empty() || map.contains_key(".") {
        if !path.is_empty() {
            leaves.push(path.clone());
        }
        if children.is_empty() {
            return;
        }
    }
    for (key, child) in children {
        let segment = if let Some(name) = key.strip_prefix("f:") {
            format!(".{name}")
        } else if let Some(keys) = key.strip_prefix("k:") {
            let keys: Map<String, Value> = serde_json::from_str(keys).unwrap_or_default();
            let inner: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("[{}]", inner.join(","))
        } else if let Some(value) = key.strip_prefix("v:") {
            format!("[={value}]")
        } else if let Some(index) = key.strip_prefix("i:") {
            format!("[{index}]")
        } else {
            continue;
        };
        collect_leaves(child, format!("{path}{segment}"), leaves);
    }
}

/// A merge patch handing people's fields — but the `member` fields ([`member_fields`]) — to
/// hubfed's `Apply` entry (their entries keep only the member fields, or go), conditional on
/// `resource_version`: the next apply then removes what hubfed owns and does not send. `None`
/// when there is nothing to hand over, or no `Apply` entry of hubfed's.
pub fn take_over_patch(
    managed_fields: &[ManagedFieldsEntry],
    hubfed: &str,
    people: &[String],
    member: &[String],
    resource_version: &str,
) -> Option<Value> {
    let ours = |e: &ManagedFieldsEntry| {
        e.manager.as_deref() == Some(hubfed)
            && e.operation.as_deref() == Some("Apply")
            && e.subresource.as_deref().unwrap_or_default().is_empty()
    };
    if resource_version.is_empty() || !managed_fields.iter().any(ours) {
        return None;
    }
    let taken: Vec<&ManagedFieldsEntry> = people_entries(managed_fields, hubfed, people).collect();
    let mut handed = json!({});
    let mut entries = Vec::new();
    for entry in managed_fields {
        if !taken.iter().any(|t| std::ptr::eq(*t, entry)) {
            entries.push(entry.clone());
            continue;
        }
        let fields = entry
            .fields_v1
            .as_ref()
            .map_or_else(|| json!({}), |f| f.0.clone());
        let (outside, inside) = split_member_fields(&fields, member);
        union(&mut handed, &outside);
        if inside.as_object().is_some_and(|o| !o.is_empty()) {
            let mut kept = entry.clone();
            kept.fields_v1 = Some(FieldsV1(inside));
            entries.push(kept);
        }
    }
    if handed.as_object().is_none_or(Map::is_empty) {
        return None;
    }
    for entry in entries.iter_mut().filter(|e| ours(e)) {
        let mut fields = entry.fields_v1.take().map_or_else(|| json!({}), |f| f.0);
        union(&mut fields, &handed);
        entry.fields_v1 = Some(FieldsV1(fields));
    }
    Some(json!({
        "metadata": {"resourceVersion": resource_version, "managedFields": entries},
    }))
}

fn union(into: &mut Value, other: &Value) {
    let (Some(into), Some(other)) = (into.as_object_mut(), other.as_object()) else {
        return;
    };
    for (key, value) in other {
        match into.get_mut(key) {
            Some(existing) => union(existing, value),
            None => {
                into.insert(key.clone(), value.clone());
            }
        }
    }
}

/// The last drift seen in one cluster, for `status.clusters[].lastDrift`.
pub use hubfed_api::federated::DriftRecord;

/// The record of `changes` (at most [`MAX_RECORDED_FIELDS`] fields listed).
pub fn drift_record(changes: &[FieldChange], action: &str, now: &str) -> DriftRecord {
    let managers: BTreeSet<&str> = changes.iter().map(|c| c.manager.as_str()).collect();
    let mut fields: Vec<String> = changes.iter().map(|c| c.field.clone()).collect();
    fields.sort();
    fields.dedup();
    let more = fields.len().saturating_sub(MAX_RECORDED_FIELDS);
    fields.truncate(MAX_RECORDED_FIELDS);
    if more > 0 {
        fields.push(format!("… and {more} more"));
    }
    DriftRecord {
        time: now.to_owned(),
        action: action.to_owned(),
        managers: managers.into_iter().map(str::to_owned).collect(),
        fields,
    }
}

/// How many fields a [`DriftRecord`] lists.
pub const MAX_RECORDED_FIELDS: usize = 10;

/// What was done about a drift, in a [`DriftRecord`] and the `Drifted` event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DriftAction {
    Reverted,
    Reported,
}

impl DriftAction {
    pub fn as_str(self) -> &'static str {
        match self {
            DriftAction::Reverted => "Reverted",
            DriftAction::Reported => "Reported",
        }
    }
}

#[cfg(test)]
mod tests;
