// A fn calling a fn of its own bulkhead (deadlock): call a plain helper, or give each a bulkhead.
use bulkhead::{BulkheadError, bulkhead};

mod payments {
    use super::*;

    #[bulkhead("payment")]
    pub fn charge(order: u64) -> Result<u64, BulkheadError> {
        authorize(order)?;
        Ok(order)
    }

    #[bulkhead("payment")]
    pub fn authorize(order: u64) -> Result<u64, BulkheadError> {
        Ok(order)
    }
}

fn main() {
    let _ = payments::charge(1);
}
