/*
 * Counters behind CUPOOL_STATS=1: calls seen per handled entry point, and per
 * device the pooled and native allocations, bytes, peaks, trims, OOM retries
 * and rewritten memsets, plus the time spent inside cupool and an estimate of
 * what the pooled calls would have cost natively.  All counters are relaxed
 * atomics: the hot path pays one uncontended add each.  The summary is
 * printed at exit and touches no driver.
 */
#include "common.h"

#include <math.h>
#include <stdio.h>
#include <unistd.h>

atomic_ullong cupool_calls[CUPOOL_SYM_COUNT];
atomic_ullong cupool_time_ns;
/* The last slot collects what happened on no known device. */
cupool_device_stats_t cupool_device_stats[CUPOOL_MAX_DEVICES + 1];

cupool_device_stats_t *cupool_stats_for(int device)
{
    return &cupool_device_stats[device >= 0 && device < CUPOOL_MAX_DEVICES ? device : CUPOOL_MAX_DEVICES];
}

static void raise_peak(atomic_ullong *peak, unsigned long long value)
{
    unsigned long long old = atomic_load_explicit(peak, memory_order_relaxed);
    while (value > old && !atomic_compare_exchange_weak_explicit(peak, &old, value, memory_order_relaxed,
                                                                 memory_order_relaxed)) {
    }
}

/* Native cuMemAlloc and cuMemFree latency on an H200 (DESIGN.md), by size;
 * interpolated linearly in log2(size) between the measured points. */
static const struct {
    double log2_size, alloc_us, free_us;
} native_cost[] = {{8, 50, 40}, {20, 51, 41}, {24, 52, 56}, {28, 100, 200}, {30, 514, 630}};

static uint64_t native_estimate_ns(size_t size, int is_free)
{
    double x = log2((double)(size ? size : 1));
    size_t n = CUPOOL_ARRAY_SIZE(native_cost), i = 0;
    while (i + 2 < n && x > native_cost[i + 1].log2_size) i++;
    double x0 = native_cost[i].log2_size, x1 = native_cost[i + 1].log2_size;
    double y0 = is_free ? native_cost[i].free_us : native_cost[i].alloc_us;
    double y1 = is_free ? native_cost[i + 1].free_us : native_cost[i + 1].alloc_us;
    double t = (x - x0) / (x1 - x0);
    if (t < 0) t = 0;
    return (uint64_t)((y0 + t * (y1 - y0)) * 1000.0);
}

void cupool_stats_alloc(int device, int route, size_t size)
{
    cupool_device_stats_t *s = cupool_stats_for(device);
    if (route == CUPOOL_ROUTE_POOL) {
        atomic_fetch_add_explicit(&s->pooled_allocs, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->pooled_bytes, size, memory_order_relaxed);
        raise_peak(&s->peak_in_use, atomic_fetch_add_explicit(&s->in_use, size, memory_order_relaxed) + size);
        if (cupool_timing) atomic_fetch_add_explicit(&s->saved_ns, native_estimate_ns(size, 0), memory_order_relaxed);
    } else {
        atomic_fetch_add_explicit(&s->native_allocs, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->native_bytes, size, memory_order_relaxed);
    }
}

void cupool_stats_free(int device, int route, size_t size)
{
    cupool_device_stats_t *s = cupool_stats_for(device);
    if (route == CUPOOL_ROUTE_POOL) {
        atomic_fetch_add_explicit(&s->pooled_frees, 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&s->in_use, size, memory_order_relaxed);
        if (cupool_timing) atomic_fetch_add_explicit(&s->saved_ns, native_estimate_ns(size, 1), memory_order_relaxed);
    } else {
        atomic_fetch_add_explicit(&s->native_frees, 1, memory_order_relaxed);
    }
}

void cupool_stats_reserved(int device, uint64_t reserved)
{
    raise_peak(&cupool_stats_for(device)->peak_reserved, reserved);
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

void cupool_stats_print(void)
{
    FILE *out = stderr;
    fprintf(out, "cupool: statistics for pid %d (policy %s, free mode %s)\n", (int)getpid(),
            cupool_option_string(CUPOOL_OPT_POLICY), cupool_option_string(CUPOOL_OPT_FREE));
    fprintf(out, "cupool:   calls seen:\n");
    for (int i = 0; i < CUPOOL_SYM_COUNT; i++)
        if (LOAD(cupool_calls[i])) fprintf(out, "cupool:     %-34s %llu\n", cupool_symbol_name(i), LOAD(cupool_calls[i]));
    unsigned long long estimate = 0;
    for (int d = 0; d <= CUPOOL_MAX_DEVICES; d++) {
        cupool_device_stats_t *s = &cupool_device_stats[d];
        if (!LOAD(s->pooled_allocs) && !LOAD(s->native_allocs) && !LOAD(s->pooled_frees) && !LOAD(s->native_frees) &&
            !LOAD(s->rewritten_memsets))
            continue;
        char b1[32], b2[32], b3[32], b4[32];
        if (d < CUPOOL_MAX_DEVICES) fprintf(out, "cupool:   device %d:\n", d);
        else fprintf(out, "cupool:   no device:\n");
        fprintf(out, "cupool:     pooled allocations  %llu (%s), frees %llu\n", LOAD(s->pooled_allocs),
                human((double)LOAD(s->pooled_bytes), b1, sizeof b1), LOAD(s->pooled_frees));
        fprintf(out, "cupool:     native allocations  %llu (%s), frees %llu\n", LOAD(s->native_allocs),
                human((double)LOAD(s->native_bytes), b2, sizeof b2), LOAD(s->native_frees));
        fprintf(out, "cupool:     peak in use %s, peak reserved %s\n", human((double)LOAD(s->peak_in_use), b3, sizeof b3),
                human((double)LOAD(s->peak_reserved), b4, sizeof b4));
        fprintf(out, "cupool:     trims %llu, OOM retries %llu, rewritten memsets %llu\n", LOAD(s->trims),
                LOAD(s->oom_retries), LOAD(s->rewritten_memsets));
        estimate += LOAD(s->saved_ns);
    }
    double spent = (double)LOAD(cupool_time_ns) / 1e6;
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
    out->pooled_allocs = LOAD(s->pooled_allocs);
    out->native_allocs = LOAD(s->native_allocs);
    out->pooled_frees = LOAD(s->pooled_frees);
    out->in_use = LOAD(s->in_use);
    out->peak_in_use = LOAD(s->peak_in_use);
    out->peak_reserved = LOAD(s->peak_reserved);
    out->trims = LOAD(s->trims);
    out->oom_retries = LOAD(s->oom_retries);
    out->rewritten_memsets = LOAD(s->rewritten_memsets);
    return 0;
}
