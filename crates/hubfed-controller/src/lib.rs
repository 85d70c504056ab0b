//! The hubfed control plane: the cluster registry ([`clusters`]), the FederatedTypeConfig
//! controller ([`ftc`]) and one sync controller per federated type ([`sync`]).

pub mod clusters;
pub mod ftc;
mod run;
pub mod sync;

pub use run::{ControllerConfig, run};
