// #[bulkhead] on a struct: put it on a function with a body (free, or in an impl block).
use bulkhead::bulkhead;

#[bulkhead("payment")]
struct PaymentClient {
    endpoint: String,
}

fn main() {
    let _ = PaymentClient { endpoint: String::new() }.endpoint;
}
