/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kept store (kept_store.h): pinned host and managed blocks the driver
 * allocated for the program, tracked while in use and kept, once freed, for
 * the next allocation of their call, flags, size and context.  One lock
 * guards it all; it is taken before cupool_registry_lock (contexts.c) and
 * a context's lock, never after, so that a context's teardown (which takes
 * it) cannot be interleaved with a free that records fences in that
 * context.
 */
#include "free/free.h"

#include <stdlib.h>
#include <string.h>

/* A block the store cannot index (no host memory for uthash's buckets)
 * goes to the driver's free instead: never uthash's exit(). */
#define HASH_NONFATAL_OOM 1
#define HASH_FUNCTION CUPOOL_WORD_HASH
#include <uthash.h>

/* A free records a fence in every context cupool knows: past this many,
 * the block goes back to the driver instead (whose free waits for the
 * whole device). */
#define KEPT_FENCES 8

/* What an allocation must match to take a kept block; the size first, as
 * the table's hash reads the first word.  Zeroed before it is filled: the
 * table compares its bytes, padding included. */
typedef struct {
    size_t size;
    cupool_context_t *owner;  /* the context current at its allocation: the memory is that context's */
    int kind;                 /* enum cupool_kept_kind */
    unsigned flags;
} kept_id_t;

/* A block the driver allocated for the program, in use or kept. */
typedef struct tracked {
    uintptr_t ptr;
    kept_id_t id;
    int touched;              /* managed: given advice or attached to a stream */
    int kept;                 /* freed by the program, in the store */
    UT_hash_handle hh;
} tracked_t;

typedef struct kept_block kept_block_t;

/* The kept blocks of one id, oldest first. */
typedef struct kept_key {
    kept_id_t id;
    kept_block_t *oldest, *newest;
    UT_hash_handle hh;
} kept_key_t;

/* A freed block waiting for the next allocation of its id. */
struct kept_block {
    tracked_t *t;                 /* its record: pointer, id, and that it is kept */
    kept_block_t *next;           /* in its key's list */
    kept_block_t *older, *newer;  /* in its class's list, oldest first */
    int nfences;                  /* fences not yet seen complete */
    struct {
        cupool_context_t *c;
        CUevent ev;
    } fences[KEPT_FENCES];
};

static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;
static tracked_t *tracked;
static kept_key_t *keys;
/* Per class (enum cupool_kept_class), the kept blocks oldest first. */
static kept_block_t *oldest[CUPOOL_KEPT_CLASSES], *newest[CUPOOL_KEPT_CLASSES];
/* Kept blocks advice reached during a capture, to be freed by the driver
 * when their key is next asked for: the kept blocks whose record is marked
 * touched (a block is kept only untouched, and served again untouched). */
static size_t marked;

static enum cupool_kept_class class_of(int kind)
{
    return kind == CUPOOL_KEPT_MANAGED ? CUPOOL_KEPT_CLASS_MANAGED : CUPOOL_KEPT_CLASS_HOST;
}

static cupool_kept_stats_t *stats_of(enum cupool_kept_class cls)
{
    return &cupool_kept_stats[cls];
}

static void count(atomic_ullong *counter)
{
    atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
}

/* The bytes a class keeps: its statistics counter, written under kept_lock. */
static uint64_t kept_bytes(enum cupool_kept_class cls)
{
    return atomic_load_explicit(&stats_of(cls)->kept_bytes, memory_order_relaxed);
}

static void add_kept_bytes(enum cupool_kept_class cls, int64_t delta)
{
    cupool_kept_stats_t *s = stats_of(cls);
    uint64_t bytes = kept_bytes(cls) + (uint64_t)delta;
    atomic_store_explicit(&s->kept_bytes, bytes, memory_order_relaxed);
    if (bytes > atomic_load_explicit(&s->peak_kept, memory_order_relaxed))
        atomic_store_explicit(&s->peak_kept, bytes, memory_order_relaxed);
}

