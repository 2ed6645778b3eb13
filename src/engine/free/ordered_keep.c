/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `ordered`'s keep and reuse: a block freed in `ordered` goes into the
 * context's ready store (ready_store.c) instead of back to its pool, and the
 * context's next allocation of its size takes it, ordered after its last
 * uses by one event on the legacy stream; and the synchronization that
 * moves a context out of `ordered`, after which the users of every block
 * kept until then are known to be done.
 */
#include "free_store.h"

#include <time.h>

/* ---- ordered reuse ----------------------------------------------------------
 * An `ordered` allocation and free cost two pool calls on the order
 * stream, and PyTorch makes hundreds of pairs in a training step, a few
 * percent of it (docs/DESIGN.md, "Measured costs behind the code").  A
 * freed block need not leave cupool's hands to serve the context's next
 * allocation of its size: what that needs is order, not completion.  All
 * the work the program enqueued is ordered before the order stream's last
 * operation (order.c keeps it so).  With the legacy stream as the order
 * stream, the blocking and per-thread streams share its order: an
 * operation on the legacy stream waits for all the work they were given
 * before it, and all the work they are given after it waits for it.  So
 * once one operation has been enqueued on the legacy stream after a free,
 * whatever the program enqueues later runs after every use of the block
 * made before the free; a non-blocking order stream needs no such
 * operation (every other stream joins it before its work), and a move of
 * the order counts as one.
 *
 * A free in `ordered` therefore puts the block in the context's ready
 * store, noting the count of such operations it must see pass
 * (c->fences + 1, its `due`).  An allocation of its size takes the oldest
 * block of that size, first recording an event on the legacy stream (an
 * ordered fence, cheaper than a pool call) when none has been recorded
 * since that block's free: one fence serves every block freed before it.  A block the store
 * hands back to its pool goes on the order stream, as `ordered` frees.  A
 * synchronization of the context (the move out of `ordered`, teardown)
 * completes every user of the blocks kept before it began (numbered in
 * c->kept, their `kept`): those then serve `deferred` as well.  The
 * store's rules are deferred's (cap CUPOOL_ORDERED_READY, age, limit,
 * out-of-memory, cuMemGetInfo), and so is its price: a block waits for its
 * own size where the pool could have served any smaller request from it. */

/* The store's clock in `ordered`, which reads it at every allocation and
 * free it serves: a coarse one (steps of a few ms, a few ns a read) is
 * enough for READY_MAX_AGE_NS. */
static uint64_t coarse_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Records an ordered fence after every free made so far in the context:
 * the driver's answer, or CUPOOL_CAPTURE_IN_PROGRESS (which an operation
 * on the legacy stream would disturb).  c->lock held, c->ctx current. */
static CUresult record_ordered_fence(cupool_context_t *c)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    /* A non-blocking order stream is an order of its own: every other
     * stream's work waits for it before it begins (order.c), so a block
     * freed in it serves its next allocation with no event. */
    if (atomic_load_explicit(&c->order, memory_order_relaxed) != CU_STREAM_LEGACY) {
        c->fences++;
        return CUDA_SUCCESS;
    }
    CUresult r = CUDA_SUCCESS;
    if (!c->ordered_fence) r = real_cuEventCreate(&c->ordered_fence, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS) c->ordered_fence = NULL;
    if (r == CUDA_SUCCESS && !cupool_legacy_enter()) r = CUPOOL_CAPTURE_IN_PROGRESS;
    if (r == CUDA_SUCCESS) {
        r = real_cuEventRecord(c->ordered_fence, CU_STREAM_LEGACY);
        cupool_legacy_leave();
    }
    if (r == CUDA_SUCCESS) {
        c->fences++;
        atomic_fetch_add_explicit(&cupool_stats_for(c->ordinal)->ordered_fences, 1, memory_order_relaxed);
    } else if (r != CUPOOL_CAPTURE_IN_PROGRESS) {
        cupool_message_once(CUPOOL_MSG_WARN, "cannot record an event on the legacy stream (%s); ordered allocations "
                                             "use the pool instead of freed blocks",
                            cupool_result_name(r));
    }
    return r;
}

CUresult cupool_ordered_reuse(cupool_context_t *c, size_t size, CUdeviceptr *dptr)
{
    CUPOOL_ASSERT_NOT_HELD(&c->lock);
    /* cupool_ordered_alloc found the store not empty (without the lock): a
     * size it neither keeps nor makes room for takes no lock. */
    if (!cupool_ordered_keeps(size) && size < MISS_GIVES_BACK) return CUDA_ERROR_NOT_FOUND;
    CUresult fenced = CUDA_SUCCESS;
    CUdeviceptr ptr = 0;
    pthread_mutex_lock(&c->lock);
    struct ready_size *rs = c->ready_oldest && cupool_ordered_keeps(size) ? cupool_ready_find(c, size) : NULL;
    if (rs && rs->oldest && (rs->oldest->due <= c->fences || (fenced = record_ordered_fence(c)) == CUDA_SUCCESS))
        ptr = cupool_ready_take_oldest(c, rs);
    /* The oldest go back on the legacy stream (their users may still
     * run), where the allocation follows them. */
    if (!ptr && fenced == CUDA_SUCCESS) cupool_ready_make_room(c, size, c->private_stream);
    /* Blocks a second old without a taker go back (a program that moved
     * on to other sizes). */
    cupool_ready_trim(c, UINT64_MAX, coarse_now_ns(), c->private_stream);
    pthread_mutex_unlock(&c->lock);
    if (!ptr) return fenced == CUPOOL_CAPTURE_IN_PROGRESS ? fenced : CUDA_ERROR_NOT_FOUND;
    *dptr = ptr;
    return CUDA_SUCCESS;
}

