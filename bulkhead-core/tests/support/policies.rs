//! The policies of a bulkhead built in a test, set through its one `configure`. Included
//! by `support/mod.rs` and by the loom models.

use bulkhead_config_types::{BulkheadConfig, SemaphoreConfig};
use bulkhead_core::{SemaphoreBulkhead, ThreadPoolBulkhead};

/// A config whose policies are what `set` writes (its limits are not read by `configure`).
pub fn policies(set: impl FnOnce(&mut BulkheadConfig)) -> BulkheadConfig {
    let mut config = BulkheadConfig::semaphore(SemaphoreConfig::default());
    set(&mut config);
    config
}

/// Either kind's `configure`, for [`with_policies`](WithPolicies::with_policies).
pub trait WithPolicies: Sized {
    /// The kind's own `configure`, the test's partition names kept.
    fn configure_with(&self, config: &BulkheadConfig);

    /// The bulkhead with exactly the policies `set` writes ([`policies`]): any it had
    /// before and `set` leaves out are removed.
    fn with_policies(self, set: impl FnOnce(&mut BulkheadConfig)) -> Self {
        self.configure_with(&policies(set));
        self
    }
}

impl WithPolicies for SemaphoreBulkhead {
    fn configure_with(&self, config: &BulkheadConfig) {
        self.configure(config)
            .expect("the test keeps its partition names");
    }
}

impl WithPolicies for ThreadPoolBulkhead {
    fn configure_with(&self, config: &BulkheadConfig) {
        self.configure(config)
            .expect("the test keeps its partition names");
    }
}
