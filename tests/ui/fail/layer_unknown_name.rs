fn main() {
    let _login = bulkhead::layer!("tower-gatway");
}