int cupool_kept_serves(enum cupool_kept_kind kind)
{
    if (!cupool_active() || cupool_option_started(CUPOOL_OPT_POLICY) == CUPOOL_POLICY_OFF) return 0;
    return cupool_option_started(class_of(kind) == CUPOOL_KEPT_CLASS_HOST ? CUPOOL_OPT_HOST : CUPOOL_OPT_MANAGED) != 0;
}

/* The driver's free of a block, in the context that allocated it. */
static CUresult driver_free(const tracked_t *t)
{
    int pushed = cupool_enter_context(t->id.owner->ctx);
    CUresult r = class_of(t->id.kind) == CUPOOL_KEPT_CLASS_HOST ? real_cuMemFreeHost((void *)t->ptr)
                                                                 : real_cuMemFree_v2((CUdeviceptr)t->ptr);
    cupool_leave_context(pushed);
    return r;
}

static tracked_t *find_tracked(uintptr_t ptr)
{
    CUPOOL_ASSERT_HELD(&kept_lock);
    tracked_t *t = NULL;
    if (tracked) HASH_FIND(hh, tracked, &ptr, sizeof ptr, t);
    return t;
}

static void untrack(tracked_t *t)
{
    CUPOOL_ASSERT_HELD(&kept_lock);
    HASH_DEL(tracked, t);
    free(t);
}

/* ---- kept blocks (kept_lock held) --------------------------------------------- */

static int fences_passed(kept_block_t *b)
{
    CUPOOL_ASSERT_HELD(&kept_lock);
    while (b->nfences > 0) {
        int i = b->nfences - 1;
        if (!cupool_fence_passed(b->fences[i].c, b->fences[i].ev, 0)) return 0;
        b->nfences = i;
    }
    return 1;
}

static void forget_fences(kept_block_t *b)
{
    CUPOOL_ASSERT_HELD(&kept_lock);
    for (int i = 0; i < b->nfences; i++) cupool_fence_forget(b->fences[i].c, b->fences[i].ev);
    b->nfences = 0;
}

static kept_key_t *find_key(const kept_id_t *id)
{
    CUPOOL_ASSERT_HELD(&kept_lock);
    kept_key_t *key = NULL;
    HASH_FIND(hh, keys, id, sizeof *id, key);
    return key;
}

/* Takes b out of the store: out of its key's list (short: blocks of one
 * size, flags and context) and its class's. */
static void unlink_block(kept_block_t *b)
{
    CUPOOL_ASSERT_HELD(&kept_lock);
    const kept_id_t *id = &b->t->id;
    enum cupool_kept_class cls = class_of(id->kind);
    kept_key_t *key = find_key(id);
    kept_block_t **p = &key->oldest, *before = NULL;
    for (; *p != b; p = &(*p)->next) before = *p;
    *p = b->next;
    if (key->newest == b) key->newest = before;
    if (!key->oldest) {
        HASH_DEL(keys, key);
        free(key);
    }
    if (b->older) b->older->newer = b->newer;
    else oldest[cls] = b->newer;
    if (b->newer) b->newer->older = b->older;
    else newest[cls] = b->older;
    add_kept_bytes(cls, -(int64_t)id->size);
}

/* Adds b (its fences recorded) as the newest of its key and class; 0 when
 * there is no host memory for its key. */
static int link_newest(kept_block_t *b)
{
    CUPOOL_ASSERT_HELD(&kept_lock);
    const kept_id_t *id = &b->t->id;
    kept_key_t *key = find_key(id);
    if (!key) {
        if (!(key = calloc(1, sizeof *key))) return 0;
        key->id = *id;
        HASH_ADD(hh, keys, id, sizeof key->id, key);
        if (!key->hh.tbl) { /* uthash could not grow its table */
            free(key);
            return 0;
        }
    }
    enum cupool_kept_class cls = class_of(id->kind);
    b->next = NULL;
    if (key->oldest) key->newest->next = b;
    else key->oldest = b;
    key->newest = b;
    b->newer = NULL;
    b->older = newest[cls];
    if (newest[cls]) newest[cls]->newer = b;
    else oldest[cls] = b;
    newest[cls] = b;
    add_kept_bytes(cls, (int64_t)id->size);
    return 1;
}

/* Takes a kept block out of the store and out of cupool's records; the
 * driver frees it unless its context is already gone (and its memory with
 * it). */
