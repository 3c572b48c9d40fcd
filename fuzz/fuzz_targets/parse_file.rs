//! Hostile config: any bytes given to `parse_file` (parse + validate + resolve + lint) give
//! a config or positioned errors, never a panic, a hang or an exponential blow-up.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let source = String::from_utf8_lossy(data);
    match bulkhead_config::parse_file("fuzz.yaml", &source) {
        Ok(parsed) => {
            // Lints are positioned too.
            for warning in parsed.warnings.iter() {
                assert!(warning.to_string().starts_with("fuzz.yaml"), "{warning}");
            }
        }
        Err(errors) => {
            assert!(errors.has_errors(), "an Err carries at least one error");
            for error in errors.iter() {
                let text = error.to_string();
                assert!(text.starts_with("fuzz.yaml"), "unpositioned: {text}");
            }
        }
    }
});
