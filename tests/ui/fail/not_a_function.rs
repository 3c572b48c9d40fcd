use bulkhead::bulkhead;

#[bulkhead("payment")]
struct PaymentClient {
    endpoint: String,
}

fn main() {
    let _ = PaymentClient { endpoint: String::new() }.endpoint;
}
