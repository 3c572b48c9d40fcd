// An error type without From<BulkheadError>: add that impl, return BulkheadError, or a fallback.
use bulkhead::bulkhead;

// `std::io::Error` has no `From<bulkhead::BulkheadError>`.
#[bulkhead("inventory")]
fn read_stock(path: &str) -> Result<String, std::io::Error> {
    std::fs::read_to_string(path)
}

fn main() {
    let _ = read_stock("stock.txt");
}
