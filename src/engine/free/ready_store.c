/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ready store of a context, shared by `ordered` and `deferred`: freed
 * blocks whose users are done (or, kept by `ordered`, ordered after them),
 * still allocated from their pools, waiting for the context's next
 * allocation of their size; the caps of what a context holds, the store's
 * own and those of CUPOOL_DEFERRED_READY and CUPOOL_DEFERRED_WAIT (here,
 * not in deferred_fence.c, because the store's cap needs them and the
 * fences sit above the store, handing it their blocks); and what every free
 * mode uses to hand a block back to its pool (cupool_give_back,
 * cupool_release_block) or back to the program when a free fails
 * (cupool_restore_block), and the teardown of the context's spare records.
 * Blocks stay in the origin table until they are back in their pool, so a
 * second free of one is caught.
 */
#include "free_store.h"

#include <string.h>

/* ---- the caps of what a context holds -------------------------------------- */

/* CUPOOL_DEFERRED_READY and CUPOOL_DEFERRED_WAIT may be a share of the
 * bytes in use ("25%"): what cupool holds then grows and shrinks with the
 * program, as a framework's caching allocator's cache does.  A share never
 * comes to less than this, so that a small program's frees do not wait for
 * the GPU one by one. */
#define HELD_SHARE_FLOOR (64ull << 20)

/* The bytes the device's pools have allocated (in use by the program, or
 * held by cupool), asked of the driver at most once a millisecond and anew
 * once cupool has handed blocks back (cupool_release_block clears the
 * time). */
static uint64_t pool_used_recent(cupool_device_t *dev, uint64_t now_ns)
{
    uint64_t at = atomic_load_explicit(&dev->pool_used_at_ns, memory_order_relaxed);
    if (at && now_ns - at < 1000000) return atomic_load_explicit(&dev->pool_used, memory_order_relaxed);
    uint64_t used = 0;
    for (int i = 0; i < dev->npools; i++) {
        cuuint64_t value = 0;
        real_cuMemPoolGetAttribute(dev->pools[i], CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &value);
        used += value;
    }
    atomic_store_explicit(&dev->pool_used, used, memory_order_relaxed);
    atomic_store_explicit(&dev->pool_used_at_ns, now_ns, memory_order_relaxed);
    return used;
}

/* The bytes option `id` (CUPOOL_DEFERRED_READY, CUPOOL_DEFERRED_WAIT)
 * allows the context to hold, or its share of the bytes the program has
 * in use on the device (the pools' allocated bytes less what this context
 * holds; a second context on the device means `sync`, which holds
 * nothing). */
uint64_t cupool_deferred_cap(cupool_context_t *c, enum cupool_option id)
{
    uint64_t value = cupool_option_started(id);
    if (!cupool_is_share(value)) return value;
    uint64_t used = pool_used_recent(c->device, cupool_now_ns());
    /* Frees ordered on the GPU left the pools' count at the free. */
    uint64_t held = c->ready_bytes;
    if (!cupool_deferred_on_gpu()) held += c->deferred_bytes;
    uint64_t in_use = used > held ? used - held : 0;
    uint64_t cap = (uint64_t)((double)in_use * (double)(value & ~CUPOOL_SHARE_FLAG) / 10000.0);
    return cap > HELD_SHARE_FLOOR ? cap : HELD_SHARE_FLOOR;
}

/* ---- ready blocks ------------------------------------------------------------
 * A `deferred` allocation costs a pool call on cupool's private stream and a
 * query of that stream, so that the block is complete for every stream
 * (several times `ordered`'s pool call under PyTorch: docs/DESIGN.md,
 * "Measured costs behind the code").
 * A freed block whose fence has completed is that already: no work
 * of the program uses it any more, and it never left cupool's hands.  So it
 * waits in the context's ready store, still allocated from its pool, for the
 * context's next `deferred` allocation of the same size, which it serves
 * under c->lock with no driver call.  (For compute-sanitizer the block simply
 * stays allocated; its allocation is ordered before every stream as before.)
 * A ready block goes back to its pool, oldest first, when the store holds
 * more than cupool_ready_cap(), when READY_MAX_AGE_NS have passed since its free
 * (its fence) without a taker (a program that moved on to other sizes), when
 * the context leaves `deferred`, and on out-of-memory (cupool_trim_for_retry).
 * cuMemGetInfo counts the store as free memory.
 * The price is memory: a block waits for its own size, where the pool could
 * have served any smaller request from it: PyTorch on a non-blocking
 * stream steps faster with the store and peaks higher.  Handing the oldest
 * ready blocks back on a miss kept the peak down but cost more time than
 * the store saved: a miss is mostly a block of that size still waiting for
 * its fence, not a size the program dropped (the figures: docs/DESIGN.md,
 * "Measured costs behind the code"). */
