//! The hand-written peers: a `Mutex`/`Condvar` semaphore and a bare crossbeam-channel
//! worker pool — what a service would write without a bulkhead library.

use std::sync::{Condvar, Mutex};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

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

/// A fixed pool of workers taking boxed jobs from one bounded crossbeam channel.
pub struct CrossbeamPool {
    jobs: Option<Sender<Job>>,
    workers: Vec<JoinHandle<()>>,
}

impl CrossbeamPool {
    pub fn new(threads: usize, capacity: usize) -> Self {
        let (tx, rx): (Sender<Job>, Receiver<Job>) = crossbeam_channel::bounded(capacity);
        let workers = (0..threads)
            .map(|_| {
                let rx = rx.clone();
                std::thread::spawn(move || {
                    for job in rx {
                        job();
                    }
                })
            })
            .collect();
        CrossbeamPool {
            jobs: Some(tx),
            workers,
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
        if let Some(jobs) = &self.jobs {
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

impl Drop for CrossbeamPool {
    fn drop(&mut self) {
        self.jobs = None;
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}
