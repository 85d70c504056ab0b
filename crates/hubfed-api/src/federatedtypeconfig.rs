//! `FederatedTypeConfig` (`core.kubefed.io/v1beta1`, docs/kubefed-compatibility.md §1.5): which
//! target type is federated, under which `Federated<Kind>` type, and whether propagation runs.

use kube::CustomResource;
use kube::core::{ApiResource as DynamicApiResource, GroupVersionKind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::names::{NAMESPACES_FTC_NAME, TYPES_GROUP, TYPES_VERSION};

/// Scope of a resource type (`apiextensions.ResourceScope`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ResourceScope {
    Cluster,
    Namespaced,
}

impl ResourceScope {
    /// The exact wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Cluster => "Cluster",
            Self::Namespaced => "Namespaced",
        }
    }
}

/// `Enabled` / `Disabled`, the shape of every KubeFed on/off switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum EnabledDisabled {
    Enabled,
    Disabled,
}

impl EnabledDisabled {
    pub const fn is_enabled(self) -> bool {
        matches!(self, Self::Enabled)
    }

    /// The exact wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Enabled => "Enabled",
            Self::Disabled => "Disabled",
        }
    }
}

/// `spec.propagation`.
pub type PropagationMode = EnabledDisabled;
/// `spec.statusCollection`.
pub type StatusCollectionMode = EnabledDisabled;

/// State of a per-type controller, reported in the FTC status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ControllerStatus {
    Running,
    NotRunning,
}

/// Which target type to federate and how.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "core.kubefed.io",
    version = "v1beta1",
    kind = "FederatedTypeConfig",
    namespaced,
    shortname = "ftc",
    status = "FederatedTypeConfigStatus",
    derive = "PartialEq",
    doc = "Configures federation of one target type. Named `<plural>[.<group>]` of the target and only honoured in the KubeFed namespace."
)]
#[serde(rename_all = "camelCase")]
pub struct FederatedTypeConfigSpec {
    /// The type whose objects are propagated to member clusters.
    pub target_type: ApiResource,
    /// Whether member clusters are written at all.
    pub propagation: PropagationMode,
    /// The `Federated<Kind>` type holding template, placement and overrides.
    pub federated_type: ApiResource,
    /// The legacy status type; group and version default to the federated type's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_type: Option<ApiResource>,
    /// Whether member status is collected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::condition::optional_enum_schema::<StatusCollectionMode>")]
    pub status_collection: Option<StatusCollectionMode>,
}

/// How to reach one API type (KubeFed `APIResource`; not kube's dynamic `ApiResource`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiResource {
    /// API group; empty for the core group.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    pub version: String,
    /// CamelCase singular kind, e.g. `ConfigMap`.
    pub kind: String,
    /// Lowercase plural resource name, e.g. `configmaps`.
    pub plural_name: String,
    pub scope: ResourceScope,
}

/// Written by the FTC controller; clients wait for `observedGeneration == generation`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederatedTypeConfigStatus {
    pub observed_generation: i64,
    /// State of the sync (propagation) controller for this type.
    pub propagation_controller: ControllerStatus,
    /// State of the legacy status controller for this type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::condition::optional_enum_schema::<ControllerStatus>")]
    pub status_controller: Option<ControllerStatus>,
}

/// KubeFed's `PluralName`: lowercase the kind, then `+es` after s/x/ch/sh/z/o, `y` → `ies`,
/// else `+s`. Kept naive on purpose: FTC defaults must match KubeFed's, not English.
pub fn plural_name(kind: &str) -> String {
    let lower = kind.to_lowercase();
    if ["s", "x", "ch", "sh", "z", "o"]
        .iter()
        .any(|suffix| lower.ends_with(suffix))
    {
        format!("{lower}es")
    } else if let Some(stem) = lower.strip_suffix('y') {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
    }
}

impl ApiResource {
    /// `<plural>` for the core group, `<plural>.<group>` otherwise (KubeFed
    /// `GroupQualifiedName`); this is the FTC name of a target type.
    pub fn group_qualified_name(&self) -> String {
        if self.group.is_empty() {
            self.plural_name.clone()
        } else {
            format!("{}.{}", self.plural_name, self.group)
        }
    }

