//! The budget of large objects' writes. A cold start plans every federated object within seconds,
//! while its member writes wait minutes for their members' write permits; each waiting write
//! holds the object's desired body, and from its first request on the body's encoding too.
//! With ~1 MB templates that was 1.3–1.5 GB of controller memory at 1,000 objects × 10
//! members, whatever the members' pace. So a reconcile of a large object first takes room in
//! a budget ([`charge_kib`]), and the room comes back when the reconcile and the last of the
//! writes it left running have ended; a reconcile that finds no room waits for it, holding
//! its reconcile slot (backpressure: the members' pace, not the hub's, sets how many large
//! objects are in flight).
//!
//! Small objects take no room: what their writes hold is bounded by their number (about 1 KB
//! a waiting write), and a budget shared with them would queue them behind large ones.

/// A spec shorter than this (bytes of its JSON) takes no room.
pub const LARGE_SPEC_BYTES: usize = 64 * 1024;

/// The default budget (`--large-object-budget-mib`): about 130 objects of ~1 MB in flight —
/// with 16 writes at once per member, enough to keep every member busy (one object in flight
/// gives each of its members one write).
pub const DEFAULT_BUDGET_MIB: u32 = 256;

/// KiB of a budget of `budget_kib` that a reconcile takes for a federated object whose spec
/// is `spec_bytes` long: none when the budget is off (0), the object is being deleted (a
/// deletion sends no body) or its spec is small; otherwise twice the spec — the desired
/// object and its encoding, each about the template's size — and never more than the whole
/// budget, so that an object larger than the budget still goes through, alone.
///
/// An estimate: clusters with overrides of their own get bodies of their own, which the
/// charge does not count.
pub fn charge_kib(spec_bytes: usize, deleting: bool, budget_kib: u32) -> u32 {
    if budget_kib == 0 || deleting || spec_bytes < LARGE_SPEC_BYTES {
        return 0;
    }
    let kib = spec_bytes.saturating_mul(2).div_ceil(1024);
    u32::try_from(kib).unwrap_or(u32::MAX).min(budget_kib)
}

/// KiB in a budget of `mib` MiB (0: no budget).
pub fn budget_kib(mib: u32) -> u32 {
    mib.saturating_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: u32 = 256 * 1024;

    #[test]
    fn small_specs_take_no_room() {
        assert_eq!(charge_kib(0, false, BUDGET), 0);
        assert_eq!(charge_kib(LARGE_SPEC_BYTES - 1, false, BUDGET), 0);
    }

    #[test]
    fn a_large_spec_takes_twice_its_size_rounded_up_to_a_kib() {
        assert_eq!(charge_kib(LARGE_SPEC_BYTES, false, BUDGET), 128);
        assert_eq!(charge_kib(900_000, false, BUDGET), 1758);
        assert_eq!(charge_kib(LARGE_SPEC_BYTES + 1, false, BUDGET), 129);
    }

    #[test]
    fn deletions_take_no_room() {
        assert_eq!(charge_kib(900_000, true, BUDGET), 0);
    }

    #[test]
    fn without_a_budget_nothing_is_charged() {
        assert_eq!(charge_kib(900_000, false, budget_kib(0)), 0);
    }

    #[test]
    fn an_object_larger_than_the_budget_takes_all_of_it_and_no_more() {
        assert_eq!(charge_kib(5 * 1024 * 1024, false, budget_kib(1)), 1024);
        assert_eq!(charge_kib(usize::MAX, false, BUDGET), BUDGET);
    }

    #[test]
    fn budgets_are_counted_in_kib() {
        assert_eq!(budget_kib(256), 262_144);
        assert_eq!(budget_kib(u32::MAX), u32::MAX);
    }
}
