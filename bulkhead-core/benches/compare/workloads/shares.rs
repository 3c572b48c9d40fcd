//! Workload "shares": admission through a partition and through a per-key cap, against
//! the plain semaphore call in the same run (the attribute's `partition = "…"` against the
//! plain attribute; the per-key cap also against [`KeyedPeer`], and [`KeyedFloor`], the least
//! any cap per key adds, against the plain call); and resident memory after 1,000,000
//! distinct keys (each admitted and released) against 1,000,000 plain calls.

use std::hint::black_box;

use bulkhead_config_types::{Partitions, PerKeyConfig};
use bulkhead_core::SemaphoreBulkhead;

use crate::alloc;
use crate::attribute;
use crate::fixtures::{configured, semaphore_config};
use crate::harness::{Cell, Row, Settings, Unit, each, find, measure, report};
use crate::peers::{KeyedFloor, KeyedPeer};
use crate::workloads::Workload;

/// Distinct keys in the memory row.
const KEYS: u64 = 1_000_000;

fn resident_kib() -> f64 {
    memory_stats::memory_stats().map_or(f64::NAN, |m| m.physical_mem as f64 / 1024.0)
}

const PLAIN: &str = "SemaphoreBulkhead::call (plain)";
const PARTITIONED: &str = "Partition::call (live: 0.8 of 25)";
const ATTRIBUTE_PLAIN: &str = "#[bulkhead] fn (plain)";
const ATTRIBUTE_PARTITIONED: &str = "#[bulkhead(partition = \"live\")] fn";
const KEYED: &str = "keyed(&tenant).call (per_key: 5, 1000 tenants)";
const KEYED_PEER: &str = "DashMap count per key + tokio Semaphore (cap 5, 1000 tenants)";
const KEYED_FLOOR: &str = "floor: key hashed, a counter's CAS in and subtraction out, plain call";

pub fn run(settings: &Settings, rows: &mut Vec<Row>) {
    let plain = SemaphoreBulkhead::new("bench-plain", &semaphore_config(25));
    let partitioned = configured(
        SemaphoreBulkhead::new("bench-partitioned", &semaphore_config(25)),
        |c| c.partitions = Partitions::new([("live", 0.8), ("batch", 0.2)]),
    );
    let live = partitioned.partition("live").expect("declared above");
    let keyed = configured(
        SemaphoreBulkhead::new("bench-keyed", &semaphore_config(25)),
        |c| c.per_key = Some(PerKeyConfig::new(5)),
    );
    let keyed_peer = KeyedPeer::new(25, 5);
    let keyed_floor = KeyedFloor::new(
        SemaphoreBulkhead::new("bench-floor", &semaphore_config(25)),
        5,
    );
    let tenants: Vec<String> = (0..1000).map(|n| format!("tenant-{n}")).collect();
    let (mut a, mut b, mut c, mut d, mut e, mut f, mut g) =
        (0u64, 0u64, 0u64, 0usize, 0u64, 0usize, 0usize);
    let results = measure(
        settings.fast,
        vec![
            each(PLAIN, || {
                a += 1;
                black_box(plain.call(|| black_box(a)).ok());
            }),
            each(PARTITIONED, || {
                b += 1;
                black_box(live.call(|| black_box(b)).ok());
            }),
            each(ATTRIBUTE_PLAIN, || {
                e += 1;
                black_box(attribute::guarded(e).ok());
            }),
            each(ATTRIBUTE_PARTITIONED, || {
                c += 1;
                black_box(attribute::guarded_in_partition(c).ok());
            }),
            each(KEYED, || {
                d = next_tenant(d, tenants.len());
                black_box(keyed.keyed(&tenants[d]).call(|| black_box(d)).ok());
            }),
            each(KEYED_PEER, || {
                f = next_tenant(f, tenants.len());
                black_box(keyed_peer.call(&tenants[f], || black_box(f)));
            }),
            each(KEYED_FLOOR, || {
                g = next_tenant(g, tenants.len());
                black_box(keyed_floor.call(&tenants[g], || black_box(g)));
            }),
        ],
    );
    report("shares", &results);
    let plain = find(&results, PLAIN);
    let attribute_plain = find(&results, ATTRIBUTE_PLAIN);
    for (name, peer, target) in [
        (PARTITIONED, plain, "≤ 1.3×"),
        (ATTRIBUTE_PARTITIONED, attribute_plain, "≤ 1.3×"),
        (KEYED, plain, "≤ 2.0×"),
        (KEYED, find(&results, KEYED_PEER), "–"),
        (KEYED_FLOOR, plain, "–"),
    ] {
        rows.push(Row {
            workload: Workload::Shares,
            title: "partitioned / keyed admission vs the plain call".into(),
            ours: Cell::of(find(&results, name)),
            peer: Cell::of(peer),
            target: target.into(),
        });
    }
    memory(rows);
}

/// Resident growth over `KEYS` distinct keys, each admitted and released, against the
/// same number of plain calls.
fn memory(rows: &mut Vec<Row>) {
    let keyed = configured(
        SemaphoreBulkhead::new("bench-keyed-memory", &semaphore_config(25)),
        |c| {
            c.per_key = Some(PerKeyConfig {
                max_concurrent_calls: 1,
                max_keys: 1000,
            });
        },
    );
    let plain = SemaphoreBulkhead::new("bench-plain-memory", &semaphore_config(25));
    for n in 0..1000u64 {
        assert!(keyed.keyed(&n).call(|| ()).is_ok(), "warm-up");
        assert!(plain.call(|| ()).is_ok(), "warm-up");
    }
    let footprint = |call: &dyn Fn(u64) -> bool| {
        let before = resident_kib();
        let (admitted, allocations) =
            alloc::count_allocations(|| (0..KEYS).filter(|&n| call(n)).count() as u64);
        assert_eq!(admitted, KEYS, "every call must be admitted");
        (resident_kib() - before, allocations)
    };
    let (kib, allocs) = footprint(&|n| keyed.keyed(&(n + 1000)).call(|| ()).is_ok());
    let (plain_kib, plain_allocs) = footprint(&|_| plain.call(|| ()).is_ok());
    let tracked = keyed.snapshot().per_key.map_or(0, |p| p.keys_tracked);
    eprintln!(
        "  shares memory: {KEYS} distinct keys: {kib:+.0} KiB, {allocs} allocations, \
         {tracked} keys tracked after; plain calls: {plain_kib:+.0} KiB"
    );
    rows.push(Row {
        workload: Workload::Shares,
        title: format!("resident memory after {KEYS} distinct keys"),
        ours: Cell {
            label: "keyed(&n).call, a new key each call (per_key, max_keys 1000)".into(),
            value: Some(kib),
            unit: Unit::KiB,
            note: format!("{allocs} allocations, {tracked} keys tracked after"),
            rounds: Vec::new(),
        },
        peer: Cell {
            label: "SemaphoreBulkhead::call (plain)".into(),
            value: Some(plain_kib),
            unit: Unit::KiB,
            note: format!("{plain_allocs} allocations"),
            rounds: Vec::new(),
        },
        target: "flat".into(),
    });
}

/// The tenant after `i` of `len`, round and round: a compare, not a division (a 32-bit
/// `div` per call, ~10 cycles, was charged to the keyed rows and not to the plain call
/// they are compared with).
#[inline(always)]
fn next_tenant(i: usize, len: usize) -> usize {
    if i + 1 == len { 0 } else { i + 1 }
}
