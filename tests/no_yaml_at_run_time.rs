//! `#[bulkhead]` functions never read YAML at run time: what the attribute resolved at
//! compile time is typed data in the binary, and the config file's text is not in the
//! binary at all — so there is nothing to parse, and no fallback to default sizes if
//! parsing failed.

use bulkhead::{BulkheadError, bulkhead};

#[bulkhead("inventory")]
fn reserve(sku: u64) -> Result<u64, BulkheadError> {
    Ok(sku)
}

/// The binary's bytes as text (std's optimised search, even in a debug build).
fn binary_text() -> String {
    let bytes = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[test]
fn the_config_file_text_is_not_in_the_binary_but_its_declaration_is() {
    assert_eq!(reserve(3).unwrap(), 3);
    let declared = bulkhead::declarations().get("inventory").unwrap();
    assert_eq!(
        bulkhead::registry().semaphore("inventory").unwrap().limit(),
        4
    );
    assert_eq!(declared.declared_at().file, "bulkheads.yaml");

    let binary = binary_text();
    // The scan does see the strings the declaration compiles in…
    assert!(binary.contains("bulkheads.yaml"));
    // …but no line of the YAML file: its text was only read by the compiler. (Read from
    // disk here: `include_str!` would put it in this very binary.)
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/bulkheads.yaml");
    let yaml = std::fs::read_to_string(path).unwrap();
    let marker = yaml.lines().next().unwrap();
    assert!(marker.starts_with("# yaml-language-server"), "{marker}");
    for line in yaml
        .lines()
        .filter(|l| l.contains("inventory:") || *l == marker)
    {
        assert!(
            !binary.contains(line),
            "the binary holds the YAML line {line:?}"
        );
    }
}
