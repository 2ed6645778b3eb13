/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Counters behind CUPOOL_STATS=1: calls seen per handled entry point, and per
 * device the pooled and native allocations, bytes, peaks, trims, OOM retries
 * and rewritten memsets, plus the time spent inside cupool and an estimate of
 * what the pooled calls would have cost natively.  The counters every call
 * touches are kept per thread; the summary is printed at exit and touches no
 * driver.
 */
#include "stats.h"
#include "options.h"
#include "log.h"

#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The rare counters (trims, OOM retries, rewritten memsets, peaks), one set
 * per device; the last slot collects what happened on no known device. */
cupool_device_stats_t cupool_device_stats[CUPOOL_MAX_DEVICES + 1];
cupool_kept_stats_t cupool_kept_stats[2];

cupool_device_stats_t *cupool_stats_for(int device)
{
    return &cupool_device_stats[device >= 0 && device < CUPOOL_MAX_DEVICES ? device : CUPOOL_MAX_DEVICES];
}

static int slot(int device)
{
    return device >= 0 && device < CUPOOL_MAX_DEVICES ? device : CUPOOL_MAX_DEVICES;
}

static void raise_peak(atomic_ullong *peak, unsigned long long value)
{
    unsigned long long old = atomic_load_explicit(peak, memory_order_relaxed);
    while (value > old && !atomic_compare_exchange_weak_explicit(peak, &old, value, memory_order_relaxed,
                                                                 memory_order_relaxed)) {
    }
}

/* ---- the hot counters, one set per thread -------------------------------- */

/* Counted on every call.  Atomic adds on counters every thread shares would
 * bounce their cache lines between cores on each allocation, so each thread
 * counts into its own set (a plain load and store: only it writes there) and
 * readers add the sets up.  A thread's set is folded into `retired` when the
 * thread ends. */
enum { HOT_POOLED_ALLOCS, HOT_NATIVE_ALLOCS, HOT_POOLED_FREES, HOT_NATIVE_FREES, HOT_POOLED_BYTES,
       HOT_NATIVE_BYTES, HOT_FREED_BYTES, HOT_ESTIMATE_NS, HOT_COUNT };

/* A device's counters fill one cache line of the set (it is line-aligned
 * and they come first): an allocation or free writes that line alone.  The
 * fast paths of cuMemAlloc and cuMemFree count in the thread's own line
 * instead (base.h, cupool_stats_fast_*), whose counts move here when the
 * thread's context cache is refilled or the thread ends; they count no
 * `calls`, which only the CUPOOL_STATS summary prints: they are off while
 * CUPOOL_STATS is on. */
typedef struct cupool_counters {
    atomic_ullong device[CUPOOL_MAX_DEVICES + 1][HOT_COUNT];
    atomic_ullong calls[CUPOOL_SYM_COUNT];
    atomic_ullong time_ns; /* in the calls cupool served itself */
    cupool_thread_t *thread; /* the owner's line, with the fast paths' counts not yet moved here */
    struct cupool_counters *next;
} __attribute__((aligned(64))) hot_t;
_Static_assert(HOT_COUNT * sizeof(atomic_ullong) == 64, "a device's counters fill one cache line");

static pthread_mutex_t hot_lock = PTHREAD_MUTEX_INITIALIZER;
static hot_t *hot_sets;
static hot_t retired; /* also the set of a thread whose own could not be allocated */
static CUPOOL_THREAD_LOCAL hot_t *thread_set; /* the calling thread's */
static pthread_key_t hot_key;
static pthread_once_t hot_once = PTHREAD_ONCE_INIT;

static inline __attribute__((always_inline)) void bump(hot_t *h, atomic_ullong *counter, uint64_t n)
{
    if (CUPOOL_UNLIKELY(h == &retired)) atomic_fetch_add_explicit(counter, n, memory_order_relaxed);
    else cupool_count_add(counter, n);
}

