/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The engine, as the shims see it: the middle layer, between the shims
 * (shims/) above and the base (base/) below, and its one face.  A context's
 * state (cupool_context_t) is opaque here: the engine's own files see it in
 * state.h, which no shim reaches (tests/test_layers.sh checks).  The engine
 * keeps the origin table (origin.h), the devices and their pools
 * (devices.c), the contexts with their free modes (contexts.c) and their
 * end (lifecycle.c), an allocation's path (alloc.c), the free
 * modes and their stores (free/, its header free/free.h), the stream
 * captures in progress (capture.c) and the driver queue (queue.c).  An
 * allocation reads top-down: a shim asks cupool_alloc_fast(), else
 * cupool_current_context(), cupool_pick_pool() and cupool_alloc_block();
 * a free asks cupool_free_fast(), else the origin table
 * (cupool_origin_claim, cupool_free_keeps_block) and cupool_free_block(),
 * which goes down to the store of its mode (free/free_modes.c).
 */
#ifndef CUPOOL_ENGINE_H
#define CUPOOL_ENGINE_H

#include "../base/base.h"
#include "origin.h"
#include "ipc.h"
#include "kept_store.h"

/* Starts the engine once the program's cuInit has succeeded (the shims'
 * start-up): fork handlers, the driver queue, what `ordered` keeps and
 * whether the fast paths may run. */
void cupool_engine_start(void);

/* The live statistics page (live.c, its format live.h): created, with the
 * thread that updates it, at start-up unless CUPOOL_LIVE=0; the thread
 * stopped and the page removed at exit, before anything else is torn
 * down.  Neither is on a call's path. */
void cupool_live_start(void);
void cupool_live_stop(void);

/* Legacy CUDA IPC on pooled memory: ipc.h.  Pinned host and managed
 * memory: kept_store.h.  Other processes on the device: share.h. */

/* ---- contexts ----------------------------------------------------------------- */

/* The thread's cached state of its current context (*ctx, as of
 * *generation), or NULL when the cache misses or holds none; *ctx is NULL
 * when no context is current. */
static inline cupool_context_t *cupool_context_from_cache(CUcontext *ctx, unsigned *generation)
{
    if (cupool_hot.ctx_get_current(ctx) != CUDA_SUCCESS) *ctx = NULL;
    if (!*ctx) return NULL;
    *generation = atomic_load_explicit(&cupool_hot.generation, memory_order_acquire);
    if (CUPOOL_LIKELY(cupool_thread.context_handle == *ctx && cupool_thread.context_generation == *generation))
        return cupool_thread.context;
    return NULL;
}
/* The state of the calling thread's current context, created on first use;
 * NULL when no context is current or cupool cannot pool there.  The
 * thread's cache answers nearly every time; a miss asks the registry
 * (contexts.c). */
cupool_context_t *cupool_current_context(void);
/* The state of a given context, created on first use (must be current). */
cupool_context_t *cupool_context_of(CUcontext ctx);
/* What the shims read of a context's state: its driver handle, its
 * device's ordinal, whether pools serve that device and whether they are
 * exportable (CUPOOL_IPC), and the free mode in force (CUPOOL_FREE_*). */
CUcontext cupool_context_handle(const cupool_context_t *c);
int cupool_context_ordinal(const cupool_context_t *c);
int cupool_context_pooled(const cupool_context_t *c);
int cupool_context_exportable(const cupool_context_t *c);
int cupool_context_mode(const cupool_context_t *c);
/* The context is its device's primary one (cuDevicePrimaryCtxRetain). */
void cupool_context_set_primary(cupool_context_t *c);
/* Whether any device's allocations are served from pools. */
int cupool_pools_in_use(void);

/* ---- allocation ----------------------------------------------------------------- */

/* The fast path of cuMemAlloc (alloc.c): what nearly every allocation of a
 * program under cupool's default settings needs, served from the thread's
 * cached context; 1 when served (the block in the origin table and
 * counted), 0 before it changed anything: the general path then decides
 * from the start. */
int cupool_alloc_fast(CUdeviceptr *dptr, size_t size);
/* The pool serving a request of this size in the context, or NULL when it
 * must go native (no pool, a size out of bounds, CUPOOL_LIMIT reached). */
CUmemoryPool cupool_pick_pool(cupool_context_t *c, size_t size);
/* Allocates a block from pool in the context's free mode (the context
 * current): a block freed earlier, or the pool on the legacy stream
 * (`ordered`) or on cupool's own stream, complete before it returns.
 * *mode: the free mode it was allocated under.  The driver's answer. */
CUresult cupool_alloc_block(cupool_context_t *c, CUmemoryPool pool, CUdeviceptr *dptr, size_t size, int *mode);
/* Blocks the calling thread's allocations took from a ready store so far
 * (free/ready_store.c): the log marks an allocation that moved it. */
extern CUPOOL_THREAD_LOCAL unsigned long cupool_store_takes;
/* Before an allocation that ran out of memory is tried again: the memory
 * the pools keep on c's device may be what is missing.  Every context on
 * the device hands back what it holds freed, the pools trim, and the
 * managed blocks the kept store holds go back to the driver (they may
 * hold device memory too).  Counted. */
