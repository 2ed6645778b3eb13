/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The free store, private to the files of engine/free/ (the rest of the
 * engine sees free.h): the records of freed blocks not yet back in their
 * pools (a block, the ready blocks of one size, a batch of `deferred` frees
 * behind one fence), the spare lists that keep those records for reuse,
 * and what the free files call of each other, file by file in the order a
 * free reads them: the frees made now (free_modes.c), `ordered`'s keep
 * (ordered_keep.c), `deferred`'s queue (deferred_fence.c) and the ready
 * store (ready_store.c) they all hand their blocks to.  Every function
 * here is called with c->lock held unless it says otherwise.
 */
#ifndef CUPOOL_FREE_STORE_H
#define CUPOOL_FREE_STORE_H

#include "free.h"

#include <stdlib.h>

/* A block the ready store cannot index (no host memory for uthash's
 * buckets) goes back to its pool instead: never uthash's exit(). */
#define HASH_NONFATAL_OOM 1
#define HASH_FUNCTION CUPOOL_WORD_HASH
#include <uthash.h>

/* A freed block not yet back in its pool: `deferred`'s (waiting for its
 * fence, or held during a capture) or `ordered`'s (kept for reuse), and
 * in the ready store either's. */
struct freed_block {
    CUdeviceptr ptr;
    size_t size;
    freed_block_t *next;               /* in its pending, batch or held list, or its size's ready list */
    freed_block_t *older, *newer;      /* ready: the context's ready blocks, oldest first */
    uint64_t fenced_ns;                   /* ready: when its batch's fence was recorded (ordered: its free) */
    uint64_t due;                         /* ready, kept by `ordered`: the count of c->fences from which it may
                                             serve (see "ordered reuse"); 0 otherwise */
    uint64_t kept;                        /* ready, kept by `ordered`: its number in c->kept; 0 otherwise (its
                                             users are done) */
};

/* The ready blocks of one size, oldest first. */
struct ready_size {
    size_t size;
    freed_block_t *oldest, *newest;
    UT_hash_handle hh;
};

/* Blocks freed before one fence was set: with CUPOOL_DEFERRED_ORDER=gpu
 * back in their pools already, their frees ordered on the GPU behind the
 * fence (blocks NULL), and counted until it has completed; with `host` held
 * here and handed on together once it has completed. */
struct deferred_batch {
    freed_block_t *blocks;
    deferred_batch_t *next;
    uint64_t bytes;                       /* of its blocks, counted in c->deferred_bytes */
    CUevent fence;                        /* after all the work of the context (record_fence) */
    uint64_t fenced_ns;                   /* when it was recorded */
};

/* The records of blocks and batches are kept for reuse (up to SPARE_MAX
 * of each per context, under c->lock): a deferred free in steady state then
 * makes no host allocation.  A record on a spare list is dead but for the
 * link in its first bytes. */
#define SPARE_MAX 1024

static inline void *cupool_take_record(cupool_spare_list_t *list, size_t size)
{
    void *record = list->head;
    CUPOOL_ASSERT((record != NULL) == (list->count > 0));
    if (!record) return malloc(size);
    list->head = *(void **)record;
    list->count--;
    return record;
}

static inline void cupool_give_record(cupool_spare_list_t *list, void *record)
{
    CUPOOL_ASSERT(record && list->count >= 0 && list->count <= SPARE_MAX);
    if (list->count == SPARE_MAX) {
        free(record);
        return;
    }
    *(void **)record = list->head;
    list->head = record;
    list->count++;
}


/* A miss of at least this size makes the store hand back its oldest
 * blocks, as many bytes as the allocation asks, before the pool serves it.
 * Smaller requests fit in granules the pool already holds and would only
 * cost the store its blocks. */
#define MISS_GIVES_BACK (1ull << 20)

/* Whether `deferred` frees go back to their pools at once, ordered on the
 * GPU behind their fences (CUPOOL_DEFERRED_ORDER=gpu, deferred_fence.c),
 * rather than held until the fences have completed (`host`): read by the
 * fences and by the ready store's cap, below them. */
static inline int cupool_deferred_on_gpu(void)
{
    return cupool_option_started(CUPOOL_OPT_DEFERRED_ORDER) == CUPOOL_DEFERRED_GPU;
}

/* ---- free_modes.c ------------------------------------------------------------ */