#define READY_MAX_AGE_NS 1000000000ull

/* The most the store keeps now: CUPOOL_DEFERRED_READY or
 * CUPOOL_ORDERED_READY as the context's mode says (0 turns it off; `sync`
 * keeps nothing), no more than a pool keeps across synchronizations
 * (CUPOOL_RELEASE_THRESHOLD), and no more than CUPOOL_LIMIT leaves beside
 * the blocks in use on the device (the count CUPOOL_LIMIT keeps). */
uint64_t cupool_ready_cap(cupool_context_t *c)
{
    int mode = atomic_load_explicit(&c->mode, memory_order_relaxed);
    /* Frees ordered on the GPU (CUPOOL_DEFERRED_ORDER=gpu) go to the pool,
     * not here: in `deferred` the store then only empties. */
    uint64_t cap = 0;
    if (mode == CUPOOL_FREE_ORDERED) cap = cupool_option_started(CUPOOL_OPT_ORDERED_READY);
    else if (mode == CUPOOL_FREE_DEFERRED && !cupool_deferred_on_gpu()) cap = cupool_deferred_cap(c, CUPOOL_OPT_DEFERRED_READY);
    uint64_t threshold = cupool_option_started(CUPOOL_OPT_RELEASE_THRESHOLD);
    uint64_t limit = cupool_option_started(CUPOOL_OPT_LIMIT);
    if (threshold < cap) cap = threshold;
    if (limit != CUPOOL_SIZE_UNLIMITED) {
        uint64_t used = atomic_load_explicit(&c->device->used, memory_order_relaxed);
        uint64_t room = limit > used ? limit - used : 0;
        if (room < cap) cap = room;
    }
    return cap;
}

/* The list of a size, which may be empty; NULL when the size has none. */
struct ready_size *cupool_ready_find(cupool_context_t *c, size_t size)
{
    struct ready_size *rs = NULL;
    HASH_FIND(hh, c->ready_sizes, &size, sizeof size, rs);
    return rs;
}

/* A size whose list empties keeps it, for the next block of that size: a
 * program frees and allocates the same sizes over and over, and removing
 * the list and adding it again cost more than the rest of a reuse.  Past
 * READY_EMPTY_MAX empty lists they all go.  c->lock held. */
#define READY_EMPTY_MAX 256

static void ready_drop_empty(cupool_context_t *c)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    struct ready_size *rs, *tmp;
    HASH_ITER(hh, c->ready_sizes, rs, tmp)
    {
        if (rs->oldest || rs->size == 0) continue; /* the sentinel (ready_put) stays */
        HASH_DEL(c->ready_sizes, rs);
        cupool_give_record(&c->spare_sizes, rs);
    }
    c->ready_empty = 0;
}

/* Takes the oldest block of its size (rs) out of the store.  c->lock held. */
static freed_block_t *ready_pop(cupool_context_t *c, struct ready_size *rs)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    CUPOOL_ASSERT(rs && rs->oldest && c->ready_bytes >= rs->oldest->size);
    freed_block_t *b = rs->oldest;
    rs->oldest = b->next;
    if (!rs->oldest) {
        rs->newest = NULL;
        if (++c->ready_empty > READY_EMPTY_MAX) ready_drop_empty(c);
    }
    if (b->older) b->older->newer = b->newer;
    else CUPOOL_HINT_WRITE(c->ready_oldest, b->newer);
    if (b->newer) b->newer->older = b->older;
    else c->ready_newest = b->older;
    if (b == c->ready_oversize) CUPOOL_HINT_WRITE(c->ready_oversize, NULL);
    CUPOOL_HINT_WRITE(c->ready_bytes, c->ready_bytes - b->size);
    return b;
}

/* Whether the users of a block in the store may still be running: kept by
 * `ordered`, and the context not synchronized since.  c->lock held. */
static int ready_block_busy(const cupool_context_t *c, const freed_block_t *b)
{
    return b->kept > c->kept_done;
}

/* Hands one block, no longer anywhere in cupool's lists, back to its pool,
 * on `stream` once its users are done; c->lock held, c->ctx current.  A
 * block whose users may still run goes back on the order stream (order.c),
 * after them in stream order, as `ordered` frees; but while a capture is
 * in progress, which that would disturb, it waits with the frees held for
 * the capture's end (release_held waits for their users). */
