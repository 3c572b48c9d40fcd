#!/usr/bin/env bash
# Instructions per operation of the compare bench's `--profile` loops, ours and the peers',
# as Markdown tables for docs/benchmarks.md; and, for the pool round trips (row 3), futex
# calls, context switches and CPU migrations per round trip.
#
#   bash bulkhead-core/benches/instructions.sh > /tmp/instructions.md
#
# Instruction counts come from valgrind's callgrind, which counts what the program executes
# whatever else the machine runs: they are the measure to compare across runs and machines
# of this kind. Each count is *marginal*: the loop is run for N and 2N operations and the
# difference divided by N, so start-up and set-up drop out. Every thread is counted: a pool
# loop's count is the caller's and the workers' work together, their waiting included
# (valgrind runs one thread at a time, so a waiting thread spins and yields little).
#
# The futex / context-switch counts run the loops at full speed, REPEATS times each (`perf stat`, or `strace -c`
# and `/usr/bin/time` where perf cannot count syscalls): they depend on timing — whether a
# worker is still awake when the next task arrives — so they move with the machine's load,
# which the table's header states.
#
# Needs valgrind (`apt-get install valgrind`); perf or strace for the second table.
# Environment: INSTRUCTIONS_N (default 100000) and INSTRUCTIONS_POOL_N (default 10000)
# operations per loop; INSTRUCTIONS_REPEATS (default 5) measurements of each pool loop; SYSCALLS_N (default 50000) round trips; SKIP_SYSCALLS=1 skips the
# second table; COMPARE_BIN uses a given bench binary instead of building one.
set -euo pipefail
shopt -s inherit_errexit

cd "$(dirname "$0")/../.."
N=${INSTRUCTIONS_N:-100000}
POOL_N=${INSTRUCTIONS_POOL_N:-10000}
REPEATS=${INSTRUCTIONS_REPEATS:-5}
SYSCALLS_N=${SYSCALLS_N:-50000}

die() {
    echo "instructions.sh: $*" >&2
    exit 1
}

command -v valgrind >/dev/null || die "valgrind is not installed (apt-get install valgrind)"

if [ -n "${COMPARE_BIN:-}" ]; then
    bin=$COMPARE_BIN
else
    # The bench binary, built as `cargo bench` builds it (the bench profile).
    bin=$(cargo bench -p bulkheads-core --bench compare --no-run --message-format=json 2>/dev/null |
        grep -o '"executable":"[^"]*compare-[^"]*"' | tail -n 1 | cut -d'"' -f4)
fi
[ -x "$bin" ] || die "no compare bench binary (cargo bench -p bulkheads-core --bench compare --no-run failed?)"

# Instructions of one run of `--profile WORKLOAD N`: callgrind's "Collected" total.
collected() {
    local out
    out=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" --profile "$1" "$2" 2>&1) ||
        die "valgrind failed on --profile $1 $2: $(tail -n 3 <<<"$out")"
    awk '/Collected :/ { print $NF }' <<<"$out" | tail -n 1
}

# Operations per loop and repeats: the pool loops hand every task to another thread, so
# fewer operations; and their counts include the waiting, which moves with how valgrind
# interleaves the threads (a few percent for the windows, up to a tenth for the round
# trips), so they are measured REPEATS times and given as the median with the range.
ops_for() {
    case $1 in
    *round-trip | *window*) echo "$POOL_N" ;;
    *) echo "$N" ;;
    esac
}
repeats_for() {
    case $1 in
    *round-trip | *window*) echo "$REPEATS" ;;
    *) echo 1 ;;
    esac
}

# Marginal instructions per operation of each loop, measured once: per_op[WORKLOAD] is the
# median of the repeats, shown[WORKLOAD] the figure for the table (with the range).
declare -A per_op shown
measure() {
    local w=$1 n r one two values
    [ -n "${per_op[$w]:-}" ] && return
    n=$(ops_for "$w")
    values=()
    for ((r = 0; r < $(repeats_for "$w"); r++)); do
        one=$(collected "$w" "$n")
        two=$(collected "$w" $((2 * n)))
        values+=("$(awk -v a="$one" -v b="$two" -v n="$n" 'BEGIN { printf "%.0f", (b - a) / n }')")
    done
    read -r per_op[$w] shown[$w] <<<"$(printf '%s\n' "${values[@]}" | sort -n | awk '
        { v[NR] = $1 }
        END {
            m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
            s = sprintf("%.0f", m)
            if (v[1] != v[NR]) s = s " (" v[1] "–" v[NR] ")"
            printf "%.0f %s\n", m, s
        }')"
    echo "  $w: ${shown[$w]} instructions per operation (repeats: ${values[*]})" >&2
}

