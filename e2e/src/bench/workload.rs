//! The benchmark's objects: M objects, ConfigMaps, Secrets and Deployments in turn, spread
//! over the benchmark namespaces, each with a revision that updates bump.
//!
//! The revision is written twice in every body: in the content (data, or the Deployment's
//! pod template, so a Deployment's generation moves) and in the annotation [`REV_ANNOTATION`].
//! One server-side apply writes both, so a metadata-only watch of the annotation tells exactly
//! when a member holds a revision.
//!
//! KubeFed drops a template's annotations (`AnnotationsNotSupported`): with `--controller
//! kubefed` the revision is carried by the label of the same name instead
//! ([`carry_revision_in_label`]), for every run of the process.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use std::collections::BTreeMap;

use hubfed_api::names::MANAGED_LABEL;
use k8s_openapi::ByteString;
use kube::discovery::ApiResource;
use serde_json::{Value, json};

/// Annotation holding an object's revision.
pub const REV_ANNOTATION: &str = "bench.hubfed.io/rev";
/// The revision is in the label [`REV_ANNOTATION`] rather than the annotation (KubeFed).
static REV_IN_LABEL: AtomicBool = AtomicBool::new(false);

/// Carries the revision in a label from now on (set once, before any object is made).
pub fn carry_revision_in_label() {
    REV_IN_LABEL.store(true, Ordering::Relaxed);
}

fn rev_in_label() -> bool {
    REV_IN_LABEL.load(Ordering::Relaxed)
}

/// `--object-bytes`: the size of the large value of every ConfigMap and Secret (0: the
/// default, small objects).
static OBJECT_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Gives every ConfigMap and Secret template a value of `bytes` bytes (set once, before any
/// object is made); Deployments keep their small template.
pub fn set_object_bytes(bytes: usize) {
    OBJECT_BYTES.store(bytes, Ordering::Relaxed);
}

/// Objects per page when the benchmark lists full objects: 500, fewer with `--object-bytes`
/// (about 20 MB a page).
pub fn list_page() -> u32 {
    match OBJECT_BYTES.load(Ordering::Relaxed) {
        0 => 500,
        bytes => u32::try_from(20_000_000 / bytes)
            .unwrap_or(500)
            .clamp(1, 500),
    }
}

/// The length of a ConfigMap's or Secret's large value: `bytes`, or `default` without
/// `--object-bytes`.
fn large_value(default: usize) -> usize {
    match OBJECT_BYTES.load(Ordering::Relaxed) {
        0 => default,
        bytes => bytes,
    }
}

/// The revision a member object's metadata carries (annotation, or label with KubeFed).
pub fn revision_of(
    labels: Option<&BTreeMap<String, String>>,
    annotations: Option<&BTreeMap<String, String>>,
) -> Option<u32> {
    let carrier = if rev_in_label() { labels } else { annotations };
    carrier?.get(REV_ANNOTATION)?.parse().ok()
}

/// Label on every benchmark object.
pub const BENCH_LABEL: &str = "bench.hubfed.io/object";
/// Prefix of the federated namespaces.
pub const NAMESPACE_PREFIX: &str = "bench-";
/// Prefix of the raw phase's member namespaces (never federated).
pub const RAW_NAMESPACE_PREFIX: &str = "bench-raw-";

/// The kinds of the mix, in turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    ConfigMap,
    Secret,
    Deployment,
}

pub const KINDS: [Kind; 3] = [Kind::ConfigMap, Kind::Secret, Kind::Deployment];

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::ConfigMap => "ConfigMap",
            Kind::Secret => "Secret",
            Kind::Deployment => "Deployment",
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Kind::ConfigMap => "cm",
            Kind::Secret => "secret",
            Kind::Deployment => "deploy",
        }
    }

    fn api_version(self) -> &'static str {
        match self {
            Kind::ConfigMap | Kind::Secret => "v1",
            Kind::Deployment => "apps/v1",
        }
    }

    /// The member type.
    pub fn target(self) -> ApiResource {
        hubfed_e2e::target(self.name())
    }

    /// The hub's `Federated<Kind>` type.
    pub fn federated(self) -> ApiResource {
        hubfed_e2e::federated(self.name())
    }
}

