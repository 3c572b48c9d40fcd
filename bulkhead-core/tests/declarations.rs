//! Declarations grouped into the program's bulkheads, and a registry built from them:
//! every declared bulkhead exists from the start, deploys are checked against each
//! declaration, and one name declared twice follows the documented rules.

use bulkhead_config_types::{BulkheadConfig, Config, Kind, SemaphoreConfig, ThreadPoolConfig};
use bulkhead_core::declaration::Declaration;
use bulkhead_core::{
    AnnotatedFunction, DeclarationSite, Declarations, Registry, ReloadProblem, system_clock,
};

fn two_permits() -> BulkheadConfig {
    BulkheadConfig::semaphore(SemaphoreConfig {
        max_concurrent_calls: 2,
        ..SemaphoreConfig::default()
    })
}

fn five_permits() -> BulkheadConfig {
    BulkheadConfig::semaphore(SemaphoreConfig {
        max_concurrent_calls: 5,
        ..SemaphoreConfig::default()
    })
}

fn a_pool() -> BulkheadConfig {
    BulkheadConfig::thread_pool(ThreadPoolConfig::default())
}

const fn declaration(
    name: &'static str,
    kind: Kind,
    config: fn() -> BulkheadConfig,
    crate_name: &'static str,
    line: u32,
    function: &'static str,
) -> Declaration {
    Declaration {
        name,
        kind,
        config,
        declared_at: DeclarationSite {
            crate_name,
            file: "bulkheads.yaml",
            line,
            column: 3,
        },
        function: AnnotatedFunction {
            path: function,
            file: "src/lib.rs",
            line: 10,
        },
    }
}

static PAYMENT_CHARGE: Declaration = declaration(
    "payment",
    Kind::Semaphore,
    two_permits,
    "shop",
    2,
    "shop::charge",
);
static PAYMENT_REFUND: Declaration = declaration(
    "payment",
    Kind::Semaphore,
    two_permits,
    "shop",
    2,
    "shop::refund",
);
static PDF: Declaration = declaration(
    "pdf-render",
    Kind::ThreadPool,
    a_pool,
    "shop",
    3,
    "shop::render",
);
static PAYMENT_ELSEWHERE: Declaration = declaration(
    "payment",
    Kind::Semaphore,
    five_permits,
    "billing",
    7,
    "billing::charge",
);
static PAYMENT_AS_POOL: Declaration = declaration(
    "payment",
    Kind::ThreadPool,
    a_pool,
    "billing",
    7,
    "billing::charge",
);

#[test]
fn one_bulkhead_per_name_with_every_function_that_uses_it() {
    let declarations = Declarations::from_declarations([&PAYMENT_REFUND, &PDF, &PAYMENT_CHARGE]);
    assert_eq!(
        declarations.names().collect::<Vec<_>>(),
        ["payment", "pdf-render"]
    );
    let payment = declarations.get("payment").unwrap();
    assert_eq!(payment.kind(), Kind::Semaphore);
    assert_eq!(payment.config(), &two_permits());
    assert_eq!(
        payment.declared_at().to_string(),
        "bulkheads.yaml:2:3 (crate shop)"
    );
    let functions: Vec<&str> = payment.functions().iter().map(|f| f.path).collect();
    assert_eq!(functions, ["shop::charge", "shop::refund"]);
    assert!(payment.overridden().is_empty());
    assert!(declarations.check().is_ok());
}

#[test]
fn a_registry_from_declarations_holds_every_bulkhead_before_any_call() {
    let declarations = Declarations::from_declarations([&PAYMENT_CHARGE, &PDF]);
    let registry = Registry::from_declarations(&declarations, system_clock()).unwrap();
    assert_eq!(registry.names(), ["payment", "pdf-render"]);
    let snapshots = registry.snapshot();
    assert!(snapshots.iter().all(|s| s.calls.permitted == 0));
    assert_eq!(registry.semaphore("payment").unwrap().limit(), 2);
    assert!(registry.thread_pool("pdf-render").is_some());
}

#[test]
fn a_kind_change_of_a_declared_bulkhead_is_refused_naming_its_declaration() {
    let declarations = Declarations::from_declarations([&PAYMENT_CHARGE, &PDF]);
    let registry = Registry::from_declarations(&declarations, system_clock()).unwrap();
    let mut deploy = Config::default();
    deploy.bulkheads.insert("pdf-render".into(), two_permits());
    let err = registry.reload(&deploy).unwrap_err();
    assert!(matches!(
        &err.problems[..],
        [ReloadProblem::KindChanged { name, declared_at: Some(site), .. }]
            if name == "pdf-render" && site.line == 3
    ));
    assert!(
        err.to_string()
            .contains("declares `pdf-render` as a thread-pool at bulkheads.yaml:3:3 (crate shop)"),
        "{err}"
    );
}

#[test]
fn same_name_same_kind_different_sizes_serves_the_first_crate_and_reports_the_other() {
    let declarations = Declarations::from_declarations([&PAYMENT_ELSEWHERE, &PAYMENT_CHARGE]);
    let payment = declarations.get("payment").unwrap();
    // `billing` sorts before `shop`: its five permits serve.
    assert_eq!(payment.config(), &five_permits());
    assert_eq!(payment.declared_at().crate_name, "billing");
    assert_eq!(payment.overridden().len(), 1);
    assert_eq!(payment.overridden()[0].0.crate_name, "shop");
    assert_eq!(payment.overridden()[0].1, two_permits());
    assert_eq!(payment.functions().len(), 2);
    assert!(declarations.check().is_ok());
}

#[test]
fn same_name_different_kinds_is_an_error_naming_both_declarations() {
    let declarations = Declarations::from_declarations([&PAYMENT_CHARGE, &PAYMENT_AS_POOL]);
    let conflict = declarations.check().unwrap_err();
    let message = conflict.to_string();
    assert!(
        message.contains("bulkheads.yaml:7:3 (crate billing)")
            && message.contains("bulkheads.yaml:2:3 (crate shop)"),
        "{message}"
    );
    assert!(Registry::from_declarations(&declarations, system_clock()).is_err());
}