static void drop_block(kept_block_t *b, enum cupool_context_end end)
{
    CUPOOL_ASSERT_HELD(&kept_lock);
    if (b->t->touched) marked--;
    unlink_block(b);
    forget_fences(b);
    if (end == CUPOOL_CONTEXT_ALIVE) driver_free(b->t);
    untrack(b->t);
    free(b);
}

/* ---- allocation ----------------------------------------------------------- */

static int track(uintptr_t ptr, const kept_id_t *id)
{
    CUPOOL_ASSERT_HELD(&kept_lock);
    tracked_t *t = malloc(sizeof *t);
    if (!t) return 0;
    *t = (tracked_t){.ptr = ptr, .id = *id};
    HASH_ADD(hh, tracked, ptr, sizeof t->ptr, t);
    if (t->hh.tbl) return 1;
    free(t);
    return 0;
}

/* The oldest kept block of the id whose fences have all completed, taken
 * out of the store and in use again; 0 when there is none. */
static uintptr_t take_kept(const kept_id_t *id)
{
    CUPOOL_ASSERT_HELD(&kept_lock);
    kept_key_t *key = find_key(id);
    /* Blocks of the key advice reached during a capture
     * (cupool_kept_mark_touched): the driver frees them now, no capture
     * being in progress. */
    int dropped = 0;
    for (kept_block_t *b = marked && key ? key->oldest : NULL, *next; b; b = next) {
        next = b->next;
        if (!b->t->touched) continue;
        count(&stats_of(class_of(id->kind))->advice_frees);
        drop_block(b, CUPOOL_CONTEXT_ALIVE);
        dropped = 1;
    }
    if (dropped) key = find_key(id);
    if (!key || !fences_passed(key->oldest)) return 0;
    kept_block_t *b = key->oldest;
    tracked_t *t = b->t;
    t->kept = t->touched = 0;
    unlink_block(b);
    free(b);
    return t->ptr;
}

CUresult cupool_kept_alloc(enum cupool_kept_kind kind, cupool_kept_driver_alloc_fn *driver, uintptr_t *ptr,
                           size_t size, unsigned flags, int *route)
{
    CUPOOL_ASSERT_NOT_HELD(&kept_lock);
    *route = CUPOOL_ROUTE_NATIVE;
    cupool_context_t *c = ptr && size ? cupool_current_context() : NULL;
    if (!c) return driver(ptr, size, flags);
    kept_id_t id;
    memset(&id, 0, sizeof id);
    id.size = size;
    id.owner = c;
    id.kind = kind;
    id.flags = flags;
    enum cupool_kept_class cls = class_of(kind);
    cupool_kept_stats_t *s = stats_of(cls);

    pthread_mutex_lock(&kept_lock);
    uintptr_t kept = take_kept(&id);
    pthread_mutex_unlock(&kept_lock);
    if (kept) {
        *ptr = kept;
        *route = CUPOOL_ROUTE_POOL;
        count(&s->allocs);
        count(&s->reused);
        return CUDA_SUCCESS;
    }
    CUresult r = driver(ptr, size, flags);
    if (r == CUDA_ERROR_OUT_OF_MEMORY && kept_bytes(cls)) {
        cupool_kept_release(cls);
        r = driver(ptr, size, flags);
    }
    if (r != CUDA_SUCCESS) return r;
    pthread_mutex_lock(&kept_lock);
    /* Without a record the free goes to the driver: nothing is lost. */
    if (track(*ptr, &id)) count(&s->allocs);
    pthread_mutex_unlock(&kept_lock);
    return r;
}

/* ---- free ------------------------------------------------------------------ */

static int record_fence(cupool_context_t *c, void *arg)
{
    kept_block_t *b = arg;
    if (b->nfences == KEPT_FENCES) return 1;
    CUevent ev;
    if (cupool_fence_record(c, &ev) != CUDA_SUCCESS) return 1;
    b->fences[b->nfences].c = c;
    b->fences[b->nfences].ev = ev;
    b->nfences++;
    return 0;
}

