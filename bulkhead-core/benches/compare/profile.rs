//! `compare --profile <workload> <iterations>`: one workload's loop alone, for a profiler.
//!
//! Each loop is its own `#[inline(never)]` function named `profile_loop_*`, so callgrind
//! can count instructions inside it only and divide by the iterations:
//!
//! ```text
//! valgrind --tool=callgrind --toggle-collect='*profile_loop_*' \
//!     target/release/deps/compare-<hash> --profile semaphore-call 100000
//! callgrind_annotate --inclusive=yes callgrind.out.<pid>
//! ```

use std::hint::black_box;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bulkhead_config_types::{Partitions, PerKeyConfig};
use bulkhead_core::{Partition, SemaphoreBulkhead, ThreadPoolBulkhead};

use crate::fixtures::{
    QUEUE, WORKERS, full_pool, full_semaphore, full_semaphore_shared_name, pool_config,
    semaphore_config,
};
use crate::peers::CrossbeamPool;
use crate::workloads::pool_throughput::{callers, crossbeam_window, ours_window};

/// The workloads `--profile` knows.
pub const WORKLOADS: &[&str] = &[
    "attribute-call",
    "attribute-refusal",
    "semaphore-call",
    "semaphore-try",
    "tokio-try",
    "semaphore-call-async",
    "semaphore-acquire-async",
    "tokio-acquire",
    "semaphore-refusal",
    "semaphore-refusal-shared",
    "pool-refusal",
    "pool-round-trip",
    "pool-async-round-trip",
    "tokio-blocking-round-trip",
    "crossbeam-round-trip",
    "pool-window",
    "crossbeam-window",
    "pool-window-callers",
    "crossbeam-window-callers",
    "partition-call",
    "attribute-partition-call",
    "keyed-call",
];

pub fn run(workload: &str, n: u64) {
    match workload {
        "attribute-call" => profile_loop_attribute_call(n),
        "attribute-refusal" => {
            let (_sem, _held) = crate::attribute::full_attribute();
            profile_loop_attribute_refusal(n);
        }
        "semaphore-call" => {
            let sem = SemaphoreBulkhead::new("profile", &semaphore_config(25));
            profile_loop_semaphore_call(&sem, n);
        }
        "semaphore-try" => {
            let sem = SemaphoreBulkhead::new("profile", &semaphore_config(25));
            profile_loop_semaphore_try(&sem, n);
        }
        "tokio-try" => {
            let sem = tokio::sync::Semaphore::new(25);
            profile_loop_tokio_try(&sem, n);
        }
        "semaphore-call-async" => {
            let sem = SemaphoreBulkhead::new("profile", &semaphore_config(25));
            profile_loop_semaphore_call_async(&sem, n);
        }
        "semaphore-acquire-async" => {
            let sem = SemaphoreBulkhead::new("profile", &semaphore_config(25));
            profile_loop_semaphore_acquire_async(&sem, n);
        }
        "tokio-acquire" => {
            let sem = tokio::sync::Semaphore::new(25);
            profile_loop_tokio_acquire(&sem, n);
        }
        "semaphore-refusal" => {
            let (sem, _held) = full_semaphore();
            profile_loop_semaphore_refusal(&sem, n);
        }
        "semaphore-refusal-shared" => {
            let (sem, _held) = full_semaphore_shared_name();
            profile_loop_semaphore_refusal(&sem, n);
        }
        "pool-refusal" => {
            let (pool, _held) = full_pool();
            profile_loop_pool_refusal(&pool, n);
        }
        "pool-round-trip" => {
            let pool = ThreadPoolBulkhead::new("profile", &pool_config(WORKERS, QUEUE));
            profile_loop_pool_round_trip(&pool, n);
        }
        "pool-async-round-trip" => {
            let pool = ThreadPoolBulkhead::new("profile", &pool_config(WORKERS, QUEUE));
            profile_loop_pool_async_round_trip(&pool, n);
        }
        "tokio-blocking-round-trip" => {
            let rt = crate::fixtures::tokio_runtime();
            profile_loop_tokio_blocking_round_trip(&rt, n);
        }
        "crossbeam-round-trip" => {
            let pool = CrossbeamPool::new(WORKERS as usize, QUEUE as usize);
            profile_loop_crossbeam_round_trip(&pool, n);
        }
        "pool-window" => {
            let pool = ThreadPoolBulkhead::new("profile", &pool_config(WORKERS, QUEUE));
            profile_loop_pool_window(&pool, n);
        }
        "crossbeam-window" => {
            let pool = CrossbeamPool::new(WORKERS as usize, QUEUE as usize);
            profile_loop_crossbeam_window(&pool, n);
        }
        "pool-window-callers" => {
            let pool = ThreadPoolBulkhead::new("profile", &pool_config(WORKERS, QUEUE));
            profile_loop_pool_window_callers(&pool, n);
        }
        "crossbeam-window-callers" => {
            let pool = CrossbeamPool::new(WORKERS as usize, QUEUE as usize);
            profile_loop_crossbeam_window_callers(&pool, n);
        }
        "partition-call" => {
            let sem = SemaphoreBulkhead::new("profile", &semaphore_config(25))
                .with_partitions(&Partitions::new([("live", 0.8), ("batch", 0.2)]));
            profile_loop_partition_call(&sem.partition("live").expect("declared above"), n);
        }
        "attribute-partition-call" => profile_loop_attribute_partition_call(n),
        "keyed-call" => {
            let sem = SemaphoreBulkhead::new("profile", &semaphore_config(25))
                .with_per_key(Some(&PerKeyConfig::new(5)));
            let tenants: Vec<String> = (0..1000).map(|n| format!("tenant-{n}")).collect();
            profile_loop_keyed_call(&sem, &tenants, n);
        }
        other => {
            eprintln!(
                "unknown workload {other:?}; one of: {}",
                WORKLOADS.join(", ")
            );
            std::process::exit(2);
        }
    }
}

