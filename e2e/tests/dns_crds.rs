//! hubfed's multi-cluster DNS CRDs (`crds/multiclusterdns.yaml`) against KubeFed v0.6.1's, the
//! last KubeFed release that had them, from KubeFed's Go module: names, scope, versions,
//! subresources, printer columns and schema, field by field
//! ([`hubfed_e2e::upstream_crds::crd_differences`]). Every difference must be one of
//! [`DELIBERATE`], with why, and every entry there must still occur.
//!
//! Skips, saying why, when Go is missing (KubeFed's module comes through the Go module proxy,
//! `hack/kubefed-module.sh` with `KUBEFED_VERSION`).

use hubfed_api::multiclusterdns::{GROUP, KUBEFED_RELEASE};
use hubfed_e2e::helm::repo_root;
use hubfed_e2e::upstream_crds::{check_deliberate, crd_differences, crds_in, go_module_dir};

/// Where KubeFed's chart keeps its CRDs, in its module.
const KUBEFED_CRDS: &str = "charts/kubefed/charts/controllermanager/crds/crds.yaml";

/// Why the current core LoadBalancerStatus is kept whole.
const CORE_TYPE: &str = "the current core/v1 LoadBalancerStatus (KubeFed's was Kubernetes \
    1.19's): a member Service's ipMode and ports are kept, so the status read back equals the \
    one written and the controller does not write it again and again";

/// Why records carry conditions.
const CONDITIONS: &str = "never silent: the record names the cluster without a region or \
    zones, or whose load balancer's host name does not resolve (KubeFed logged it, if at all, \
    and wrote nothing)";

/// Differences from KubeFed's CRDs, as `(CRD, difference, why)`; `*` stands for both records.
const DELIBERATE: &[(&str, &str, &str)] = &[
    (
        "*",
        "v1alpha1.schema.status.dns[].loadBalancer.ingress[].ipMode: added",
        CORE_TYPE,
    ),
    (
        "*",
        "v1alpha1.schema.status.dns[].loadBalancer.ingress[].ports: added",
        CORE_TYPE,
    ),
    ("*", "v1alpha1.schema.status.conditions: added", CONDITIONS),
];

/// The two record CRDs `*` stands for.
const RECORDS: [&str; 2] = ["ingressdnsrecords", "servicednsrecords"];

#[test]
fn hubfeds_dns_crds_are_kubefed_v0_6_1s() -> anyhow::Result<()> {
    let Some(module) = go_module_dir("kubefed-module.sh", "KUBEFED_VERSION", KUBEFED_RELEASE)?
    else {
        eprintln!("skipped: Go is missing, KubeFed {KUBEFED_RELEASE}'s module cannot be read");
        return Ok(());
    };
    let theirs: std::collections::BTreeMap<_, _> = crds_in(&module.join(KUBEFED_CRDS))?
        .into_iter()
        .filter(|(name, _)| name.ends_with(&format!(".{GROUP}")))
        .collect();
    let ours = crds_in(&repo_root().join("crds/multiclusterdns.yaml"))?;
    anyhow::ensure!(
        theirs.keys().eq(ours.keys()),
        "CRDs: KubeFed {:?}, hubfed {:?}",
        theirs.keys().collect::<Vec<_>>(),
        ours.keys().collect::<Vec<_>>()
    );
    let record = |name: &str| RECORDS.iter().any(|r| name == format!("{r}.{GROUP}"));
    let mut found: Vec<(String, bool, String)> = Vec::new();
    for (name, crd) in &theirs {
        found.extend(
            crd_differences("KubeFed", crd, &ours[name])
                .into_iter()
                .map(|difference| (name.clone(), record(name), difference)),
        );
    }
    check_deliberate(&format!("KubeFed {KUBEFED_RELEASE}"), &found, DELIBERATE)?;
    eprintln!(
        "{} deliberate differences from KubeFed {KUBEFED_RELEASE}'s DNS CRDs, each listed with why",
        found.len()
    );
    Ok(())
}
