//! KubeFed v1beta1-compatible API types for hubfed and the well-known names shared by every
//! component (labels, annotations, finalizers, groups).
//!
//! Wire shapes follow `docs/kubefed-compatibility.md`; a KubeFed manifest deserialises
//! into these types unchanged.

pub mod about;
pub mod condition;
pub mod defaulttypes;
pub mod duration;
mod error;
pub mod externaldns;
pub mod federated;
pub mod federatedcrd;
pub mod federatedtypeconfig;
pub mod kubefedcluster;
pub mod kubefedconfig;
pub mod mcs;
pub mod multiclusterdns;
pub mod names;
pub mod propagatedversion;
pub mod pull_mcs;
pub mod render;
pub mod scheduling;
mod upstream;
pub mod work;

pub use error::Error;
