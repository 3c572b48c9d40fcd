//! The library's bulkheads as the application sees them: registered before any call, and
//! sized by the application's deploy file; the deploy file checked as CI would.

use std::path::Path;

// Links the library (as the application does by calling it) without calling anything.
extern crate geo_client;

const DEPLOY: &str = include_str!("../deploy.yaml");

fn deploy_file() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy.yaml")
}

#[test]
fn the_librarys_bulkheads_are_listed_and_sized_by_the_apps_deploy_before_any_call() {
    let registry = bulkhead::registry();
    assert_eq!(registry.names(), ["geocoder", "tiles"]);
    let declared = bulkhead::declarations().get("geocoder").unwrap();
    assert_eq!(declared.declared_at().crate_name, "geo-client");
    assert!(declared.functions()[0].path.starts_with("geo_client::"));
    let geocoder = registry.thread_pool("geocoder").unwrap();
    assert_eq!(geocoder.snapshot().limit, 2);

    bulkhead::Deploy::new()
        .yaml("deploy.yaml", DEPLOY)
        .unwrap()
        .strict()
        .install()
        .unwrap();
    let snapshot = geocoder.snapshot();
    assert_eq!((snapshot.limit, snapshot.queue_capacity), (8, Some(16)));
    assert_eq!(snapshot.calls.permitted, 0, "no call was made");
    assert_eq!(
        registry.semaphore("tiles").unwrap().max_wait(),
        std::time::Duration::from_millis(200)
    );
}

#[test]
fn check_deploy_accepts_the_deploy_file_and_refuses_a_misspelled_one() {
    let check = bulkhead::check_deploy(&[deploy_file()], true);
    assert_eq!(check.exit_status(), 0, "{}", check.human());

    let dir = std::env::temp_dir().join(format!("library-app-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let typo = dir.join("typo.yaml");
    std::fs::write(&typo, "bulkheads:\n  geocodr: { max_threads: 3 }\n").unwrap();
    let check = bulkhead::check_deploy(&[&typo], true);
    assert_eq!(check.exit_status(), 1);
    let report = check.human();
    assert!(
        report.contains("typo.yaml:2:3: error: bulkheads.geocodr:")
            && report.contains("did you mean `geocoder`?"),
        "{report}"
    );
    let check = bulkhead::check_deploy(&[dir.join("missing.yaml")], true);
    assert_eq!(check.exit_status(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}
