// The Java peers of `cargo bench -p bulkhead-core --bench compare`: the JDK primitives
// Resilience4j's bulkheads are built on (a fair java.util.concurrent.Semaphore, and a
// ThreadPoolExecutor with an ArrayBlockingQueue), on the same workloads as the Rust rows.
//
// Compiled and run by the bench (javac -d target/bench-java ...). Prints one line per
// workload: `key <TAB> median ns/op <TAB> min <TAB> max`. Same method as the Rust harness:
// calibrate a batch to the sample time, warm up (longer here, for the JIT), take 21
// samples, report the median.

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.Future;
import java.util.concurrent.Semaphore;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

public final class Compare {
    static final int SAMPLES = 21;
    static final int WORKERS = 2;
    static final int CALLERS = 4;
    static final int WINDOW = 32;
    static final int QUEUE = 256;

    /** Keeps results alive so the JIT cannot drop the work. */
    static volatile long sink;

    interface Batch {
        /** Runs n iterations; returns elapsed nanoseconds. */
        long run(long n) throws Exception;
    }

    /** What Resilience4j throws on refusal, with stack traces off (writableStackTrace false). */
    static final class BulkheadFull extends RuntimeException {
        BulkheadFull(String name) {
            super("Bulkhead '" + name + "' is full", null, false, false);
        }
    }

    static void measure(String key, long sampleNanos, long warmupNanos, Batch batch) throws Exception {
        long n = 1;
        long spent = 0;
        long elapsed;
        while (true) {
            elapsed = batch.run(n);
            spent += elapsed;
            if (elapsed >= sampleNanos / 4 && spent >= warmupNanos) {
                break;
            }
            if (elapsed < sampleNanos / 4) {
                n *= 2;
            }
        }
        long perSample = Math.max(1, (long) (sampleNanos / ((double) elapsed / n)));
        double[] samples = new double[SAMPLES];
        for (int i = 0; i < SAMPLES; i++) {
            samples[i] = (double) batch.run(perSample) / perSample;
        }
        java.util.Arrays.sort(samples);
        System.out.printf("%s\t%.3f\t%.3f\t%.3f%n", key, samples[SAMPLES / 2], samples[0], samples[SAMPLES - 1]);
        System.out.flush();
    }

    static ThreadPoolExecutor pool() {
        ThreadPoolExecutor pool = new ThreadPoolExecutor(
                WORKERS, WORKERS, 60, TimeUnit.SECONDS, new ArrayBlockingQueue<>(QUEUE));
        pool.prestartAllCoreThreads();
        return pool;
    }

    /** Runs `perCaller` on CALLERS threads at once, n iterations split between them. */
    interface CallerLoop {
        void run(long iterations) throws Exception;
    }

    static long callers(long n, CallerLoop body) throws Exception {
        long each = Math.max(1, n / CALLERS);
        List<Thread> threads = new ArrayList<>();
        Exception[] failed = new Exception[1];
        long start = System.nanoTime();
        for (int c = 0; c < CALLERS; c++) {
            Thread t = new Thread(() -> {
                try {
                    body.run(each);
                } catch (Exception e) {
                    failed[0] = e;
                }
            });
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) {
            t.join();
        }
        long elapsed = System.nanoTime() - start;
        if (failed[0] != null) {
            throw failed[0];
        }
        // Report per task over all callers.
        return elapsed * n / (each * CALLERS);
    }

    public static void main(String[] args) throws Exception {
        long ms = 1_000_000L;

        // 1. Uncontended semaphore call, as Resilience4j's SemaphoreBulkhead does it: a fair
        //    semaphore, tryAcquire with the (zero) max wait, release in finally.
        Semaphore sem = new Semaphore(25, true);
        measure("semaphore_call", 20 * ms, 1500 * ms, n -> {
            long acc = 0;
            long start = System.nanoTime();
            for (long i = 0; i < n; i++) {
                if (sem.tryAcquire(0, TimeUnit.MILLISECONDS)) {
                    try {
                        acc += i;
                    } finally {
                        sem.release();
                    }
                }
            }
            long elapsed = System.nanoTime() - start;
            sink = acc;
            return elapsed;
        });

        // 2. Refusal of a full semaphore: tryAcquire fails; and the same refusal reported as
        //    Resilience4j does, by throwing an exception without a stack trace.
        Semaphore full = new Semaphore(1, true);
        full.acquire();
        measure("semaphore_refusal", 20 * ms, 1500 * ms, n -> {
            long refused = 0;
            long start = System.nanoTime();
            for (long i = 0; i < n; i++) {
                if (!full.tryAcquire(0, TimeUnit.MILLISECONDS)) {
                    refused++;
                }
            }
            long elapsed = System.nanoTime() - start;
            sink = refused;
            return elapsed;
        });
        measure("semaphore_refusal_exception", 20 * ms, 1500 * ms, n -> {
            long refused = 0;
            long start = System.nanoTime();
            for (long i = 0; i < n; i++) {
                try {
                    if (!full.tryAcquire(0, TimeUnit.MILLISECONDS)) {
                        throw new BulkheadFull("bench");
                    }
                } catch (BulkheadFull e) {
                    refused += e.getMessage().length();
                }
            }
            long elapsed = System.nanoTime() - start;
            sink = refused;
            return elapsed;
        });

        // 3. Thread-pool round trip: submit, wait for the result.
        ThreadPoolExecutor pool = pool();
        measure("pool_round_trip", 60 * ms, 2000 * ms, n -> {
            long acc = 0;
            long start = System.nanoTime();
            for (long i = 0; i < n; i++) {
                final long x = i;
                acc += pool.submit(() -> x + 1).get();
            }
            long elapsed = System.nanoTime() - start;
            sink = acc;
            return elapsed;
        });

        // 4. Throughput, several callers each keeping a window of tasks in flight.
        measure("pool_throughput_window", 60 * ms, 2000 * ms, n -> callers(n, each -> {
            ArrayDeque<Future<Long>> window = new ArrayDeque<>();
            long acc = 0;
            for (long i = 0; i < each; i++) {
                if (window.size() == WINDOW) {
                    acc += window.poll().get();
                }
                final long x = i;
                window.add(pool.submit(() -> x + 1));
            }
            while (!window.isEmpty()) {
                acc += window.poll().get();
            }
            sink = acc;
        }));
        // 4b. Throughput, several blocking callers (one task in flight each).
        measure("pool_throughput_blocking", 60 * ms, 2000 * ms, n -> callers(n, each -> {
            long acc = 0;
            for (long i = 0; i < each; i++) {
                final long x = i;
                acc += pool.submit(() -> x + 1).get();
            }
            sink = acc;
        }));
        pool.shutdown();
        pool.awaitTermination(10, TimeUnit.SECONDS);
    }
}
