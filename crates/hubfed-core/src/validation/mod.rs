//! Admission validation and defaulting (docs/kubefed-compatibility.md §6): pure functions behind
//! the webhooks for FederatedTypeConfig, KubeFedCluster, KubeFedConfig and — hubfed additions —
//! federated objects, PlacementPolicies and the multi-cluster DNS kinds. Errors are
//! apimachinery field errors (`spec.apiEndpoint: Required value`) and [`summary`] joins them
//! the way an aggregate error does, which is what the webhook reports.
//!
//! Each kind has a typed entry point over the `hubfed-api` structs and a `*_value` entry point
//! over the raw admission object. The raw entry points first check the object's shape field by
//! field (wrong JSON types, unknown enum values, missing required enums), so that problems the
//! typed structs cannot even represent are still reported with their field path; then they run
//! the typed rules on what deserialises.
//!
//! Deliberate differences from KubeFed's `validation.go`:
//! - FederatedTypeConfigs are validated after `SetFederatedTypeConfigDefaults`, the view every
//!   controller works with; the name error is reported at `metadata.name` (KubeFed: `name`).
//! - List items are reported with their index (`spec.featureGates[1].name`, KubeFed:
//!   `spec.featureGates.name`).
//! - Added checks: `proxyURL`, the `ConfigMalformed` condition type (which KubeFed's own health
//!   controller writes), `cacheSyncTimeout` and `maxConcurrentReconciles` (> 0 when set; not
//!   required, so configs written by older KubeFed versions still update), and durations that do
//!   not parse (KubeFed failed to decode them: 400 instead of a field error).
//! - The legacy feature gate name `FederatedIngress` stays accepted, as KubeFed v0.10 did.

mod cluster;
mod config;
mod dns;
mod federated;
mod fields;
mod ftc;
mod gofmt;
mod gourl;
mod names;
mod nesting;
mod policy;
mod shape;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use hubfed_api::condition::ConditionStatus;
use hubfed_api::duration::parse_go_duration;
use hubfed_api::federatedtypeconfig::{
    ApiResource, FederatedTypeConfig, FederatedTypeConfigSpec, FederatedTypeConfigStatus,
    ResourceScope,
};
use hubfed_api::kubefedcluster::{
    ClusterConditionType, KubeFedClusterSpec, KubeFedClusterStatus, SyncMode, TlsValidation,
};
use hubfed_api::kubefedconfig::KubeFedConfigSpec;
use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use serde_json::{Map, Value, json};

use crate::CoreError;
use crate::overrides::FORBIDDEN_PATHS;
use crate::selector::Selector;

pub use self::cluster::*;
pub use self::config::*;
pub use self::dns::*;
pub use self::federated::*;
pub use self::fields::*;
pub use self::ftc::*;
pub use self::gofmt::json_type_name;
use self::gofmt::*;
use self::gourl::*;
pub use self::names::*;
pub use self::nesting::{Nesting, nesting};
pub use self::policy::*;
use self::shape::*;
