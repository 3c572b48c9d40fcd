//! `compare --profile <workload> <iterations>`: one workload's loop alone, for a profiler.
//!
//! `bulkhead-core/benches/instructions.sh` runs these loops under callgrind and prints the
//! instructions per operation, ours beside the peers', as the tables of
//! `docs/benchmarks.md`. Each loop is its own `#[inline(never)]` function named
//! `profile_loop_*`, so a profile can also be narrowed to one loop on the caller's thread:
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
    QUEUE, WORKERS, configured, full_pool, full_semaphore, full_semaphore_shared_name, pool_config,
    semaphore_config, tokio_runtime,
};
use crate::peers::{BoundedBlocking, BoundedPool, CrossbeamPool, RayonPool, wait};
use crate::workloads::pool_throughput::{
    bounded_blocking_window, bounded_window, callers, crossbeam_window, ours_window, rayon_window,
    tokio_window,
};

/// A `--profile` workload: its name, and what sets up its loop and runs it `n` times.
type ProfileWorkload = (&'static str, fn(u64));

/// The workloads `--profile` knows.
pub const WORKLOADS: &[ProfileWorkload] = &[
    ("attribute-call", profile_loop_attribute_call),
    ("attribute-refusal", |n| {
        let (_sem, _held) = crate::attribute::full_attribute();
        profile_loop_attribute_refusal(n);
    }),
    ("semaphore-call", |n| {
        profile_loop_semaphore_call(&semaphore(), n)
    }),
    ("semaphore-try", |n| {
        profile_loop_semaphore_try(&semaphore(), n)
    }),
    ("tokio-try", |n| {
        let sem = tokio::sync::Semaphore::new(25);
        profile_loop_tokio_try(&sem, n);
    }),
    ("semaphore-call-async", |n| {
        profile_loop_semaphore_call_async(&semaphore(), n)
    }),
    ("semaphore-acquire-async", |n| {
        profile_loop_semaphore_acquire_async(&semaphore(), n)
    }),
    ("tokio-acquire", |n| {
        let sem = tokio::sync::Semaphore::new(25);
        profile_loop_tokio_acquire(&sem, n);
    }),
    ("semaphore-refusal", |n| {
        let (sem, _held) = full_semaphore();
        profile_loop_semaphore_refusal(&sem, n);
    }),
    ("semaphore-refusal-shared", |n| {
        let (sem, _held) = full_semaphore_shared_name();
        profile_loop_semaphore_refusal(&sem, n);
    }),
    ("tokio-refusal", |n| {
        let sem = tokio::sync::Semaphore::new(1);
        let _held = sem.try_acquire();
        profile_loop_tokio_refusal(&sem, n);
    }),
    // A sync refusal and an async one per iteration.
    ("pool-refusal", |n| {
        let (pool, _held) = full_pool();
        profile_loop_pool_refusal(&pool, n);
    }),
    ("pool-call-refusal", |n| {
        let (pool, _held) = full_pool();
        profile_loop_pool_call_refusal(&pool, n);
    }),
    ("pool-async-refusal", |n| {
        let (pool, _held) = full_pool();
        profile_loop_pool_async_refusal(&pool, n);
    }),
    ("pool-round-trip", |n| {
        profile_loop_pool_round_trip(&ours_pool(), n)
    }),
    ("pool-async-round-trip", |n| {
        profile_loop_pool_async_round_trip(&ours_pool(), n)
    }),
    ("tokio-blocking-round-trip", |n| {
        profile_loop_tokio_blocking_round_trip(&tokio_runtime(), n)
    }),
    ("crossbeam-round-trip", |n| {
        profile_loop_crossbeam_round_trip(&crossbeam_pool(), n)
    }),
    ("bounded-round-trip", |n| {
        profile_loop_bounded_round_trip(&bounded_pool(), n)
    }),
    ("bounded-blocking-round-trip", |n| {
        profile_loop_bounded_blocking_round_trip(&bounded_blocking(), n)
    }),
    ("rayon-round-trip", |n| {
        profile_loop_rayon_round_trip(&rayon_pool(), n)
    }),
    ("pool-window", |n| profile_loop_pool_window(&ours_pool(), n)),
    ("crossbeam-window", |n| {
        profile_loop_crossbeam_window(&crossbeam_pool(), n)
    }),
    ("tokio-blocking-window", |n| {
        profile_loop_tokio_blocking_window(&tokio_runtime(), n)
    }),
    ("bounded-window", |n| {
        profile_loop_bounded_window(&bounded_pool(), n)
    }),
    ("bounded-blocking-window", |n| {
        profile_loop_bounded_blocking_window(&bounded_blocking(), n)
    }),
    ("rayon-window", |n| {
        profile_loop_rayon_window(&rayon_pool(), n)
    }),
    ("pool-window-callers", |n| {
        profile_loop_pool_window_callers(&ours_pool(), n)
    }),
    ("crossbeam-window-callers", |n| {
        profile_loop_crossbeam_window_callers(&crossbeam_pool(), n)
    }),
    ("bounded-window-callers", |n| {
        profile_loop_bounded_window_callers(&bounded_pool(), n)
    }),
    ("partition-call", |n| {
        let sem = configured(semaphore(), |c| {
            c.partitions = Partitions::new([("live", 0.8), ("batch", 0.2)]);
        });
        profile_loop_partition_call(&sem.partition("live").expect("declared above"), n);
    }),
    (
        "attribute-partition-call",
        profile_loop_attribute_partition_call,
    ),
    ("keyed-call", |n| {
        let sem = configured(semaphore(), |c| c.per_key = Some(PerKeyConfig::new(5)));
        let tenants: Vec<String> = (0..1000).map(|n| format!("tenant-{n}")).collect();
        profile_loop_keyed_call(&sem, &tenants, n);
    }),
    ("keyed-peer", |n| {
        let tenants: Vec<String> = (0..1000).map(|n| format!("tenant-{n}")).collect();
        profile_loop_keyed_peer(&crate::peers::KeyedPeer::new(25, 5), &tenants, n);
    }),
    ("semaphore-tasks", |n| {
        let sem = SemaphoreBulkhead::new(
            "profile-tasks",
            &bulkhead_config_types::SemaphoreConfig {
                fair: true,
                max_wait: std::time::Duration::from_secs(10).into(),
                ..semaphore_config(64)
            },
        );
        profile_loop_tasks(n, move |x| {
            let sem = sem.clone();
            async move {
                sem.call_async(async move {
                    tokio::task::yield_now().await;
                    black_box(x)
                })
                .await
                .expect("max_wait is long")
            }
        });
    }),
    ("attribute-tasks", |n| {
        profile_loop_tasks(n, |x| async move {
            crate::workloads::tokio_tasks::semaphore_call(x)
                .await
                .expect("max_wait is long")
        });
    }),
    ("tokio-semaphore-tasks", |n| {
        let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(64));
        profile_loop_tasks(n, move |x| {
            let sem = std::sync::Arc::clone(&sem);
            async move {
                let _permit = sem.acquire().await.expect("never closed");
                tokio::task::yield_now().await;
                black_box(x)
            }
        });
    }),
    ("keyed-floor", |n| {
        let tenants: Vec<String> = (0..1000).map(|n| format!("tenant-{n}")).collect();
        profile_loop_keyed_floor(&crate::peers::KeyedFloor::new(semaphore(), 5), &tenants, n);
    }),
];

