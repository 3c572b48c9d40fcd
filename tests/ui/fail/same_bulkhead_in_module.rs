// The same mistake between free functions of one module.
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