/// Where object `index` lives and what it is.
#[derive(Clone, Debug)]
pub struct ObjectId {
    pub index: usize,
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

/// The benchmark's object set.
#[derive(Clone, Debug)]
pub struct Workload {
    pub objects: usize,
    pub namespaces: usize,
}

impl Workload {
    pub fn namespace_names(&self) -> Vec<String> {
        (0..self.namespaces)
            .map(|n| format!("{NAMESPACE_PREFIX}{n}"))
            .collect()
    }

    pub fn raw_namespace_names(&self) -> Vec<String> {
        (0..self.namespaces)
            .map(|n| format!("{RAW_NAMESPACE_PREFIX}{n}"))
            .collect()
    }

    pub fn id(&self, index: usize) -> ObjectId {
        let kind = KINDS[index % KINDS.len()];
        ObjectId {
            index,
            kind,
            namespace: format!("{NAMESPACE_PREFIX}{}", index % self.namespaces),
            name: format!("{}-{index:05}", kind.prefix()),
        }
    }

    pub fn ids(&self) -> impl Iterator<Item = ObjectId> + '_ {
        (0..self.objects).map(|i| self.id(i))
    }

    /// The object index a member object's name stands for, if it is one of ours.
    pub fn index_of(&self, kind: Kind, namespace: Option<&str>, name: &str) -> Option<usize> {
        let namespace = namespace?;
        if !namespace.starts_with(NAMESPACE_PREFIX) || namespace.starts_with(RAW_NAMESPACE_PREFIX) {
            return None;
        }
        let (prefix, number) = name.rsplit_once('-')?;
        let index: usize = number.parse().ok()?;
        (prefix == kind.prefix() && index < self.objects && self.id(index).kind == kind)
            .then_some(index)
    }
}

/// Deterministic filler so objects have a realistic size (~0.5–1 KiB each).
fn payload(index: usize, rev: u32, len: usize) -> String {
    let seed = format!("object {index} revision {rev} ");
    let mut text = seed.repeat(len / seed.len() + 1);
    text.truncate(len);
    text
}

fn metadata(id: &ObjectId, rev: u32) -> Value {
    if rev_in_label() {
        return json!({
            "labels": {BENCH_LABEL: "true", "app": id.name, REV_ANNOTATION: rev.to_string()},
        });
    }
    json!({
        "labels": {BENCH_LABEL: "true", "app": id.name},
        "annotations": {REV_ANNOTATION: rev.to_string()},
    })
}

/// The federated template of object `id` at revision `rev`: what every member should hold
/// (apart from name, namespace and the managed label).
pub fn template(id: &ObjectId, rev: u32) -> Value {
    let i = id.index;
    match id.kind {
        Kind::ConfigMap => json!({
            "metadata": metadata(id, rev),
            "data": {
                "rev": rev.to_string(),
                "settings.yaml": payload(i, rev, large_value(384)),
                "feature-flags": payload(i + 1, rev, 128),
            },
        }),
        Kind::Secret => {
            let data: BTreeMap<&str, ByteString> = BTreeMap::from([
                ("rev", ByteString(rev.to_string().into_bytes())),
                ("password", ByteString(payload(i, rev, 64).into_bytes())),
                (
                    "tls.key",
                    ByteString(payload(i + 2, rev, large_value(256)).into_bytes()),
                ),
            ]);
            json!({
                "metadata": metadata(id, rev),
                "type": "Opaque",
                "data": data,
            })
        }
        Kind::Deployment => json!({
            "metadata": metadata(id, rev),
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": id.name}},
                "template": {
                    "metadata": {
                        "labels": {"app": id.name},
                        "annotations": {REV_ANNOTATION: rev.to_string()},
                    },
                    "spec": {
                        "containers": [{
                            "name": "app",
                            "image": "registry.invalid/hubfed-bench:1",
                            "args": ["--serve", "--port=8080"],
                            "env": [{"name": "REVISION", "value": rev.to_string()}],
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                        }],
                    },
                },
            },
        }),
    }
}

