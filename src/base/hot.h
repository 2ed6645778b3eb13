/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The hot lines: what every allocation and free reads of the process
 * (cupool_hot) and of the calling thread (cupool_thread), each in one
 * cache line (defined in real_driver.c).  The base keeps them, the layer
 * every other includes, though most of their fields are the engine's: a
 * line split by owner would be two lines to miss on every call where the
 * fast paths read one (the hot line's copies of the driver's pointers
 * beside the engine's counts and switches).  Each field says which file
 * writes it.  Whether cupool has started (cupool_active) is read here
 * too.
 */
#ifndef CUPOOL_BASE_HOT_H
#define CUPOOL_BASE_HOT_H

#include "macros.h"

/* The process-wide state every allocation and free reads, in one cache line.
 * Between two of cupool's calls the driver's own evict most of the L1 cache,
 * so each line cupool reads costs a miss; spread over the data segment these
 * were eight lines a pair (README, "What cupool itself costs").  Written at
 * start-up, and rarely after (captures, generation). */
typedef struct cupool_hot {
    /* The base's (real_driver.c; shims/interpose.c at start-up). */
    atomic_int driver_loaded; /* cupool_driver_load() succeeded */
    atomic_int started;       /* the program's cuInit succeeded: pools may be used (shims/interpose.c) */
    int timing;               /* the log or statistics need timestamps (shims/interpose.c) */
    /* The engine's. */
    int count_used;           /* something reads the devices' `used` counts (shims/interpose.c) */
    atomic_int fast;          /* the fast paths (engine/alloc.c, engine/free/free_modes.c) may run: started,
                                 no log, statistics or limit, CUPOOL_FREE not deferred, and no context has
                                 moved to `deferred` (engine/lifecycle.c, engine/contexts.c) */
    atomic_int captures;      /* stream captures in progress, any thread (engine/capture.c) */
    atomic_uint generation;   /* bumped when a context goes away (engine/lifecycle.c) */
    int queue;                /* ordered pool calls go through the contexts' driver queues (engine/queue.c) */
    /* The base's again: the driver calls of a pooled allocation and free,
     * copies of their real_* pointers made when the driver is loaded. */
    __typeof__(cuCtxGetCurrent) *ctx_get_current;
    __typeof__(cuMemAllocFromPoolAsync) *alloc_from_pool;
    __typeof__(cuMemFreeAsync) *free_async;
    /* The engine's: the largest block `ordered` keeps for reuse (cupool_ordered_keeps,
     * engine/free/free_store.h), set at start-up (engine/lifecycle.c): here,
     * every `ordered` free asks, and the options' lines would be two more
     * to miss. */
    uint64_t ordered_keep_max;
} __attribute__((aligned(64))) cupool_hot_t;
_Static_assert(sizeof(cupool_hot_t) == 64, "what every call reads of the process fills one cache line");
extern cupool_hot_t cupool_hot;

/* The same for the calling thread: what its allocations and frees read of
 * its own, in one line (defined in real_driver.c). */
typedef struct cupool_thread {
    struct cupool_context *context;       /* its current context's state, cached (engine/contexts.c) ... */
    CUcontext context_handle;             /* ... for this context */
    unsigned context_generation;          /* ... as of this cupool_hot.generation */
    short in_front;                       /* it is making calls in front of a driver queue (engine/queue.c) */
    _Atomic short fast_device;            /* the device the fast paths' counts below are of (stats.c) */
    struct cupool_origin_entry *last_inserted, *last_retired; /* the origin table's hints (engine/origin.c) */
    /* What the fast paths (engine/alloc.c, engine/free/free_modes.c)
     * served in the cached context, on fast_device: counted here, in the
     * line they read anyway (base/stats.h), and moved into the thread's
     * statistics set when the cache is refilled (stats.c).  Only this
     * thread writes them; cupool_get_stats reads them from others. */
    atomic_ullong fast_allocs, fast_frees;
    atomic_ullong fast_bytes;             /* allocated less freed, modulo 2^64 */
} __attribute__((aligned(64))) cupool_thread_t;
extern CUPOOL_THREAD_LOCAL cupool_thread_t cupool_thread;

/* True once the program's cuInit succeeded and cupool's pools may be used. */
static inline int cupool_active(void)
{
    return atomic_load_explicit(&cupool_hot.started, memory_order_acquire);
}

#endif
