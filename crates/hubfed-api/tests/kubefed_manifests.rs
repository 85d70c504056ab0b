//! KubeFed manifests, written as KubeFed v0.10.0 produces them, deserialise into the hubfed
//! types and serialise back to the same JSON.

use hubfed_api::federated::{
    FederatedSpec, FederatedStatus, PROPAGATION_CONDITION_TYPE, PropagationStatus,
};
use hubfed_api::federatedtypeconfig::{
    ControllerStatus, EnabledDisabled, FederatedTypeConfig, ResourceScope,
};
use hubfed_api::kubefedcluster::{ClusterConditionType, KubeFedCluster, TlsValidation};
use hubfed_api::kubefedconfig::{KubeFedConfig, ResourceLockType};
use hubfed_api::propagatedversion::{ClusterPropagatedVersion, PropagatedVersion};
use hubfed_api::scheduling::ReplicaSchedulingPreference;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Parses `yaml` as `T`, checks that `T` serialises back to the same JSON, returns `T`.
#[allow(clippy::unwrap_used)] // test helper: a panic is the failure report
fn round_trip<T: DeserializeOwned + Serialize>(yaml: &str) -> T {
    let original: Value = serde_yaml_ng::from_str(yaml).unwrap();
    let typed: T = serde_json::from_value(original.clone()).unwrap();
    assert_eq!(serde_json::to_value(&typed).unwrap(), original);
    typed
}

const FTC_DEPLOYMENTS: &str = r"
apiVersion: core.kubefed.io/v1beta1
kind: FederatedTypeConfig
metadata:
  name: deployments.apps
  namespace: kube-federation-system
  finalizers:
  - core.kubefed.io/federated-type-config
  generation: 2
spec:
  federatedType:
    group: types.kubefed.io
    kind: FederatedDeployment
    pluralName: federateddeployments
    scope: Namespaced
    version: v1beta1
  propagation: Enabled
  statusCollection: Disabled
  targetType:
    group: apps
    kind: Deployment
    pluralName: deployments
    scope: Namespaced
    version: v1
status:
  observedGeneration: 2
  propagationController: Running
  statusController: NotRunning
";

#[test]
fn federated_type_config_round_trips() {
    let ftc: FederatedTypeConfig = round_trip(FTC_DEPLOYMENTS);
    assert_eq!(
        ftc.spec.target_type.group_qualified_name(),
        "deployments.apps"
    );
    assert_eq!(ftc.spec.target_type.api_version(), "apps/v1");
    assert_eq!(ftc.spec.federated_type.kind, "FederatedDeployment");
    assert_eq!(ftc.spec.status_collection, Some(EnabledDisabled::Disabled));
    assert!(ftc.propagation_enabled());
    assert!(ftc.federated_namespaced());
    assert!(!ftc.status_enabled());
    let status = ftc.status.unwrap();
    assert_eq!(status.propagation_controller, ControllerStatus::Running);
    assert_eq!(status.status_controller, Some(ControllerStatus::NotRunning));
}

#[test]
fn federated_type_config_for_target_matches_the_chart() {
    let ftc: FederatedTypeConfig = serde_yaml_ng::from_str(FTC_DEPLOYMENTS).unwrap();
    let generated =
        FederatedTypeConfig::for_target(ftc.spec.target_type.clone(), "kube-federation-system");
    assert_eq!(generated.metadata.name.as_deref(), Some("deployments.apps"));
    assert_eq!(generated.spec.federated_type, ftc.spec.federated_type);
    assert_eq!(generated.spec.target_type, ftc.spec.target_type);
}

#[test]
fn namespace_ftc_has_a_namespaced_federated_type() {
    let ftc: FederatedTypeConfig = round_trip(
        r"
apiVersion: core.kubefed.io/v1beta1
kind: FederatedTypeConfig
metadata:
  name: namespaces
  namespace: kube-federation-system
spec:
  federatedType:
    group: types.kubefed.io
    kind: FederatedNamespace
    pluralName: federatednamespaces
    scope: Namespaced
    version: v1beta1
  propagation: Enabled
  targetType:
    kind: Namespace
    pluralName: namespaces
    scope: Cluster
    version: v1
",
    );
    assert!(ftc.is_namespace());
    assert!(!ftc.target_namespaced());
    assert!(ftc.federated_namespaced());
    assert_eq!(ftc.spec.target_type.api_version(), "v1");
    assert_eq!(ftc.spec.target_type.scope, ResourceScope::Cluster);
}

const KUBEFED_CLUSTER: &str = r#"
apiVersion: core.kubefed.io/v1beta1
kind: KubeFedCluster
metadata:
  name: cluster2
  namespace: kube-federation-system
  labels:
    region: eu
spec:
  apiEndpoint: https://172.17.0.3:6443
  caBundle: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM=
  disabledTLSValidations:
  - SubjectName
  - ValidityPeriod
  proxyURL: socks5://proxy.example:1080
  secretRef:
    name: cluster2-shhv6
