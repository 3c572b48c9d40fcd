// layer! naming a bulkhead the config does not declare (a typo): use the name the error suggests.
fn main() {
    let _login = bulkhead::layer!("tower-gatway");
}
