/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Statistics counters (stats.c): the rare counters per device, the hot
 * ones per thread, and the fast paths' counts kept in the thread's line.
 */
#ifndef CUPOOL_BASE_STATS_H
#define CUPOOL_BASE_STATS_H

#include "real_driver.h"
#include "spin_lock.h"

#define CUPOOL_MAX_DEVICES 64

/* Where a call was served (the call bracket, log.h, and the counts). */
enum cupool_route { CUPOOL_ROUTE_NONE, CUPOOL_ROUTE_POOL, CUPOOL_ROUTE_NATIVE, CUPOOL_ROUTE_REWRITTEN };
/* Counts a call of entry point sym (an untimed one: cupool_call_end). */
void cupool_stats_count(int sym);

/* Per device, what is counted rarely or only while CUPOOL_STATS/CUPOOL_LOG
 * is on (the per-call counts live per thread inside stats.c). */
typedef struct cupool_device_stats {
    atomic_ullong in_use, peak_in_use, peak_reserved; /* only while timing */
    atomic_ullong trims, oom_retries, rewritten_memsets;
    atomic_ullong ready_reuses; /* allocations served by a block of their size freed earlier (engine's free store) */
    atomic_ullong ordered_fences; /* events recorded on the legacy stream so that such a block can serve (engine's free store) */
    atomic_ullong order_moves; /* times `ordered`'s order stream moved to the stream given work (engine/order.c) */
    atomic_ullong misses_given_back, given_back_bytes; /* large allocations the store handed blocks back for (engine's free store) */
    atomic_ullong oversize_kept; /* `ordered` frees the store kept though larger than itself (engine's free store) */
    atomic_ullong deferred_waits; /* frees that waited for the GPU, more than CUPOOL_DEFERRED_WAIT waiting (engine's free store) */
    atomic_ullong gpu_ordered_frees; /* `deferred` batches handed back to their pools behind their fences (engine's free store) */
    /* Where the reserve above what is in use was, only while timing: at the
     * peak reserved (a snapshot under peak_lock), and the most each part
     * held at once. */
    cupool_spinlock_t peak_lock;
    uint64_t at_peak_in_use, at_peak_ready, at_peak_waiting;
    atomic_ullong peak_ready, peak_waiting;
    atomic_ullong queued_calls; /* pool calls made for a waiting thread, only while timing (engine/queue.c) */
} cupool_device_stats_t;

extern cupool_device_stats_t cupool_device_stats[CUPOOL_MAX_DEVICES + 1];
/* Counts a call of entry point sym; served_ns: time of a call cupool served. */
void cupool_stats_call(int sym, uint64_t served_ns);
cupool_device_stats_t *cupool_stats_for(int device);
void cupool_stats_alloc(int device, int route, size_t size);
/* A pooled cuMemAlloc or cuMemFree served by a fast path (engine/alloc.c
 * and engine/free/free_modes.c; never while CUPOOL_STATS or CUPOOL_LOG is on), in the
 * thread's cached context.
 * The fast paths run only where the thread's context cache holds, which
 * cupool_stats_thread() allowed: their counts are then read with the
 * thread's own (a plain load and store: only this thread writes them). */
static inline void cupool_count_add(atomic_ullong *counter, unsigned long long n)
{
    atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + n, memory_order_relaxed);
}
static inline void cupool_stats_fast_alloc(size_t size)
{
    cupool_count_add(&cupool_thread.fast_allocs, 1);
    cupool_count_add(&cupool_thread.fast_bytes, size);
}
static inline void cupool_stats_fast_free(size_t size)
{
    cupool_count_add(&cupool_thread.fast_frees, 1);
    cupool_count_add(&cupool_thread.fast_bytes, -(unsigned long long)size);
}
/* The thread is about to cache a context of `device` (-1: none cupool
 * pools in): gives the thread its statistics set if it has none, and moves
 * the fast paths' counts of another device there.
 * Returns 0 for a thread that is exiting (its set is gone): it must not
 * cache, so that its late calls take the general paths, which count in the
 * set of exited threads. */
int cupool_stats_thread(int device);
void cupool_stats_free(int device, int route, size_t size);
/* The device's pools reserve `reserved` bytes while cupool holds `ready`
 * bytes in the ready store and `waiting` waiting for their fences. */
void cupool_stats_reserved(int device, uint64_t reserved, uint64_t ready, uint64_t waiting);
/* cupool holds `ready` bytes in a context's ready store and `waiting`
 * waiting for their fences (for the most held at once). */
void cupool_stats_held(int device, uint64_t ready, uint64_t waiting);
/* Pinned host and managed memory the engine's kept store tracks
 * (engine/kept_store.c), [CUPOOL_KEPT_STATS_HOST] and [..._MANAGED]. */
enum { CUPOOL_KEPT_STATS_MANAGED, CUPOOL_KEPT_STATS_HOST };
typedef struct {
    atomic_ullong allocs, reused;          /* allocations tracked, of them served by a kept block */
    atomic_ullong frees, kept_frees;       /* frees of tracked blocks, of them kept */
    atomic_ullong kept_bytes, peak_kept;   /* kept now, the most kept at once */
    atomic_ullong limit_frees, oom_frees;  /* kept blocks handed back for the limit, for an out-of-memory retry */
    atomic_ullong advice_frees;            /* kept managed blocks handed back: advice reached their mapping */
} cupool_kept_stats_t;
extern cupool_kept_stats_t cupool_kept_stats[2];
void cupool_stats_print(void);

#endif
