//! hubfed's CRDs against KubeFed v0.10.0's, from KubeFed's Go module: every CRD of KubeFed's
//! chart that hubfed ships keeps KubeFed's names, scope, versions, subresources, printer
//! columns and schema, field by field; every difference is one of [`DELIBERATE`], with why,
//! and every entry there still occurs (the list stays true).
//!
//! Skips, saying why, when Go is missing (KubeFed's module comes through the Go module proxy,
//! `hack/kubefed-module.sh`).

use hubfed_e2e::helm::repo_root;
use hubfed_e2e::kubefed::{self, crd_differences, crds_in};
use hubfed_e2e::upstream_crds::check_deliberate;

/// KubeFed's CRDs hubfed does not ship, and why.
const NOT_SHIPPED: [(&str, &str); 1] = [(
    "federatedservicestatuses.core.kubefed.io",
    "KubeFed's legacy per-Service status, written by its status controller; hubfed reports \
     per-cluster status in the federated object (docs/kubefed-compatibility.md §1.9)",
)];

/// `*` stands for each of the ten default federated types.
const DELIBERATE: &[(&str, &str, &str)] = &[
    (
        "federatedtypeconfigs.core.kubefed.io",
        "v1beta1.schema.spec.federatedType.scope enum: KubeFed null, hubfed [\"Cluster\",\"Namespaced\"]",
        "KubeFed's own values (its Go constants, checked by its webhook); the API server now refuses a typo too",
    ),
    (
        "federatedtypeconfigs.core.kubefed.io",
        "v1beta1.schema.spec.propagation enum: KubeFed null, hubfed [\"Enabled\",\"Disabled\"]",
        "KubeFed's own values (its Go constants, checked by its webhook); the API server now refuses a typo too",
    ),
    (
        "federatedtypeconfigs.core.kubefed.io",
        "v1beta1.schema.spec.statusCollection enum: KubeFed null, hubfed [\"Enabled\",\"Disabled\"]",
        "KubeFed's own values (its Go constants, checked by its webhook); the API server now refuses a typo too",
    ),
    (
        "federatedtypeconfigs.core.kubefed.io",
        "v1beta1.schema.spec.statusType.scope enum: KubeFed null, hubfed [\"Cluster\",\"Namespaced\"]",
        "KubeFed's own values (its Go constants, checked by its webhook); the API server now refuses a typo too",
    ),
    (
        "federatedtypeconfigs.core.kubefed.io",
        "v1beta1.schema.spec.targetType.scope enum: KubeFed null, hubfed [\"Cluster\",\"Namespaced\"]",
        "KubeFed's own values (its Go constants, checked by its webhook); the API server now refuses a typo too",
    ),
    (
        "federatedtypeconfigs.core.kubefed.io",
        "v1beta1.schema.status.propagationController enum: KubeFed null, hubfed [\"Running\",\"NotRunning\"]",
        "KubeFed's own values (its Go constants, checked by its webhook); the API server now refuses a typo too",
    ),
    (
        "federatedtypeconfigs.core.kubefed.io",
        "v1beta1.schema.status.statusController enum: KubeFed null, hubfed [\"Running\",\"NotRunning\"]",
        "KubeFed's own values (its Go constants, checked by its webhook); the API server now refuses a typo too",
    ),
    (
        "kubefedclusters.core.kubefed.io",
        "v1beta1.schema.spec required: KubeFed [\"apiEndpoint\", \"secretRef\"], hubfed []",
        "a pull member (syncMode Pull) has no endpoint or credentials in the hub; hubfed's webhook still requires both for push members",
    ),
    (
        "kubefedclusters.core.kubefed.io",
        "v1beta1.schema.spec.apiEndpoint default: KubeFed null, hubfed \"\"",
        "the same: empty for a pull member",
    ),
    (
        "kubefedclusters.core.kubefed.io",
        "v1beta1.schema.spec.secretRef default: KubeFed null, hubfed {\"name\":\"\"}",
        "the same: empty for a pull member",
    ),
    (
        "kubefedclusters.core.kubefed.io",
        "v1beta1.schema.spec.proxyURL default: KubeFed null, hubfed \"\"",
        "empty means no proxy, as KubeFed reads an absent one",
    ),
    (
        "kubefedclusters.core.kubefed.io",
        "v1beta1.schema.spec.disabledTLSValidations[] enum: KubeFed null, hubfed [\"SubjectName\",\"ValidityPeriod\",\"*\"]",
        "KubeFed's own values (its Go constants, checked by its webhook); the API server now refuses a typo too",
    ),
    (
        "kubefedclusters.core.kubefed.io",
        "v1beta1.schema.spec.syncMode: added",
        "pull mode (Push, the default, is KubeFed's behaviour)",
    ),
    (
        "kubefedconfigs.core.kubefed.io",
        "v1beta1.schema.spec.featureGates[].configuration enum: KubeFed null, hubfed [\"Enabled\",\"Disabled\"]",
        "KubeFed's own values (its Go constants, checked by its webhook); the API server now refuses a typo too",
    ),
    (
        "kubefedconfigs.core.kubefed.io",
        "v1beta1.schema.spec.leaderElect.resourceLock enum: KubeFed null, hubfed [\"configmaps\",\"endpoints\"]",
        "KubeFed's own values (its Go constants, checked by its webhook); the API server now refuses a typo too",
    ),
    (
        "kubefedconfigs.core.kubefed.io",
        "v1beta1.schema.spec.scope enum: KubeFed null, hubfed [\"Cluster\",\"Namespaced\"]",
        "KubeFed's own values (its Go constants, checked by its webhook); the API server now refuses a typo too",
    ),
    (
        "kubefedconfigs.core.kubefed.io",
        "v1beta1.schema.spec.syncController.adoptResources enum: KubeFed null, hubfed [\"Enabled\",\"Disabled\"]",
        "KubeFed's own values (its Go constants, checked by its webhook); the API server now refuses a typo too",
    ),
    (
        "replicaschedulingpreferences.scheduling.kubefed.io",
        "v1alpha1.schema required: KubeFed [], hubfed [\"spec\"]",
        "an RSP without a spec schedules nothing; KubeFed's scheduler failed on it at run time",
    ),
    (
        "replicaschedulingpreferences.scheduling.kubefed.io",
        "v1alpha1.schema.spec.intersectWithClusterSelector default: KubeFed null, hubfed false",
        "KubeFed's Go type always writes it (false when unset)",
    ),
    (
        "*",
        "names.categories: KubeFed null, hubfed [\"federated\"]",
        "`kubectl get federated -A` lists every federated object",
    ),
    (
        "*",
        "v1beta1.additionalPrinterColumns names: KubeFed [], hubfed [\"Propagation\",\"Reason\",\"Ready\",\"Message\",\"Age\"]",
        "`kubectl get` shows propagation and readiness",
    ),
    (
        "*",
        "v1beta1.schema.status.clusters[].lastDrift: added",
        "when hubfed last reverted a change made in the member",
    ),
    (
        "*",
        "v1beta1.schema.status.clusters[].message: added",
        "why a cluster's status is not empty, in words",
    ),
    (
        "*",
        "v1beta1.schema.status.clusters[].ready: added",
        "readiness of the copy in that cluster",
    ),
    (
        "*",
        "v1beta1.schema.status.clusters[].readyMessage: added",
        "why the copy is not ready",
    ),
    (
        "*",
        "v1beta1.schema.status.conditions[].message: added",
        "the condition's details, as Kubernetes conditions have",
    ),
    (
        "*",
        "v1beta1.schema.status.ready: added",
        "ready clusters of placed clusters (the Ready column)",
    ),
];

