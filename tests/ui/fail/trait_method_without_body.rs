// #[bulkhead] on a trait method without a body: put it on the method in the impl block.
use bulkhead::{BulkheadError, bulkhead};

trait Payments {
    // A declaration has no body to wrap: the attribute goes on the implementation.
    #[bulkhead("payment")]
    fn charge(&self, order: u64) -> Result<u64, BulkheadError>;
}

fn main() {}