/* A free the driver refused: warns, and the block stays the program's; or
 * (r CUPOOL_CAPTURE_IN_PROGRESS) held until the capture has ended (no lock
 * needed). */
CUresult cupool_free_failed(const cupool_origin_t *o, CUresult r);
/* The free of `sync` (the block's context current, no capture in
 * progress): the context synchronized, then the block on the legacy
 * stream; a refused free leaves the block the program's (no lock needed). */
CUresult cupool_free_sync(const cupool_origin_t *o);

/* ---- ordered_keep.c --------------------------------------------------------- */

/* Whether `ordered` keeps a freed block of this size for reuse: every size
 * with the store on (CUPOOL_ORDERED_READY not 0), one larger than the store
 * alone and only until the next free (cupool_ordered_keep); not above
 * CUPOOL_RELEASE_THRESHOLD, nor above the store under CUPOOL_LIMIT. */
static inline int cupool_ordered_keeps(size_t size)
{
    return size <= cupool_hot.ordered_keep_max;
}
/* An `ordered` free kept for reuse (no capture in progress, c->ctx current,
 * c->lock not held): 1 when the store took the block; 0 when it did not,
 * and the block is still in the origin table, for the caller to free. */
int cupool_ordered_keep(cupool_context_t *c, const cupool_origin_t *o);

/* ---- deferred_fence.c ------------------------------------------------------- */

/* Whether `deferred`'s fences are one context-wide event (decided once). */
int cupool_context_fences(void);
/* Queues a `deferred` free behind a fence; cupool_defer_held holds it
 * until the capture in progress has ended (any mode).  c->lock not held. */
CUresult cupool_defer(cupool_context_t *c, const cupool_origin_t *o);
CUresult cupool_defer_held(cupool_context_t *c, const cupool_origin_t *o);

/* ---- ready_store.c ----------------------------------------------------------- */

/* What option `id` (CUPOOL_DEFERRED_READY, CUPOOL_DEFERRED_WAIT) allows
 * the context to hold now: bytes, or a share of those in use. */
uint64_t cupool_deferred_cap(cupool_context_t *c, enum cupool_option id);
/* The most the store keeps now (see ready_store.c). */
uint64_t cupool_ready_cap(cupool_context_t *c);
/* The list of a size, which may be empty; NULL when the size has none. */
struct ready_size *cupool_ready_find(cupool_context_t *c, size_t size);
/* Hands one block, no longer anywhere in cupool's lists, back to its pool
 * (on the legacy stream while its users may still run). */
void cupool_release_block(cupool_context_t *c, freed_block_t *b, CUstream stream);
/* Hands a list of blocks back to the pool; returns the bytes released. */
uint64_t cupool_release_blocks(cupool_context_t *c, freed_block_t *b, CUstream stream);
/* Returns a ready block of b's size (the oldest of that size) to its pool. */
void cupool_ready_evict(cupool_context_t *c, const freed_block_t *b, CUstream stream);
/* Keeps a block whose users are all done for the next allocation of its
 * size, or hands it back to its pool when the store cannot take it. */
void cupool_ready_put(cupool_context_t *c, freed_block_t *b, uint64_t fenced_ns, CUstream stream);
/* Hands the oldest block of its size (rs, not empty) to an allocation. */
CUdeviceptr cupool_ready_take_oldest(cupool_context_t *c, struct ready_size *rs);
/* A ready block of exactly this size for `deferred`; 0 when there is none. */
CUdeviceptr cupool_ready_take(cupool_context_t *c, size_t size);
/* Returns to the pools what the store should no longer keep: past its cap
 * or its age. */
void cupool_ready_trim(cupool_context_t *c, uint64_t cap, uint64_t now_ns, CUstream stream);
/* An allocation of `size` the store has no block for: hands back its oldest
 * blocks, as many bytes as the allocation asks, when size >= MISS_GIVES_BACK. */
void cupool_ready_make_room(cupool_context_t *c, size_t size, CUstream stream);
/* Returns one block, no longer in the origin table, to its pool (no lock
 * needed); a failure is warned about. */
CUresult cupool_give_back(CUdeviceptr ptr, CUstream stream);
void cupool_warn_give_back(CUdeviceptr ptr, CUresult r);
/* A free that could not be carried out: the block stays the program's
 * (no lock needed). */
CUresult cupool_restore_block(const cupool_origin_t *o, CUresult r);

#endif