static void fold(hot_t *into, const hot_t *from)
{
    for (int d = 0; d <= CUPOOL_MAX_DEVICES; d++)
        for (int k = 0; k < HOT_COUNT; k++)
            atomic_fetch_add_explicit(&into->device[d][k], atomic_load_explicit(&from->device[d][k], memory_order_relaxed),
                                      memory_order_relaxed);
    for (int i = 0; i < CUPOOL_SYM_COUNT; i++)
        atomic_fetch_add_explicit(&into->calls[i], atomic_load_explicit(&from->calls[i], memory_order_relaxed),
                                  memory_order_relaxed);
    atomic_fetch_add_explicit(&into->time_ns, atomic_load_explicit(&from->time_ns, memory_order_relaxed),
                              memory_order_relaxed);
}

/* Moves the fast paths' counts from the thread's line into its set h
 * (hot_lock held: a reader sees them in one place or the other). */
static void take_fast_counts(hot_t *h)
{
    cupool_thread_t *t = &cupool_thread;
    atomic_ullong *c = h->device[slot(atomic_load_explicit(&t->fast_device, memory_order_relaxed))];
    long long bytes = (long long)atomic_load_explicit(&t->fast_bytes, memory_order_relaxed);
    /* Only their difference (in use) is read while the fast paths run:
     * they never do under CUPOOL_STATS, whose summary prints the totals. */
    cupool_count_add(&c[HOT_POOLED_ALLOCS], atomic_load_explicit(&t->fast_allocs, memory_order_relaxed));
    cupool_count_add(&c[HOT_POOLED_FREES], atomic_load_explicit(&t->fast_frees, memory_order_relaxed));
    cupool_count_add(&c[bytes >= 0 ? HOT_POOLED_BYTES : HOT_FREED_BYTES],
                     bytes >= 0 ? (unsigned long long)bytes : -(unsigned long long)bytes);
    atomic_store_explicit(&t->fast_allocs, 0, memory_order_relaxed);
    atomic_store_explicit(&t->fast_frees, 0, memory_order_relaxed);
    atomic_store_explicit(&t->fast_bytes, 0, memory_order_relaxed);
}

static void thread_done(void *arg)
{
    hot_t *h = arg;
    /* Another library's thread-exit destructor may still call the driver
     * after this one: such late calls count into `retired`, on the general
     * paths (an empty context cache, which cupool_stats_thread keeps empty:
     * the fast paths count in the thread's line, which nobody reads now). */
    thread_set = &retired;
    cupool_thread.context = NULL;
    cupool_thread.context_handle = NULL;
    pthread_mutex_lock(&hot_lock);
    take_fast_counts(h);
    fold(&retired, h);
    for (hot_t **p = &hot_sets; *p; p = &(*p)->next)
        if (*p == h) {
            *p = h->next;
            break;
        }
    pthread_mutex_unlock(&hot_lock);
    free(h);
}

static void fork_prepare(void)
{
    pthread_mutex_lock(&hot_lock);
}

static void fork_done(void)
{
    pthread_mutex_unlock(&hot_lock);
}

static void hot_setup(void)
{
    pthread_key_create(&hot_key, thread_done);
    pthread_atfork(fork_prepare, fork_done, fork_done);
}

static __attribute__((noinline, cold)) hot_t *first_hot(void);

/* The calling thread's set; the first call of a thread makes it, out of
 * line so the counting paths stay leaves. */
static inline hot_t *hot(void)
{
    if (CUPOOL_LIKELY(thread_set != NULL)) return thread_set;
    return first_hot();
}

static hot_t *first_hot(void)
{
    pthread_once(&hot_once, hot_setup);
    hot_t *h = aligned_alloc(_Alignof(hot_t), sizeof *h);
    if (!h) return &retired;
    memset(h, 0, sizeof *h);
    h->thread = &cupool_thread;
    pthread_mutex_lock(&hot_lock);
    h->next = hot_sets;
    hot_sets = h;
    pthread_mutex_unlock(&hot_lock);
    pthread_setspecific(hot_key, h);
    return thread_set = h;
}

/* The sum over every thread's set of the counter at `offset` in hot_t
 * (modulo 2^64); with a nonzero `fast`, plus the counter at that offset in
 * the lines of the live threads whose fast-path counts are of `device`. */
