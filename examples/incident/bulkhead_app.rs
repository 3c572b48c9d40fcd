//! The "after": a bulkhead per dependency, sized by `examples/incident.yaml` (or with an
//! adaptive `recommendations`), and the handlers that use them.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use bulkhead::axum::{BulkheadLayer, Refusal};
use bulkhead::{BulkheadError, Config, SemaphoreBulkhead, ThreadPoolBulkhead};
use serde_json::{Value, json};

use super::dependency::{RecommendationService, Work, product_page, recommendations};
use super::{INCIDENT_YAML, INCIDENT_YAML_PATH, Scenario};

#[derive(Clone)]
pub(super) struct BulkheadApp {
    pub(super) order: ThreadPoolBulkhead,
    pub(super) product_detail: ThreadPoolBulkhead,
    pub(super) recommendations: SemaphoreBulkhead,
    pub(super) login: SemaphoreBulkhead,
    pub(super) dependency: Arc<RecommendationService>,
    pub(super) work: Work,
}

/// The deploy config of the "after" set-up.
pub(super) fn incident_config() -> Result<Config, String> {
    bulkhead::config::parse_file(INCIDENT_YAML_PATH, INCIDENT_YAML)
        .map(|parsed| parsed.config)
        .map_err(|diagnostics| diagnostics.to_string())
}

/// The same deploy with `recommendations` adaptive instead of hand-sized: Gradient2 with
/// its defaults, up to one call per `product-detail` thread (its only callers).
pub(super) fn adaptive_incident_config() -> Result<Config, String> {
    use bulkhead::config::{AdaptiveAlgorithm, AdaptiveConfig, Limits};
    let mut config = incident_config()?;
    let callers = match config.bulkheads.get("product-detail").map(|b| &b.limits) {
        Some(Limits::ThreadPool(pool)) => pool.max_threads,
        _ => {
            return Err(format!(
                "{INCIDENT_YAML_PATH}: `product-detail` is not a thread pool"
            ));
        }
    };
    let recommendations = config
        .bulkheads
        .get_mut("recommendations")
        .ok_or_else(|| format!("{INCIDENT_YAML_PATH}: `recommendations` is not declared"))?;
    if let Limits::Semaphore(semaphore) = &mut recommendations.limits {
        semaphore.max_concurrent_calls = callers;
    }
    recommendations.adaptive = Some(AdaptiveConfig::new(AdaptiveAlgorithm::Gradient2));
    Ok(config)
}

impl BulkheadApp {
    /// Installs `examples/incident.yaml` as the deploy config of the process-wide registry
    /// (what a service does at start-up) and registers the endpoints' bulkheads from it.
    /// The annotated `recommendations` function finds its entry there too.
    /// With `adaptive`, the deploy of [`adaptive_incident_config`] instead: installing it
    /// switches the already registered `recommendations` to an adaptive limit live.
    pub(super) fn new(
        scenario: &Scenario,
        dependency: Arc<RecommendationService>,
        adaptive: bool,
    ) -> Result<Self, String> {
        let config = if adaptive {
            adaptive_incident_config()?
        } else {
            incident_config()?
        };
        bulkhead::install(&config).map_err(|err| format!("{INCIDENT_YAML_PATH}: {err}"))?;
        let register = |name: &str| {
            let declared = config
                .bulkheads
                .get(name)
                .ok_or_else(|| format!("{INCIDENT_YAML_PATH}: `{name}` is not declared"))?;
            bulkhead::registry()
                .register(name, declared)
                .map_err(|err| format!("{INCIDENT_YAML_PATH}: {err}"))
        };
        let wrong_kind = |name: &str| format!("{INCIDENT_YAML_PATH}: `{name}` has the wrong kind");
        let thread_pool = |name: &str| {
            register(name)?
                .as_thread_pool()
                .cloned()
                .ok_or_else(|| wrong_kind(name))
        };
        let semaphore = |name: &str| {
            register(name)?
                .as_semaphore()
                .cloned()
                .ok_or_else(|| wrong_kind(name))
        };
        Ok(BulkheadApp {
            order: thread_pool("order")?,
            product_detail: thread_pool("product-detail")?,
            recommendations: semaphore("recommendations")?,
            login: semaphore("login")?,
            dependency,
            work: Work::of(scenario),
        })
    }

    pub(super) fn router(&self) -> Router {
        let login = Router::new()
            .route("/login/{id}", get(isolated_login))
            .route_layer(BulkheadLayer::new(self.login.clone()));
        Router::new()
            .route("/order/{id}", get(isolated_order))
            .route("/product-detail/{id}", get(isolated_product_detail))
            .merge(login)
            .with_state(self.clone())
    }

    /// Calls waiting for room in any of the bulkheads right now.
    pub(super) fn queued(&self) -> usize {
        [
            self.order.snapshot(),
            self.product_detail.snapshot(),
            self.recommendations.snapshot(),
            self.login.snapshot(),
        ]
        .iter()
        .map(|snapshot| (snapshot.queued + snapshot.waiting) as usize)
        .sum()
    }

    /// The bulkheads belong to the process-wide registry and outlive the run; nothing to
    /// stop here. (A service would call `bulkhead::registry().shutdown(timeout)` on exit.)
    pub(super) fn shutdown(&self) {}
}

pub(super) async fn isolated_order(
    State(app): State<BulkheadApp>,
    Path(id): Path<u64>,
) -> Result<Json<Value>, Refusal> {
    let work = app.work;
    let order = app
        .order
        .call_async(id, move |id| async move { work.place_order(id) })
        .await
        .map_err(BulkheadError::from)?;
    Ok(Json(order))
}

pub(super) async fn isolated_product_detail(
    State(app): State<BulkheadApp>,
    Path(id): Path<u64>,
) -> Result<Json<Value>, Refusal> {
    let work = app.work;
    let page = app
        .product_detail
        .call_async(id, {
            let app = app.clone();
            move |id| async move {
                let product = work.look_up_product(id);
                product_page(product, recommendations(&app.dependency, id))
            }
        })
        .await
        .map_err(BulkheadError::from)?;
    Ok(Json(page))
}

pub(super) async fn isolated_login(
    State(app): State<BulkheadApp>,
    Path(id): Path<u64>,
) -> Json<Value> {
    // Admitted by the route's bulkhead layer; the check itself is async I/O here.
    tokio::time::sleep(app.work.login).await;
    Json(json!({ "user": id, "session": format!("s-{id}") }))
}
