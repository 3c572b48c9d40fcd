//! Thread-pool bulkheads: a sync `&self` method with borrowed arguments runs on a worker
//! (the caller blocks, so borrows are fine); an `async fn` with owned arguments runs its
//! future on a worker.
#![deny(warnings)]
use std::sync::Arc;

use bulkhead::{BulkheadError, bulkhead};

struct Reports {
    title: String,
}

impl Reports {
    #[bulkhead("reports")]
    fn render(&self, rows: &[u32]) -> Result<String, BulkheadError> {
        let name = std::thread::current().name().map(str::to_owned);
        Ok(format!("{} ({} rows) on {name:?}", self.title, rows.len()))
    }

    #[bulkhead("reports", fallback = Self::stale)]
    fn summary(&self, rows: &[u32]) -> String {
        format!("{}: {}", self.title, rows.iter().sum::<u32>())
    }

    fn stale(&self, _rows: &[u32], _: BulkheadError) -> String {
        format!("{}: stale", self.title)
    }

    /// `&mut self` travels to the worker too; `self` inside a macro is renamed with the rest.
    #[bulkhead("reports")]
    fn retitle(&mut self, title: &str) -> Result<usize, BulkheadError> {
        self.title = title.to_owned();
        Ok(format!("{}", self.title).len())
    }

    /// By-value `self`, a pattern argument and a fallback that gets both back.
    #[bulkhead("reports", fallback = Self::unnamed)]
    fn into_title(self, (prefix, suffix): (&str, &str)) -> String {
        format!("{prefix}{}{suffix}", self.title)
    }

    fn unnamed(self, _parts: (&str, &str), _: BulkheadError) -> String {
        self.title
    }

    #[bulkhead("search")]
    async fn find(self: Arc<Self>, needle: String) -> Result<bool, BulkheadError> {
        Ok(self.title.contains(&needle))
    }
}

#[bulkhead("search", fallback = nothing_found)]
async fn search(query: String, limit: usize) -> Vec<String> {
    vec![query; limit]
}

fn nothing_found(_query: String, _limit: usize, _: BulkheadError) -> Vec<String> {
    Vec::new()
}

#[tokio::main]
async fn main() {
    let reports = Arc::new(Reports { title: String::from("sales") });
    assert!(reports.render(&[1, 2]).unwrap().contains("reports-"));
    assert_eq!(reports.summary(&[1, 2]), "sales: 3");
    assert!(reports.clone().find(String::from("ale")).await.unwrap());
    assert_eq!(search(String::from("x"), 2).await.len(), 2);
    let mut owned = Reports { title: String::from("a") };
    assert_eq!(owned.retitle("ab").unwrap(), 2);
    assert_eq!(owned.into_title(("<", ">")), "<ab>");
}
