//! The "before": every endpoint's blocking work on one shared worker pool with an
//! unbounded queue, as in a servlet container. Nothing is refused; work waits as long as it
//! takes, even after its client has given up.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use http::StatusCode;
use serde_json::Value;

use super::Scenario;
use super::dependency::{RecommendationService, Recommendations, Work, product_page};

/// One pool of worker threads shared by every endpoint, with an unbounded FIFO queue: what
/// a servlet container's request pool is. Nothing is ever refused; work waits as long as it
/// takes, even after its client has given up.
pub(super) struct SharedWorkerPool {
    pub(super) sender: Mutex<Option<mpsc::Sender<Job>>>,
    pub(super) workers: Mutex<Vec<thread::JoinHandle<()>>>,
    pub(super) queued: Arc<AtomicUsize>,
    pub(super) closed: Arc<AtomicBool>,
}

pub(super) type Job = Box<dyn FnOnce() + Send>;

impl SharedWorkerPool {
    pub(super) fn new(threads: usize) -> Self {
        let (sender, receiver) = mpsc::channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        let queued = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicBool::new(false));
        let workers = (0..threads)
            .map(|n| {
                let receiver = Arc::clone(&receiver);
                let queued = Arc::clone(&queued);
                let closed = Arc::clone(&closed);
                thread::Builder::new()
                    .name(format!("shared-{n}"))
                    .spawn(move || {
                        loop {
                            let job = match receiver.lock() {
                                Ok(receiver) => receiver.recv(),
                                Err(_) => return,
                            };
                            let Ok(job) = job else { return };
                            queued.fetch_sub(1, Ordering::Relaxed);
                            // After shutdown, queued work is discarded instead of run.
                            if !closed.load(Ordering::Relaxed) {
                                job();
                            }
                        }
                    })
                    .expect("spawn a shared-pool worker")
            })
            .collect();
        SharedWorkerPool {
            sender: Mutex::new(Some(sender)),
            workers: Mutex::new(workers),
            queued,
            closed,
        }
    }

    /// Runs `work` on the pool, queueing behind everything already queued.
    pub(super) async fn run<R: Send + 'static>(
        &self,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> Option<R> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = answer.send(work());
        });
        {
            let sender = self.sender.lock().ok()?;
            self.queued.fetch_add(1, Ordering::Relaxed);
            sender.as_ref()?.send(job).ok()?;
        }
        answered.await.ok()
    }

    pub(super) fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Discards the queued work, lets running work finish, and joins the workers.
    pub(super) fn shutdown(&self) {
        self.closed.store(true, Ordering::Relaxed);
        if let Ok(mut sender) = self.sender.lock() {
            sender.take();
        }
        if let Ok(mut workers) = self.workers.lock() {
            for worker in workers.drain(..) {
                let _ = worker.join();
            }
        }
    }
}

#[derive(Clone)]
pub(super) struct SharedPoolApp {
    pub(super) pool: Arc<SharedWorkerPool>,
    pub(super) dependency: Arc<RecommendationService>,
    pub(super) work: Work,
}

impl SharedPoolApp {
    pub(super) fn new(scenario: &Scenario, dependency: Arc<RecommendationService>) -> Self {
        SharedPoolApp {
            pool: Arc::new(SharedWorkerPool::new(scenario.shared_pool_threads)),
            dependency,
            work: Work::of(scenario),
        }
    }

    pub(super) fn router(&self) -> Router {
        Router::new()
            .route("/order/{id}", get(shared_order))
            .route("/product-detail/{id}", get(shared_product_detail))
            .route("/login/{id}", get(shared_login))
            .with_state(self.clone())
    }
}

/// The answer to work run on the shared pool: its JSON, or a 500 once the pool is shut down.
fn answer(result: Option<Value>) -> Response {
    match result {
        Some(value) => Json(value).into_response(),
        None => (StatusCode::INTERNAL_SERVER_ERROR, "worker pool shut down").into_response(),
    }
}

pub(super) async fn shared_order(
    State(app): State<SharedPoolApp>,
    Path(id): Path<u64>,
) -> Response {
    let work = app.work;
    answer(app.pool.run(move || work.place_order(id)).await)
}

pub(super) async fn shared_login(
    State(app): State<SharedPoolApp>,
    Path(id): Path<u64>,
) -> Response {
    let work = app.work;
    answer(app.pool.run(move || work.log_in(id)).await)
}

pub(super) async fn shared_product_detail(
    State(app): State<SharedPoolApp>,
    Path(id): Path<u64>,
) -> Response {
    let work = app.work;
    let dependency = Arc::clone(&app.dependency);
    let page = app.pool.run(move || {
        let product = work.look_up_product(id);
        let live = Recommendations {
            items: dependency.recommend(id),
            fallback: false,
        };
        product_page(product, live)
    });
    answer(page.await)
}