void cupool_release_block(cupool_context_t *c, freed_block_t *b, CUstream stream)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    int legacy = 0, hold = 0;
    if (CUPOOL_UNLIKELY(ready_block_busy(c, b))) {
        legacy = cupool_legacy_enter();
        hold = !legacy;
        stream = atomic_load_explicit(&c->order, memory_order_relaxed);
    }
    if (hold) {
        b->due = b->kept = 0;
        b->next = c->held;
        CUPOOL_HINT_WRITE(c->held, b);
    } else {
        /* The record leaves the origin table first: once the pool has the
         * block, another thread may be handed the same address. */
        cupool_origin_t gone;
        cupool_origin_remove(b->ptr, &gone);
        cupool_give_back(b->ptr, stream);
        cupool_give_record(&c->spare_blocks, b);
        /* The pools' allocated bytes just fell: a share (cupool_deferred_cap)
         * asks anew. */
        atomic_store_explicit(&c->device->pool_used_at_ns, 0, memory_order_relaxed);
    }
    if (legacy) cupool_legacy_leave();
}

/* Hands a list of blocks back to the pool; their users are all done.
 * Returns the bytes released.  c->lock held. */
uint64_t cupool_release_blocks(cupool_context_t *c, freed_block_t *b, CUstream stream)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    uint64_t bytes = 0;
    while (b) {
        freed_block_t *next = b->next;
        bytes += b->size;
        cupool_release_block(c, b, stream);
        b = next;
    }
    return bytes;
}

/* Returns a ready block of b's size (the oldest of that size, which is b
 * or as large) to its pool.  c->lock held. */
void cupool_ready_evict(cupool_context_t *c, const freed_block_t *b, CUstream stream)
{
    cupool_release_block(c, ready_pop(c, cupool_ready_find(c, b->size)), stream);
}

/* A new, empty list for the ready blocks of this size; NULL when out of host
 * memory.  c->lock held. */
static struct ready_size *ready_size_add(cupool_context_t *c, size_t size)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    struct ready_size *rs = cupool_take_record(&c->spare_sizes, sizeof *rs);
    if (!rs) return NULL;
    memset(rs, 0, sizeof *rs);
    rs->size = size;
    HASH_ADD(hh, c->ready_sizes, size, sizeof rs->size, rs);
    if (rs->hh.tbl) return rs;
    cupool_give_record(&c->spare_sizes, rs); /* uthash could not grow its table */
    return NULL;
}

/* Keeps a block whose users are all done for the next allocation of its
 * size, or hands it back to its pool when the store cannot take it.
 * c->lock held. */
void cupool_ready_put(cupool_context_t *c, freed_block_t *b, uint64_t fenced_ns, CUstream stream)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    CUPOOL_ASSERT(b && b->size > 0);
    struct ready_size *rs = cupool_ready_find(c, b->size);
    if (rs && !rs->oldest) c->ready_empty--;
    /* A sentinel of size 0 (no allocation has that size) keeps the table
     * from emptying: uthash would free its buckets with the last size and
     * allocate them again with the next. */
    if (!rs && !c->ready_sizes) ready_size_add(c, 0);
    if (!rs && c->ready_sizes) rs = ready_size_add(c, b->size);
    if (!rs) {
        cupool_release_block(c, b, stream);
        return;
    }
    b->next = NULL;
    if (rs->newest) rs->newest->next = b;
    else rs->oldest = b;
    rs->newest = b;
    b->fenced_ns = fenced_ns;
    b->newer = NULL;
    b->older = c->ready_newest;
    if (c->ready_newest) c->ready_newest->newer = b;
    else CUPOOL_HINT_WRITE(c->ready_oldest, b);
    c->ready_newest = b;
    CUPOOL_HINT_WRITE(c->ready_bytes, c->ready_bytes + b->size);
}

CUPOOL_THREAD_LOCAL unsigned long cupool_store_takes;

/* Hands the oldest block of its size (rs, not empty) to an allocation, in
 * `deferred` or `ordered`, and counts it.  c->lock held. */
CUdeviceptr cupool_ready_take_oldest(cupool_context_t *c, struct ready_size *rs)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    freed_block_t *b = ready_pop(c, rs);
    CUdeviceptr ptr = b->ptr;
    cupool_give_record(&c->spare_blocks, b);
    atomic_fetch_add_explicit(&cupool_stats_for(c->ordinal)->ready_reuses, 1, memory_order_relaxed);
    cupool_store_takes++;
    return ptr;
}

/* Takes a ready block of exactly this size for `deferred`; 0 when there is
 * none.  A block freed in `ordered` serves only once the context has
 * synchronized since its free (the move out of `ordered` does).
 * c->lock held. */
CUdeviceptr cupool_ready_take(cupool_context_t *c, size_t size)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    struct ready_size *rs = c->ready_oldest ? cupool_ready_find(c, size) : NULL;
    if (!rs || !rs->oldest || ready_block_busy(c, rs->oldest)) return 0;
    return cupool_ready_take_oldest(c, rs);
}

