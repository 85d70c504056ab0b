//! `hubfed-controller`: the hubfed control plane (see [`hubfed_controller::process`]).

/// jemalloc, not glibc's allocator: glibc's holds on to freed memory. A cold start of
/// 100 × 900 KB objects to 10 members: peak 397 MiB with glibc, 304 with jemalloc; at rest
/// 332 MiB (162 after a `malloc_trim`) against 123 (docs/benchmarks.md, "Large objects").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    hubfed_controller::process::main();
}