void cupool_trim_for_retry(cupool_context_t *c);
/* Adds delta to the bytes the context's device's pools serve (kept only
 * where something reads it: CUPOOL_LIMIT, the log and the statistics). */
void cupool_context_used(cupool_context_t *c, int64_t delta);
/* What the device's pools reserve, asked of the driver only when it may
 * have changed (for the log and statistics); and what the context holds
 * freed, ready for reuse and waiting for fences (hints). */
uint64_t cupool_context_reserved_recent(cupool_context_t *c, uint64_t now_ns);
uint64_t cupool_context_ready_bytes(const cupool_context_t *c);
uint64_t cupool_context_waiting_bytes(const cupool_context_t *c);
/* The memory cuMemGetInfo counts free beside the driver's answer: what the
 * device's pools reserve and do not use, and the context's ready blocks. */
uint64_t cupool_context_idle_bytes(cupool_context_t *c);

/* ---- free ------------------------------------------------------------------------- */

/* What cupool_free_block does with a block (cupool_free_keeps_block's answer). */
enum cupool_free_how {
    CUPOOL_FREE_NOW = 0,  /* back to its pool now, in the context's mode */
    CUPOOL_FREE_KEPT = 1, /* kept for a while, marked freed in the origin table */
};
/* The fast path of cuMemFree (free/free_modes.c), the counterpart of
 * cupool_alloc_fast: 1 when served, *result then holds the driver's answer
 * (a refused free leaves the block the program's). */
int cupool_free_fast(CUdeviceptr dptr, CUresult *result);
/* Whether cupool keeps this block when the program frees it now: a
 * `deferred` free, a free during a capture, or an `ordered` free kept for
 * reuse (the block stays in the origin table, marked freed, until it goes
 * back to its pool). */
int cupool_free_keeps_block(const cupool_origin_t *o);
/* Frees a block the program freed (its context current), as
 * cupool_free_keeps_block decided (how): the free's one mode dispatch. */
CUresult cupool_free_block(cupool_context_t *c, const cupool_origin_t *o, enum cupool_free_how how);

/* ---- contexts' lifecycle (lifecycle.c, contexts.c, for shims/context.c) ------------ */

/* A context cuCtxDestroy is about to destroy (unless it is a primary one,
 * or not valid); a device's primary context about to be reset; about to be
 * released (its ready blocks go back first, on its own stream); released,
 * and gone if the driver says it is no longer active; peer access granted
 * to, or taken from, the calling thread's device on peer's device. */
void cupool_context_destroying(CUcontext ctx);
void cupool_primary_resetting(int ordinal);
void cupool_primary_releasing(int ordinal);
void cupool_primary_released(int ordinal);
void cupool_peer_access(CUcontext peer, int enable);

/* ---- streams and captures (for shims/stream.c) --------------------------------------- */

/* A new stream of the calling thread's context, and a stream about to be
 * destroyed (contexts.c). */
void cupool_track_stream(CUstream stream, unsigned flags);
void cupool_forget_stream(CUstream stream);
/* A context the driver destroyed: the captures begun in it are over
 * (capture.c). */
void cupool_captures_context_gone(CUcontext ctx);
/* A capture beginning (the capture shims): counted from before it begins,
 * inside the capture gate (enter), then listed by the stream it began on,
 * or uncounted if it did not begin (done, which leaves the gate). */
void cupool_capture_begin_enter(void);
CUresult cupool_capture_begin_done(CUstream stream, CUresult r);
/* Takes off the list the captures begun on stream (any context), or in ctx
 * (any stream), and uncounts them; returns how many there were. */
int cupool_capture_take(CUstream stream, CUcontext ctx);
/* A capture that ended without being on the list: uncounts it. */
void cupool_capture_uncounted(void);

/* ---- the work streams run (order.c, for shims/work.c) ---------------------------------- */

/* Work the program gives a stream: a kernel, a copy, a set, a graph, a host
 * function, anything the GPU runs in that stream's order.  The work shims
 * call cupool_stream_work() before the real function (it may make the
 * stream wait for earlier work first) and cupool_stream_work_done() after
 * it, whatever it returned.  per_thread: the call was a
 * per-thread-default-stream variant (_ptsz/_ptds, or cuGetProcAddress asked
 * with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), so a NULL stream
 * means the calling thread's default stream, not the legacy one; the calls
 * with no stream argument that run on the default stream (cuMemcpy,
 * cuMemsetD8...) pass NULL.  Only once cupool is active (cupool_active()). */
typedef struct {
    cupool_context_t *context; /* NULL: nothing to look at afterwards */
    CUstream stream;
    unsigned moves;
} cupool_work_t;
cupool_work_t cupool_stream_work(CUstream stream, int per_thread);
void cupool_stream_work_done(const cupool_work_t *work);
/* The program is about to destroy `stream` (shims/stream.c, before
 * cupool_forget_stream): an order stream leaves it. */
void cupool_order_stream_destroyed(CUstream stream);
/* The two, for a shim: nothing before cupool is active, nothing after
 * when there is nothing to look at. */
static inline cupool_work_t cupool_work_begin(CUstream stream, int per_thread)
{
    if (!cupool_active()) return (cupool_work_t){0};
    return cupool_stream_work(stream, per_thread);
}
static inline void cupool_work_end(const cupool_work_t *work)
{
    if (work->context) cupool_stream_work_done(work);
}

#endif
