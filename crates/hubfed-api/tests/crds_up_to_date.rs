//! The checked-in `crds/*.yaml` must be exactly what the Rust types generate.

use std::path::Path;

#[test]
fn checked_in_crds_are_up_to_date() {
    let crds_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crds");
    let mut stale = Vec::new();
    for (file, expected) in hubfed_api::render::render_all().unwrap() {
        let path = crds_dir.join(file);
        let actual = std::fs::read_to_string(&path).unwrap_or_default();
        if actual != expected {
            stale.push(file);
        }
    }
    assert!(
        stale.is_empty(),
        "crds/{{{}}} differ from the Rust API types: run `make generate`",
        stale.join(",")
    );
}
