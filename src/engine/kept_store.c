/*
 * The kept store (kept_store.h): pinned host and managed blocks the driver
 * allocated for the program, tracked while in use and kept, once freed, for
 * the next allocation of their call, flags, size and context.  One lock
 * guards it all; it is taken before registry_lock and a context's lock,
 * never after, so that a context's teardown (which takes it) cannot be
 * interleaved with a free that records fences in that context.
 */
#include "engine.h"
#include "free_store.h"

#include <string.h>

/* A free records a fence in every context cupool knows: past this many,
 * the block goes back to the driver instead (whose free waits for the
 * whole device). */
#define KEPT_FENCES 8

/* A block the driver allocated for the program, in use or kept. */
typedef struct tracked {
    uintptr_t ptr;
    size_t size;
    unsigned flags;
    int kind;                 /* enum cupool_kept_kind */
    int touched;              /* managed: given advice or attached to a stream */
    int kept;                 /* freed by the program, in the store */
    cupool_context_t *owner;  /* the context current at its allocation: the memory is that context's */
    UT_hash_handle hh;
} tracked_t;

/* What an allocation must match to take a kept block; the size first, as
 * the table's hash reads the first word. */
typedef struct {
    size_t size;
    cupool_context_t *owner;
    int kind;
    unsigned flags;
} kept_id_t;

typedef struct kept_block kept_block_t;

/* The kept blocks of one id, oldest first. */
typedef struct kept_key {
    kept_id_t id;
    kept_block_t *oldest, *newest;
    UT_hash_handle hh;
} kept_key_t;

/* A freed block waiting for the next allocation of its id. */
struct kept_block {
    uintptr_t ptr;
    kept_id_t id;
    tracked_t *t;                 /* its record, which says it is kept */
    kept_block_t *next;           /* in its key's list */
    kept_block_t *older, *newer;  /* in its class's list (pinned host, managed), oldest first */
    int nfences;                  /* fences not yet seen complete */
    struct {
        cupool_context_t *c;
        CUevent ev;
    } fences[KEPT_FENCES];
};

static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;
static tracked_t *tracked;
static kept_key_t *keys;
/* Per class (1: pinned host, 0: managed), the kept blocks oldest first. */
static kept_block_t *oldest[2], *newest[2];
static uint64_t kept_bytes[2];

static int is_host(int kind)
{
    return kind != CUPOOL_KEPT_MANAGED;
}

static cupool_kept_stats_t *stats_of(int host)
{
    return &cupool_kept_stats[host ? CUPOOL_KEPT_STATS_HOST : CUPOOL_KEPT_STATS_MANAGED];
}

static void count(atomic_ullong *counter)
{
    atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
}

static void set_kept_bytes(int host, uint64_t bytes)
{
    kept_bytes[host] = bytes;
    cupool_kept_stats_t *s = stats_of(host);
    atomic_store_explicit(&s->kept_bytes, bytes, memory_order_relaxed);
    if (bytes > atomic_load_explicit(&s->peak_kept, memory_order_relaxed))
        atomic_store_explicit(&s->peak_kept, bytes, memory_order_relaxed);
}

int cupool_kept_serves(enum cupool_kept_kind kind)
{
    if (!cupool_active() || cupool_option_started(CUPOOL_OPT_POLICY) == CUPOOL_POLICY_OFF) return 0;
    return cupool_option_started(is_host(kind) ? CUPOOL_OPT_HOST : CUPOOL_OPT_MANAGED) != 0;
}

/* The driver's free of a block, in the context that allocated it. */
static CUresult driver_free(int kind, uintptr_t ptr, cupool_context_t *owner)
{
    int pushed = owner ? cupool_enter_context(owner->ctx) : 0;
    CUresult r = is_host(kind) ? real_cuMemFreeHost((void *)ptr) : real_cuMemFree_v2((CUdeviceptr)ptr);
    cupool_leave_context(pushed);
    return r;
}

/* ---- kept blocks (kept_lock held) --------------------------------------------- */

static int fences_passed(kept_block_t *b)
{
    while (b->nfences > 0) {
        int i = b->nfences - 1;
        if (!cupool_fence_passed(b->fences[i].c, b->fences[i].ev, 0)) return 0;
        b->nfences = i;
    }
    return 1;
}

static void forget_fences(kept_block_t *b)
{
    for (int i = 0; i < b->nfences; i++) cupool_fence_forget(b->fences[i].c, b->fences[i].ev);
    b->nfences = 0;
}

static kept_key_t *find_key(const kept_id_t *id)
{
    kept_key_t *key = NULL;
    HASH_FIND(hh, keys, id, sizeof *id, key);
    return key;
}

