//! Placeholder for the incident example while the runtime lands: a two-permit bulkhead
//! refuses the third concurrent call with `BulkheadError::Full`.

use std::sync::atomic::{AtomicU32, Ordering};

use bulkhead_core::{BulkheadError, BulkheadName};

fn main() {
    let name = BulkheadName::new("recommendations");
    let active = AtomicU32::new(0);
    let limit = 2;
    for call in 1..=3 {
        if active.fetch_add(1, Ordering::AcqRel) < limit {
            println!("call {call}: admitted");
        } else {
            active.fetch_sub(1, Ordering::AcqRel);
            let refusal = BulkheadError::Full { name: name.clone() };
            println!("call {call}: refused: {refusal}");
        }
    }
}