/// Runs the workload named `workload` `n` times, or says which names there are.
pub fn run(workload: &str, n: u64) {
    match WORKLOADS.iter().find(|(name, _)| *name == workload) {
        Some((_, run)) => run(n),
        None => {
            let names: Vec<&str> = WORKLOADS.iter().map(|(name, _)| *name).collect();
            eprintln!(
                "unknown workload {workload:?}; one of: {}",
                names.join(", ")
            );
            std::process::exit(2);
        }
    }
}

/// The pools and semaphore of the loops, sized as the bench's rows size them.
fn ours_pool() -> ThreadPoolBulkhead {
    ThreadPoolBulkhead::new("profile", &pool_config(WORKERS, QUEUE))
}

fn crossbeam_pool() -> CrossbeamPool {
    CrossbeamPool::new(WORKERS as usize, QUEUE as usize)
}

fn bounded_pool() -> BoundedPool {
    BoundedPool::new(WORKERS as usize, QUEUE as usize)
}

fn bounded_blocking() -> BoundedBlocking {
    BoundedBlocking::new(tokio_runtime(), WORKERS as usize, QUEUE as usize)
}

fn rayon_pool() -> RayonPool {
    RayonPool::new(WORKERS as usize)
}

fn semaphore() -> SemaphoreBulkhead {
    SemaphoreBulkhead::new("profile", &semaphore_config(25))
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
    // Round the tenants without a division per call (as the wall-clock loops do).
    for (i, tenant) in (0..n).zip(tenants.iter().cycle()) {
        black_box(sem.keyed(tenant).call(|| black_box(i)).ok());
    }
}

