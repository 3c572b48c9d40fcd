//! Hostile input is refused with a clear error, never a panic, a stack overflow or an
//! exponential blow-up.

use bulkhead_config::{MAX_DEPTH, MAX_NODES, MAX_SOURCE_BYTES, parse_file};

fn refused_with(source: &str, words: &str) {
    let errors = parse_file("hostile.yaml", source).expect_err("hostile input must be refused");
    let text = errors.to_string();
    assert!(text.contains(words), "expected {words:?} in:\n{text}");
    assert!(
        text.starts_with("hostile.yaml:"),
        "errors name the file: {text}"
    );
}

#[test]
fn a_file_over_the_size_limit_is_refused_before_it_is_parsed() {
    let huge = format!(
        "bulkheads:\n  a: {{ kind: semaphore }}\n#{}",
        "x".repeat(MAX_SOURCE_BYTES)
    );
    refused_with(&huge, "at most 1048576 bytes");
}

#[test]
fn deep_flow_nesting_is_refused_without_overflowing_the_stack() {
    let depth = 200_000;
    let deep = format!("bulkheads: {}{}", "[".repeat(depth), "]".repeat(depth));
    let errors = parse_file("hostile.yaml", &deep).expect_err("refused");
    assert!(errors.has_errors());
}

#[test]
fn deep_block_nesting_is_refused_at_the_depth_limit() {
    let mut doc = String::new();
    for level in 0..(MAX_DEPTH + 10) {
        doc.push_str(&" ".repeat(level));
        doc.push_str("k:\n");
    }
    refused_with(&doc, &format!("nested more than {MAX_DEPTH} levels"));
}

#[test]
fn a_billion_laughs_alias_bomb_is_refused_before_it_expands() {
    let mut doc = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..10 {
        let prev = format!("*a{}", i - 1);
        doc.push_str(&format!("a{i}: &a{i} [{}]\n", vec![prev; 10].join(", ")));
    }
    refused_with(&doc, &format!("more than {MAX_NODES} nodes"));
}

#[test]
fn a_flat_file_with_too_many_nodes_is_refused() {
    let doc: String = (0..MAX_NODES).map(|i| format!("k{i}: 1\n")).collect();
    assert!(doc.len() < MAX_SOURCE_BYTES);
    refused_with(&doc, &format!("more than {MAX_NODES} nodes"));
}

#[test]
fn binary_garbage_is_an_error_not_a_panic() {
    let garbage: String = (0u32..4096)
        .filter_map(|i| char::from_u32(i * 7919 % 0x11000))
        .collect();
    let _ = parse_file("hostile.yaml", &garbage);
    refused_with("\u{0}\u{1}: [\u{7f}", "not valid YAML");
}