static uint64_t hot_total_with(size_t offset, size_t fast, int device)
{
    pthread_mutex_lock(&hot_lock);
    uint64_t total = atomic_load_explicit((atomic_ullong *)((char *)&retired + offset), memory_order_relaxed);
    for (hot_t *h = hot_sets; h; h = h->next) {
        total += atomic_load_explicit((atomic_ullong *)((char *)h + offset), memory_order_relaxed);
        if (fast && slot(atomic_load_explicit(&h->thread->fast_device, memory_order_relaxed)) == device)
            total += atomic_load_explicit((atomic_ullong *)((char *)h->thread + fast), memory_order_relaxed);
    }
    pthread_mutex_unlock(&hot_lock);
    return total;
}

static uint64_t hot_total(size_t offset)
{
    return hot_total_with(offset, 0, 0);
}

static size_t device_offset(int device, int k)
{
    return offsetof(hot_t, device) + ((size_t)device * HOT_COUNT + (size_t)k) * sizeof(atomic_ullong);
}

static uint64_t hot_sum(int device, int k)
{
    return hot_total(device_offset(device, k));
}

void cupool_stats_count(int sym)
{
    hot_t *h = hot();
    bump(h, &h->calls[sym], 1);
}

int cupool_stats_thread(int device)
{
    hot_t *h = hot();
    if (h == &retired) return 0; /* exiting, or no set could be allocated */
    cupool_thread_t *t = &cupool_thread;
    if (device >= 0 && atomic_load_explicit(&t->fast_device, memory_order_relaxed) != device) {
        if (atomic_load_explicit(&t->fast_allocs, memory_order_relaxed) ||
            atomic_load_explicit(&t->fast_frees, memory_order_relaxed)) {
            pthread_mutex_lock(&hot_lock);
            take_fast_counts(h);
            pthread_mutex_unlock(&hot_lock);
        }
        atomic_store_explicit(&t->fast_device, (short)device, memory_order_relaxed);
    }
    return 1;
}

void cupool_stats_call(int sym, uint64_t served_ns)
{
    hot_t *h = hot();
    bump(h, &h->calls[sym], 1);
    if (served_ns) bump(h, &h->time_ns, served_ns);
}

/* Native cuMemAlloc and cuMemFree latency on an H200 (DESIGN.md), by size;
 * interpolated linearly in log2(size) between the measured points. */
static const struct {
    double log2_size, alloc_us, free_us;
} native_cost[] = {{8, 50, 40}, {20, 51, 41}, {24, 52, 56}, {28, 100, 200}, {30, 514, 630}};

static uint64_t native_estimate_at(double x, int is_free)
{
    size_t n = CUPOOL_ARRAY_SIZE(native_cost), i = 0;
    while (i + 2 < n && x > native_cost[i + 1].log2_size) i++;
    double x0 = native_cost[i].log2_size, x1 = native_cost[i + 1].log2_size;
    double y0 = is_free ? native_cost[i].free_us : native_cost[i].alloc_us;
    double y1 = is_free ? native_cost[i + 1].free_us : native_cost[i + 1].alloc_us;
    double t = (x - x0) / (x1 - x0);
    if (t < 0) t = 0;
    return (uint64_t)((y0 + t * (y1 - y0)) * 1000.0);
}

/* The estimate per power of two of the size, worked out once: it is added
 * on every pooled call while timing is on, where log2() would cost more
 * than the rest of the bookkeeping. */
static uint64_t estimate_table[2][65];
static pthread_once_t estimate_once = PTHREAD_ONCE_INIT;

static void estimate_setup(void)
{
    for (int f = 0; f < 2; f++)
        for (int k = 0; k < 65; k++) estimate_table[f][k] = native_estimate_at(k, f);
}

static uint64_t native_estimate_ns(size_t size, int is_free)
{
    pthread_once(&estimate_once, estimate_setup);
    return estimate_table[is_free][size ? 64 - __builtin_clzll((unsigned long long)size) - 1 : 0];
}

/* What only CUPOOL_STATS and CUPOOL_LOG need, out of line: the counting
 * path then stays a leaf that saves no registers. */
