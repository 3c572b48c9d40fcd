//! The workloads of the compare bench, one file each, and [`Workload`]: the typed id that
//! selects a workload (`BENCH_ONLY`), runs it, and orders its rows in the table.

pub mod async_semaphore;
pub mod cluster;
pub mod contended;
pub mod listeners;
pub mod memory;
pub mod pool_round_trip;
pub mod pool_throughput;
pub mod refusal;
pub mod semaphore_call;
pub mod shares;
pub mod tokio_tasks;

use crate::harness::{Row, Settings};

/// A workload of the bench. The table lists rows in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Workload {
    SemaphoreCall,
    Refusal,
    PoolRoundTrip,
    PoolThroughput,
    AsyncSemaphore,
    Memory,
    ClusterRateLimit,
    ContendedSemaphore,
    TokioPool,
    TokioSemaphore,
    Listeners,
    Shares,
}

impl Workload {
    /// Every workload, in the order they run.
    pub const ALL: [Workload; 12] = [
        Workload::SemaphoreCall,
        Workload::Refusal,
        Workload::PoolRoundTrip,
        Workload::PoolThroughput,
        Workload::AsyncSemaphore,
        Workload::Memory,
        Workload::Listeners,
        Workload::ClusterRateLimit,
        Workload::ContendedSemaphore,
        Workload::TokioPool,
        Workload::TokioSemaphore,
        Workload::Shares,
    ];

    /// The key `BENCH_ONLY` selects it by (and `--profile` names, for its loops).
    pub fn key(self) -> &'static str {
        match self {
            Workload::SemaphoreCall => "1",
            Workload::Refusal => "2",
            Workload::PoolRoundTrip => "3",
            Workload::PoolThroughput => "4",
            Workload::AsyncSemaphore => "5",
            Workload::Memory => "6",
            Workload::ClusterRateLimit => "7",
            Workload::ContendedSemaphore => "8",
            Workload::TokioPool => "9a",
            Workload::TokioSemaphore => "9b",
            Workload::Listeners => "listeners",
            Workload::Shares => "shares",
        }
    }

    /// How its rows start in the table: `3.` for a numbered workload, `listeners:` else.
    pub fn heading(self) -> String {
        let key = self.key();
        if key.starts_with(|c: char| c.is_ascii_digit()) {
            format!("{key}.")
        } else {
            format!("{key}:")
        }
    }

    /// Measures the workload and adds its rows.
    pub fn run(self, settings: &Settings, rows: &mut Vec<Row>) {
        match self {
            Workload::SemaphoreCall => semaphore_call::run(settings, rows),
            Workload::Refusal => refusal::run(settings, rows),
            Workload::PoolRoundTrip => pool_round_trip::run(settings, rows),
            Workload::PoolThroughput => pool_throughput::run(settings, rows),
            Workload::AsyncSemaphore => async_semaphore::run(settings, rows),
            Workload::Memory => memory::run(settings, rows),
            Workload::ClusterRateLimit => cluster::run(settings, rows),
            Workload::ContendedSemaphore => contended::run(settings, rows),
            Workload::TokioPool => tokio_tasks::run_pool(settings, rows),
            Workload::TokioSemaphore => tokio_tasks::run_semaphore(settings, rows),
            Workload::Listeners => listeners::run(settings, rows),
            Workload::Shares => shares::run(settings, rows),
        }
    }
}
