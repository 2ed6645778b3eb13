/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The engine's own state, private to engine/: cupool's state per device (its
 * pools, its contexts, the bytes it serves) and per context (the free mode
 * in force, a private stream, the live non-blocking streams, the queue of
 * deferred frees, the store of freed blocks ready for reuse), the inline
 * helpers that read it without calling out, and the functions the engine's
 * files call of each other.  The registry (devices.c, contexts.c,
 * lifecycle.c, their own header registry.h) keeps the free mode correct as
 * the program creates streams and contexts and enables peer access; the free
 * subsystem (free/, its header free/free.h) carries frees out.  The shims
 * see none of it: their face is engine.h, where a
 * context's state is opaque (tests/test_layers.sh checks that no shim or
 * tool reaches this header).
 */
#ifndef CUPOOL_ENGINE_STATE_H
#define CUPOOL_ENGINE_STATE_H

#include "engine.h"

#include <pthread.h>

enum { CUPOOL_POOL_MAIN, CUPOOL_POOL_LARGE, CUPOOL_POOLS_PER_DEVICE };

typedef struct cupool_device {
    int ordinal;
    int pooled;                              /* pools usable on this device */
    CUmemoryPool pools[CUPOOL_POOLS_PER_DEVICE];
    int npools;
    int contexts;                            /* live contexts cupool knows */
    int shared;                              /* a 2nd context or peer access: memory escapes a context */
    int exportable;                          /* its pools share memory with other processes (CUPOOL_IPC, ipc.c) */
    uint64_t peers;                          /* bit j: device j was granted access to these pools */
    atomic_ullong used;                      /* bytes allocated from the pools and not freed */
    atomic_ullong reserved;                  /* pools' reserved bytes when last asked */
    atomic_ullong reserved_at_ns;            /* ... and when */
    atomic_ullong pool_used;                 /* pools' allocated bytes when last asked */
    atomic_ullong pool_used_at_ns;           /* ... and when (0: ask anew) */
} __attribute__((aligned(64))) cupool_device_t; /* its first fields in one line */

typedef struct freed_block freed_block_t;
typedef struct {
    void *head;
    int count;
} cupool_spare_list_t;
typedef struct deferred_batch deferred_batch_t;

/* The driver queue of a context (queue.c): its `ordered` pool calls, one
 * thread at a time, the thread in front making the calls of those waiting.
 * In a line of its own: every thread of the context writes it. */
typedef struct cupool_request {
    struct cupool_request *next;
    CUmemoryPool pool;                       /* an allocation from it; NULL: a free */
    CUdeviceptr ptr;                         /* the block freed, or allocated */
    size_t size;
    CUresult result;
    atomic_int done;                         /* set by the thread that made the call */
} cupool_request_t;

typedef struct {
    cupool_spinlock_t lock;                  /* held by the thread in front */
    _Atomic(cupool_request_t *) waiting;     /* calls of the threads behind it */
} __attribute__((aligned(64))) cupool_queue_t;

/* What every allocation and free reads comes first, in one cache line:
 * the driver's own calls between two of cupool's evict what is spread out
 * (the pool and device number are here so that the fast paths need not
 * read the device's line or the options'). */
