//! `bulkhead::reload` on the process-wide registry while `#[bulkhead]` functions of both
//! kinds are under load: sizes move up and down, callers are never blocked by a reload, the
//! limits hold and every call is accounted exactly once. (A binary of its own: the
//! registry is process-wide, and a reload must name every bulkhead used in the process.)

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::thread;

use bulkhead::config::{BulkheadConfig, SemaphoreConfig, ThreadPoolConfig};
use bulkhead::{BulkheadError, Config, bulkhead};

/// Declared in `bulkheads.yaml`: a thread pool of 2 threads and a queue of 2.
#[bulkhead("reports")]
fn render(n: u64) -> Result<u64, BulkheadError> {
    spin(n);
    Ok(n)
}

/// Declared in `bulkheads.yaml`: a semaphore of 4.
#[bulkhead("inventory")]
fn reserve(n: u64) -> Result<u64, BulkheadError> {
    spin(n);
    Ok(n)
}

fn spin(n: u64) {
    for _ in 0..(n % 300) {
        std::hint::spin_loop();
    }
    if n.is_multiple_of(4) {
        thread::yield_now();
    }
}

/// (permits, max_threads, queue_capacity): up and down.
const STEPS: [(u32, u32, u32); 6] = [
    (4, 2, 2),
    (8, 5, 6),
    (1, 1, 0),
    (6, 3, 8),
    (2, 1, 1),
    (5, 4, 3),
];
const MOST_PERMITS: u32 = 8;
const MOST_THREADS: u32 = 5;
const MOST_QUEUED: u32 = 8;

fn deploy((permits, threads, queue): (u32, u32, u32)) -> Config {
    let mut config = Config::default();
    config.bulkheads.insert(
        "inventory".into(),
        BulkheadConfig::semaphore(SemaphoreConfig {
            max_concurrent_calls: permits,
            ..SemaphoreConfig::default()
        }),
    );
    config.bulkheads.insert(
        "reports".into(),
        BulkheadConfig::thread_pool(ThreadPoolConfig {
            core_threads: 1,
            max_threads: threads,
            queue_capacity: queue,
            thread_name_prefix: Some("reports-".into()),
            ..ThreadPoolConfig::default()
        }),
    );
    config
}

#[derive(Default)]
struct Seen {
    ok: AtomicU64,
    full: AtomicU64,
}

impl Seen {
    fn add(&self, result: Result<u64, BulkheadError>) {
        match result {
            Ok(_) => self.ok.fetch_add(1, SeqCst),
            Err(BulkheadError::Full { .. }) => self.full.fetch_add(1, SeqCst),
            Err(other) => panic!("unexpected refusal: {other}"),
        };
    }
}

#[test]
fn facade_reload_under_load_moves_sizes_live_and_accounts_every_call() {
    const CALLERS: u64 = 6;
    const CALLS: u64 = 1_000;
    bulkhead::install(&deploy(STEPS[0])).unwrap();
    // First use registers both with the installed sizes.
    render(1).unwrap();
    reserve(1).unwrap();
    let registry = bulkhead::registry();
    let pool = registry.thread_pool("reports").unwrap();
    let sem = registry.semaphore("inventory").unwrap();
    assert_eq!((pool.snapshot().limit, sem.limit()), (2, 4));
    let (pool_before, sem_before) = (pool.snapshot().calls, sem.snapshot().calls);

    let (pool_seen, sem_seen) = (Seen::default(), Seen::default());
    let done = AtomicU64::new(0);
    let made = AtomicU64::new(0);
    // The callers go on until the reloader has walked the steps twice: every reload
    // happens under load however the threads are scheduled.
    let schedule_done = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let reloads = thread::scope(|s| {
        for c in 0..CALLERS {
            let (pool_seen, sem_seen, done) = (&pool_seen, &sem_seen, &done);
            let (made, schedule_done) = (&made, &schedule_done);
            s.spawn(move || {
                let mut i = 0;
                while i < CALLS || !schedule_done.load(SeqCst) {
                    let n = c * 7919 + i;
                    pool_seen.add(render(n));
                    sem_seen.add(reserve(n));
                    made.fetch_add(1, SeqCst);
                    i += 1;
                }
                done.fetch_add(1, SeqCst);
            });
        }
        let sampler = s.spawn(|| {
            while !stop.load(SeqCst) {
                let p = pool.snapshot();
                assert!(p.active <= MOST_THREADS, "{p:?}");
                assert!(p.queued <= MOST_QUEUED, "{p:?}");
                let m = sem.snapshot();
                assert!(m.active <= MOST_PERMITS, "{m:?}");
                thread::yield_now();
            }
        });
        let mut reloads = 0;
        while done.load(SeqCst) < CALLERS {
            let step = STEPS[(reloads + 1) % STEPS.len()];
            let report = bulkhead::reload(&deploy(step)).unwrap();
            assert!(report.undeclared.is_empty(), "{report:?}");
            // Applied in place: the handles the functions hold see it at once.
            let p = pool.snapshot();
            assert_eq!((p.limit, p.queue_capacity), (step.1, Some(step.2)));
            assert_eq!(sem.limit(), step.0);
            reloads += 1;
            if reloads >= 2 * STEPS.len() {
                schedule_done.store(true, SeqCst);
            }
            for _ in 0..200 {
                thread::yield_now();
            }
        }
        stop.store(true, SeqCst);
        sampler.join().unwrap();
        reloads
    });
    assert!(
        reloads >= 2 * STEPS.len(),
        "only {reloads} reloads under load"
    );

    let total = made.load(SeqCst);
    assert!(total >= CALLERS * CALLS);
    for (what, seen, now, before) in [
        ("reports", &pool_seen, pool.snapshot().calls, pool_before),
        ("inventory", &sem_seen, sem.snapshot().calls, sem_before),
    ] {
        let (ok, full) = (seen.ok.load(SeqCst), seen.full.load(SeqCst));
        assert_eq!(ok + full, total, "{what}");
        assert_eq!(now.permitted - before.permitted, ok, "{what}: {now:?}");
        assert_eq!(now.completed - before.completed, ok, "{what}: {now:?}");
        assert_eq!(
            now.refused.full - before.refused.full,
            full,
            "{what}: {now:?}"
        );
        assert_eq!(now.refused.total() - before.refused.total(), full, "{what}");
        assert_eq!((now.panicked, now.cancelled), (0, 0), "{what}");
    }
}