/* Whether the store holds a block larger than itself that another thread
 * freed (c->lock held, or as a hint). */
static int oversize_of_another_thread(const cupool_context_t *c)
{
    return CUPOOL_HINT_READ(c->ready_oversize) && CUPOOL_HINT_READ(c->oversize_owner) != &cupool_thread;
}

/* An `ordered` free kept for reuse (no capture in progress, c->ctx
 * current): into the store, which hands its oldest blocks back past its cap
 * or age.  A block larger than the whole store is kept too, beside the
 * others, until the next free (which hands it back first), a miss of 1 MiB
 * or more, or its age: a program that frees a large buffer and allocates
 * its size again (the allocation pair at 256 MiB and 1 GiB) then makes no
 * pool call, for at most one block's memory, which
 * the pool, keeping everything it reserved, would hold anyway. */
int cupool_ordered_keep(cupool_context_t *c, const cupool_origin_t *o)
{
    CUPOOL_ASSERT_NOT_HELD(&c->lock);
    freed_block_t *b = NULL;
    uint64_t cap = cupool_ready_cap(c);
    /* Larger than the store: kept unless the store holds such a block
     * another thread freed (looked at first without the lock, as a hint).
     * Threads sharing the context would otherwise pass that one block
     * around, each free handing back another's under the store's lock,
     * where the driver queue makes their pool calls together (slower
     * than the bare calls, where keeping it is faster: docs/DESIGN.md,
     * "Measured costs behind the code"). */
    int oversize = o->size > cap;
    if (!oversize || (cap && cupool_option_started(CUPOOL_OPT_LIMIT) == CUPOOL_SIZE_UNLIMITED &&
                      !oversize_of_another_thread(c))) {
        pthread_mutex_lock(&c->lock);
        if (!(oversize && oversize_of_another_thread(c)) &&
            (b = cupool_take_record(&c->spare_blocks, sizeof(freed_block_t)))) {
            uint64_t now_ns = coarse_now_ns();
            if (c->ready_oversize) cupool_ready_evict(c, c->ready_oversize, c->private_stream);
            b->ptr = o->ptr;
            b->size = o->size;
            b->due = c->fences + 1;
            b->kept = ++c->kept;
            cupool_ready_put(c, b, now_ns, c->private_stream);
            if (oversize && c->ready_newest == b) {
                CUPOOL_HINT_WRITE(c->ready_oversize, b);
                CUPOOL_HINT_WRITE(c->oversize_owner, (const void *)&cupool_thread);
                atomic_fetch_add_explicit(&cupool_stats_for(c->ordinal)->oversize_kept, 1, memory_order_relaxed);
            }
            cupool_ready_trim(c, cap, now_ns, c->private_stream);
        }
        pthread_mutex_unlock(&c->lock);
    }
    /* Not kept (that, or no host memory for its record): the caller hands
     * it back to the pool at once (free_modes.c). */
    return b != NULL;
}

/* The count of kept blocks before the synchronization, not after: a block
 * kept while it runs may have users it does not wait for. */
static uint64_t kept_before_sync(cupool_context_t *c)
{
    CUPOOL_ASSERT_NOT_HELD(&c->lock);
    pthread_mutex_lock(&c->lock);
    uint64_t kept = c->kept;
    pthread_mutex_unlock(&c->lock);
    return kept;
}

static void kept_synchronized(cupool_context_t *c, uint64_t before)
{
    CUPOOL_ASSERT_NOT_HELD(&c->lock);
    pthread_mutex_lock(&c->lock);
    if (before > c->kept_done) c->kept_done = before;
    pthread_mutex_unlock(&c->lock);
}

/* The legacy-stream work of `ordered` (allocations and frees still queued
 * behind kernels) must be complete before another stream can touch its
 * blocks. */
void cupool_ordered_leave(cupool_context_t *c)
{
    int pushed = cupool_enter_context(c->ctx);
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    uint64_t kept = kept_before_sync(c);
    CUresult r = real_cuCtxSynchronize();
    cupool_relaxed_end(previous);
    cupool_leave_context(pushed);
    CUPOOL_HINT_WRITE(c->sync_due, 0);
    atomic_store(&c->leaving, 0);
    if (r == CUDA_SUCCESS) kept_synchronized(c, kept);
    if (r != CUDA_SUCCESS)
        cupool_message(CUPOOL_MSG_WARN, "synchronizing context %p to leave ordered mode failed: %s", (void *)c->ctx,
                       cupool_result_name(r));
}