struct cupool_context {
    CUcontext ctx;
    freed_block_t *ready_oldest;          /* the store's oldest block (free/ready_store.c, c->lock; read without it
                                                by an `ordered` allocation, to find the store empty: fields
                                                read so are written with CUPOOL_HINT_WRITE) */
    CUmemoryPool any_size_pool;              /* the pool of every size, no limit to count; else NULL */
    atomic_int mode;                         /* CUPOOL_FREE_ORDERED/DEFERRED/SYNC in force */
    int sync_due;                            /* left ordered during a capture: synchronize after it */
    int ordinal;                             /* the device's */
    atomic_int threads;                      /* threads that have used it, at least (counted at their cache
                                                misses, with the driver queue on): from 2 the queue is used */
    freed_block_t *pending;               /* deferred frees no event covers yet (c->lock) */
    deferred_batch_t *head;                  /* batches waiting for their fences (c->lock) */
    freed_block_t *held;                  /* frees made during a capture (c->lock) */
    deferred_batch_t *tail;
    CUstream private_stream;                 /* non-blocking, cupool's own */
    int primary;
    pthread_mutex_t lock;                    /* guards what follows, and the lists above */
    CUstream *streams;                       /* live non-blocking streams of the program */
    int nstreams, streams_cap;
    int npending;
    uint64_t deferred_bytes;                 /* freed, waiting for fences (read without the lock as a hint) */
    uint64_t batch_start_ns;                 /* when the first pending free came */
    CUstream fence_stream;                   /* cupool's, waits for every stream's work */
    int streams_folded;                      /* destroyed streams' work waited for on fence_stream
                                                (free/deferred_fence.c) */
    CUevent scratch_event;                   /* recorded on each stream for the fence to wait on */
    CUevent *spare_events;
    int nspare, spare_cap;
    cupool_spare_list_t spare_blocks;        /* records kept for reuse (free/free_store.h) */
    cupool_spare_list_t spare_batches;
    cupool_spare_list_t spare_sizes;
    struct ready_size *ready_sizes;          /* freed blocks ready for reuse, by size (free/ready_store.c) */
    freed_block_t *ready_newest;
    uint64_t ready_bytes;
    int ready_empty;                         /* sizes in ready_sizes whose list is empty (free/ready_store.c) */
    uint64_t fences;                         /* ordered fences recorded so far (free/ordered_keep.c) */
    uint64_t kept;                           /* blocks `ordered` kept so far (free/ordered_keep.c) */
    uint64_t kept_done;                      /* ... of them, the first so many are known complete (a synchronization) */
    CUevent ordered_fence;                   /* recorded on the legacy stream between a free and a reuse */
    freed_block_t *ready_oversize;        /* the one block kept though larger than the store (free/ordered_keep.c;
                                                in the store's line, which every keep and take read) */
    const void *oversize_owner;              /* the cupool_thread of the thread that freed it */
    cupool_device_t *device;                 /* out of the first lines: the fast paths do not read it */
    struct cupool_context *next;             /* registry chain */
    /* The order stream (order.c): the stream `ordered` makes its pool calls
     * and frees on, CU_STREAM_LEGACY or a non-blocking stream of the
     * program; read by every launch, written only when it moves. */
    _Atomic(CUstream) order;
    atomic_uint order_moves;                 /* twice its moves, odd while one is under way (order.c) */
    atomic_int leaving;                      /* out of `ordered`, the synchronization not yet done (order.c) */
    CUevent order_event;                     /* recorded on the stream left, waited for by the next (c->lock) */
    CUstream *blocking;                      /* the program's blocking streams: with the legacy stream, one order */
    int nblocking, blocking_cap;
    uint64_t moves_since_ns;                 /* the first move of the window CUPOOL_FREE=auto's limit counts */
    unsigned moves_recent;                   /* ... and the moves since */
    cupool_queue_t queue;
} __attribute__((aligned(64)));

/* The same for the fast paths (alloc.c, free/free_modes.c), from the thread's
 * cache alone: NULL when it misses, and the general path then looks the
 * context up.  What they serve is counted in the thread's line
 * (cupool_stats_fast_*), for the device of the context cached. */
static inline cupool_context_t *cupool_cached_context(void)
{
    CUcontext ctx = NULL;
    unsigned generation;
    return cupool_context_from_cache(&ctx, &generation);
}
/* The free mode the fast paths serve a context in now, or 0: `ordered` or
 * `sync`, with no capture in progress (which needs the general paths). */
