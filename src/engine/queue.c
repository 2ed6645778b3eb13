/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The driver queue: a context's `ordered` pool calls, one thread at a time,
 * the thread in front making the calls of the threads waiting behind it
 * (flat combining).
 *
 * Why: the driver serves cuMemAllocFromPoolAsync and cuMemFreeAsync under a
 * lock of its own, and when several threads call at once each call costs
 * three to four times what it costs one thread alone, because the driver's
 * data moves from core to core with its lock and waiting threads sleep and
 * wake in the kernel.  A pthread mutex in front of the driver changes
 * nothing (its waiters sleep too).  A spin lock in front helps the probe
 * (bench/probes/threads_pair.c), whose threads take it again straight
 * after leaving it and so keep the driver's data in their cache, but
 * little around cupool's calls, with cupool's own work between them (the
 * figures: docs/DESIGN.md, "Measured costs behind the code").  Here one
 * thread makes every waiting thread's call in a row, which keeps the data
 * in one cache and serves every thread in turn.
 *
 * Correctness: the calls go to the context's order stream (order.c), which
 * is one stream for every thread of the context, so the thread in front
 * makes exactly the call the waiting thread would have made, on the same
 * stream, after everything the waiting thread did before it asked.
 *
 * A thread that finds the queue empty makes its own call at once, for one
 * atomic exchange and one store more; a context one thread alone has used
 * skips the queue (state.h).
 *
 * Here too, the joins of one stream to another that keep the order stream
 * correct when it moves (order.c moves it; a pool call made on the stream
 * it left, by a thread that read it just before, is joined to the new one
 * here).
 */
#include "state.h"

#include <time.h>

/* A thread's call waiting in a queue: its own, so that asking needs no
 * memory from anywhere; in its own cache line, as the thread in front
 * writes it. */
static CUPOOL_THREAD_LOCAL cupool_request_t own_request __attribute__((aligned(64)));

static CUresult call_now(cupool_context_t *c, CUmemoryPool pool, CUdeviceptr *ptr, size_t size)
{
    return cupool_order_pool_call(c, pool, ptr, size);
}

/* Makes the calls waiting in the queue, whose lock the caller holds.  A few
 * rounds at most: the thread in front has its own program to run, and a
 * call still waiting after it left is made by its own thread, which then
 * finds the lock free. */
static void serve(cupool_context_t *c)
{
    CUPOOL_ASSERT_SPIN_HELD(&c->queue.lock);
    cupool_queue_t *q = &c->queue;
    int was_in_front = cupool_thread.in_front;
    cupool_thread.in_front = 1;
    unsigned long long served = 0;
    for (int round = 0; round < 4; round++) {
        cupool_request_t *r = atomic_exchange_explicit(&q->waiting, NULL, memory_order_acquire);
        if (!r) break;
        while (r) {
            /* Read before done is set: the thread may reuse its request
             * the moment it sees done. */
            cupool_request_t *next = r->next;
            r->result = call_now(c, r->pool, &r->ptr, r->size);
            atomic_store_explicit(&r->done, 1, memory_order_release);
            r = next;
            served++;
        }
    }
    cupool_thread.in_front = was_in_front;
    if (cupool_hot.timing && served)
        atomic_fetch_add_explicit(&cupool_stats_for(c->ordinal)->queued_calls, served, memory_order_relaxed);
}

/* The lock taken by the caller is free: its own call at once, then any
 * that came meanwhile. */
static CUresult call_in_front(cupool_context_t *c, CUmemoryPool pool, CUdeviceptr *ptr, size_t size)
{
    cupool_queue_t *q = &c->queue;
    int was_in_front = cupool_thread.in_front; /* of another context's queue */
    cupool_thread.in_front = 1;
    CUresult r = call_now(c, pool, ptr, size);
    if (atomic_load_explicit(&q->waiting, memory_order_relaxed)) serve(c);
    cupool_thread.in_front = was_in_front;
    cupool_spin_unlock(&q->lock);
    return r;
}