    pub fn namespaced(&self) -> bool {
        self.scope == ResourceScope::Namespaced
    }

    /// `apiVersion` of objects of this type (`v1` for the core group).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn gvk(&self) -> GroupVersionKind {
        GroupVersionKind::gvk(&self.group, &self.version, &self.kind)
    }

    /// The kube dynamic-client description of this type, for `Api::<DynamicObject>`.
    pub fn to_dynamic(&self) -> DynamicApiResource {
        DynamicApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version: self.api_version(),
            kind: self.kind.clone(),
            plural: self.plural_name.clone(),
        }
    }
}

impl FederatedTypeConfig {
    /// The FTC KubeFed's `enable` writes for `target` (docs/kubefed-compatibility.md §3): named
    /// after the target, federated kind `Federated<Kind>`, plural `federated<plural>`, propagation
    /// enabled.
    pub fn for_target(target: ApiResource, namespace: &str) -> Self {
        Self::for_target_in_group(target, namespace, TYPES_GROUP, TYPES_VERSION)
    }

    /// [`Self::for_target`] with a non-default federated group/version.
    pub fn for_target_in_group(
        target: ApiResource,
        namespace: &str,
        federated_group: &str,
        federated_version: &str,
    ) -> Self {
        let name = target.group_qualified_name();
        let federated_scope = if name == NAMESPACES_FTC_NAME {
            ResourceScope::Namespaced
        } else {
            target.scope
        };
        let federated_type = ApiResource {
            group: federated_group.to_owned(),
            version: federated_version.to_owned(),
            kind: format!("Federated{}", target.kind),
            plural_name: format!("federated{}", target.plural_name),
            scope: federated_scope,
        };
        let mut ftc = Self::new(
            &name,
            FederatedTypeConfigSpec {
                target_type: target,
                propagation: PropagationMode::Enabled,
                federated_type,
                status_type: None,
                status_collection: None,
            },
        );
        ftc.metadata.namespace = Some(namespace.to_owned());
        ftc
    }