# row | ours (--profile loop) | peer (--profile loop)
rows=(
    '1. sync semaphore call: `#[bulkhead] fn` vs tokio `try_acquire` + drop|attribute-call|tokio-try'
    '1. sync semaphore call: core `SemaphoreBulkhead::call` vs tokio `try_acquire` + drop|semaphore-call|tokio-try'
    '1. permit only: `try_acquire` + drop vs tokio `try_acquire` + drop|semaphore-try|tokio-try'
    '2. refusal: `#[bulkhead] fn` refused (Full) vs tokio `try_acquire` refused|attribute-refusal|tokio-refusal'
    '2. refusal: semaphore `call` refused (registered) vs tokio `try_acquire` refused|semaphore-refusal|tokio-refusal'
    '2. refusal: semaphore `call` refused (built by hand, `Arc` name) vs tokio|semaphore-refusal-shared|tokio-refusal'
    '2. refusal: thread pool `call` refused vs tokio `try_acquire` refused|pool-call-refusal|tokio-refusal'
    '2. refusal: thread pool `call_async` refused, first poll, vs tokio `try_acquire` refused|pool-async-refusal|tokio-refusal'
    '3. round trip: pool `call` vs crossbeam-channel pool|pool-round-trip|crossbeam-round-trip'
    '3. round trip: pool `call` vs bounded peer (CAS + `try_send` + oneshot)|pool-round-trip|bounded-round-trip'
    '3. round trip: pool `call_async` (block_on) vs `spawn_blocking`|pool-async-round-trip|tokio-blocking-round-trip'
    '3. round trip: pool `call_async` vs bounded peer (CAS + `try_send` + oneshot)|pool-async-round-trip|bounded-round-trip'
    '3. round trip: pool `call_async` vs `spawn_blocking` under a `Semaphore`|pool-async-round-trip|bounded-blocking-round-trip'
    '3. round trip: pool `call_async` vs rayon `spawn` + oneshot|pool-async-round-trip|rayon-round-trip'
    '4. window of 32 (one caller), per task: pool `call_async` vs crossbeam-channel pool|pool-window|crossbeam-window'
    '4. window of 32 (one caller), per task: pool `call_async` vs bounded peer|pool-window|bounded-window'
    '4. window of 32 (one caller), per task: pool `call_async` vs `spawn_blocking`|pool-window|tokio-blocking-window'
    '4. window of 32 (one caller), per task: pool `call_async` vs `spawn_blocking` under a `Semaphore`|pool-window|bounded-blocking-window'
    '4. window of 32 (one caller), per task: pool `call_async` vs rayon `spawn` + oneshot|pool-window|rayon-window'
    '4. 4 callers × 32 in flight (as the bench runs it), per task: pool `call_async` vs crossbeam-channel pool|pool-window-callers|crossbeam-window-callers'
    '4. 4 callers × 32 in flight (as the bench runs it), per task: pool `call_async` vs bounded peer|pool-window-callers|bounded-window-callers'
    '5. async: `call_async`, ready body, vs tokio `acquire` + drop|semaphore-call-async|tokio-acquire'
    '5. async: `acquire_async` + drop vs tokio `acquire` + drop|semaphore-acquire-async|tokio-acquire'
    '9b. 1 000 tasks on 64 permits, one thread (a current-thread runtime): `call_async` vs tokio `Semaphore::acquire`|semaphore-tasks|tokio-semaphore-tasks'
    'shares: `Partition::call` vs the plain `SemaphoreBulkhead::call`|partition-call|semaphore-call'
    'shares: `#[bulkhead(partition = "live")] fn` vs the plain `#[bulkhead] fn`|attribute-partition-call|attribute-call'
    'shares: `keyed(&tenant).call` (1 000 tenants) vs the plain `SemaphoreBulkhead::call`|keyed-call|semaphore-call'
    'shares: `keyed(&tenant).call` (1 000 tenants) vs a `DashMap` count per key + tokio `Semaphore`|keyed-call|keyed-peer'
    'shares: the keyed floor (key hashed, a counter'"'"'s CAS in and subtraction out, not a usable cap) vs the plain `SemaphoreBulkhead::call`|keyed-floor|semaphore-call'
)

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain --untracked-files=no 2>/dev/null | head -n 1)
echo "Instructions per operation — $(date -u '+%Y-%m-%d %H:%M UTC'), commit \`$commit\`${dirty:+ with uncommitted changes}; $(rustc -V); $(valgrind --version), callgrind, every thread; marginal over $N operations (the pool loops: $POOL_N, median of $REPEATS measurements and their range, waiting included)."
echo
echo "| row | ours (\`--profile\` loop) | instructions | peer (\`--profile\` loop) | instructions | ratio |"
echo "|---|---|---|---|---|---|"
for row in "${rows[@]}"; do
    IFS='|' read -r title ours peer <<<"$row"
    measure "$ours"
    measure "$peer"
    ratio=$(awk -v a="${per_op[$ours]}" -v b="${per_op[$peer]}" \
        'BEGIN { if (b > 0) printf "%.2f×", a / b; else print "–" }')
    echo "| $title | \`$ours\` | ${shown[$ours]} | \`$peer\` | ${shown[$peer]} | $ratio |"
