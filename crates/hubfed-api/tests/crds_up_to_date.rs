//! The checked-in `crds/*.yaml` must be exactly what the Rust types generate, and `crds/`
//! holds nothing else.

use std::path::Path;

#[test]
fn checked_in_crds_are_up_to_date() {
    let crds_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crds");
    let rendered = hubfed_api::render::render_all().unwrap();
    let mut stale = Vec::new();
    for (file, expected) in &rendered {
        let path = crds_dir.join(file);
        let actual = std::fs::read_to_string(&path).unwrap_or_default();
        if &actual != expected {
            stale.push(*file);
        }
    }
    assert!(
        stale.is_empty(),
        "crds/{{{}}} differ from the Rust API types: run `make generate`",
        stale.join(",")
    );
    let mut checked_in: Vec<String> = std::fs::read_dir(&crds_dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    checked_in.sort();
    let mut generated: Vec<&str> = rendered.iter().map(|(file, _)| *file).collect();
    generated.sort();
    assert_eq!(
        checked_in, generated,
        "crds/ holds exactly the generated files"
    );
}