status:
  conditions:
  - lastProbeTime: "2022-08-10T12:00:10Z"
    lastTransitionTime: "2022-08-10T11:58:00Z"
    message: /healthz responded with ok
    reason: ClusterReady
    status: "True"
    type: Ready
  kubernetesVersion: v1.24.3
"#;

#[test]
fn kubefed_cluster_round_trips() {
    let cluster: KubeFedCluster = round_trip(KUBEFED_CLUSTER);
    assert_eq!(
        cluster.spec.ca_bundle.as_ref().unwrap().0,
        b"-----BEGIN CERTIFICATE-----\nMIIC"
    );
    assert_eq!(
        cluster.spec.disabled_tls_validations,
        vec![TlsValidation::SubjectName, TlsValidation::ValidityPeriod]
    );
    assert_eq!(cluster.spec.proxy_url, "socks5://proxy.example:1080");
    assert!(cluster.is_ready());
    let status = cluster.status.unwrap();
    let ready = status.condition(ClusterConditionType::Ready).unwrap();
    assert_eq!(ready.reason.as_deref(), Some("ClusterReady"));
    assert_eq!(status.kubernetes_version.as_deref(), Some("v1.24.3"));
}

#[test]
fn kubefed_cluster_without_optional_fields_serialises_proxy_url_like_kubefed() {
    let cluster: KubeFedCluster = serde_yaml_ng::from_str(
        r#"
apiVersion: core.kubefed.io/v1beta1
kind: KubeFedCluster
metadata: {name: c1, namespace: kube-federation-system}
spec:
  apiEndpoint: https://c1:6443
  secretRef: {name: c1-token}
  disabledTLSValidations: ["*"]
status:
  conditions:
  - {type: Offline, status: "True", lastProbeTime: "2022-08-10T12:00:10Z",
     reason: ClusterNotReachable, message: "cluster is not reachable: timeout"}
"#,
    )
    .unwrap();
    assert_eq!(
        cluster.spec.disabled_tls_validations,
        vec![TlsValidation::All]
    );
    assert!(cluster.spec.ca_bundle.is_none());
    assert!(!cluster.is_ready());
    let spec = serde_json::to_value(&cluster.spec).unwrap();
    assert_eq!(
        spec,
        json!({
            "apiEndpoint": "https://c1:6443",
            "secretRef": {"name": "c1-token"},
            "disabledTLSValidations": ["*"],
            "proxyURL": "",
        })
    );
}

/// Every field, as the KubeFed chart writes it.
const KUBEFED_CONFIG: &str = r#"
apiVersion: core.kubefed.io/v1beta1
kind: KubeFedConfig
metadata:
  name: kubefed
  namespace: kube-federation-system
spec:
  scope: "Cluster"
  controllerDuration:
    availableDelay: "20s"
    unavailableDelay: "60s"
    cacheSyncTimeout: "5m"
  leaderElect:
    leaseDuration: "15s"
    renewDeadline: "10s"
    retryPeriod: "5s"
    resourceLock: "configmaps"
  clusterHealthCheck:
    period: "10s"
    failureThreshold: 3
    successThreshold: 1
    timeout: "3s"
  syncController:
    maxConcurrentReconciles: 1
    adoptResources: "Enabled"
  statusController:
    maxConcurrentReconciles: 1
  featureGates:
  - name: PushReconciler
    configuration: "Enabled"
  - name: SchedulerPreferences
    configuration: "Enabled"
  - name: RawResourceStatusCollection
    configuration: "Disabled"
"#;

#[test]
fn kubefed_config_round_trips() {
    let config: KubeFedConfig = round_trip(KUBEFED_CONFIG);
    let spec = &config.spec;
    assert_eq!(spec.scope, ResourceScope::Cluster);
    let durations = spec.controller_duration.as_ref().unwrap();
    assert_eq!(
        hubfed_api::duration::parse_go_duration(durations.unavailable_delay.as_ref().unwrap())
            .unwrap()
            .as_secs(),
        60
    );
    assert_eq!(
        spec.leader_elect.as_ref().unwrap().resource_lock,
        Some(ResourceLockType::Configmaps)
    );
    assert!(spec.feature_enabled("SchedulerPreferences"));
    assert!(!spec.feature_enabled("RawResourceStatusCollection"));
    assert!(!spec.feature_enabled("NoSuchGate"));

    // Defaulting a complete config changes nothing but the order of the gates.
    let mut defaulted = spec.clone();
    defaulted.apply_defaults();
    let gate_names: Vec<&str> = defaulted
        .feature_gates
        .iter()
        .map(|g| g.name.as_str())
        .collect();
    assert_eq!(
        gate_names,
        [
            "PushReconciler",
            "RawResourceStatusCollection",
            "SchedulerPreferences"
        ]
    );
    defaulted.feature_gates = spec.feature_gates.clone();
    assert_eq!(&defaulted, spec);
}