CUresult cupool_queue_call(cupool_context_t *c, CUmemoryPool pool, CUdeviceptr *ptr, size_t size)
{
    cupool_queue_t *q = &c->queue;
    if (cupool_spin_trylock(&q->lock)) return call_in_front(c, pool, ptr, size);
    if (cupool_thread.in_front) {
        /* Called back from inside a call this thread makes in front of a
         * queue (a tool's callback may allocate): waiting would wait for
         * the thread itself (and own_request may be in the queue this
         * thread is serving). */
        return call_now(c, pool, ptr, size);
    }
    cupool_request_t *r = &own_request;
    r->pool = pool;
    r->ptr = *ptr;
    r->size = size;
    atomic_store_explicit(&r->done, 0, memory_order_relaxed);
    cupool_request_t *head = atomic_load_explicit(&q->waiting, memory_order_relaxed);
    do r->next = head;
    while (!atomic_compare_exchange_weak_explicit(&q->waiting, &head, r, memory_order_release, memory_order_relaxed));

    /* Wait to be served, or for the lock to come free: then this thread is
     * in front and serves the queue, its own call included.  Spinning, then
     * yielding the core: the wait is for other threads' driver calls, a
     * microsecond or so each.  Past a few thousand tries (a millisecond or
     * more: a pool growing by gigabytes) it sleeps between looks, 20 us
     * at first and up to 320 us, so that waiting threads do not burn their
     * cores. */
    long nap_ns = 20000;
    for (unsigned tries = 0; !atomic_load_explicit(&r->done, memory_order_acquire); tries++) {
        if (!atomic_load_explicit(&q->lock, memory_order_relaxed) && cupool_spin_trylock(&q->lock)) {
            serve(c);
            cupool_spin_unlock(&q->lock);
            continue;
        }
        if (tries < 4096) {
            cupool_wait_turn(tries, 256);
        } else {
            struct timespec nap = {0, nap_ns};
            nanosleep(&nap, NULL);
            if (nap_ns < 320000) nap_ns *= 2;
        }
    }
    *ptr = r->ptr;
    return r->result;
}

/* An `ordered` free made out of line: for a block the store did not keep
 * (free/free_modes.c), and cupool_ordered_free's (free/free.h) through the
 * queue. */
CUresult cupool_queue_free(cupool_context_t *c, CUdeviceptr ptr)
{
    if (CUPOOL_UNLIKELY(cupool_queue_wanted(c))) return cupool_queue_call(c, NULL, &ptr, 0);
    return cupool_order_pool_call(c, NULL, &ptr, 0);
}

/* A tool's callbacks run inside the driver's calls and may allocate or
 * wait there: under a tool, by default, no thread waits for another's
 * driver call. */
void cupool_queue_decide(void)
{
    uint64_t q = cupool_option(CUPOOL_OPT_DRIVER_QUEUE);
    cupool_hot.queue = q == CUPOOL_QUEUE_ON || (q == CUPOOL_QUEUE_AUTO && !cupool_cuda_tool_attached());
    cupool_message(CUPOOL_MSG_INFO, "driver queue: %s",
                   cupool_hot.queue ? "on" : q == CUPOOL_QUEUE_OFF ? "off (CUPOOL_DRIVER_QUEUE=off)"
                                                                   : "off (a CUDA tool is attached)");
}

/* ---- joins of the order stream ----------------------------------------------- */

CUresult cupool_order_join(cupool_context_t *c, CUstream from, CUstream to)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    CUresult r = CUDA_SUCCESS;
    if (!c->order_event) r = real_cuEventCreate(&c->order_event, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS) {
        c->order_event = NULL;
        return r;
    }
    r = real_cuEventRecord(c->order_event, from);
    if (r == CUDA_SUCCESS) r = real_cuStreamWaitEvent(to, c->order_event, 0);
    return r;
}

void cupool_order_follow(cupool_context_t *c, CUstream from, CUstream to)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    int pushed = cupool_enter_context(c->ctx);
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    CUresult r = CUDA_ERROR_NOT_PERMITTED;
    if (cupool_legacy_enter()) {
        r = cupool_order_join(c, from, to);
        cupool_legacy_leave();
    }
    if (r != CUDA_SUCCESS && from != CU_STREAM_LEGACY && from != CU_STREAM_PER_THREAD) real_cuStreamSynchronize(from);
    cupool_relaxed_end(previous);
    cupool_leave_context(pushed);
}

/* Work or a pool call was enqueued on `stream` while the order stream
 * moved away from it: the order stream follows it (a program that itself
 * gave a default stream work during a capture has already disturbed the
 * capture). */
__attribute__((cold)) void cupool_order_rejoin(cupool_context_t *c, CUstream stream)
{
    pthread_mutex_lock(&c->lock);
    CUstream order = atomic_load_explicit(&c->order, memory_order_relaxed);
    if (stream != order) cupool_order_follow(c, stream, order);
    pthread_mutex_unlock(&c->lock);
}

__attribute__((cold)) void cupool_order_settle(cupool_context_t *c)
{
    CUstream order = atomic_load_explicit(&c->order, memory_order_relaxed);
    int pushed = cupool_enter_context(c->ctx);
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    /* The legacy stream only outside a capture; during one the context's
     * synchronization after it (c->sync_due) completes the block. */
    int legacy = order == CU_STREAM_LEGACY;
    if (!legacy || cupool_legacy_enter()) {
        real_cuStreamSynchronize(order);
        if (legacy) cupool_legacy_leave();
    }
    cupool_relaxed_end(previous);
    cupool_leave_context(pushed);
}
