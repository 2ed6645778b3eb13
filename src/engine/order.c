/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The order stream: the one stream of a context that `ordered` makes its
 * pool calls and frees on, and the work tracker that keeps it correct when
 * the program's work is on another stream.  The work shims (shims/work.c)
 * tell it of every call that gives a stream work, before and after the
 * driver enqueues it.
 *
 * `ordered` is correct when every use of a block is ordered before the
 * free's place in the order stream and every later use after it.  The
 * tracker keeps one rule that gives both: all work the program has
 * enqueued is ordered before the order stream's last operation.  Work on a
 * stream of the order stream's order (the order stream itself; with the
 * legacy stream, the blocking and per-thread streams, which wait for it and
 * which it waits for) keeps the rule by itself.  Work on any other stream
 * moves the order there first: one event recorded on the stream left, one
 * wait for it on the stream joined, then the work.  The stream joined is
 * the work's stream if it is non-blocking, else the legacy stream.  A
 * program whose work is on one non-blocking stream (a training loop inside
 * `with torch.cuda.stream(s)`) so has its frees ordered there after one
 * move, and reuses its memory in stream order as cudaMallocAsync would,
 * with no host wait and no event per free.
 *
 * What a move costs is that it joins the two streams: a program that
 * alternates between streams on purpose (a copy stream beside a compute
 * stream, NCCL's streams beside the training stream) would lose their
 * overlap.  Such a program moves the order at every step, where one that
 * migrates (initialization on the legacy stream, training on its own
 * stream, an evaluation now and then) moves it a few times in all.  So
 * under CUPOOL_FREE=auto more than MOVES_MOST moves within MOVES_WINDOW_NS
 * of the first of them move the context to `deferred` instead, whose
 * fences need no order.  A move needs an event on the legacy stream (left
 * or joined), which a capture in progress forbids: under `auto` the context
 * then moves to `deferred` too (synchronizing once the capture has ended);
 * work given to a stream that is capturing is not run now and needs
 * nothing (the graph's launch is work of its own).
 *
 * Another thread may enqueue work on the stream left while the order moves
 * (it looked before the move and enqueued after the event).  So each work
 * call compares the context's count of moves before and after it (a move
 * makes it odd before its event and even once the new order stream is
 * stored), and if it changed or was odd, the order stream waits for the
 * call's stream (cupool_order_rejoin); the pool calls on the order stream
 * do the same (state.h).  The thread that enqueued such work frees its
 * blocks only after that, so the rule holds for every free.
 */
#include "state.h"

/* More moves than MOVES_MOST within MOVES_WINDOW_NS: under `auto`,
 * `deferred`. */
#define MOVES_MOST 16
#define MOVES_WINDOW_NS (10 * 1000000000ull)

/* ---- which streams share the legacy stream's order --------------------------- */

static int listed(const CUstream *list, int n, CUstream stream)
{
    for (int i = 0; i < n; i++)
        if (list[i] == stream) return 1;
    return 0;
}

/* Streams the program created without CU_STREAM_NON_BLOCKING: c->lock held. */
static int is_blocking(const cupool_context_t *c, CUstream stream)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    return listed(c->blocking, c->nblocking, stream);
}

/* Non-blocking streams the program created in this context (the list
 * `deferred`'s fences use): c->lock held. */
static int is_non_blocking(const cupool_context_t *c, CUstream stream)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    return listed(c->streams, c->nstreams, stream);
}

/* Whether work on `stream` is ordered with the order stream `order` by the
 * driver alone.  c->lock held. */
static int same_order(const cupool_context_t *c, CUstream stream, CUstream order)
{
    if (stream == order) return 1;
    if (order != CU_STREAM_LEGACY) return 0;
    return stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD || is_blocking(c, stream);
}

/* The stream a call means: NULL is the legacy stream, or the calling
 * thread's own default stream in a per-thread variant. */
static CUstream canonical(CUstream stream, int per_thread)
{
    if (stream == NULL) return per_thread ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    return stream;
}

/* ---- moving the order -------------------------------------------------------- */

/* Whether `stream` is capturing: its work is recorded, not run. */
static int is_capturing(CUstream stream)
{
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    return real_cuStreamIsCapturing(stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

enum move_result { MOVED, NOT_NEEDED, REFUSED };

/* The count of moves, around each (c->lock held): odd from before the
 * event on the stream left until the new order stream is stored
 * (cupool_order_missed, state.h).  A call that read the count before the
 * move began and enqueued after its event sees it changed: the driver
 * orders that enqueue after the event's record, itself after the count's
 * increment.  One that read it odd, or during the move's store, waits for
 * the move in cupool_order_rejoin, under c->lock. */
static void move_begin(cupool_context_t *c)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    atomic_fetch_add_explicit(&c->order_moves, 1, memory_order_seq_cst);
}

static void move_end(cupool_context_t *c)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    atomic_fetch_add_explicit(&c->order_moves, 1, memory_order_release);
}

/* Moves the order to `stream` (or to the legacy stream, for one of its
 * order), so that the work about to be enqueued there follows everything
 * before it; c->lock held, c->ctx current.  REFUSED: the move is not
 * possible (a capture forbids the legacy stream now, a stream of another
 * context, the driver failed) or too frequent under `auto`: the caller
 * moves the context out of `ordered`. */
