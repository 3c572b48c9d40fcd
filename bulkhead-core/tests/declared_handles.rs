//! An annotated function's first call takes the handle the process-wide registry built for
//! its declaration: the declared config is not built again, validated again or looked up
//! by name at run time (the handle is keyed by the declaration itself).
#![cfg(target_os = "linux")] // where the linker gathers declarations

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use bulkhead_config_types::{BulkheadConfig, Kind, SemaphoreConfig};
use bulkhead_core::declaration::Declaration;
use bulkhead_core::{AnnotatedFunction, DeclarationSite, declared_handle, registry};

/// How many times the declared config was built.
static BUILT: AtomicUsize = AtomicUsize::new(0);

fn three_permits() -> BulkheadConfig {
    BUILT.fetch_add(1, SeqCst);
    BulkheadConfig::semaphore(SemaphoreConfig {
        max_concurrent_calls: 3,
        ..SemaphoreConfig::default()
    })
}

bulkhead_core::__declare! {
    static LOOKUPS: Declaration = Declaration {
        name: "declared-handle",
        kind: Kind::Semaphore,
        config: three_permits,
        declared_at: DeclarationSite {
            crate_name: "shop",
            file: "bulkheads.yaml",
            line: 4,
            column: 3,
        },
        function: AnnotatedFunction {
            path: "shop::lookup",
            file: "src/lib.rs",
            line: 12,
        },
    };
}

#[test]
fn the_first_call_takes_the_handle_built_with_the_registry_and_builds_nothing() {
    let registered = registry().semaphore("declared-handle").expect("declared");
    let built = BUILT.load(SeqCst);
    for _ in 0..3 {
        let handle = declared_handle(&LOOKUPS).expect("the linker gathered the declaration");
        let handle = handle.as_semaphore().expect("a semaphore").clone();
        // The same bulkhead: a permit taken through one is missing from the other.
        let permit = handle.try_acquire().unwrap();
        assert_eq!(registered.available(), 2);
        drop(permit);
    }
    assert_eq!(BUILT.load(SeqCst), built, "the config was built again");
}
