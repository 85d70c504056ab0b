//! Federated types: finding a type by the names people use (discovery,
//! docs/kubefed-compatibility.md §3 `enable`), the enabled types of the hub, and a federated
//! object of the hub by `KIND/NAME`. `enable` and `disable` are in `enable.rs`.

use hubfed_api::federatedtypeconfig::{ApiResource, FederatedTypeConfig, ResourceScope};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::api::Api;

use crate::control_plane::list_ftcs;
use crate::error::{Error, Result};
use crate::kubeconfig::Target;

/// One API type as discovery describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct DiscoveredType {
    pub resource: ApiResource,
    pub singular: String,
    pub short_names: Vec<String>,
    pub verbs: Vec<String>,
    /// A `scale` subresource: for built-in types, an int32 `spec.replicas`.
    pub has_scale: bool,
}

impl DiscoveredType {
    fn matches(&self, wanted: &str) -> bool {
        let r = &self.resource;
        wanted == r.plural_name
            || wanted == self.singular
            || wanted == r.kind.to_lowercase()
            || self.short_names.iter().any(|s| s == wanted)
            || (!r.group.is_empty() && wanted == format!("{}.{}", r.plural_name, r.group))
            || (!r.group.is_empty() && wanted == format!("{}.{}", r.kind.to_lowercase(), r.group))
    }
}

/// The types of one discovery document (`/api/v1` or `/apis/<group>/<version>`).
fn types_of_list(list: &APIResourceList) -> Vec<DiscoveredType> {
    let (group, version) = match list.group_version.split_once('/') {
        Some((group, version)) => (group.to_owned(), version.to_owned()),
        None => (String::new(), list.group_version.clone()),
    };
    list.resources
        .iter()
        .filter(|r| !r.name.contains('/'))
        .map(|r| DiscoveredType {
            resource: ApiResource {
                group: group.clone(),
                version: version.clone(),
                kind: r.kind.clone(),
                plural_name: r.name.clone(),
                scope: if r.namespaced {
                    ResourceScope::Namespaced
                } else {
                    ResourceScope::Cluster
                },
            },
            singular: if r.singular_name.is_empty() {
                r.kind.to_lowercase()
            } else {
                r.singular_name.clone()
            },
            short_names: r.short_names.clone().unwrap_or_default(),
            verbs: r.verbs.clone(),
            has_scale: list
                .resources
                .iter()
                .any(|s| s.name == format!("{}/scale", r.name)),
        })
        .collect()
}

/// Every type the cluster serves, in `version` where the group serves it, else in the
/// group's preferred version. Groups whose discovery fails (an aggregated API that is down)
/// are skipped.
pub async fn discover(target: &Target, version: Option<&str>) -> Result<Vec<DiscoveredType>> {
    let client = &target.client;
    let mut types = Vec::new();
    let core = client
        .list_core_api_resources("v1")
        .await
        .map_err(|e| target.err(e))?;
    types.extend(types_of_list(&core));
    let groups = client.list_api_groups().await.map_err(|e| target.err(e))?;
    for group in groups.groups {
        let chosen = version
            .and_then(|v| group.versions.iter().find(|gv| gv.version == v))
            .or(group.preferred_version.as_ref())
            .or(group.versions.first());
        let Some(chosen) = chosen else { continue };
        if let Ok(list) = client.list_api_group_resources(&chosen.group_version).await {
            types.extend(types_of_list(&list));
        }
    }
    Ok(types)
}

/// Finds `name` among `types` (plural, singular, kind, short name, `plural.group` or
/// `kind.group`, case-insensitive). Several groups matching: the core group wins, else it
/// is ambiguous.
pub fn find_type<'a>(name: &str, types: &'a [DiscoveredType]) -> Result<&'a DiscoveredType> {
    let wanted = name.to_lowercase();
    let matches: Vec<&DiscoveredType> = types.iter().filter(|t| t.matches(&wanted)).collect();
    match matches.as_slice() {
        [] => Err(Error::UnknownType {
            name: name.to_owned(),
            reason: "the hub cluster serves no such resource".to_owned(),
        }),
        [one] => Ok(one),
        several => {
            let mut core = several.iter().filter(|t| t.resource.group.is_empty());
            if let (Some(first), None) = (core.next(), core.next()) {
                return Ok(first);
            }
            let mut names: Vec<String> = several
                .iter()
                .map(|t| t.resource.group_qualified_name())
                .collect();
            names.sort();
            names.dedup();
            Err(Error::UnknownType {
                name: name.to_owned(),
                reason: format!(
                    "it is ambiguous ({}); give it as plural.group",
                    names.join(", ")
                ),
            })
        }
    }
}

