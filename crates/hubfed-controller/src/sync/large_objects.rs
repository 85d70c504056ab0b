//! The budget of room for large objects' writes ([`hubfed_core::large_objects`]): shared by every sync
//! controller of the process, taken by a reconcile before it reads the object's spec and
//! given back when the reconcile and every write it left running have ended. A reconcile of
//! an object whose room is still held — by its last reconcile's writes, left running — shares
//! that room rather than waiting for room of its own: it would otherwise wait for its own
//! writes to end, holding a reconcile slot.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

use hubfed_core::large_objects::{budget_kib, charge_kib};
use kube::api::DynamicObject;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::metrics::{GaugeHeld, METRICS};

/// The room of large objects' writes; see the [module documentation](self).
pub struct Budget {
    /// `None`: no budget (`--large-object-budget-mib 0`).
    room: Option<Arc<Semaphore>>,
    kib: u32,
    held: Arc<Held>,
}

/// The room held now, by object (federated kind, namespace, name).
type Held = Mutex<HashMap<Key, Weak<Reservation>>>;
type Key = (String, Option<String>, String);

/// The budget taken for one object: shared by its reconciles and the writes they leave running,
/// given back when the last of them drops it.
pub(crate) struct Reservation {
    _permit: OwnedSemaphorePermit,
    kib: u32,
    key: Key,
    held: Arc<Held>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        used_bytes().sub(bytes(self.kib));
        let mut held = self.held.lock();
        // Unless the object has taken room anew since this one's last holder let go.
        if held
            .get(&self.key)
            .is_some_and(|room| room.strong_count() == 0)
        {
            held.remove(&self.key);
        }
    }
}

fn used_bytes() -> prometheus::IntGauge {
    METRICS
        .large_object_budget_bytes
        .with_label_values(&["used"])
}

fn bytes(kib: u32) -> i64 {
    i64::from(kib) * 1024
}

impl Budget {
    /// A budget of `mib` MiB (0: none).
    pub fn new(mib: u32) -> Self {
        let kib = budget_kib(mib);
        METRICS
            .large_object_budget_bytes
            .with_label_values(&["limit"])
            .set(bytes(kib));
        let room = (kib > 0).then(|| Arc::new(Semaphore::new(kib as usize)));
        Self {
            room,
            kib,
            held: Arc::default(),
        }
    }

    /// The room a reconcile of `obj` (of federated kind `kind`) needs (`None`: none, the
    /// object is small or being deleted, or there is no budget): the room it still holds, or
    /// new room, waited for as long as it takes.
    pub(crate) async fn take(&self, kind: &str, obj: &DynamicObject) -> Option<Arc<Reservation>> {
        let room = self.room.as_ref()?;
        let deleting = obj.metadata.deletion_timestamp.is_some();
        let kib = charge_kib(spec_bytes(obj), deleting, self.kib);
        if kib == 0 {
            return None;
        }
        let key = (
            kind.to_owned(),
            obj.metadata.namespace.clone(),
            obj.metadata.name.clone().unwrap_or_default(),
        );
        let held = (self.held.lock()).get(&key).and_then(Weak::upgrade);
        if held.is_some() {
            return held;
        }
        let permit = match Arc::clone(room).try_acquire_many_owned(kib) {
            Ok(permit) => permit,
            Err(_) => {
                let _waiting = GaugeHeld::new(
                    METRICS
                        .large_object_budget_waiting
                        .with_label_values::<&str>(&[]),
                );
                // The semaphore is never closed.
                Arc::clone(room).acquire_many_owned(kib).await.ok()?
            }
        };
        used_bytes().add(bytes(kib));
        let room = Arc::new(Reservation {
            _permit: permit,
            kib,
            key: key.clone(),
            held: Arc::clone(&self.held),
        });
        let mut held = self.held.lock();
        held.insert(key, Arc::downgrade(&room));
        Some(room)
    }
}

/// The length of `obj`'s spec as JSON: the cache keeps it as text
/// ([`super::packed_fields::pack`]); an object that is not packed is measured by encoding it.
fn spec_bytes(obj: &DynamicObject) -> usize {
    match obj.data.get("spec") {
        None => 0,
        Some(Value::String(text)) => text.len(),
        Some(value) => value.to_string().len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hubfed_core::large_objects::LARGE_SPEC_BYTES;
    use serde_json::json;

    const KIND: &str = "FederatedConfigMap";

    fn object(data_bytes: usize, packed: bool) -> DynamicObject {
        let mut obj = object_named("big", data_bytes);
        if !packed {
            obj.data["spec"] = serde_json::from_str(obj.data["spec"].as_str().unwrap()).unwrap();
        }
        obj
    }

    fn object_named(name: &str, data_bytes: usize) -> DynamicObject {
        let mut obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "types.kubefed.io/v1beta1",
            "kind": KIND,
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"template": {"data": {"k": "x".repeat(data_bytes)}}},
        }))
        .unwrap();
        super::super::packed_fields::pack(&mut obj);
        obj
    }

    #[test]
    fn a_packed_spec_is_measured_by_its_text_and_an_unpacked_one_by_its_encoding() {
        let packed = spec_bytes(&object(100, true));
        let unpacked = spec_bytes(&object(100, false));
        assert_eq!(packed, unpacked);
        assert!(packed > 100, "{packed}");
    }

    /// The room of a second large object comes only when the first's is given back, and the
    /// gauges follow.
    #[tokio::test]
    async fn room_is_waited_for_and_given_back() {
        let budget = Budget::new(1);
        let big = object(LARGE_SPEC_BYTES * 5, true);
        let first = budget.take(KIND, &big).await.expect("room for the first");
        let again = budget
            .take(KIND, &big)
            .await
            .expect("the first's room, shared");
        assert!(
            Arc::ptr_eq(&first, &again),
            "a second reconcile took room anew"
        );
        drop(again);
        let other = object_named("other", LARGE_SPEC_BYTES * 5);
        let waiting = METRICS
            .large_object_budget_waiting
            .with_label_values::<&str>(&[]);
        let second = {
            let budget = &budget;
            let other = &other;
            async move { budget.take(KIND, other).await }
        };
        tokio::pin!(second);
        let early = tokio::time::timeout(std::time::Duration::from_millis(50), &mut second).await;
        assert!(
            early.is_err(),
            "the second object found room beside the first"
        );
        assert_eq!(waiting.get(), 1);
        drop(first);
        let second = second.await.expect("room once the first's came back");
        assert_eq!(waiting.get(), 0);
        assert_eq!(used_bytes().get(), bytes(second.kib));
        drop(second);
        assert_eq!(used_bytes().get(), 0);
        assert!(
            budget.take(KIND, &object(10, true)).await.is_none(),
            "small objects take none"
        );
        assert!(
            budget.held.lock().is_empty(),
            "room given back is still held"
        );
    }
}
