//! What several workloads share: pool and semaphore sizes and configs, the tokio runtime
//! of the pool peers, and bulkheads kept full by another thread (for the refusal and
//! memory workloads).

use bulkhead_config_types::{BulkheadConfig, SemaphoreConfig, ThreadPoolConfig};
use bulkhead_core::{Bulkhead, Registry, SemaphoreBulkhead, ThreadPoolBulkhead};
use crossbeam_channel::{Receiver, Sender};

/// Worker threads of every pool (ours and the peers): the machine's core count.
pub const WORKERS: u32 = 2;
/// Queue capacity of the pools: room for every caller's window.
pub const QUEUE: u32 = 256;

pub fn semaphore_config(permits: u32) -> SemaphoreConfig {
    SemaphoreConfig {
        max_concurrent_calls: permits,
        ..SemaphoreConfig::default()
    }
}

pub fn pool_config(threads: u32, queue: u32) -> ThreadPoolConfig {
    ThreadPoolConfig {
        core_threads: threads,
        max_threads: threads,
        queue_capacity: queue,
        ..ThreadPoolConfig::default()
    }
}

/// A multi-thread runtime of one worker whose blocking pool has [`WORKERS`] threads: the
/// `spawn_blocking` peer of the pool workloads.
pub fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(WORKERS as usize)
        .build()
        .expect("a tokio runtime")
}

/// A thread that holds every slot of a bulkhead until the guard drops.
pub struct Occupied {
    release: Option<crossbeam_channel::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Occupied {
    /// Runs `hold(held, release)` on a new thread and returns once `hold` has sent on
    /// `held` (it holds the bulkhead); `release` is closed when the guard drops.
    pub fn new(hold: impl FnOnce(Sender<()>, Receiver<()>) + Send + 'static) -> Occupied {
        let (release_tx, release_rx) = crossbeam_channel::bounded::<()>(0);
        let (held_tx, held_rx) = crossbeam_channel::bounded::<()>(1);
        let thread = std::thread::spawn(move || hold(held_tx, release_rx));
        let _ = held_rx.recv();
        Occupied {
            release: Some(release_tx),
            thread: Some(thread),
        }
    }
}

impl Drop for Occupied {
    fn drop(&mut self) {
        self.release = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A registered bulkhead, as `#[bulkhead]` and `bulkhead::install` get them: from a
/// [`Registry`], which gives it a static name (an error clones no reference count).
pub fn registered(name: &str, config: BulkheadConfig) -> Bulkhead {
    static REGISTRY: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
    REGISTRY
        .get_or_init(Registry::new)
        .register(name, &config)
        .expect("a bench bulkhead")
}

/// A registered semaphore bulkhead with its only permit held by another thread.
pub fn full_semaphore() -> (SemaphoreBulkhead, Occupied) {
    let sem = registered(
        "bench-full-semaphore",
        BulkheadConfig::semaphore(semaphore_config(1)),
    );
    occupy_semaphore(sem.as_semaphore().expect("a semaphore").clone())
}

/// The same, built by hand with a shared (reference-counted) name, as
/// `SemaphoreBulkhead::new("…", …)` makes: each refusal clones and drops the name's `Arc`.
pub fn full_semaphore_shared_name() -> (SemaphoreBulkhead, Occupied) {
    occupy_semaphore(SemaphoreBulkhead::new(
        "bench-full-semaphore-by-hand",
        &semaphore_config(1),
    ))
}

pub fn occupy_semaphore(sem: SemaphoreBulkhead) -> (SemaphoreBulkhead, Occupied) {
    let holder = sem.clone();
    let occupied = Occupied::new(move |held, release| {
        let _permit = holder.try_acquire();
        let _ = held.send(());
        let _ = release.recv();
    });
    (sem, occupied)
}

/// A registered one-thread, no-queue pool whose thread is busy until the guard drops.
pub fn full_pool() -> (ThreadPoolBulkhead, Occupied) {
    let pool = registered(
        "bench-full-pool",
        BulkheadConfig::thread_pool(pool_config(1, 0)),
    );
    let pool = pool.as_thread_pool().expect("a thread pool").clone();
    let holder = pool.clone();
    let occupied = Occupied::new(move |held, release| {
        let _ = holder.call((), |()| {
            let _ = held.send(());
            let _ = release.recv();
        });
    });
    (pool, occupied)
}

/// `bulkhead` with the policies `set` writes into a config of none, through its one
/// `configure` (the config's limits are not read there).
pub fn configured(
    bulkhead: SemaphoreBulkhead,
    set: impl FnOnce(&mut BulkheadConfig),
) -> SemaphoreBulkhead {
    let mut config = BulkheadConfig::semaphore(SemaphoreConfig::default());
    set(&mut config);
    bulkhead
        .configure(&config)
        .expect("a fresh bulkhead takes any partitions");
    bulkhead
}