/* Keeps a block the program freed; 0 when it cannot (then the caller has
 * the driver free it).  kept_lock held. */
static int keep(tracked_t *t)
{
    CUPOOL_ASSERT_HELD(&kept_lock);
    enum cupool_kept_class cls = class_of(t->id.kind);
    uint64_t limit = cupool_option_started(cls == CUPOOL_KEPT_CLASS_HOST ? CUPOOL_OPT_HOST_KEEP : CUPOOL_OPT_MANAGED_KEEP);
    if (t->id.size > limit) return 0;
    kept_block_t *b = malloc(sizeof *b);
    if (!b) return 0;
    b->t = t;
    b->nfences = 0;
    /* The context freeing it is among those fenced, even if it allocated
     * nothing through cupool before.  A fence that cannot be set (a
     * capture in progress, too many contexts, no event) leaves the block to
     * the driver's free, which waits for the device. */
    cupool_current_context();
    if (cupool_each_context(record_fence, b) != 0 || !link_newest(b)) {
        forget_fences(b);
        free(b);
        return 0;
    }
    t->kept = 1;
    while (kept_bytes(cls) > limit) {
        count(&stats_of(cls)->limit_frees);
        drop_block(oldest[cls], CUPOOL_CONTEXT_ALIVE);
    }
    return 1;
}

int cupool_kept_free(enum cupool_kept_class cls, uintptr_t ptr, size_t *size, unsigned *flags, int *route,
                     CUresult *result)
{
    if (!ptr || !cupool_active()) return 0;
    pthread_mutex_lock(&kept_lock);
    tracked_t *t = find_tracked(ptr);
    /* cuMemFreeHost of managed memory, or cuMemFree of pinned host memory:
     * the driver's answer. */
    if (!t || class_of(t->id.kind) != cls) {
        pthread_mutex_unlock(&kept_lock);
        return 0;
    }
    *size = t->id.size;
    *flags = t->id.flags;
    *route = CUPOOL_ROUTE_NATIVE;
    /* A second free: what the driver answers for memory no longer
     * allocated, without reaching it (it would free the kept block). */
    if (t->kept) {
        pthread_mutex_unlock(&kept_lock);
        *result = CUDA_ERROR_INVALID_VALUE;
        return 1;
    }
    cupool_kept_stats_t *s = stats_of(cls);
    count(&s->frees);
    if (!t->touched && keep(t)) {
        count(&s->kept_frees);
        *route = CUPOOL_ROUTE_POOL;
        *result = CUDA_SUCCESS;
    } else {
        *result = driver_free(t);
        untrack(t);
    }
    pthread_mutex_unlock(&kept_lock);
    return 1;
}

/* Widens [*lo, *hi) to the driver's mapping of the byte at `at`, when it
 * names one (then 1). */
static int widen_to_mapping(uintptr_t at, uintptr_t *lo, uintptr_t *hi)
{
    CUdeviceptr base = 0;
    size_t size = 0;
    if (real_cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, (CUdeviceptr)at) != CUDA_SUCCESS ||
        real_cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, (CUdeviceptr)at) != CUDA_SUCCESS ||
        !base || !size)
        return 0;
    if ((uintptr_t)base < *lo) *lo = (uintptr_t)base;
    if ((uintptr_t)base + size > *hi) *hi = (uintptr_t)base + size;
    return 1;
}

static int meets(const tracked_t *t, uintptr_t lo, uintptr_t hi)
{
    return t->id.kind == CUPOOL_KEPT_MANAGED && lo < t->ptr + t->id.size && t->ptr < hi;
}

/* Advice lives in the pages, and the driver places small managed blocks
 * side by side in shared mappings (2 MiB, measured): advice on one block
 * can reach the pages of the blocks beside it, and stays in a page until
 * no block uses it.  So every managed block in the mappings the range
 * meets counts as touched: one in use is not kept at its free, a kept one
 * goes back to the driver now, so that no allocation gets advice it was
 * not given and the pages are released as they would be natively.  While
 * a stream capture is in progress the driver's free would break it: a
 * kept block is then only marked, and freed when its key is next asked
 * for (take_kept). */
