//! Whether the hub serves hubfed's own CRDs, said once per change.
//!
//! A hub taken over from KubeFed holds KubeFed's CRDs but not hubfed's own: `Work` (pull
//! mode), `PlacementPolicy` and `RolloutStrategy`. Each feature built on one of them keeps
//! going without it (its watch waits quietly, [`crate::watch::quiet_while_unserved`]), and
//! this module tells the operator: one warning per CRD found missing, naming the feature that
//! is off until it is installed, one info line when it appears, and the gauge
//! `hubfed_crd_installed{crd}`.
//!
//! The controller has no RBAC on CustomResourceDefinitions, so presence is read from API
//! discovery (`/apis/<group>/<version>`, readable by any authenticated client). Unknown is
//! never missing: a discovery request that fails keeps what was known (nothing at first), logs
//! at debug level and is retried.
//!
//! # When it looks again
//!
//! Discovery cannot be watched. While a CRD is missing or its presence unknown, it looks
//! again after 1 s, doubling to [`RECHECK_MAX`] (30 s), where it settles; once every CRD is
//! installed, every [`RECHECK_INSTALLED`] (60 s), to notice one deleted. The features' own
//! watches retry on the same schedule, so a CRD applied is in use within about 30 s.

use std::collections::BTreeMap;
use std::time::Duration;

use hubfed_api::scheduling::{PlacementPolicy, RolloutStrategy};
use hubfed_api::work::Work;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::{Client, CustomResourceExt as _};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::metrics::METRICS;

/// The longest wait between two looks while a CRD is missing or unknown.
pub const RECHECK_MAX: Duration = Duration::from_secs(30);
/// The wait between two looks while every CRD is installed.
pub const RECHECK_INSTALLED: Duration = Duration::from_secs(60);
/// The first wait after a look that found a CRD missing or unknown.
const RECHECK_FIRST: Duration = Duration::from_secs(1);

/// One of hubfed's own CRDs in the hub.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum HubCrd {
    Work,
    PlacementPolicy,
    RolloutStrategy,
}

impl HubCrd {
    /// Every CRD the controller uses.
    pub const CONTROLLER: [Self; 3] = [Self::Work, Self::PlacementPolicy, Self::RolloutStrategy];
    /// The CRD a pull-mode agent uses.
    pub const AGENT: [Self; 1] = [Self::Work];

    /// The CRD's name, `<plural>.<group>`.
    pub fn name(self) -> String {
        match self {
            Self::Work => Work::crd_name(),
            Self::PlacementPolicy => PlacementPolicy::crd_name(),
            Self::RolloutStrategy => RolloutStrategy::crd_name(),
        }
        .to_owned()
    }

    /// The discovery path of its group and version (`pull.hubfed.io/v1alpha1`) and its
    /// plural.
    fn served_as(self) -> (String, String) {
        let resource = match self {
            Self::Work => Work::api_resource(),
            Self::PlacementPolicy => PlacementPolicy::api_resource(),
            Self::RolloutStrategy => RolloutStrategy::api_resource(),
        };
        (resource.api_version, resource.plural)
    }

    /// What is off while the CRD is missing.
    pub fn feature(self) -> &'static str {
        match self {
            Self::Work => "pull mode (Works for pull-mode members)",
            Self::PlacementPolicy => "PlacementPolicy placement",
            Self::RolloutStrategy => "staged rollout (objects naming a RolloutStrategy are held)",
        }
    }
}

/// What discovery says of a CRD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    Installed,
    Missing,
}

/// The presence of `plural` from the discovery of its group and version: the resource list,
/// or `None` when the group and version are not served (404).
fn presence_in(resources: Option<&APIResourceList>, plural: &str) -> Presence {
    let served = resources.is_some_and(|list| list.resources.iter().any(|r| r.name == plural));
    if served {
        Presence::Installed
    } else {
        Presence::Missing
    }
}

/// What the operator is told when a look finds a CRD's presence changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum News {
    /// Missing (at start, or deleted): warn once.
    Missing,
    /// Installed after it was missing: say the feature is on.
    Appeared,
}

/// The last known presence of each CRD; unknown ones are absent.
#[derive(Debug, Default)]
struct Known(BTreeMap<HubCrd, Presence>);

impl Known {
    /// Records a look's answer for `crd` (`None`: unknown, which changes nothing) and says
    /// what is news.
    fn note(&mut self, crd: HubCrd, now: Option<Presence>) -> Option<News> {
        let now = now?;
        let before = self.0.insert(crd, now);
        match (before, now) {
            (Some(Presence::Missing), Presence::Missing) => None,
            (_, Presence::Missing) => Some(News::Missing),
            (Some(Presence::Missing), Presence::Installed) => Some(News::Appeared),
            (_, Presence::Installed) => None,
        }
    }

    /// Whether every one of `crds` is known to be installed.
    fn all_installed(&self, crds: &[HubCrd]) -> bool {
        crds.iter()
            .all(|crd| self.0.get(crd) == Some(&Presence::Installed))
    }
}

/// The wait before the next look: [`RECHECK_INSTALLED`] when all are installed, else the
/// last wait doubled (from [`RECHECK_FIRST`]) up to [`RECHECK_MAX`].
fn next_wait(all_installed: bool, last: Option<Duration>) -> Duration {
    if all_installed {
        return RECHECK_INSTALLED;
    }
    last.map_or(RECHECK_FIRST, |last| (last * 2).min(RECHECK_MAX))
}