#[test]
fn hubfeds_crds_keep_kubefeds() -> anyhow::Result<()> {
    let Some(module) = kubefed::module_dir()? else {
        eprintln!("skipped: Go is missing, KubeFed's module cannot be read");
        return Ok(());
    };
    let chart = module.join("charts/kubefed");
    let root = repo_root();
    let pairs = [
        (
            chart.join("charts/controllermanager/crds/crds.yaml"),
            root.join("crds/core.yaml"),
        ),
        (
            chart.join("crds/crds.yaml"),
            root.join("crds/federated-types.yaml"),
        ),
    ];
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for (theirs, ours) in pairs {
        let (theirs, ours) = (crds_in(&theirs)?, crds_in(&ours)?);
        for (name, crd) in &theirs {
            let Some(ours) = ours.get(name) else {
                if !NOT_SHIPPED.iter().any(|(n, _)| n == name) {
                    missing.push(name.clone());
                }
                continue;
            };
            let federated = name.ends_with(".types.kubefed.io");
            found.extend(
                crd_differences(crd, ours)
                    .into_iter()
                    .map(|difference| (name.clone(), federated, difference)),
            );
        }
    }
    anyhow::ensure!(
        missing.is_empty(),
        "KubeFed's CRDs not shipped: {missing:?}"
    );
    check_deliberate(&format!("KubeFed {}", kubefed::VERSION), &found, DELIBERATE)?;
    eprintln!(
        "{} deliberate differences from KubeFed {}'s CRDs, each listed with why",
        found.len(),
        kubefed::VERSION
    );
    Ok(())
}