static inline int cupool_fast_mode(const cupool_context_t *c)
{
    _Static_assert(CUPOOL_FREE_ORDERED == 1 && CUPOOL_FREE_DEFERRED == 2 && CUPOOL_FREE_SYNC == 3,
                   "ordered and sync are the odd modes: one test, where two cost a pair 3 instructions");
    int mode = atomic_load_explicit(&c->mode, memory_order_relaxed);
    if (!(mode & 1) || cupool_capturing()) return 0;
    return mode;
}

/* Adds delta to the bytes a device's pools serve.  The count is shared by
 * every thread, so it is kept only where something reads it: CUPOOL_LIMIT,
 * and the pool-size queries of the log and statistics. */
static inline void cupool_device_used(cupool_device_t *dev, int64_t delta)
{
    if (cupool_hot.count_used)
        atomic_fetch_add_explicit(&dev->used, (unsigned long long)delta, memory_order_relaxed);
}

/* The context's `ordered` pool calls on its legacy stream (pool NULL: a
 * free), through its driver queue (queue.c): out of line, so that the path
 * of one thread stays as short as it was without it. */
CUresult cupool_queue_call(cupool_context_t *c, CUmemoryPool pool, CUdeviceptr *ptr, size_t size);
/* Whether the contexts' `ordered` pool calls go through their driver
 * queues (cupool_hot.queue): decided once, at start-up. */
void cupool_queue_decide(void);
/* An `ordered` free through the queue or straight on the legacy stream,
 * out of line. */
CUresult cupool_queue_free(cupool_context_t *c, CUdeviceptr ptr);
/* With the queue off (cupool_hot.queue), or while one thread alone has
 * used the context, a thread calls the driver itself: one thread needs no
 * queue, nor its atomic operations (a share of a pair: docs/DESIGN.md,
 * "Measured costs behind the code"). */
static inline int cupool_queue_wanted(const cupool_context_t *c)
{
    return atomic_load_explicit(&c->threads, memory_order_relaxed) > 1;
}
/* What an `ordered` pool call answers, not the driver, when a capture is
 * in progress or beginning (cupool_legacy_enter): an allocation then comes
 * from cupool's own stream, a free is held until the capture has ended
 * (cupool_free_failed). */
#define CUPOOL_CAPTURE_IN_PROGRESS ((CUresult)-1)
/* Moves a context to a stronger free mode under CUPOOL_FREE=auto, as the
 * program's streams and contexts make it need (contexts.c). */
void cupool_context_promote(cupool_context_t *c, int mode);
/* Makes `to` wait for everything enqueued on `from` so far: one event on
 * `from`, one wait on `to` (queue.c; c->lock held, c->ctx current, the
 * legacy gate entered when either is the legacy stream). */
CUresult cupool_order_join(cupool_context_t *c, CUstream from, CUstream to);
/* The same where a capture may forbid it: `to` waits for `from`, or where
 * the legacy stream may not be touched now (a capture beginning or in
 * progress) or the driver refuses, the host waits for `from` instead,
 * unless it is a default stream (queue.c; c->lock held, the context
 * entered for the calls). */
void cupool_order_follow(cupool_context_t *c, CUstream from, CUstream to);
/* The host waits for the order stream (queue.c; out of line, cold): for an
 * `ordered` allocation made while the context left `ordered`, and for work
 * given before the synchronization of that move is done. */
void cupool_order_settle(cupool_context_t *c);
/* An operation enqueued on `stream` after the order stream moved away from
 * it (order.c moves it): the order stream waits for it (queue.c; out of
 * line, cold). */
void cupool_order_rejoin(cupool_context_t *c, CUstream stream);
/* Whether an operation enqueued on the order stream the caller read (with
 * c->order_moves `before`, read first) may have missed a move: a move
 * makes the count odd before it records its event on the stream it leaves
 * and even again once the new order stream is stored, so an operation
 * enqueued after that event finds the count changed, or read it odd. */
