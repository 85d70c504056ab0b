//! KubeFed v1beta1-compatible API types for hubfed and the well-known names shared by every
//! component (labels, annotations, finalizers, groups).
//!
//! Wire shapes follow `shared/reference/kubefed-v1beta1.md`; a KubeFed manifest deserialises
//! into these types unchanged.

pub mod federated;
pub mod names;