    fn name_str(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// KubeFed's `SetFederatedTypeConfigDefaults`: fill empty target plural/group from the
    /// FTC name, the federated plural from its kind, and the status type from the federated
    /// type. Controllers apply it on read; there is no defaulting webhook.
    pub fn set_defaults(&mut self) {
        let name = self.metadata.name.clone().unwrap_or_default();
        let (target_plural, target_group) = match name.split_once('.') {
            Some((plural, group)) => (plural, Some(group)),
            None => (name.as_str(), None),
        };
        let spec = &mut self.spec;
        default_string(&mut spec.target_type.plural_name, target_plural);
        if let Some(group) = target_group {
            default_string(&mut spec.target_type.group, group);
        }
        let federated_plural = plural_name(&spec.federated_type.kind);
        default_string(&mut spec.federated_type.plural_name, &federated_plural);
        if let Some(status_type) = spec.status_type.as_mut() {
            let status_plural = plural_name(&status_type.kind);
            default_string(&mut status_type.plural_name, &status_plural);
            default_string(&mut status_type.group, &spec.federated_type.group);
            default_string(&mut status_type.version, &spec.federated_type.version);
        }
    }

    /// Whether this FTC federates `namespaces`, the type every namespaced type depends on.
    pub fn is_namespace(&self) -> bool {
        self.name_str() == NAMESPACES_FTC_NAME
    }

    pub fn target_namespaced(&self) -> bool {
        self.spec.target_type.namespaced()
    }

    /// Whether `Federated<Kind>` objects are namespaced. FederatedNamespace is namespaced
    /// although Namespace is not, so placement works with namespace-scoped permissions.
    pub fn federated_namespaced(&self) -> bool {
        self.is_namespace() || self.target_namespaced()
    }

    pub fn propagation_enabled(&self) -> bool {
        self.spec.propagation.is_enabled()
    }

    /// KubeFed's `GetStatusEnabled`: the legacy status controller only ever ran for
    /// `services`.
    pub fn status_enabled(&self) -> bool {
        self.spec
            .status_collection
            .is_some_and(EnabledDisabled::is_enabled)
            && self.name_str() == "services"
    }
}

fn default_string(value: &mut String, default: &str) {
    if value.is_empty() {
        default.clone_into(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plural_name_follows_kubefed() {
        let cases = [
            ("Deployment", "deployments"),
            ("FederatedDeployment", "federateddeployments"),
            ("Ingress", "ingresses"),
            ("Box", "boxes"),
            ("Patch", "patches"),
            ("Mesh", "meshes"),
            ("Quiz", "quizes"),
            ("Potato", "potatoes"),
            ("NetworkPolicy", "networkpolicies"),
            // Naive on purpose, exactly as KubeFed.
            ("Gateway", "gatewaies"),
            ("Endpoints", "endpointses"),
            ("", "s"),
        ];
        for (kind, plural) in cases {
            assert_eq!(plural_name(kind), plural, "{kind}");
        }
    }

    fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
        ApiResource {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural_name: plural.into(),
            scope: ResourceScope::Namespaced,
        }
    }

    fn ftc(name: &str, spec: FederatedTypeConfigSpec) -> FederatedTypeConfig {
        FederatedTypeConfig::new(name, spec)
    }

    #[test]
    fn defaults_fill_only_empty_fields() {
        let mut config = ftc(
            "deployments.apps",
            FederatedTypeConfigSpec {
                target_type: resource("", "Deployment", ""),
                propagation: PropagationMode::Enabled,
                federated_type: resource("types.kubefed.io", "FederatedDeployment", ""),
                status_type: Some(ApiResource {
                    version: String::new(),
                    ..resource("", "DeploymentStatus", "")
                }),
                status_collection: None,
            },
        );
        config.spec.federated_type.version = "v1beta1".into();
        config.set_defaults();
        let spec = &config.spec;
        assert_eq!(spec.target_type.plural_name, "deployments");
        assert_eq!(spec.target_type.group, "apps");
        assert_eq!(spec.federated_type.plural_name, "federateddeployments");
        let status_type = spec.status_type.as_ref().unwrap();
        assert_eq!(status_type.plural_name, "deploymentstatuses");
        assert_eq!(status_type.group, "types.kubefed.io");
        assert_eq!(status_type.version, "v1beta1");

        // Set values win.
        let mut config = ftc(
            "widgets.example.com",
            FederatedTypeConfigSpec {
                target_type: resource("other.io", "Widget", "widgetz"),
                propagation: PropagationMode::Disabled,
                federated_type: resource("types.kubefed.io", "FederatedWidget", "fwidgets"),
                status_type: None,
                status_collection: None,
            },
        );
        let before = config.clone();
        config.set_defaults();
        assert_eq!(config, before);
    }

    #[test]
    fn core_group_name_sets_no_group() {
        let mut config = ftc(
            "configmaps",
            FederatedTypeConfigSpec {
                target_type: resource("", "ConfigMap", ""),
                propagation: PropagationMode::Enabled,
                federated_type: resource("types.kubefed.io", "FederatedConfigMap", ""),
                status_type: None,
                status_collection: None,
            },
        );
        config.set_defaults();
        assert_eq!(config.spec.target_type.plural_name, "configmaps");
        assert_eq!(config.spec.target_type.group, "");
        assert_eq!(config.spec.target_type.group_qualified_name(), "configmaps");
        assert_eq!(config.spec.target_type.api_version(), "v1");
    }

    #[test]
    fn status_enabled_only_for_services() {
        let spec = FederatedTypeConfigSpec {
            target_type: resource("", "Service", "services"),
            propagation: PropagationMode::Enabled,
            federated_type: resource("types.kubefed.io", "FederatedService", "federatedservices"),
            status_type: None,
            status_collection: Some(StatusCollectionMode::Enabled),
        };
        assert!(ftc("services", spec.clone()).status_enabled());
        assert!(!ftc("configmaps", spec.clone()).status_enabled());
        let disabled = FederatedTypeConfigSpec {
            status_collection: Some(StatusCollectionMode::Disabled),
            ..spec
        };
        assert!(!ftc("services", disabled).status_enabled());
    }

    #[test]
    fn dynamic_api_resource_uses_plural_and_api_version() {
        let dynamic = resource("apps", "Deployment", "deployments").to_dynamic();
        assert_eq!(dynamic.api_version, "apps/v1");
        assert_eq!(dynamic.plural, "deployments");
    }
}
