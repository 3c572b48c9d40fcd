//! Hostile config through the runtime's path: a deploy file and `BULKHEAD_…` variables
//! layered over a declaration (as YAML, and as the typed declarations a program compiles
//! in), with an `extends` chain of up to 2 040 links as one more layer and as a file of its
//! own. Any input gives a config or errors, never a panic, a hang or a blow-up, and every
//! diagnostic is one line.
#![no_main]

use bulkhead_config::{Diagnostics, Layers, Parsed, parse_file};
use libfuzzer_sys::fuzz_target;

/// `templates: c0 → c1 → … → c<links>` (the last sets the kind) and a bulkhead on `c0`.
fn chain(links: usize, kind: &str) -> String {
    let mut text = String::from("templates:\n");
    for i in 0..links {
        text.push_str(&format!("  c{i}: {{ extends: c{} }}\n", i + 1));
    }
    text.push_str(&format!("  c{links}: {{ kind: {kind} }}\nbulkheads:\n  chained: {{ extends: c0 }}\n"));
    text
}

fn check(result: Result<Parsed, Diagnostics>) {
    let diagnostics = match result {
        Ok(parsed) => parsed.warnings,
        Err(errors) => {
            assert!(errors.has_errors(), "an Err carries at least one error");
            errors
        }
    };
    for d in diagnostics.iter() {
        let line = d.to_string();
        assert!(!line.contains(['\n', '\r', '\u{1b}']), "not one safe line: {line:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    // Mostly short chains (0..=127 links), sometimes long ones (up to 2 032).
    let links = data.first().map_or(0, |&b| match b {
        0..=127 => usize::from(b),
        _ => usize::from(b - 127) * 16,
    });
    let kind = if data.get(1).is_some_and(|b| b % 2 == 1) { "thread-pool" } else { "semaphore" };
    let text = String::from_utf8_lossy(data.get(2..).unwrap_or_default());
    // Declaration, deploy and environment, separated by U+0001.
    let mut parts = text.splitn(3, '\u{1}');
    let declared = parts.next().unwrap_or_default();
    let deploy = parts.next().unwrap_or_default();
    let env: Vec<(String, String)> = parts
        .next()
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .take(64)
        .collect();
    let chain = chain(links, kind);

    check(parse_file("chain.yaml", &chain));
    check(
        Layers::new("bulkheads.yaml", declared)
            .yaml("chain.yaml", &chain)
            .and_then(|l| l.yaml("deploy.yaml", deploy))
            .map(|l| l.env_vars(env.clone()))
            .and_then(|l| l.resolve()),
    );
    // As a program does at start-up: over its compiled-in declarations.
    if let Ok(parsed) = parse_file("bulkheads.yaml", declared) {
        for strict in [false, true] {
            let mut layers = Layers::over_declarations(&parsed.config, |n| Some(format!("{n}.rs")));
            if strict {
                layers = layers.strict();
            }
            check(
                layers
                    .yaml("deploy.yaml", deploy)
                    .map(|l| l.env_vars(env.clone()))
                    .and_then(|l| l.resolve()),
            );
        }
    }
});