/* Returns to the pools what the store should no longer keep: past its cap
 * (0: everything; the block kept though larger than the store does not
 * count against any other) or its age.  c->lock held. */
void cupool_ready_trim(cupool_context_t *c, uint64_t cap, uint64_t now_ns, CUstream stream)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    for (;;) {
        uint64_t counted = c->ready_bytes - (cap && c->ready_oversize ? c->ready_oversize->size : 0);
        if (!c->ready_oldest || (counted <= cap && now_ns <= c->ready_oldest->fenced_ns + READY_MAX_AGE_NS)) return;
        cupool_ready_evict(c, c->ready_oldest, stream);
    }
}

/* An allocation of `size` the store has no block for: its blocks are
 * memory the pool cannot give to it, so the pool would reserve more while
 * they wait for sizes that may not come again (without this, PyTorch
 * inference over changing shapes peaks at twice the caching allocator's
 * memory: docs/DESIGN.md, "Measured costs behind the code").  The oldest
 * go back on `stream` (on the legacy stream while their users may still
 * run), where the allocation follows them, so the pool can hand their
 * memory straight on.  c->lock held. */
void cupool_ready_make_room(cupool_context_t *c, size_t size, CUstream stream)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    if (size < MISS_GIVES_BACK || !c->ready_oldest) return;
    uint64_t back = 0;
    while (back < size && c->ready_oldest) {
        /* The block larger than the store first: most room, one call. */
        const freed_block_t *b = c->ready_oversize ? c->ready_oversize : c->ready_oldest;
        back += b->size;
        cupool_ready_evict(c, b, stream);
    }
    cupool_device_stats_t *st = cupool_stats_for(c->ordinal);
    atomic_fetch_add_explicit(&st->misses_given_back, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&st->given_back_bytes, back, memory_order_relaxed);
}

void cupool_ready_return_all(cupool_context_t *c)
{
    CUPOOL_ASSERT_NOT_HELD(&c->lock);
    if (!CUPOOL_HINT_READ(c->ready_oldest)) return;
    int pushed = cupool_enter_context(c->ctx);
    pthread_mutex_lock(&c->lock);
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    while (c->ready_oldest) cupool_ready_evict(c, c->ready_oldest, c->private_stream);
    cupool_relaxed_end(previous);
    pthread_mutex_unlock(&c->lock);
    cupool_leave_context(pushed);
}

/* ---- a context's teardown ------------------------------------------------- */

static void free_records(cupool_spare_list_t *list)
{
    while (list->head) {
        void *record = list->head;
        list->head = *(void **)record;
        free(record);
    }
    list->count = 0;
}

void cupool_ready_drop_records(cupool_context_t *c)
{
    /* The ready store holds its sentinel and empty lists alone by now,
     * unless the context's blocks could not be handed back (they died with
     * it). */
    for (freed_block_t *b = c->ready_oldest, *newer; b; b = newer) {
        newer = b->newer;
        free(b);
    }
    CUPOOL_HINT_WRITE(c->ready_oldest, NULL);
    c->ready_newest = NULL;
    CUPOOL_HINT_WRITE(c->ready_bytes, 0);
    struct ready_size *rs, *tmp;
    HASH_ITER(hh, c->ready_sizes, rs, tmp)
    {
        HASH_DEL(c->ready_sizes, rs);
        free(rs);
    }
    c->ready_empty = 0;
    free_records(&c->spare_blocks);
    free_records(&c->spare_batches);
    free_records(&c->spare_sizes);
}

/* ---- handing a block back, to its pool or to the program --------------------- */

void cupool_warn_give_back(CUdeviceptr ptr, CUresult r)
{
    cupool_message(CUPOOL_MSG_WARN, "returning block 0x%llx to its pool failed: %s", (unsigned long long)ptr,
                   cupool_result_name(r));
}

/* Returns one block, no longer in the origin table, to its pool. */
CUresult cupool_give_back(CUdeviceptr ptr, CUstream stream)
{
    CUresult r = real_cuMemFreeAsync(ptr, stream);
    if (r != CUDA_SUCCESS) cupool_warn_give_back(ptr, r);
    return r;
}

/* A free that could not be carried out: the block stays the program's, as
 * it would after a native cuMemFree that failed, and its record says so. */
CUresult cupool_restore_block(const cupool_origin_t *o, CUresult r)
{
    cupool_origin_t gone, back = *o;
    cupool_origin_remove(o->ptr, &gone);
    back.freed = 0;
    back.exported = 0;
    cupool_origin_insert(&back);
    return r;
}