static inline int cupool_order_missed(cupool_context_t *c, unsigned before)
{
    return (before & 1) || atomic_load_explicit(&c->order_moves, memory_order_acquire) != before;
}
/* One pool call on the context's order stream (pool NULL: a free of *ptr),
 * counted as a call on the legacy stream (capture_gate.h) whichever it is:
 * a capture beginning on a blocking stream could see either.  Should the
 * order stream move meanwhile, the new one waits for the call. */
static inline CUresult cupool_order_pool_call(cupool_context_t *c, CUmemoryPool pool, CUdeviceptr *ptr, size_t size)
{
    if (CUPOOL_UNLIKELY(!cupool_legacy_enter())) return CUPOOL_CAPTURE_IN_PROGRESS;
    unsigned moves = atomic_load_explicit(&c->order_moves, memory_order_acquire);
    CUstream stream = atomic_load_explicit(&c->order, memory_order_relaxed);
    CUresult r = pool ? cupool_hot.alloc_from_pool(ptr, size, pool, stream) : cupool_hot.free_async(*ptr, stream);
    if (CUPOOL_UNLIKELY(cupool_order_missed(c, moves))) cupool_order_rejoin(c, stream);
    cupool_legacy_leave();
    return r;
}
/* An allocation on cupool's private stream, complete before it returns
 * (alloc.c): every allocation but `ordered`'s. */
CUresult cupool_alloc_private(cupool_context_t *c, CUmemoryPool pool, CUdeviceptr *dptr, size_t size);
/* What else must go with a context (the kept store, kept_store.c): called
 * at its teardown, the context current and synchronized
 * (CUPOOL_CONTEXT_ALIVE), or once it is already gone with its memory and
 * events (CUPOOL_CONTEXT_GONE). */
enum cupool_context_end { CUPOOL_CONTEXT_ALIVE, CUPOOL_CONTEXT_GONE };
typedef void cupool_teardown_fn(cupool_context_t *c, enum cupool_context_end end);
void cupool_context_on_teardown(cupool_teardown_fn *fn);
/* Calls fn for every context cupool knows, in turn, none torn down
 * meanwhile; stops at the first that returns nonzero and returns that. */
int cupool_each_context(int (*fn)(cupool_context_t *c, void *arg), void *arg);
uint64_t cupool_device_reserved_unused(cupool_device_t *dev);
/* For the live statistics page (live.c): per device ordinal, the free
 * modes in force (bit m: mode m), the contexts cupool keeps, whether pools
 * serve it and, with `query`, what its pools reserve; returns 1 + the
 * highest ordinal set up, 0 for none. */
int cupool_devices_report(int query, unsigned modes[], unsigned ncontexts[], int pooled[], uint64_t reserved[]);
uint64_t cupool_device_reserved(cupool_device_t *dev);
/* The same, asked of the driver only when it may have changed (the pools
 * hold less than is in use, or the last answer is 1 ms old): for the log
 * and statistics, which would otherwise query the driver on every call. */
uint64_t cupool_device_reserved_recent(cupool_device_t *dev, uint64_t now_ns);

/* ---- capture.c: the captures in progress (the shims' part: engine.h) ----- */
/* What to call when the count of captures in progress drops to zero
 * (registered at start-up). */
typedef void cupool_captures_ended_fn(void);
void cupool_capture_on_end(cupool_captures_ended_fn *fn);

/* Held while a capture begins and while free/deferred_fence.c records a fence,
 * which would invalidate a capture begun under it (capture.c). */
void cupool_capture_gate_enter(void);
void cupool_capture_gate_leave(void);
/* The gate's lock, for the assertions that it is held (CUPOOL_ASSERT_HELD). */
const pthread_mutex_t *cupool_capture_gate_lock(void);

/* A context going away (its teardown, the context current and
 * synchronized): the blocks it exported are forgotten, and those the
 * program freed while another process had them open go back to its pools
 * (ipc_export.c). */
void cupool_ipc_forget_context(cupool_context_t *c);

#endif