void cupool_kept_mark_touched(uintptr_t ptr, size_t size)
{
    /* No managed block is tracked then: no driver query is owed. */
    if (!cupool_kept_serves(CUPOOL_KEPT_MANAGED)) return;
    uintptr_t lo = ptr, hi = ptr + (size ? size : 1);
    int found = widen_to_mapping(ptr, &lo, &hi);
    /* The last byte's mapping too, unless the first's holds it. */
    if (size > 1 && (!found || ptr + size - 1 >= hi)) widen_to_mapping(ptr + size - 1, &lo, &hi);
    int capturing = cupool_capturing();
    pthread_mutex_lock(&kept_lock);
    for (kept_block_t *b = oldest[CUPOOL_KEPT_CLASS_MANAGED], *newer; b; b = newer) {
        newer = b->newer;
        if (!meets(b->t, lo, hi)) continue;
        if (capturing) {
            marked += !b->t->touched;
            b->t->touched = 1;
            continue;
        }
        count(&stats_of(CUPOOL_KEPT_CLASS_MANAGED)->advice_frees);
        drop_block(b, CUPOOL_CONTEXT_ALIVE);
    }
    for (tracked_t *t = tracked; t; t = t->hh.next)
        if (meets(t, lo, hi)) t->touched = 1;
    pthread_mutex_unlock(&kept_lock);
}

void cupool_kept_release(enum cupool_kept_class cls)
{
    pthread_mutex_lock(&kept_lock);
    while (oldest[cls]) {
        count(&stats_of(cls)->oom_frees);
        drop_block(oldest[cls], CUPOOL_CONTEXT_ALIVE);
    }
    pthread_mutex_unlock(&kept_lock);
}

/* ---- contexts and fork ----------------------------------------------------- */

/* A context is being destroyed (current, synchronized: alive), or is
 * already gone with its memory and events: its kept blocks go back to the
 * driver (unless gone), its tracked ones are forgotten, its fences in other
 * blocks count as completed.  Called at its teardown (cupool_teardown_fn). */
static void forget_context(cupool_context_t *c, enum cupool_context_end end)
{
    pthread_mutex_lock(&kept_lock);
    for (int cls = 0; cls < CUPOOL_KEPT_CLASSES; cls++) {
        for (kept_block_t *b = oldest[cls], *newer; b; b = newer) {
            newer = b->newer;
            /* The context's fences in other blocks: its work is done. */
            for (int i = 0; i < b->nfences; i++) {
                if (b->fences[i].c != c) continue;
                if (end == CUPOOL_CONTEXT_ALIVE) cupool_fence_forget(c, b->fences[i].ev);
                b->fences[i--] = b->fences[--b->nfences];
            }
            /* Natively the context's memory goes with it. */
            if (b->t->id.owner == c) drop_block(b, end);
        }
    }
    /* Its blocks in use. */
    tracked_t *t, *tmp;
    HASH_ITER(hh, tracked, t, tmp) {
        if (t->id.owner == c) untrack(t);
    }
    pthread_mutex_unlock(&kept_lock);
}

static void fork_prepare(void)
{
    pthread_mutex_lock(&kept_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&kept_lock);
}

/* The child passes everything through (cupool_stop): it forgets the
 * parent's blocks, whose contexts are not its own. */
static void fork_child(void)
{
    tracked_t *t, *tmp;
    HASH_ITER(hh, tracked, t, tmp) {
        untrack(t);
    }
    kept_key_t *key, *ktmp;
    HASH_ITER(hh, keys, key, ktmp) {
        HASH_DEL(keys, key);
        free(key);
    }
    for (int cls = 0; cls < CUPOOL_KEPT_CLASSES; cls++) {
        for (kept_block_t *b = oldest[cls], *newer; b; b = newer) {
            newer = b->newer;
            free(b);
        }
        oldest[cls] = newest[cls] = NULL;
        atomic_store_explicit(&stats_of(cls)->kept_bytes, 0, memory_order_relaxed);
    }
    marked = 0;
    pthread_mutex_init(&kept_lock, NULL);
}

void cupool_kept_start(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    cupool_context_on_teardown(forget_context);
}