/* Takes b out of the store: out of its key's list (short: blocks of one
 * size, flags and context) and its class's. */
static void unlink_block(kept_key_t *key, kept_block_t *b)
{
    int host = is_host(b->id.kind);
    kept_block_t **p = &key->oldest, *before = NULL;
    for (; *p != b; p = &(*p)->next) before = *p;
    *p = b->next;
    if (key->newest == b) key->newest = before;
    if (!key->oldest) {
        HASH_DEL(keys, key);
        free(key);
    }
    if (b->older) b->older->newer = b->newer;
    else oldest[host] = b->newer;
    if (b->newer) b->newer->older = b->older;
    else newest[host] = b->older;
    set_kept_bytes(host, kept_bytes[host] - b->id.size);
}

/* Adds b (its fences recorded) as the newest of its key and class; 0 when
 * there is no host memory for its key. */
static int link_newest(kept_block_t *b)
{
    kept_key_t *key = find_key(&b->id);
    if (!key) {
        if (!(key = calloc(1, sizeof *key))) return 0;
        key->id = b->id;
        HASH_ADD(hh, keys, id, sizeof key->id, key);
        if (!key->hh.tbl) { /* uthash could not grow its table */
            free(key);
            return 0;
        }
    }
    int host = is_host(b->id.kind);
    b->next = NULL;
    if (key->oldest) key->newest->next = b;
    else key->oldest = b;
    key->newest = b;
    b->newer = NULL;
    b->older = newest[host];
    if (newest[host]) newest[host]->newer = b;
    else oldest[host] = b;
    newest[host] = b;
    set_kept_bytes(host, kept_bytes[host] + b->id.size);
    return 1;
}

/* Hands the oldest kept block of a class back to the driver. */
static void drop_oldest(int host)
{
    kept_block_t *b = oldest[host];
    unlink_block(find_key(&b->id), b);
    forget_fences(b);
    driver_free(b->id.kind, b->ptr, b->id.owner);
    HASH_DEL(tracked, b->t);
    free(b->t);
    free(b);
}

/* ---- allocation ----------------------------------------------------------- */

static int track(uintptr_t ptr, const kept_id_t *id)
{
    tracked_t *t = malloc(sizeof *t);
    if (!t) return 0;
    *t = (tracked_t){.ptr = ptr, .size = id->size, .flags = id->flags, .kind = id->kind, .owner = id->owner};
    HASH_ADD(hh, tracked, ptr, sizeof t->ptr, t);
    if (t->hh.tbl) return 1;
    free(t);
    return 0;
}

/* The oldest kept block of the id whose fences have all completed, taken
 * out of the store and tracked again; 0 when there is none. */
static uintptr_t take_kept(const kept_id_t *id)
{
    kept_key_t *key = find_key(id);
    if (!key || !fences_passed(key->oldest)) return 0;
    kept_block_t *b = key->oldest;
    b->t->kept = b->t->touched = 0;
    unlink_block(key, b);
    uintptr_t ptr = b->ptr;
    free(b);
    return ptr;
}

