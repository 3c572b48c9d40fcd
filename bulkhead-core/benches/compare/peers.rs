//! The peers written here: a `Mutex`/`Condvar` semaphore, a bare crossbeam-channel worker
//! pool, and the *bounded* pools a service would write without a bulkhead library — the
//! same admission rule as ours (`threads + queue` tasks in flight, refused beyond), each
//! task's result delivered to a future the caller awaits:
//!
//! * [`BoundedPool`]: admission by a CAS on an in-flight count, the task queued with
//!   `try_send` on a bounded crossbeam channel (refused if full), a oneshot per task;
//! * [`BoundedBlocking`]: tokio's `spawn_blocking` under a `Semaphore` of as many permits,
//!   refused by `try_acquire_owned`;
//! * [`RayonPool`]: rayon's `ThreadPool::spawn` with a oneshot per task (rayon has no bound:
//!   it never refuses, its queues grow).
//!
//! And for the per-key caps, [`KeyedPeer`]: the simplest exact cap per key with bounded
//! memory a service would write — a `DashMap` from the key's id to its calls in flight
//! (the entry removed when it falls to 0) in front of a tokio `Semaphore`.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use crossbeam_utils::CachePadded;
use futures_channel::oneshot;

/// The textbook counting semaphore: a count under a mutex, a condvar for waiters.
pub struct CondvarSemaphore {
    available: Mutex<usize>,
    freed: Condvar,
}

impl CondvarSemaphore {
    pub fn new(permits: usize) -> Self {
        CondvarSemaphore {
            available: Mutex::new(permits),
            freed: Condvar::new(),
        }
    }

    /// Runs `body` holding a permit, waiting for one if necessary.
    pub fn call<R>(&self, body: impl FnOnce() -> R) -> R {
        {
            let mut available = self.available.lock().unwrap_or_else(|e| e.into_inner());
            while *available == 0 {
                available = self
                    .freed
                    .wait(available)
                    .unwrap_or_else(|e| e.into_inner());
            }
            *available -= 1;
        }
        let result = body();
        *self.available.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.freed.notify_one();
        result
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// Worker threads taking boxed jobs from one bounded crossbeam channel; dropping it closes
/// the channel and joins them.
struct Workers {
    jobs: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    /// `threads` workers on a channel of `capacity` jobs; each runs `after` after each job.
    fn spawn(threads: usize, capacity: usize, after: impl Fn() + Clone + Send + 'static) -> Self {
        let (tx, rx): (Sender<Job>, Receiver<Job>) = crossbeam_channel::bounded(capacity);
        let threads = (0..threads)
            .map(|_| {
                let rx = rx.clone();
                let after = after.clone();
                std::thread::spawn(move || {
                    for job in rx {
                        job();
                        after();
                    }
                })
            })
            .collect();
        Workers {
            jobs: Some(tx),
            threads,
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.jobs = None;
        for worker in self.threads.drain(..) {
            let _ = worker.join();
        }
    }
}

/// A fixed pool of workers taking boxed jobs from one bounded crossbeam channel; `send`
/// waits when the channel is full (no refusal).
pub struct CrossbeamPool {
    workers: Workers,
}

impl CrossbeamPool {
    pub fn new(threads: usize, capacity: usize) -> Self {
        CrossbeamPool {
            workers: Workers::spawn(threads, capacity, || ()),
        }
    }

    /// Runs `body` on a worker; its result is sent on `reply`.
    pub fn submit<R: Send + 'static>(
        &self,
        body: impl FnOnce() -> R + Send + 'static,
        reply: Sender<R>,
    ) {
        let job: Job = Box::new(move || {
            let _ = reply.send(body());
        });
        if let Some(jobs) = &self.workers.jobs {
            let _ = jobs.send(job);
        }
    }

    /// Runs `body` on a worker and waits for its result (a one-shot reply channel per call).
    pub fn call<R: Send + 'static>(&self, body: impl FnOnce() -> R + Send + 'static) -> Option<R> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.submit(body, tx);
        rx.recv().ok()
    }
}

/// A task a bounded peer refused: every one of its `threads + queue` slots was taken.
#[derive(Debug)]
pub struct Refused;

/// The bounded peer: admission by a CAS on the count of tasks in flight (at most
/// `threads + queue`), the task queued with `try_send` on a bounded crossbeam channel
/// (refused if that fails), its result sent on a oneshot the caller awaits. The work every
/// bounded pool must do, and nothing else: no accounting, policy, cancellation or context.
pub struct BoundedPool {
    in_flight: Arc<CachePadded<AtomicUsize>>,
    capacity: usize,
    workers: Workers,
}

impl BoundedPool {
    pub fn new(threads: usize, queue: usize) -> Self {
        let capacity = threads + queue;
        let in_flight = Arc::new(CachePadded::new(AtomicUsize::new(0)));
        let done = Arc::clone(&in_flight);
        BoundedPool {
            in_flight,
            capacity,
            workers: Workers::spawn(threads, capacity, move || {
                done.fetch_sub(1, Ordering::Release);
            }),
        }
    }

    /// Admits `body` or refuses it; admitted, it runs on a worker and the returned
    /// receiver resolves to its result.
    pub fn submit<R: Send + 'static>(
        &self,
        body: impl FnOnce() -> R + Send + 'static,
    ) -> Result<oneshot::Receiver<R>, Refused> {
        let mut in_flight = self.in_flight.load(Ordering::Relaxed);
        loop {
            if in_flight >= self.capacity {
                return Err(Refused);
            }
            match self.in_flight.compare_exchange_weak(
                in_flight,
                in_flight + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => in_flight = now,
            }
        }
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(body());
        });
        match &self.workers.jobs {
            Some(jobs) if jobs.try_send(job).is_ok() => Ok(rx),
            _ => {
                self.in_flight.fetch_sub(1, Ordering::Release);
                Err(Refused)
            }
        }
    }
}