const FEDERATED_DEPLOYMENT: &str = r#"
apiVersion: types.kubefed.io/v1beta1
kind: FederatedDeployment
metadata:
  name: test-deployment
  namespace: test-namespace
spec:
  template:
    metadata:
      labels:
        app: nginx
    spec:
      replicas: 3
      selector:
        matchLabels:
          app: nginx
      template:
        metadata:
          labels:
            app: nginx
        spec:
          containers:
          - image: nginx
            name: nginx
  placement:
    clusters:
    - name: cluster2
    - name: cluster1
    clusterSelector:
      matchLabels:
        region: eu
      matchExpressions:
      - key: tier
        operator: In
        values: [gold]
  overrides:
  - clusterName: cluster2
    clusterOverrides:
    - path: "/spec/replicas"
      value: 5
    - path: "/spec/template/spec/containers/0/image"
      value: "nginx:1.17.0-alpine"
    - op: "add"
      path: "/metadata/annotations"
      value:
        foo: bar
    - op: "remove"
      path: "/metadata/labels/app"
  retainReplicas: true
status:
  observedGeneration: 1
  conditions:
  - type: Propagation
    status: "False"
    reason: CheckClusters
    lastUpdateTime: "2022-08-10T12:00:00Z"
    lastTransitionTime: "2022-08-10T12:00:00Z"
  clusters:
  - name: cluster1
  - name: cluster2
    status: ClusterNotReady
"#;

#[test]
fn federated_deployment_spec_and_status_round_trip() {
    let object: Value = serde_yaml_ng::from_str(FEDERATED_DEPLOYMENT).unwrap();
    let spec: FederatedSpec = serde_json::from_value(object["spec"].clone()).unwrap();
    assert_eq!(serde_json::to_value(&spec).unwrap(), object["spec"]);
    let status: FederatedStatus = serde_json::from_value(object["status"].clone()).unwrap();
    assert_eq!(serde_json::to_value(&status).unwrap(), object["status"]);

    let placement = spec.placement.unwrap();
    let clusters: Vec<&str> = placement
        .clusters
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(clusters, ["cluster2", "cluster1"]);
    assert!(placement.cluster_selector.is_some());
    let overrides = spec.overrides.unwrap();
    assert_eq!(overrides[0].cluster_overrides.len(), 4);
    assert_eq!(overrides[0].cluster_overrides[0].op, "");
    assert_eq!(overrides[0].cluster_overrides[3].value, None);
    assert_eq!(spec.retain_replicas, Some(true));

    assert_eq!(status.conditions[0].type_, PROPAGATION_CONDITION_TYPE);
    assert_eq!(
        status.conditions[0].reason.as_deref(),
        Some("CheckClusters")
    );
    let not_ready = status.clusters[1].status.as_deref().unwrap();
    assert_eq!(
        PropagationStatus::parse(not_ready),
        Some(PropagationStatus::ClusterNotReady)
    );
}

#[test]
fn propagated_versions_round_trip() {
    let version: PropagatedVersion = round_trip(
        r#"
apiVersion: core.kubefed.io/v1alpha1
kind: PropagatedVersion
metadata:
  name: deployment-test-deployment
  namespace: test-namespace
  ownerReferences:
  - apiVersion: types.kubefed.io/v1beta1
    kind: FederatedDeployment
    name: test-deployment
    uid: 0d3f1b5c-8d4e-4bb7-9f39-6c1c9e0c3f11
status:
  templateVersion: 5b2b5a6f2e1b2b0d6c2a4c7f8e9d0a1b
  overridesVersion: 9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d
  clusterVersions:
  - clusterName: cluster1
    version: gen:1
  - clusterName: cluster2
    version: gen:3
"#,
    );
    let status = version.status.unwrap();
    assert_eq!(status.override_version, "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d");
    assert_eq!(status.cluster_versions[1].version, "gen:3");

    let cluster_version: ClusterPropagatedVersion = round_trip(
        r"
apiVersion: core.kubefed.io/v1alpha1
kind: ClusterPropagatedVersion
metadata:
  name: clusterrole-reader
status:
  templateVersion: abc
  overridesVersion: def
",
    );
    assert!(cluster_version.status.unwrap().cluster_versions.is_empty());
}

#[test]
fn replica_scheduling_preference_round_trips() {
    let rsp: ReplicaSchedulingPreference = round_trip(
        r#"
apiVersion: scheduling.kubefed.io/v1alpha1
kind: ReplicaSchedulingPreference
metadata:
  name: test-deployment
  namespace: test-namespace
spec:
  targetKind: FederatedDeployment
  totalReplicas: 9
  rebalance: true
  intersectWithClusterSelector: false
  clusters:
    "*":
      weight: 1
    cluster1:
      minReplicas: 4
      maxReplicas: 6
      weight: 2
"#,
    );
    assert_eq!(rsp.spec.total_replicas, 9);
    assert_eq!(rsp.spec.clusters["cluster1"].max_replicas, Some(6));
    assert_eq!(rsp.spec.clusters["*"].min_replicas, 0);
}