static __attribute__((noinline)) void timed_alloc(hot_t *h, atomic_ullong *c, int device, size_t size)
{
    /* The peak needs one shared sum: kept only when asked for. */
    cupool_device_stats_t *s = cupool_stats_for(device);
    raise_peak(&s->peak_in_use, atomic_fetch_add_explicit(&s->in_use, size, memory_order_relaxed) + size);
    bump(h, &c[HOT_ESTIMATE_NS], native_estimate_ns(size, 0));
}

static __attribute__((noinline)) void timed_free(hot_t *h, atomic_ullong *c, int device, size_t size)
{
    atomic_fetch_sub_explicit(&cupool_stats_for(device)->in_use, size, memory_order_relaxed);
    bump(h, &c[HOT_ESTIMATE_NS], native_estimate_ns(size, 1));
}

void cupool_stats_alloc(int device, int route, size_t size)
{
    hot_t *h = hot();
    atomic_ullong *c = h->device[slot(device)];
    if (route == CUPOOL_ROUTE_POOL) {
        bump(h, &c[HOT_POOLED_ALLOCS], 1);
        bump(h, &c[HOT_POOLED_BYTES], size);
        if (cupool_hot.timing) timed_alloc(h, c, device, size);
    } else {
        bump(h, &c[HOT_NATIVE_ALLOCS], 1);
        bump(h, &c[HOT_NATIVE_BYTES], size);
    }
}

void cupool_stats_free(int device, int route, size_t size)
{
    hot_t *h = hot();
    atomic_ullong *c = h->device[slot(device)];
    if (route == CUPOOL_ROUTE_POOL) {
        bump(h, &c[HOT_POOLED_FREES], 1);
        bump(h, &c[HOT_FREED_BYTES], size);
        if (cupool_hot.timing) timed_free(h, c, device, size);
    } else {
        bump(h, &c[HOT_NATIVE_FREES], 1);
    }
}

void cupool_stats_held(int device, uint64_t ready, uint64_t waiting)
{
    cupool_device_stats_t *s = cupool_stats_for(device);
    raise_peak(&s->peak_ready, ready);
    raise_peak(&s->peak_waiting, waiting);
}

void cupool_stats_reserved(int device, uint64_t reserved, uint64_t ready, uint64_t waiting)
{
    cupool_device_stats_t *s = cupool_stats_for(device);
    cupool_stats_held(device, ready, waiting);
    if (reserved <= atomic_load_explicit(&s->peak_reserved, memory_order_relaxed)) return;
    /* A new peak: what made it up, kept together with it. */
    cupool_spin_lock(&s->peak_lock);
    if (reserved > atomic_load_explicit(&s->peak_reserved, memory_order_relaxed)) {
        atomic_store_explicit(&s->peak_reserved, reserved, memory_order_relaxed);
        s->at_peak_in_use = atomic_load_explicit(&s->in_use, memory_order_relaxed);
        s->at_peak_ready = ready;
        s->at_peak_waiting = waiting;
    }
    cupool_spin_unlock(&s->peak_lock);
}

static const char *human(double bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) bytes /= 1024, u++;
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
    return buf;
}

#define LOAD(x) ((unsigned long long)atomic_load_explicit(&(x), memory_order_relaxed))

/* Where the peak reserve went: the blocks in use, cupool's ready store,
 * the blocks waiting for their fences, and what the pools kept besides
 * (memory freed to them that they had not released). */
static void print_peak_parts(FILE *out, cupool_device_stats_t *s)
{
    char b1[32], b2[32], b3[32], b4[32];
    cupool_spin_lock(&s->peak_lock);
    uint64_t reserved = LOAD(s->peak_reserved), in_use = s->at_peak_in_use, ready = s->at_peak_ready,
             waiting = s->at_peak_waiting;
    cupool_spin_unlock(&s->peak_lock);
    if (!reserved) return;
    uint64_t parts = in_use + ready + waiting, cache = reserved > parts ? reserved - parts : 0;
    fprintf(out, "cupool:     at the peak reserved: in use %s, ready store %s, waiting for fences %s, pool cache %s\n",
            human((double)in_use, b1, sizeof b1), human((double)ready, b2, sizeof b2),
            human((double)waiting, b3, sizeof b3), human((double)cache, b4, sizeof b4));
    if (LOAD(s->peak_ready) || LOAD(s->peak_waiting))
        fprintf(out, "cupool:     most held at once: ready store %s, waiting for fences %s\n",
                human((double)LOAD(s->peak_ready), b1, sizeof b1), human((double)LOAD(s->peak_waiting), b2, sizeof b2));
}

