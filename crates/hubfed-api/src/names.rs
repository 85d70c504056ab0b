//! Well-known names: API groups, labels, annotations and finalizers
//! (docs/kubefed-compatibility.md §1.10).

/// API group of KubeFedCluster, KubeFedConfig, FederatedTypeConfig and PropagatedVersion.
pub const CORE_GROUP: &str = "core.kubefed.io";
/// Default API group of generated `Federated<Kind>` types.
pub const TYPES_GROUP: &str = "types.kubefed.io";
/// API group of ReplicaSchedulingPreference.
pub const SCHEDULING_GROUP: &str = "scheduling.kubefed.io";
/// Version of the generated `Federated<Kind>` types.
pub const TYPES_VERSION: &str = "v1beta1";

/// Default namespace of the control plane.
pub const DEFAULT_KUBEFED_NAMESPACE: &str = "kube-federation-system";
/// The KubeFedConfig object's fixed name.
pub const KUBEFED_CONFIG_NAME: &str = "kubefed";

/// Label set on every propagated member object; member watches select on it.
pub const MANAGED_LABEL: &str = "kubefed.io/managed";
/// Annotation on a federated object: keep member copies on deletion (value `"true"`).
pub const ORPHAN_ANNOTATION: &str = "kubefed.io/orphan";
/// Annotation on a federated object: JSON `metav1.DeleteOptions` used for member deletions.
pub const DELETE_OPTION_ANNOTATION: &str = "kubefed.io/deleteoption";
/// hubfed extension: annotation on a federated object allowing delete-and-recreate of member
/// objects whose update is refused because an immutable field changed (value `"true"`).
pub const RECREATE_ON_IMMUTABLE_ANNOTATION: &str = "hubfed.io/recreate-on-immutable-change";

/// hubfed extension: annotation on every member copy, `<control plane>/<federated object UID>`
/// (the control plane is the UID of its namespace in the hub): proof that this control plane
/// created the copy for that federated object, which garbage collection requires before it
/// touches a copy.
pub const OWNER_ANNOTATION: &str = "hubfed.io/owner";
/// hubfed extension: annotation on every member copy, the hash of the desired object hubfed
/// last applied there (without this annotation). Stored on the copy, so that after a restart a
/// change of the desired object that neither template nor overrides show (e.g.
/// `retainReplicas`) is still noticed.
pub const DESIRED_HASH_ANNOTATION: &str = "hubfed.io/desired-hash";
/// Prefix of the ConfigMaps (one per federated type, in the control plane's namespace) that
/// record copies possibly left in clusters that were unreachable when their federated object
/// was deleted.
pub const LEFTOVERS_CONFIGMAP_PREFIX: &str = "hubfed-leftovers.";

/// Finalizer the sync controller puts on federated objects.
pub const SYNC_CONTROLLER_FINALIZER: &str = "kubefed.io/sync-controller";
/// Finalizer the FederatedTypeConfig controller puts on FTCs.
pub const FTC_FINALIZER: &str = "core.kubefed.io/federated-type-config";

/// Category every generated federated CRD joins, so `kubectl get federated -A` lists them.
pub const FEDERATED_CATEGORY: &str = "federated";

/// Field manager hubfed uses for server-side apply on members.
pub const FIELD_MANAGER: &str = "hubfed";

/// Name of the FTC federating `namespaces`; namespaced types need it, and its federated type
/// is namespaced although Namespace is cluster-scoped.
pub const NAMESPACES_FTC_NAME: &str = "namespaces";

/// Key in a KubeFedCluster's secret holding the member bearer token.
pub const CLUSTER_SECRET_TOKEN_KEY: &str = "token";