CUresult cupool_kept_alloc(enum cupool_kept_kind kind, cupool_kept_driver_alloc_fn *driver, uintptr_t *ptr,
                           size_t size, unsigned flags, int *route)
{
    *route = CUPOOL_ROUTE_NATIVE;
    cupool_context_t *c = ptr && size ? cupool_current_context() : NULL;
    if (!c) return driver(ptr, size, flags);
    kept_id_t id;
    memset(&id, 0, sizeof id); /* the padding too: the table compares the bytes */
    id.size = size;
    id.owner = c;
    id.kind = kind;
    id.flags = flags;
    int host = is_host(kind);
    cupool_kept_stats_t *s = stats_of(host);

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
    if (r == CUDA_ERROR_OUT_OF_MEMORY && atomic_load_explicit(&s->kept_bytes, memory_order_relaxed)) {
        cupool_kept_release(host);
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
static int keep(tracked_t *t, const kept_id_t *id)
{
    int host = is_host(id->kind);
    uint64_t limit = cupool_option_started(host ? CUPOOL_OPT_HOST_KEEP : CUPOOL_OPT_MANAGED_KEEP);
    if (id->size > limit) return 0;
    kept_block_t *b = malloc(sizeof *b);
    if (!b) return 0;
    b->ptr = t->ptr;
    b->id = *id;
    b->t = t;
    b->nfences = 0;
    /* A fence that cannot be set (a capture in progress, too many
     * contexts, no event) leaves the block to the driver's free, which
     * waits for the device. */
    if (cupool_each_context(record_fence, b) != 0 || !link_newest(b)) {
        forget_fences(b);
        free(b);
        return 0;
    }
    t->kept = 1;
    while (kept_bytes[host] > limit) {
        count(&stats_of(host)->limit_frees);
        drop_oldest(host);
    }
    return 1;
}

int cupool_kept_free(int host, uintptr_t ptr, size_t *size, unsigned *flags, int *route, CUresult *result)
{
    if (!ptr || !cupool_active()) return 0;
    /* The context freeing it is among those fenced, even if it allocated
     * nothing through cupool before. */
    cupool_current_context();
    pthread_mutex_lock(&kept_lock);
    tracked_t *t = NULL;
    if (tracked) HASH_FIND(hh, tracked, &ptr, sizeof ptr, t);
    /* cuMemFreeHost of managed memory, or cuMemFree of pinned host memory:
     * the driver's answer. */
    if (!t || is_host(t->kind) != host) {
        pthread_mutex_unlock(&kept_lock);
        return 0;
    }
    *size = t->size;
    *flags = t->flags;
    *route = CUPOOL_ROUTE_NATIVE;
    /* A second free: what the driver answers for memory no longer
     * allocated, without reaching it (it would free the kept block). */
    if (t->kept) {
        pthread_mutex_unlock(&kept_lock);
        *result = CUDA_ERROR_INVALID_VALUE;
        return 1;
    }
    kept_id_t id;
    memset(&id, 0, sizeof id);
    id.size = t->size;
    id.owner = t->owner;
    id.kind = t->kind;
    id.flags = t->flags;
    cupool_kept_stats_t *s = stats_of(host);
    count(&s->frees);
    if (!t->touched && keep(t, &id)) {
        count(&s->kept_frees);
        *route = CUPOOL_ROUTE_POOL;
        *result = CUDA_SUCCESS;
    } else {
        HASH_DEL(tracked, t);
        free(t);
        *result = driver_free(id.kind, ptr, id.owner);
    }
    pthread_mutex_unlock(&kept_lock);
    return 1;
}

void cupool_kept_mark_touched(uintptr_t ptr, size_t size)
{
    pthread_mutex_lock(&kept_lock);
    tracked_t *t = NULL;
    if (tracked) HASH_FIND(hh, tracked, &ptr, sizeof ptr, t);
    /* An interior pointer: any managed block the range meets (rare: the
     * driver's own calls take whole allocations more often than not). */
    for (tracked_t *each = t ? NULL : tracked; each; each = each->hh.next)
        if (each->kind == CUPOOL_KEPT_MANAGED && ptr < each->ptr + each->size && each->ptr < ptr + (size ? size : 1))
            each->touched = 1;
    if (t) t->touched = 1;
    pthread_mutex_unlock(&kept_lock);
}

void cupool_kept_release(int host)
{
    pthread_mutex_lock(&kept_lock);
    while (oldest[host]) {
        count(&stats_of(host)->oom_frees);
        drop_oldest(host);
    }
    pthread_mutex_unlock(&kept_lock);
}

/* ---- contexts and fork ----------------------------------------------------- */

void cupool_kept_forget_context(cupool_context_t *c, int alive)
{
    pthread_mutex_lock(&kept_lock);
    for (int host = 0; host < 2; host++) {
        for (kept_block_t *b = oldest[host], *newer; b; b = newer) {
            newer = b->newer;
            /* The context's fences in other blocks: its work is done. */
            for (int i = 0; i < b->nfences; i++) {
                if (b->fences[i].c != c) continue;
                if (alive) cupool_fence_forget(c, b->fences[i].ev);
                b->fences[i--] = b->fences[--b->nfences];
            }
            if (b->id.owner != c) continue;
            unlink_block(find_key(&b->id), b);
            forget_fences(b);
            /* Natively the context's memory goes with it. */
            if (alive) driver_free(b->id.kind, b->ptr, NULL);
            free(b);
        }
    }
    /* Its blocks in use (and the records of the kept ones just freed). */
    tracked_t *t, *tmp;
    HASH_ITER(hh, tracked, t, tmp) {
        if (t->owner != c) continue;
        HASH_DEL(tracked, t);
        free(t);
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
        HASH_DEL(tracked, t);
        free(t);
    }
    kept_key_t *key, *ktmp;
    HASH_ITER(hh, keys, key, ktmp) {
        HASH_DEL(keys, key);
        free(key);
    }
    for (int host = 0; host < 2; host++) {
        for (kept_block_t *b = oldest[host], *newer; b; b = newer) {
            newer = b->newer;
            free(b);
        }
        oldest[host] = newest[host] = NULL;
        kept_bytes[host] = 0;
    }
    pthread_mutex_init(&kept_lock, NULL);
}

void cupool_kept_start(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    cupool_context_on_teardown(cupool_kept_forget_context);
}