static enum move_result move_order(cupool_context_t *c, CUstream stream, const char **why)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    CUstream from = atomic_load_explicit(&c->order, memory_order_relaxed);
    if (same_order(c, stream, from)) return NOT_NEEDED;
    if (cupool_capturing() && is_capturing(stream)) return NOT_NEEDED;
    CUstream to = same_order(c, stream, CU_STREAM_LEGACY) ? CU_STREAM_LEGACY : stream;
    /* A stream cupool did not see created in this context (another
     * context's, whose pools and events are not these) is not one the
     * order can follow. */
    *why = "work on a stream of another context";
    if (to != CU_STREAM_LEGACY && !is_non_blocking(c, to)) return REFUSED;
    uint64_t now = cupool_now_ns();
    if (!c->moves_recent || now - c->moves_since_ns > MOVES_WINDOW_NS) {
        c->moves_since_ns = now;
        c->moves_recent = 0;
    }
    *why = "work on several streams by turns";
    if (++c->moves_recent > MOVES_MOST && cupool_option(CUPOOL_OPT_FREE) == CUPOOL_FREE_AUTO) return REFUSED;
    /* During a capture: an order stream that is capturing cannot be
     * joined (its event would be part of the graph).  Only a move that
     * touches the legacy stream needs the capture gate; where the gate is
     * shut and the order leaves a stream of its own for the legacy
     * stream's order, the host waits for that stream instead, and the
     * other way nothing can put the new stream after the legacy stream's
     * work now. */
    *why = "work on another stream during a capture";
    if (cupool_capturing() && is_capturing(from)) return REFUSED;
    int legacy = from == CU_STREAM_LEGACY || to == CU_STREAM_LEGACY;
    int gated = legacy && cupool_legacy_enter();
    if (legacy && !gated && from == CU_STREAM_LEGACY) return REFUSED;
    move_begin(c);
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    CUresult r = legacy && !gated ? real_cuStreamSynchronize(from) : cupool_order_join(c, from, to);
    cupool_relaxed_end(previous);
    if (gated) cupool_legacy_leave();
    if (r == CUDA_SUCCESS) atomic_store_explicit(&c->order, to, memory_order_relaxed);
    move_end(c);
    if (r != CUDA_SUCCESS) {
        cupool_message_once(CUPOOL_MSG_WARN, "cannot order stream %p after stream %p (%s)", (void *)to, (void *)from,
                            cupool_result_name(r));
        *why = "an event the driver refused";
        return REFUSED;
    }
    /* The event serves every block kept so far as an ordered fence would. */
    c->fences++;
    atomic_fetch_add_explicit(&cupool_stats_for(c->ordinal)->order_moves, 1, memory_order_relaxed);
    return MOVED;
}

/* A move refused, for the reason `why`: under `auto`, out of `ordered`
 * (outside c->lock: the registry's lock comes first); a forced `ordered`
 * can only say so. */
static void refused(cupool_context_t *c, const char *why)
{
    if (cupool_option(CUPOOL_OPT_FREE) != CUPOOL_FREE_AUTO) {
        cupool_message_once(CUPOOL_MSG_WARN, "CUPOOL_FREE=ordered: %s is not ordered after earlier frees", why);
        return;
    }
    cupool_message(CUPOOL_MSG_INFO, "context %p: %s; frees wait for fences", (void *)c->ctx, why);
    cupool_context_promote(c, CUPOOL_FREE_DEFERRED);
}

cupool_work_t cupool_stream_work(CUstream stream, int per_thread)
{
    cupool_work_t w = {0};
    cupool_context_t *c = cupool_current_context();
    if (!c || !c->private_stream) return w;
    if (atomic_load_explicit(&c->mode, memory_order_acquire) != CUPOOL_FREE_ORDERED) {
        /* Just out of `ordered`, its synchronization not yet done: the
         * host waits for the order stream before this work is given. */
        if (CUPOOL_UNLIKELY(atomic_load(&c->leaving))) cupool_order_settle(c);
        return w;
    }
    w.context = c;
    w.stream = canonical(stream, per_thread);
    w.moves = atomic_load_explicit(&c->order_moves, memory_order_acquire);
    CUstream order = atomic_load_explicit(&c->order, memory_order_relaxed);
    /* The common case, work on the order stream itself: two loads. */
    if (CUPOOL_LIKELY(w.stream == order)) return w;
    if (order == CU_STREAM_LEGACY && w.stream == CU_STREAM_PER_THREAD) return w;
    const char *why = NULL;
    pthread_mutex_lock(&c->lock);
    enum move_result m = move_order(c, w.stream, &why);
    w.moves = atomic_load_explicit(&c->order_moves, memory_order_acquire);
    pthread_mutex_unlock(&c->lock);
    if (m == REFUSED) {
        refused(c, why);
        w.context = NULL;
    }
    return w;
}

void cupool_stream_work_done(const cupool_work_t *w)
{
    cupool_context_t *c = w->context;
    if (CUPOOL_LIKELY(!c || !cupool_order_missed(c, w->moves))) return;
    cupool_order_rejoin(c, w->stream);
}

/* The order of one context leaves `stream` if it is there (arg): back to
 * the legacy stream, after the stream's queued work (which still runs
 * after the destroy returns). */
static int leave_stream(cupool_context_t *c, void *arg)
{
    CUstream stream = arg;
    pthread_mutex_lock(&c->lock);
    if (atomic_load_explicit(&c->order, memory_order_relaxed) == stream) {
        move_begin(c);
        cupool_order_follow(c, stream, CU_STREAM_LEGACY);
        atomic_store_explicit(&c->order, CU_STREAM_LEGACY, memory_order_relaxed);
        move_end(c);
        c->fences++;
    }
    pthread_mutex_unlock(&c->lock);
    return 0;
}

void cupool_order_stream_destroyed(CUstream stream)
{
    if (stream && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD)
        cupool_each_context(leave_stream, stream);
}