/// Finds the FederatedTypeConfig `name` refers to: its own name, the target's plural, kind or
/// `plural.group`, or the federated type's kind or plural.
pub fn find_ftc<'a>(
    name: &str,
    ftcs: &'a [FederatedTypeConfig],
) -> Option<&'a FederatedTypeConfig> {
    let wanted = name.to_lowercase();
    let matches = |ftc: &&FederatedTypeConfig| {
        let target = &ftc.spec.target_type;
        let federated = &ftc.spec.federated_type;
        ftc.metadata.name.as_deref() == Some(wanted.as_str())
            || wanted == target.plural_name
            || wanted == target.kind.to_lowercase()
            || wanted == target.group_qualified_name()
            || wanted == federated.kind.to_lowercase()
            || wanted == federated.plural_name
            || wanted == federated.group_qualified_name()
    };
    let found: Vec<&FederatedTypeConfig> = ftcs.iter().filter(matches).collect();
    match found.as_slice() {
        [one] => Some(one),
        several => several
            .iter()
            .find(|f| f.spec.target_type.group.is_empty())
            .copied(),
    }
}

/// The enabled federated type `name` refers to. Names only discovery knows (singular, short
/// names) are looked up there; a type that exists but is not federated is an error saying
/// how to enable it.
pub async fn resolve_enabled(
    hub: &Target,
    namespace: &str,
    name: &str,
) -> Result<FederatedTypeConfig> {
    let ftcs = list_ftcs(hub, namespace).await?;
    if let Some(ftc) = find_ftc(name, &ftcs) {
        return Ok(ftc.clone());
    }
    let types = discover(hub, None).await?;
    let found = find_type(name, &types)?;
    let qualified = found.resource.group_qualified_name();
    ftcs.iter()
        .find(|f| f.metadata.name.as_deref() == Some(qualified.as_str()))
        .cloned()
        .ok_or_else(|| {
            Error::Refused(format!(
                "type {qualified:?} is not enabled for federation; run: hubfedctl enable {qualified}"
            ))
        })
}

/// A federated object of the hub named `KIND/NAME` (as `status`, `diff` and `rollout` take
/// it), with its FederatedTypeConfig, API and namespace (`namespace` or the context's, for
/// namespaced types).
pub struct HubObject {
    pub ftc: FederatedTypeConfig,
    pub api: Api<kube::api::DynamicObject>,
    pub namespace: Option<String>,
    pub object: kube::api::DynamicObject,
    /// `FederatedDeployment shop/web`, for messages.
    pub shown: String,
}

