//! Two crates of one program declaring one name with different kinds: a clear start-up
//! error naming both declarations, never a hidden second bulkhead.
//!
//! The second crate's declaration is written here by hand (what `#[bulkhead]` in another
//! crate would compile into the binary), so one test binary holds both. A binary of its
//! own: the conflict makes the process-wide registry unusable.

use bulkhead::__private::config_types::{BulkheadConfig, Kind, ThreadPoolConfig};
use bulkhead::__private::{AnnotatedFunction, Declaration, DeclarationSite, declare};
use bulkhead::{BulkheadError, Deploy, DeployError, bulkhead};

#[bulkhead("payment")]
fn charge(order: u64) -> Result<u64, BulkheadError> {
    Ok(order)
}

fn a_pool() -> BulkheadConfig {
    BulkheadConfig::thread_pool(ThreadPoolConfig::default())
}

declare! {
    static BILLING_PAYMENT: Declaration = Declaration {
        name: "payment",
        kind: Kind::ThreadPool,
        config: a_pool,
        declared_at: DeclarationSite {
            crate_name: "billing",
            file: "bulkheads.yaml",
            line: 9,
            column: 3,
        },
        function: AnnotatedFunction {
            path: "billing::settle",
            file: "src/lib.rs",
            line: 40,
        },
    };
}

#[test]
fn the_conflict_is_reported_naming_both_declarations() {
    let conflict = bulkhead::declarations().check().unwrap_err();
    let message = conflict.to_string();
    assert!(
        message.contains("declared as a thread-pool at bulkheads.yaml:9:3 (crate billing)")
            && message.contains("as a semaphore at bulkheads.yaml:")
            && message.contains("(crate bulkheads)"),
        "{message}"
    );

    // A deploy refuses to start, with the same message.
    let err = Deploy::new().install().unwrap_err();
    assert!(
        matches!(&err, DeployError::Conflict(c) if *c == conflict),
        "{err}"
    );

    // And so does the registry on first use, rather than serve one function from a
    // bulkhead of the wrong kind, or from one outside the registry.
    let panicked = std::panic::catch_unwind(|| charge(1)).unwrap_err();
    let text = panicked
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert_eq!(text, message);
}