/// Reports the presence of `crds` in the `hub` until `shutdown` (see the module doc); the
/// gauge's series are removed when it stops.
pub async fn report(hub: Client, crds: &'static [HubCrd], shutdown: CancellationToken) {
    let mut known = Known::default();
    let mut wait = None;
    loop {
        let mut discovered: BTreeMap<String, Option<Option<APIResourceList>>> = BTreeMap::new();
        for crd in crds {
            let (api_version, plural) = crd.served_as();
            let resources = match discovered.get(&api_version) {
                Some(found) => found.clone(),
                None => {
                    let found = discover(&hub, &api_version).await;
                    discovered.insert(api_version.clone(), found.clone());
                    found
                }
            };
            let presence = resources.map(|list| presence_in(list.as_ref(), &plural));
            if let Some(presence) = presence {
                METRICS
                    .crd_installed
                    .with_label_values(&[crd.name().as_str()])
                    .set(i64::from(presence == Presence::Installed));
            }
            match known.note(*crd, presence) {
                Some(News::Missing) => warn!(
                    crd = %crd.name(),
                    "CRD {} is not installed: {} is off until it is; apply crds/core.yaml",
                    crd.name(),
                    crd.feature()
                ),
                Some(News::Appeared) => info!(
                    crd = %crd.name(),
                    "CRD {} is installed: {} is on",
                    crd.name(),
                    crd.feature()
                ),
                None => {}
            }
        }
        let all_installed = known.all_installed(crds);
        let next = next_wait(all_installed, wait);
        wait = Some(next).filter(|_| !all_installed);
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(next) => {}
        }
    }
    for crd in crds {
        let _ = METRICS
            .crd_installed
            .remove_label_values(&[crd.name().as_str()]);
    }
}

/// The discovery of `api_version`: its resources, `Some(None)` when it is not served, `None`
/// when the request failed (unknown).
async fn discover(hub: &Client, api_version: &str) -> Option<Option<APIResourceList>> {
    match hub.list_api_group_resources(api_version).await {
        Ok(list) => Some(Some(list)),
        Err(kube::Error::Api(status)) if status.code == 404 => Some(None),
        Err(e) => {
            debug!(api_version, error = %e, "discovery failed; presence unknown, looking again");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;

    use super::*;

    fn served(plurals: &[&str]) -> APIResourceList {
        APIResourceList {
            group_version: "scheduling.hubfed.io/v1alpha1".to_owned(),
            resources: plurals
                .iter()
                .map(|p| APIResource {
                    name: (*p).to_owned(),
                    ..APIResource::default()
                })
                .collect(),
        }
    }

    #[test]
    fn a_crd_is_installed_only_when_discovery_lists_it() {
        let list = served(&["placementpolicies", "placementpolicies/status"]);
        assert_eq!(
            presence_in(Some(&list), "placementpolicies"),
            Presence::Installed
        );
        assert_eq!(
            presence_in(Some(&list), "rolloutstrategies"),
            Presence::Missing
        );
        assert_eq!(presence_in(None, "placementpolicies"), Presence::Missing);
    }

    /// Missing is said once, unknown never, and the CRD appearing once.
    #[test]
    fn each_change_is_news_once_and_unknown_is_never_missing() {
        let crd = HubCrd::PlacementPolicy;
        let mut known = Known::default();
        let looks = [
            None,
            Some(Presence::Missing),
            Some(Presence::Missing),
            None,
            Some(Presence::Missing),
            Some(Presence::Installed),
            Some(Presence::Installed),
            None,
            Some(Presence::Missing),
        ];
        let news: Vec<_> = looks.iter().map(|look| known.note(crd, *look)).collect();
        assert_eq!(
            news,
            [
                None,
                Some(News::Missing),
                None,
                None,
                None,
                Some(News::Appeared),
                None,
                None,
                Some(News::Missing),
            ]
        );
        // Installed from the first look: nothing to say.
        let mut known = Known::default();
        assert_eq!(known.note(crd, Some(Presence::Installed)), None);
        assert!(known.all_installed(&[crd]));
        assert!(!known.all_installed(&[crd, HubCrd::Work]), "Work unknown");
    }

    #[test]
    fn looks_back_off_to_thirty_seconds_while_anything_is_missing() {
        let mut waits = Vec::new();
        let mut last = None;
        for _ in 0..8 {
            let next = next_wait(false, last);
            waits.push(next.as_secs());
            last = Some(next);
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(next_wait(true, last), RECHECK_INSTALLED);
    }

    #[test]
    fn the_crds_are_named_as_in_crds_core_yaml() {
        let names: Vec<String> = HubCrd::CONTROLLER.iter().map(|c| c.name()).collect();
        assert_eq!(
            names,
            [
                "works.pull.hubfed.io",
                "placementpolicies.scheduling.hubfed.io",
                "rolloutstrategies.scheduling.hubfed.io"
            ]
        );
        assert_eq!(
            HubCrd::PlacementPolicy.served_as(),
            (
                "scheduling.hubfed.io/v1alpha1".to_owned(),
                "placementpolicies".to_owned()
            )
        );
    }
}