/// tokio's `spawn_blocking` (a blocking pool of `threads`) under a `Semaphore` of
/// `threads + queue` permits: what a tokio service writes for a bounded blocking pool.
/// The permit is taken with `try_acquire_owned` (refused when none is left) and released
/// when the body returns.
pub struct BoundedBlocking {
    runtime: tokio::runtime::Runtime,
    permits: Arc<tokio::sync::Semaphore>,
}

impl BoundedBlocking {
    pub fn new(runtime: tokio::runtime::Runtime, threads: usize, queue: usize) -> Self {
        BoundedBlocking {
            runtime,
            permits: Arc::new(tokio::sync::Semaphore::new(threads + queue)),
        }
    }

    /// Admits `body` or refuses it; admitted, it runs on the blocking pool and the returned
    /// handle resolves to its result.
    pub fn submit<R: Send + 'static>(
        &self,
        body: impl FnOnce() -> R + Send + 'static,
    ) -> Result<tokio::task::JoinHandle<R>, Refused> {
        let permit = Arc::clone(&self.permits)
            .try_acquire_owned()
            .map_err(|_| Refused)?;
        Ok(self.runtime.spawn_blocking(move || {
            let result = body();
            drop(permit);
            result
        }))
    }
}

/// rayon's work-stealing pool of `threads`, each task's result sent on a oneshot the
/// caller awaits. rayon bounds nothing: a task is never refused.
pub struct RayonPool {
    pool: rayon::ThreadPool,
}

impl RayonPool {
    pub fn new(threads: usize) -> Self {
        RayonPool {
            pool: rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("a rayon pool"),
        }
    }

    /// Runs `body` on the pool; the returned receiver resolves to its result.
    pub fn submit<R: Send + 'static>(
        &self,
        body: impl FnOnce() -> R + Send + 'static,
    ) -> oneshot::Receiver<R> {
        let (tx, rx) = oneshot::channel();
        self.pool.spawn(move || {
            let _ = tx.send(body());
        });
        rx
    }
}

/// Waits for a peer's reply on the caller's thread: the round trip of a pool peer.
pub fn wait<T, E>(reply: impl Future<Output = Result<T, E>>) -> Option<T> {
    futures_executor::block_on(reply).ok()
}

/// A cap of `cap` calls per key in front of a semaphore of `permits`: the key's count in a
/// `DashMap` (sharded `RwLock`s), incremented under its shard's write lock if below the
/// cap, decremented after the call and removed at 0 (memory bounded by the keys busy);
/// the key hashed as ours is, [`SemaphoreBulkhead::key_id`].
///
/// [`SemaphoreBulkhead::key_id`]: bulkhead_core::SemaphoreBulkhead::key_id
pub struct KeyedPeer {
    counts: dashmap::DashMap<u64, u32>,
    semaphore: tokio::sync::Semaphore,
    cap: u32,
}

impl KeyedPeer {
    pub fn new(permits: usize, cap: u32) -> Self {
        KeyedPeer {
            counts: dashmap::DashMap::new(),
            semaphore: tokio::sync::Semaphore::new(permits),
            cap,
        }
    }

    /// Runs `body` if `key` is below its cap and a permit is free; `None` otherwise.
    pub fn call<R>(&self, key: &str, body: impl FnOnce() -> R) -> Option<R> {
        let id = bulkhead_core::SemaphoreBulkhead::key_id(key);
        {
            let mut count = self.counts.entry(id).or_insert(0);
            if *count >= self.cap {
                return None;
            }
            *count += 1;
        }
        let result = self.semaphore.try_acquire().ok().map(|permit| {
            let result = body();
            drop(permit);
            result
        });
        self.counts.remove_if_mut(&id, |_, count| {
            *count -= 1;
            *count == 0
        });
        result
    }
}

/// The least any cap per key adds to a plain call, for the shares row: the key hashed as
/// ours is ([`SemaphoreBulkhead::key_id`]), one compare-and-swap into a counter picked by
/// the id, the plain call ([`SemaphoreBulkhead::call`]), one subtraction. **Not a usable
/// cap**: a fixed array of counters, with no map, so keys that share a counter share a
/// cap and nothing bounds which keys count where. It is a floor: every exact cap with
/// bounded memory does this much and more (finds the key's counter, and frees it).
///
/// [`SemaphoreBulkhead::key_id`]: bulkhead_core::SemaphoreBulkhead::key_id
/// [`SemaphoreBulkhead::call`]: bulkhead_core::SemaphoreBulkhead::call
pub struct KeyedFloor {
    counts: Box<[std::sync::atomic::AtomicU32]>,
    bulkhead: bulkhead_core::SemaphoreBulkhead,
    cap: u32,
}

impl KeyedFloor {
    pub fn new(bulkhead: bulkhead_core::SemaphoreBulkhead, cap: u32) -> Self {
        KeyedFloor {
            counts: (0..4096)
                .map(|_| std::sync::atomic::AtomicU32::new(0))
                .collect(),
            bulkhead,
            cap,
        }
    }

    /// Runs `body` if the key's counter is below the cap and the bulkhead admits it.
    pub fn call<R>(&self, key: &str, body: impl FnOnce() -> R) -> Option<R> {
        let id = bulkhead_core::SemaphoreBulkhead::key_id(key);
        let count = &self.counts[id as usize & (self.counts.len() - 1)];
        count
            .fetch_update(Ordering::SeqCst, Ordering::Relaxed, |n| {
                (n < self.cap).then_some(n + 1)
            })
            .ok()?;
        let result = self.bulkhead.call(body).ok();
        count.fetch_sub(1, Ordering::SeqCst);
        result
    }
}
