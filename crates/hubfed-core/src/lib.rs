//! Every federation decision as a pure function over plain data: no IO, no async, no clock.
//!
//! The controller reads caches, calls [`plan::plan`] for one federated object, carries out the
//! per-cluster actions, and turns the outcomes into status with [`status::compute_status`] and
//! into a PropagatedVersion with [`version::update_propagated_version`]. Behaviour follows
//! KubeFed v1beta1 (`docs/kubefed-compatibility.md` §1.6, §1.7, §1.10, §2.4); where hubfed
//! deliberately differs, the item's documentation says so. `hubfedctl enable` takes a built-in
//! type's template schema from [`openapi::kind_schema`].

pub mod admission;
pub mod burst;
pub mod conclude;
pub mod desired;
pub mod detach;
pub mod dns;
pub mod drift;
pub mod error;
pub mod gc;
pub mod gojson;
pub mod gopatch;
pub mod health;
pub mod hub;
pub mod intent;
pub mod large_objects;
pub mod lease;
pub mod mcs;
pub mod openapi;
pub mod overrides;
pub mod ownership;
pub mod placement;
pub mod plan;
pub mod planner;
pub mod pull;
pub mod readiness;
pub mod retention;
pub mod rollout;
pub mod schedule;
pub mod selector;
pub mod status;
pub mod status_writes;
pub mod validation;
pub mod version;

#[cfg(test)]
mod test_support;

pub use error::{CoreError, Result};
