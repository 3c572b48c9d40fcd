//! The incident service's own work and its recommendation dependency (healthy, then 50×
//! slower), with the recommendation call behind the `recommendations` bulkhead.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use bulkhead::BulkheadError;
use serde_json::{Value, json};

use super::Scenario;

/// The recommendation service the product page calls: healthy, then 50× slower.
pub(super) struct RecommendationService {
    pub(super) slow: AtomicBool,
    pub(super) healthy: Duration,
    pub(super) degraded: Duration,
}

impl RecommendationService {
    pub(super) fn new(scenario: &Scenario) -> Self {
        RecommendationService {
            slow: AtomicBool::new(false),
            healthy: scenario.recommendations_healthy,
            degraded: scenario.recommendations_slow,
        }
    }

    pub(super) fn slow_down(&self) {
        self.slow.store(true, Ordering::Relaxed);
    }

    pub(super) fn is_slow(&self) -> bool {
        self.slow.load(Ordering::Relaxed)
    }

    /// A blocking call to the recommendation service.
    pub(super) fn recommend(&self, product: u64) -> Vec<u64> {
        thread::sleep(if self.is_slow() {
            self.degraded
        } else {
            self.healthy
        });
        vec![product + 1, product + 2, product + 3]
    }
}

/// Recommendations for a product page, and whether they came from the cache.
pub(super) struct Recommendations {
    pub(super) items: Vec<u64>,
    pub(super) fallback: bool,
}

/// The recommendation call behind the `recommendations` bulkhead (declared in the crate's
/// `bulkheads.yaml`, sized by `examples/incident.yaml`): a few calls at once, each caller
/// waiting a few milliseconds at most for its turn; a refused call never reaches the slow
/// service and is answered from the cache instead.
#[bulkhead::bulkhead("recommendations", fallback = cached_recommendations)]
pub(super) fn recommendations(service: &RecommendationService, product: u64) -> Recommendations {
    Recommendations {
        items: service.recommend(product),
        fallback: false,
    }
}

/// The last known recommendations, served when the live call is refused.
pub(super) fn cached_recommendations(
    _service: &RecommendationService,
    product: u64,
    _refused: BulkheadError,
) -> Recommendations {
    Recommendations {
        items: vec![product + 1, product + 2],
        fallback: true,
    }
}

/// The service times of the endpoints' own work.
#[derive(Clone, Copy)]
pub(super) struct Work {
    pub(super) order: Duration,
    pub(super) login: Duration,
    pub(super) product_lookup: Duration,
}

impl Work {
    pub(super) fn of(scenario: &Scenario) -> Self {
        Work {
            order: scenario.order_work,
            login: scenario.login_work,
            product_lookup: scenario.product_lookup,
        }
    }

    /// An order's blocking database work.
    pub(super) fn place_order(self, id: u64) -> Value {
        thread::sleep(self.order);
        json!({ "order": id, "status": "placed" })
    }

    /// A login's blocking credential check.
    pub(super) fn log_in(self, user: u64) -> Value {
        thread::sleep(self.login);
        json!({ "user": user, "session": format!("s-{user}") })
    }

    /// A product page without recommendations: a blocking lookup.
    pub(super) fn look_up_product(self, product: u64) -> Value {
        thread::sleep(self.product_lookup);
        json!({ "product": product, "name": format!("product {product}") })
    }
}

pub(super) fn product_page(mut product: Value, recommendations: Recommendations) -> Value {
    product["recommendations"] = json!(recommendations.items);
    product["fallback"] = json!(recommendations.fallback);
    product
}
