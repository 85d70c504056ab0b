//! The hubfed control plane: the cluster registry ([`clusters`]), the FederatedTypeConfig
//! controller ([`ftc`]) and one sync controller per federated type ([`sync`]).

pub mod admin;
pub mod agent;
pub mod clusters;
pub mod dns;
pub mod events;
pub mod ftc;
pub mod hub_crds;
pub mod mcs;
pub mod metrics;
pub mod policy;
pub mod process;
mod run;
pub mod schedule;
mod settings;
pub mod sync;
#[cfg(test)]
mod test_requests;
mod watch;
pub mod webhook;

pub use run::{LEASE_NAME, run, run_with};
pub use settings::ControllerConfig;