void cupool_stats_print(void)
{
    FILE *out = stderr;
    int simulated = cupool_driver_simulated();
    fprintf(out, "cupool: statistics for pid %d (policy %s, free mode %s)%s\n", (int)getpid(),
            cupool_option_string(CUPOOL_OPT_POLICY), cupool_option_string(CUPOOL_OPT_FREE),
            simulated ? " on the simulated driver of the tests: times are not GPU times" : "");
    fprintf(out, "cupool:   calls seen:\n");
    for (int i = 0; i < CUPOOL_SYM_COUNT; i++) {
        unsigned long long n = hot_total(offsetof(hot_t, calls) + (size_t)i * sizeof(atomic_ullong));
        if (n) fprintf(out, "cupool:     %-34s %llu\n", cupool_symbol_name(i), n);
    }
    unsigned long long estimate = 0;
    for (int d = 0; d <= CUPOOL_MAX_DEVICES; d++) {
        unsigned long long count[HOT_COUNT];
        for (int k = 0; k < HOT_COUNT; k++) count[k] = hot_sum(d, k);
        cupool_device_stats_t *s = &cupool_device_stats[d];
        if (!count[HOT_POOLED_ALLOCS] && !count[HOT_NATIVE_ALLOCS] && !count[HOT_POOLED_FREES] &&
            !count[HOT_NATIVE_FREES] && !LOAD(s->rewritten_memsets))
            continue;
        char b1[32], b2[32], b3[32], b4[32];
        if (d < CUPOOL_MAX_DEVICES) fprintf(out, "cupool:   device %d:\n", d);
        else fprintf(out, "cupool:   no device:\n");
        fprintf(out, "cupool:     pooled allocations  %llu (%s), frees %llu\n", count[HOT_POOLED_ALLOCS],
                human((double)count[HOT_POOLED_BYTES], b1, sizeof b1), count[HOT_POOLED_FREES]);
        fprintf(out, "cupool:     native allocations  %llu (%s), frees %llu\n", count[HOT_NATIVE_ALLOCS],
                human((double)count[HOT_NATIVE_BYTES], b2, sizeof b2), count[HOT_NATIVE_FREES]);
        fprintf(out, "cupool:     peak in use %s, peak reserved %s\n", human((double)LOAD(s->peak_in_use), b3, sizeof b3),
                human((double)LOAD(s->peak_reserved), b4, sizeof b4));
        print_peak_parts(out, s);
        fprintf(out, "cupool:     trims %llu, OOM retries %llu, rewritten memsets %llu\n", LOAD(s->trims),
                LOAD(s->oom_retries), LOAD(s->rewritten_memsets));
        if (LOAD(s->ready_reuses))
            fprintf(out, "cupool:     allocations served by a ready block %llu (events recorded for them %llu)\n",
                    LOAD(s->ready_reuses), LOAD(s->ordered_fences));
        if (LOAD(s->order_moves))
            fprintf(out, "cupool:     moves of the order stream to the stream given work %llu\n", LOAD(s->order_moves));
        if (LOAD(s->misses_given_back))
            fprintf(out, "cupool:     large allocations the store made room for %llu (stored blocks handed back %s)\n",
                    LOAD(s->misses_given_back),
                    human((double)LOAD(s->given_back_bytes), b1, sizeof b1));
        if (LOAD(s->oversize_kept))
            fprintf(out, "cupool:     freed blocks the store kept though larger than itself %llu\n",
                    LOAD(s->oversize_kept));
        if (LOAD(s->gpu_ordered_frees))
            fprintf(out, "cupool:     deferred fences with their frees ordered on the GPU behind them %llu\n",
                    LOAD(s->gpu_ordered_frees));
        if (LOAD(s->deferred_waits))
            fprintf(out, "cupool:     frees that waited for the GPU (more freed and waiting than CUPOOL_DEFERRED_WAIT) %llu\n",
                    LOAD(s->deferred_waits));
        if (LOAD(s->queued_calls))
            fprintf(out, "cupool:     pool calls made for waiting threads by the one in front of the driver queue %llu\n",
                    LOAD(s->queued_calls));
        estimate += count[HOT_ESTIMATE_NS];
    }
    for (int k = CUPOOL_KEPT_STATS_HOST; k >= CUPOOL_KEPT_STATS_MANAGED; k--) {
        cupool_kept_stats_t *s = &cupool_kept_stats[k];
        if (!LOAD(s->allocs) && !LOAD(s->frees)) continue;
        char b1[32], b2[32];
        fprintf(out, "cupool:   %s memory:\n", k == CUPOOL_KEPT_STATS_HOST ? "pinned host" : "managed");
        fprintf(out, "cupool:     allocations %llu (served by kept blocks %llu), frees %llu (kept %llu)\n",
                LOAD(s->allocs), LOAD(s->reused), LOAD(s->frees), LOAD(s->kept_frees));
        fprintf(out, "cupool:     kept now %s, at most %s; handed back: for the limit %llu, out of memory %llu",
                human((double)LOAD(s->kept_bytes), b1, sizeof b1), human((double)LOAD(s->peak_kept), b2, sizeof b2),
                LOAD(s->limit_frees), LOAD(s->oom_frees));
        if (k == CUPOOL_KEPT_STATS_MANAGED) fprintf(out, ", advice in their mapping %llu", LOAD(s->advice_frees));
        fputc('\n', out);
    }
    double spent = (double)hot_total(offsetof(hot_t, time_ns)) / 1e6;
    int log_err;
    unsigned long long lost = cupool_log_lost(&log_err);
    if (lost || log_err)
        fprintf(out, "cupool:   log: %llu lines could not be written (%s); the log is incomplete\n", lost,
                strerror(log_err));
    /* The estimate comes from GPU measurements: beside a simulated time it
     * would compare a GPU's costs with the simulator's. */
    if (simulated)
        fprintf(out, "cupool:   time in cupool %.3f ms, simulated (no estimate of native GPU calls beside it)\n", spent);
    else
        fprintf(out, "cupool:   time in cupool %.3f ms; native calls would have cost about %.3f ms (saved about %.3f ms)\n",
                spent, (double)estimate / 1e6, (double)estimate / 1e6 - spent);
}

