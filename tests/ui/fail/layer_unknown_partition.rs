// layer! naming a partition the bulkhead does not declare (a typo): use the declared name the error suggests.
fn main() {
    let _reindex = bulkhead::layer!("shared-search", partition = "bacth");
}
