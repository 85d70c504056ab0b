//! The Multi-Cluster Services CRDs (`serviceexports`, `serviceimports` of
//! `multicluster.x-k8s.io`) and the About API's `clusterproperties`, installed in a member by
//! `join`, so hubfed's MCS controller can work there.
//!
//! A CRD another tool installed (another MCS implementation, another release of mcs-api) is
//! kept as it is: join never downgrades or takes over a CRD it did not write. It only warns
//! when that CRD lacks the version hubfed reads.

use hubfed_api::mcs::{MCS_API_RELEASE, RELEASE_VERSION_LABEL};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt as _;
use kube::api::Api;

use crate::error::{Error, Result};
use crate::ops;

/// The version of the MCS and About CRDs hubfed reads and writes.
const READ_VERSION: &str = "v1beta1";

/// hubfed's MCS and About CRDs, as `crds/mcs.yaml` and `crds/about.yaml` hold them.
fn member_crds() -> Result<Vec<CustomResourceDefinition>> {
    let build = |e: hubfed_api::Error| Error::Refused(format!("cannot build the MCS CRDs: {e}"));
    let mut crds = hubfed_api::mcs::crds().map_err(build)?;
    crds.push(hubfed_api::about::crd().map_err(build)?);
    Ok(crds)
}

/// What join does with one CRD, given the one the member has.
#[derive(Debug, PartialEq, Eq)]
enum Install {
    /// Missing, or hubfed's own (its release label): applied.
    Apply,
    /// Another tool's: kept; `Some(warning)` when it lacks the version hubfed reads.
    Keep(Option<String>),
}

fn decide(ours: &CustomResourceDefinition, existing: Option<&CustomResourceDefinition>) -> Install {
    let Some(existing) = existing else {
        return Install::Apply;
    };
    let release = |crd: &CustomResourceDefinition| crd.labels().get(RELEASE_VERSION_LABEL).cloned();
    if release(existing) == release(ours) {
        return Install::Apply;
    }
    let serves = existing
        .spec
        .versions
        .iter()
        .any(|version| version.name == READ_VERSION && version.served);
    Install::Keep((!serves).then(|| {
        format!(
            "CRD {} does not serve {READ_VERSION}: hubfed's multi-cluster services are off in this cluster until it does (hubfed ships mcs-api {MCS_API_RELEASE}'s)",
            existing.name_any()
        )
    }))
}

/// Installs (or keeps) the MCS and About CRDs in the member `writes` targets.
pub async fn install(writes: &mut ops::Writer<'_, '_>) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(writes.target.client.clone());
    for crd in member_crds()? {
        let name = crd.name_any();
        let existing = api.get_opt(&name).await.map_err(|e| writes.target.err(e))?;
        match decide(&crd, existing.as_ref()) {
            Install::Apply => {
                writes.apply(&api, &crd).await?;
            }
            Install::Keep(warning) => {
                let release = existing
                    .as_ref()
                    .and_then(|crd| crd.labels().get(RELEASE_VERSION_LABEL).cloned())
                    .unwrap_or_else(|| "unlabelled".to_owned());
                writes.report(
                    &format!("customresourcedefinition {name}"),
                    &format!("kept (another tool's, release {release})"),
                )?;
                if let Some(warning) = warning {
                    writes.session.warn(format_args!("{warning}"))?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours() -> CustomResourceDefinition {
        member_crds().unwrap().remove(0)
    }

    fn theirs(release: Option<&str>, versions: &[&str]) -> CustomResourceDefinition {
        let mut crd = ours();
        match release {
            Some(release) => {
                crd.labels_mut()
                    .insert(RELEASE_VERSION_LABEL.to_owned(), release.to_owned());
            }
            None => {
                crd.labels_mut().remove(RELEASE_VERSION_LABEL);
            }
        }
        crd.spec
            .versions
            .retain(|version| versions.contains(&version.name.as_str()));
        crd
    }

    #[test]
    fn a_missing_crd_and_hubfeds_own_are_applied() {
        assert_eq!(decide(&ours(), None), Install::Apply);
        assert_eq!(decide(&ours(), Some(&ours())), Install::Apply);
    }

    #[test]
    fn another_release_is_kept_and_a_missing_version_is_said() {
        let newer = theirs(Some("v0.6.0"), &["v1alpha1", "v1beta1"]);
        assert_eq!(decide(&ours(), Some(&newer)), Install::Keep(None));
        let older = theirs(None, &["v1alpha1"]);
        let Install::Keep(Some(warning)) = decide(&ours(), Some(&older)) else {
            panic!("an older CRD without v1beta1 must be kept with a warning");
        };
        assert!(warning.contains("does not serve v1beta1"), "{warning}");
    }
}
