// A method's fallback returns another type than the method: make it return the method's type.
use bulkhead::{BulkheadError, bulkhead};

struct Catalog;

impl Catalog {
    #[bulkhead("recommendations", fallback = Self::cached)]
    fn recommend(&self, user: u64) -> Vec<u64> {
        vec![user]
    }

    // Returns an `Option`, not the method's `Vec<u64>`.
    fn cached(&self, _user: u64, _: BulkheadError) -> Option<Vec<u64>> {
        None
    }
}

fn main() {
    let _ = Catalog.recommend(1);
}