#[inline(never)]
fn profile_loop_partition_call(partition: &Partition, n: u64) {
    for i in 0..n {
        black_box(partition.call(|| black_box(i)).ok());
    }
}

#[inline(never)]
fn profile_loop_attribute_partition_call(n: u64) {
    for i in 0..n {
        black_box(crate::attribute::guarded_in_partition(i).ok());
    }
}

#[inline(never)]
fn profile_loop_keyed_call(sem: &SemaphoreBulkhead, tenants: &[String], n: u64) {
    for i in 0..n {
        let tenant = &tenants[i as usize % tenants.len()];
        black_box(sem.keyed(tenant).call(|| black_box(i)).ok());
    }
}

#[inline(never)]
fn profile_loop_attribute_call(n: u64) {
    for i in 0..n {
        black_box(crate::attribute::guarded(i).ok());
    }
}

#[inline(never)]
fn profile_loop_attribute_refusal(n: u64) {
    for i in 0..n {
        black_box(crate::attribute::refused(i).is_err());
    }
}

#[inline(never)]
fn profile_loop_semaphore_call(sem: &SemaphoreBulkhead, n: u64) {
    for i in 0..n {
        black_box(sem.call(|| black_box(i)).ok());
    }
}

#[inline(never)]
fn profile_loop_semaphore_try(sem: &SemaphoreBulkhead, n: u64) {
    for _ in 0..n {
        drop(black_box(sem.try_acquire()));
    }
}

#[inline(never)]
fn profile_loop_tokio_try(sem: &tokio::sync::Semaphore, n: u64) {
    for _ in 0..n {
        drop(black_box(sem.try_acquire()));
    }
}

#[inline(never)]
fn profile_loop_semaphore_call_async(sem: &SemaphoreBulkhead, n: u64) {
    let mut cx = Context::from_waker(Waker::noop());
    for i in 0..n {
        let call = std::pin::pin!(sem.call_async(async { black_box(i) }));
        black_box(call.poll(&mut cx).is_ready());
    }
}

#[inline(never)]
fn profile_loop_semaphore_acquire_async(sem: &SemaphoreBulkhead, n: u64) {
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..n {
        let acquire = std::pin::pin!(sem.acquire_async());
        drop(black_box(acquire.poll(&mut cx)));
    }
}

#[inline(never)]
fn profile_loop_tokio_acquire(sem: &tokio::sync::Semaphore, n: u64) {
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..n {
        let acquire = std::pin::pin!(sem.acquire());
        drop(black_box(acquire.poll(&mut cx)));
    }
}

#[inline(never)]
fn profile_loop_semaphore_refusal(sem: &SemaphoreBulkhead, n: u64) {
    for _ in 0..n {
        black_box(sem.call(|| 1u64).is_err());
    }
}

#[inline(never)]
fn profile_loop_pool_refusal(pool: &ThreadPoolBulkhead, n: u64) {
    let mut cx = Context::from_waker(Waker::noop());
    for i in 0..n {
        black_box(pool.call(i, |x| x + 1).is_err());
        let mut call = pool.call_async(i, |x| async move { x + 1 });
        black_box(matches!(
            Pin::new(&mut call).poll(&mut cx),
            Poll::Ready(Err(_))
        ));
    }
}

#[inline(never)]
fn profile_loop_pool_round_trip(pool: &ThreadPoolBulkhead, n: u64) {
    for i in 0..n {
        black_box(pool.call(i, |x| x + 1).ok());
    }
}

#[inline(never)]
fn profile_loop_pool_async_round_trip(pool: &ThreadPoolBulkhead, n: u64) {
    for i in 0..n {
        let call = pool.call_async(i, |x| async move { x + 1 });
        black_box(futures_executor::block_on(call).ok());
    }
}

#[inline(never)]
fn profile_loop_tokio_blocking_round_trip(rt: &tokio::runtime::Runtime, n: u64) {
    for i in 0..n {
        black_box(futures_executor::block_on(rt.spawn_blocking(move || i + 1)).ok());
    }
}

#[inline(never)]
fn profile_loop_crossbeam_round_trip(pool: &CrossbeamPool, n: u64) {
    for i in 0..n {
        black_box(pool.call(move || i + 1));
    }
}

#[inline(never)]
fn profile_loop_pool_window(pool: &ThreadPoolBulkhead, n: u64) {
    ours_window(pool, n);
}

/// Row 4 as the bench runs it: several callers at once, each with its window.
#[inline(never)]
fn profile_loop_pool_window_callers(pool: &ThreadPoolBulkhead, n: u64) {
    black_box(callers(n, &|tasks| ours_window(pool, tasks)));
}

#[inline(never)]
fn profile_loop_crossbeam_window_callers(pool: &CrossbeamPool, n: u64) {
    black_box(callers(n, &|tasks| crossbeam_window(pool, tasks)));
}

#[inline(never)]
fn profile_loop_crossbeam_window(pool: &CrossbeamPool, n: u64) {
    crossbeam_window(pool, n);
}
