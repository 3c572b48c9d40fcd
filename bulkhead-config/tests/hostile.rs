//! Hostile `extends` chains: resolved without recursion, in time linear in the file, with
//! a documented depth limit — on a small stack, through the file path and through layers.

use bulkhead_config::{Layers, MAX_EXTENDS_DEPTH, parse_file};

/// `bulkheads: { b: { extends: t0 } }` over templates `t0 → t1 → … → t(links-1)`, the last
/// of which sets the kind: `b` is `links` links away from the end of its chain.
fn chain(links: usize) -> String {
    let mut text = String::from("templates:\n");
    for i in 0..links - 1 {
        text.push_str(&format!("  t{i}: {{ extends: t{} }}\n", i + 1));
    }
    text.push_str(&format!(
        "  t{}: {{ kind: semaphore }}\nbulkheads:\n  b: {{ extends: t0 }}\n",
        links - 1
    ));
    text
}

/// Runs `f` on a thread with a 128 KiB stack: recursion per link would overflow it.
fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(128 * 1024)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn a_chain_at_the_depth_limit_resolves() {
    let parsed = parse_file("chain.yaml", &chain(MAX_EXTENDS_DEPTH)).unwrap();
    assert_eq!(
        parsed.config.bulkheads["b"].kind(),
        bulkhead_config::Kind::Semaphore
    );
}

#[test]
fn a_chain_one_past_the_limit_is_one_error_at_the_extends_that_starts_it() {
    let errors = parse_file("chain.yaml", &chain(MAX_EXTENDS_DEPTH + 1)).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors}");
    let error = errors.iter().next().unwrap();
    assert_eq!(error.key_path, "bulkheads.b.extends");
    assert!(
        error
            .message
            .contains(&format!("more than {MAX_EXTENDS_DEPTH} templates")),
        "{error}"
    );
}

#[test]
fn thousands_of_links_are_refused_once_on_a_small_stack() {
    let errors = on_small_stack(|| parse_file("chain.yaml", &chain(5_000)).unwrap_err());
    assert_eq!(errors.len(), 1, "{errors}");
    // The first template more than the limit away from the end of the chain.
    let first_too_deep = 5_000 - 1 - (MAX_EXTENDS_DEPTH + 1);
    assert_eq!(
        errors.iter().next().unwrap().key_path,
        format!("templates.t{first_too_deep}.extends")
    );
}

#[test]
fn a_long_cycle_is_reported_once_by_its_ends() {
    let mut text = String::from("templates:\n");
    for i in 0..5_000 {
        text.push_str(&format!("  t{i}: {{ extends: t{} }}\n", (i + 1) % 5_000));
    }
    let errors = on_small_stack(move || parse_file("cycle.yaml", &text).unwrap_err());
    assert_eq!(errors.len(), 1, "{errors}");
    let error = errors.iter().next().unwrap();
    assert_eq!(error.key_path, "templates.t0.extends");
    assert!(
        error
            .message
            .contains("(t0 → t1 → t2 → … 4995 more … → t4998 → t4999 → t0)"),
        "{error}"
    );
}

#[test]
fn layers_resolve_long_chains_on_a_small_stack() {
    let errors = on_small_stack(|| {
        Layers::new("bulkheads.yaml", "bulkheads:\n  b: { kind: semaphore }\n")
            .yaml("deploy.yaml", &chain(5_000))
            .and_then(|layers| layers.resolve())
            .unwrap_err()
    });
    assert!(
        errors
            .iter()
            .any(|e| e.message.contains("starts a chain of more than")),
        "{errors}"
    );
}