/* ---- public API (include/cupool.h) --------------------------------------- */

#include "cupool.h"

CUPOOL_EXPORT int cupool_version(void)
{
    return CUPOOL_VERSION_MAJOR * 10000 + CUPOOL_VERSION_MINOR * 100 + CUPOOL_VERSION_PATCH;
}

CUPOOL_EXPORT int cupool_get_stats(int device, cupool_stats_t *out)
{
    if (!out || device < 0 || device >= CUPOOL_MAX_DEVICES) return -1;
    cupool_device_stats_t *s = &cupool_device_stats[device];
    out->pooled_allocs =
        hot_total_with(device_offset(device, HOT_POOLED_ALLOCS), offsetof(cupool_thread_t, fast_allocs), device);
    out->native_allocs = hot_sum(device, HOT_NATIVE_ALLOCS);
    out->pooled_frees =
        hot_total_with(device_offset(device, HOT_POOLED_FREES), offsetof(cupool_thread_t, fast_frees), device);
    out->in_use =
        hot_total_with(device_offset(device, HOT_POOLED_BYTES), offsetof(cupool_thread_t, fast_bytes), device) -
        hot_sum(device, HOT_FREED_BYTES);
    out->peak_in_use = LOAD(s->peak_in_use);
    out->peak_reserved = LOAD(s->peak_reserved);
    out->trims = LOAD(s->trims);
    out->oom_retries = LOAD(s->oom_retries);
    out->rewritten_memsets = LOAD(s->rewritten_memsets);
    return 0;
}
