//! The `bulkhead` command-line tool: validates deploy configs in CI/CD.
fn main() {
    eprintln!("bulkhead: the CLI is not built yet");
    std::process::exit(2);
}