/// Reads the federated object `target` (`KIND/NAME`) from the hub.
pub async fn hub_object(
    hub: &Target,
    kubefed_ns: &str,
    target: &str,
    namespace: Option<&str>,
) -> Result<HubObject> {
    let Some((type_name, name)) = target.split_once('/').filter(|(_, n)| !n.is_empty()) else {
        return Err(Error::Usage(format!(
            "{target:?}: give KIND/NAME, e.g. deployments/web"
        )));
    };
    let ftc = resolve_enabled(hub, kubefed_ns, type_name).await?;
    let resource = ftc.spec.federated_type.to_dynamic();
    let namespace = ftc
        .federated_namespaced()
        .then(|| namespace.map_or_else(|| hub.default_namespace.clone(), str::to_owned));
    let api: Api<kube::api::DynamicObject> = match &namespace {
        Some(ns) => Api::namespaced_with(hub.client.clone(), ns, &resource),
        None => Api::all_with(hub.client.clone(), &resource),
    };
    let shown = format!(
        "{} {}{name}",
        resource.kind,
        namespace
            .as_deref()
            .map(|n| format!("{n}/"))
            .unwrap_or_default()
    );
    let object = api
        .get_opt(name)
        .await
        .map_err(|e| hub.err(e))?
        .ok_or_else(|| Error::NotFound(format!("{shown} not found in the hub")))?;
    Ok(HubObject {
        ftc,
        api,
        namespace,
        object,
        shown,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;

    fn api_resource(name: &str, kind: &str, singular: &str, short: &[&str]) -> APIResource {
        APIResource {
            name: name.into(),
            kind: kind.into(),
            singular_name: singular.into(),
            namespaced: true,
            short_names: Some(short.iter().map(|s| (*s).to_owned()).collect()),
            verbs: vec!["get".into(), "list".into()],
            ..APIResource::default()
        }
    }

    fn discovered() -> Vec<DiscoveredType> {
        let core = APIResourceList {
            group_version: "v1".into(),
            resources: vec![
                api_resource("configmaps", "ConfigMap", "configmap", &["cm"]),
                api_resource("events", "Event", "event", &["ev"]),
                api_resource("pods/log", "Pod", "", &[]),
            ],
        };
        let apps = APIResourceList {
            group_version: "apps/v1".into(),
            resources: vec![
                api_resource("deployments", "Deployment", "deployment", &["deploy"]),
                api_resource("deployments/scale", "Scale", "", &[]),
            ],
        };
        let events = APIResourceList {
            group_version: "events.k8s.io/v1".into(),
            resources: vec![api_resource("events", "Event", "event", &["ev"])],
        };
        let widgets = APIResourceList {
            group_version: "example.io/v1".into(),
            resources: vec![api_resource("widgets", "Widget", "widget", &[])],
        };
        let other_widgets = APIResourceList {
            group_version: "other.io/v1".into(),
            resources: vec![api_resource("widgets", "Widget", "widget", &[])],
        };
        [core, apps, events, widgets, other_widgets]
            .iter()
            .flat_map(types_of_list)
            .collect()
    }

    #[test]
    fn discovery_lists_become_types_without_subresources() {
        let types = discovered();
        assert!(types.iter().all(|t| !t.resource.plural_name.contains('/')));
        let deployments = types
            .iter()
            .find(|t| t.resource.plural_name == "deployments")
            .unwrap();
        assert_eq!(deployments.resource.group, "apps");
        assert_eq!(deployments.resource.version, "v1");
        assert!(deployments.has_scale);
    }

    #[test]
    fn types_are_found_by_every_name_people_use() {
        let types = discovered();
        for name in [
            "deployments",
            "deployment",
            "Deployment",
            "deploy",
            "deployments.apps",
        ] {
            assert_eq!(
                find_type(name, &types)
                    .unwrap()
                    .resource
                    .group_qualified_name(),
                "deployments.apps",
                "{name}"
            );
        }
        assert_eq!(
            find_type("cm", &types).unwrap().resource.plural_name,
            "configmaps"
        );
        // The core group wins over events.k8s.io.
        assert_eq!(find_type("events", &types).unwrap().resource.group, "");
        assert_eq!(
            find_type("events.events.k8s.io", &types)
                .unwrap()
                .resource
                .group,
            "events.k8s.io"
        );
    }

    #[test]
    fn unknown_and_ambiguous_types_are_errors() {
        let types = discovered();
        let unknown = find_type("gizmos", &types).unwrap_err().to_string();
        assert_eq!(
            unknown,
            "unknown type \"gizmos\": the hub cluster serves no such resource"
        );
        let ambiguous = find_type("widget", &types).unwrap_err().to_string();
        assert!(
            ambiguous.contains("ambiguous (widgets.example.io, widgets.other.io)"),
            "{ambiguous}"
        );
        assert!(find_type("widgets.other.io", &types).is_ok());
    }

    #[test]
    fn ftcs_are_found_by_target_or_federated_names() {
        let ftcs = hubfed_api::defaulttypes::default_federated_type_configs("ns");
        for (name, expected) in [
            ("configmaps", "configmaps"),
            ("ConfigMap", "configmaps"),
            ("FederatedConfigMap", "configmaps"),
            ("federatedconfigmaps", "configmaps"),
            ("deployments.apps", "deployments.apps"),
            ("federateddeployments.types.kubefed.io", "deployments.apps"),
            ("namespaces", "namespaces"),
        ] {
            let found = find_ftc(name, &ftcs).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(found.metadata.name.as_deref(), Some(expected), "{name}");
        }
        assert!(find_ftc("statefulsets", &ftcs).is_none());
    }
}