done

[ -n "${SKIP_SYSCALLS:-}" ] && exit 0

# Futex calls, context switches and CPU migrations of one run, all threads: "futex cs migrations".
if perf stat -e 'syscalls:sys_enter_futex' true >/dev/null 2>&1; then
    method="\`perf stat -e syscalls:sys_enter_futex,context-switches,cpu-migrations\`"
    counts() {
        perf stat -x, -e 'syscalls:sys_enter_futex,context-switches,cpu-migrations' \
            "$bin" --profile "$1" "$2" 2>&1 >/dev/null |
            awk -F, '/sys_enter_futex/ { f = $1 } /context-switches/ { c = $1 } /cpu-migrations/ { m = $1 }
                     END { print (f == "" ? "-" : f), (c == "" ? "-" : c), (m == "" ? "-" : m) }'
    }
elif command -v strace >/dev/null && [ -x /usr/bin/time ]; then
    method="\`strace -f -c -e trace=futex\` (futex) and getrusage through \`/usr/bin/time\` (context switches, voluntary + involuntary; no migrations)"
    counts() {
        local f c
        f=$(strace -f -c -e trace=futex "$bin" --profile "$1" "$2" 2>&1 >/dev/null |
            awk '$NF == "futex" { print $4 }')
        c=$(/usr/bin/time -f '%w %c' "$bin" --profile "$1" "$2" 2>&1 >/dev/null | tail -n 1 |
            awk '{ print $1 + $2 }')
        echo "${f:--} ${c:--} -"
    }
else
    echo
    echo "(No futex table: neither perf with syscall tracepoints nor strace is available.)"
    exit 0
fi

echo
echo "Row 3, per round trip, at full speed: $REPEATS runs of $SYSCALLS_N round trips each, the median and the range (set-up included: under 20 events a run); load average $(cut -d' ' -f1-3 /proc/loadavg) before — these counts move with the load and the regime. $method:"
echo
echo "| loop | futex calls | context switches | CPU migrations per 1 000 |"
echo "|---|---|---|---|"
# The median (range) of one column of per-run figures, or "n/a" if a count was not taken
# (perf's "<not supported>", or "-").
summary() {
    sort -g | awk -v digits="$1" '
        $1 !~ /^[0-9.]+$/ { bad = 1 }
        { v[NR] = $1 }
        END {
            if (bad || NR == 0) { print "n/a"; exit }
            m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
            s = sprintf("%." digits "f", m)
            lo = sprintf("%." digits "f", v[1])
            hi = sprintf("%." digits "f", v[NR])
            if (lo != hi) s = s " (" lo "–" hi ")"
            print s
        }'
}
# A run's count per round trip, times `scale`; "-" if it was not taken.
per_trip() {
    awk -v x="$1" -v n="$SYSCALLS_N" -v k="$2" 'BEGIN { if (x ~ /^[0-9]+$/) print x * k / n; else print "-" }'
}
for w in pool-round-trip crossbeam-round-trip bounded-round-trip pool-async-round-trip \
    tokio-blocking-round-trip bounded-blocking-round-trip rayon-round-trip; do
    futex=() switches=() migrations=()
    for ((r = 0; r < REPEATS; r++)); do
        read -r f c m <<<"$(counts "$w" "$SYSCALLS_N")"
        futex+=("$(per_trip "$f" 1)") switches+=("$(per_trip "$c" 1)") migrations+=("$(per_trip "$m" 1000)")
    done
    echo "| \`$w\` | $(printf '%s\n' "${futex[@]}" | summary 2) | $(printf '%s\n' "${switches[@]}" | summary 2) | $(printf '%s\n' "${migrations[@]}" | summary 1) |"
    echo "  $w: futex ${futex[*]}; context switches ${switches[*]}; migrations per 1 000 ${migrations[*]}" >&2
done
echo
echo "(load average after: $(cut -d' ' -f1-3 /proc/loadavg))"