#[inline(never)]
fn profile_loop_keyed_peer(peer: &crate::peers::KeyedPeer, tenants: &[String], n: u64) {
    // Round the tenants without a division per call (as the wall-clock loops do).
    for (i, tenant) in (0..n).zip(tenants.iter().cycle()) {
        black_box(peer.call(tenant, || black_box(i)));
    }
}

/// 9b's shape on one thread (a current-thread runtime: the same waits and wake-ups as
/// the bench's, without two threads' interleaving): 1 000 tasks, each making `n / 1 000`
/// calls of `call`, 64 permits between them.
#[inline(never)]
fn profile_loop_tasks<C, F>(n: u64, call: C)
where
    C: Fn(u64) -> F + Clone + 'static,
    F: std::future::Future<Output = u64> + 'static,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a tokio runtime");
    let local = tokio::task::LocalSet::new();
    let per_task = (n / 1_000).max(1);
    local.block_on(&rt, async move {
        let tasks: Vec<_> = (0..1_000u64)
            .map(|t| {
                let call = call.clone();
                tokio::task::spawn_local(async move {
                    for i in 0..per_task {
                        black_box(call(t * per_task + i).await);
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("a profile task");
        }
    });
}

#[inline(never)]
fn profile_loop_keyed_floor(floor: &crate::peers::KeyedFloor, tenants: &[String], n: u64) {
    // Round the tenants without a division per call (as the wall-clock loops do).
    for (i, tenant) in (0..n).zip(tenants.iter().cycle()) {
        black_box(floor.call(tenant, || black_box(i)));
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
fn profile_loop_tokio_refusal(sem: &tokio::sync::Semaphore, n: u64) {
    for _ in 0..n {
        black_box(sem.try_acquire().is_err());
    }
}

#[inline(never)]
fn profile_loop_pool_call_refusal(pool: &ThreadPoolBulkhead, n: u64) {
    for i in 0..n {
        black_box(pool.call(i, |x| x + 1).is_err());
    }
}

#[inline(never)]
fn profile_loop_pool_async_refusal(pool: &ThreadPoolBulkhead, n: u64) {
    let mut cx = Context::from_waker(Waker::noop());
    for i in 0..n {
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
        black_box(wait(rt.spawn_blocking(move || i + 1)));
    }
}

#[inline(never)]
fn profile_loop_crossbeam_round_trip(pool: &CrossbeamPool, n: u64) {
    for i in 0..n {
        black_box(pool.call(move || i + 1));
    }
}

#[inline(never)]
fn profile_loop_bounded_round_trip(pool: &BoundedPool, n: u64) {
    for i in 0..n {
        black_box(pool.submit(move || i + 1).ok().and_then(wait));
    }
}

#[inline(never)]
fn profile_loop_bounded_blocking_round_trip(pool: &BoundedBlocking, n: u64) {
    for i in 0..n {
        black_box(pool.submit(move || i + 1).ok().and_then(wait));
    }
}

#[inline(never)]
fn profile_loop_rayon_round_trip(pool: &RayonPool, n: u64) {
    for i in 0..n {
        black_box(wait(pool.submit(move || i + 1)));
    }
}

#[inline(never)]
fn profile_loop_tokio_blocking_window(rt: &tokio::runtime::Runtime, n: u64) {
    tokio_window(rt, n);
}

#[inline(never)]
fn profile_loop_bounded_window(pool: &BoundedPool, n: u64) {
    bounded_window(pool, n);
}

#[inline(never)]
fn profile_loop_bounded_blocking_window(pool: &BoundedBlocking, n: u64) {
    bounded_blocking_window(pool, n);
}

#[inline(never)]
fn profile_loop_rayon_window(pool: &RayonPool, n: u64) {
    rayon_window(pool, n);
}

#[inline(never)]
fn profile_loop_bounded_window_callers(pool: &BoundedPool, n: u64) {
    black_box(callers(n, &|tasks| bounded_window(pool, tasks)));
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