/// The federated object (hub) of `id` at revision `rev`, placed on `clusters`.
pub fn federated_object(id: &ObjectId, rev: u32, clusters: &[&str]) -> kube::api::DynamicObject {
    hubfed_e2e::federated_object(
        &id.kind.federated(),
        Some(&id.namespace),
        &id.name,
        json!({"template": template(id, rev), "placement": hubfed_e2e::placement(clusters)}),
    )
}

/// A merge patch taking the federated object of `id` to revision `rev`.
pub fn federated_update(id: &ObjectId, rev: u32) -> Value {
    json!({"spec": {"template": template(id, rev)}})
}

/// The member object of `id` at `rev` in `namespace`, as hubfed would apply it (the raw
/// phase writes these). Without the managed label: the raw objects must stay invisible to
/// the controller's member watches.
pub fn member_object(id: &ObjectId, rev: u32, namespace: &str) -> Value {
    let mut body = template(id, rev);
    body["apiVersion"] = json!(id.kind.api_version());
    body["kind"] = json!(id.kind.name());
    body["metadata"]["name"] = json!(id.name);
    body["metadata"]["namespace"] = json!(namespace);
    body
}

/// Bytes of the member objects of `workload` at revision 0 as one member receives them (the
/// JSON of each apply's body; a Secret's data is base64 there), for the MB/s figures.
pub fn member_bytes(workload: &Workload) -> u64 {
    workload
        .ids()
        .map(|id| {
            serde_json::to_vec(&member_object(&id, 0, &id.namespace)).map_or(0, |b| b.len() as u64)
        })
        .sum()
}

/// Whether a member object's full body matches revision `rev` of `id`'s template (checked
/// once at the end: data, Secret bytes, the Deployment's pod template), and is managed.
pub fn member_matches(id: &ObjectId, rev: u32, member: &Value) -> bool {
    let want = template(id, rev);
    let managed = member["metadata"]["labels"][MANAGED_LABEL] == "true";
    let rev_text = rev.to_string();
    let carrier = if rev_in_label() {
        "labels"
    } else {
        "annotations"
    };
    let annotations =
        member["metadata"][carrier][REV_ANNOTATION].as_str() == Some(rev_text.as_str());
    let content = match id.kind {
        Kind::ConfigMap | Kind::Secret => member["data"] == want["data"],
        Kind::Deployment => {
            member["spec"]["template"]["spec"]["containers"][0]["env"]
                == want["spec"]["template"]["spec"]["containers"][0]["env"]
                && member["spec"]["replicas"] == want["spec"]["replicas"]
        }
    };
    managed && annotations && content
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let w = Workload {
            objects: 10,
            namespaces: 3,
        };
        for id in w.ids() {
            assert_eq!(
                w.index_of(id.kind, Some(&id.namespace), &id.name),
                Some(id.index)
            );
        }
        assert_eq!(
            w.index_of(Kind::ConfigMap, Some("bench-raw-0"), "cm-00000"),
            None
        );
        assert_eq!(w.index_of(Kind::Secret, Some("bench-0"), "cm-00000"), None);
        assert_eq!(
            w.index_of(Kind::ConfigMap, Some("bench-0"), "cm-00099"),
            None
        );
    }

    #[test]
    fn payload_has_the_length_asked() {
        for len in [0, 1, 17, 384, 10_000] {
            let text = payload(7, 3, len);
            assert_eq!(text.len(), len);
            assert!(text.starts_with(&"object 7 revision 3 "[..len.min(20)]));
        }
    }

    #[test]
    fn member_body_matches_its_template() {
        let w = Workload {
            objects: 3,
            namespaces: 1,
        };
        for id in w.ids() {
            let mut body = member_object(&id, 2, &id.namespace);
            body["metadata"]["labels"][MANAGED_LABEL] = json!("true");
            assert!(member_matches(&id, 2, &body), "{body}");
            assert!(!member_matches(&id, 3, &body));
        }
    }
}
