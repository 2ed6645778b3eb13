/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pointer-origin table (origin.h), sharded so that threads allocating
 * and freeing at once rarely meet on a lock: the pointer picks one of 64
 * shards, each a uthash table under its own spin lock (base/base.h), held only
 * for the hash operation itself.
 *
 * A pool hands the same addresses out again and again (a program's loop
 * allocates the same sizes in the same order), so a block's entry is not
 * unlinked when the block goes back to its pool: it stays in the table,
 * retired, and the next allocation at that address revives it with one
 * lookup instead of an unlink now and an insertion then.  Lookups do not
 * see retired entries.  Each shard keeps at most RETIRED_MAX of them in a
 * ring, the least recently retired going first; unlinked entries are
 * recycled through a per-shard free list, so the steady state makes no host
 * allocations.
 *
 * Entries are never freed and never change shards, so each thread keeps two
 * hints: the entry it inserted last (a program often frees the block it
 * allocated last) and the one it retired last (the pool hands the block just
 * freed to the next allocation of its size).  A hint is believed only under
 * its shard's lock and only if it names the pointer asked about; otherwise
 * the hash lookup decides.
 */
#include "origin.h"

#include <stdlib.h>
#include <string.h>

#define HASH_FUNCTION CUPOOL_WORD_HASH
/* Out of host memory, uthash leaves the entry out (the insert then fails,
 * and the allocation goes native) instead of calling exit(). */
#define HASH_NONFATAL_OOM 1
#include <uthash.h>

#define SHARDS 64
#define RETIRED_MAX 64 /* per shard: 4096 addresses, 512 KB of entries */

/* Cache-line aligned: entries of different threads' blocks, written on
 * every allocation and free, never share a line. */
typedef struct cupool_origin_entry {
    cupool_origin_t origin;
    int retired;    /* the block is back in its pool */
    unsigned slot;  /* the ring slot it took when last retired */
    unsigned shard; /* its shard, for ever */
    UT_hash_handle hh;
} __attribute__((aligned(64))) entry_t;

typedef struct shard {
    cupool_spinlock_t lock;
    entry_t *table;
    entry_t *spare;              /* unlinked entries, chained through hh.next */
    unsigned next;               /* the ring slot the next retired entry takes */
    entry_t *ring[RETIRED_MAX];  /* retired entries; the oldest at `next` */
} __attribute__((aligned(64))) shard_t;

static shard_t shards[SHARDS];

/* The hinted entry if it is ptr's, or NULL; shard lock held. */
static entry_t *hinted(shard_t *s, entry_t *hint, CUdeviceptr ptr)
{
    CUPOOL_ASSERT_SPIN_HELD(&s->lock);
    return hint && &shards[hint->shard] == s && hint->origin.ptr == ptr ? hint : NULL;
}

static void shard_lock(shard_t *s)
{
    cupool_spin_lock(&s->lock);
}

static void shard_unlock(shard_t *s)
{
    cupool_spin_unlock(&s->lock);
}

/* Unlinks an entry and keeps it for the next insertion; shard lock held.
 * Out of line: retire() calls it once per RETIRED_MAX retirements at most. */
static __attribute__((noinline, cold)) void recycle(shard_t *s, entry_t *e)
{
    CUPOOL_ASSERT_SPIN_HELD(&s->lock);
    HASH_DEL(s->table, e);
    e->retired = 0;     /* a stale ring slot naming it leaves it alone */
    e->origin.ptr = 0;  /* and so does a thread's hint (no lookup asks for 0) */
    e->hh.next = s->spare;
    s->spare = e;
}

/* The block of a live entry went (or is about to go) back to its pool:
 * the entry stays for the next allocation at its address, and the one
 * retired RETIRED_MAX retirements ago leaves the table.  A ring slot is not
 * cleared when its entry is revived: the entry it names goes only if it is
 * still retired from that very slot (not revived, not retired again since,
 * not recycled).  Shard lock held. */
static inline void retire(shard_t *s, entry_t *e)
{
    CUPOOL_ASSERT_SPIN_HELD(&s->lock);
    entry_t *oldest = s->ring[s->next];
    if (oldest && oldest->retired && oldest->slot == s->next) recycle(s, oldest);
    e->retired = 1;
    e->origin.owner = NULL; /* a context that goes away leaves nothing here */
    e->slot = s->next;
    s->ring[s->next] = e;
    s->next = (s->next + 1) % RETIRED_MAX;
    cupool_thread.last_retired = e;
}

/* The live entry of ptr, or NULL; shard lock held. */
static inline entry_t *live(shard_t *s, CUdeviceptr ptr)
{
    CUPOOL_ASSERT_SPIN_HELD(&s->lock);
    entry_t *e = hinted(s, cupool_thread.last_inserted, ptr);
    if (!e) HASH_FIND(hh, s->table, &ptr, sizeof ptr, e);
    return e && !e->retired ? e : NULL;
}

static shard_t *shard_of(CUdeviceptr ptr)
{
    /* Pool blocks are at least 256-byte aligned: mix the higher bits. */
    uint64_t h = (uint64_t)ptr >> 8;
    h ^= h >> 17;
    h *= 0x9E3779B97F4A7C15ull;
    return &shards[h >> 58];
}

/* uthash frees a table's buckets when its last entry goes and allocates
 * them again with the next: a shard would pay a calloc and a free on every
 * allocation of a program that holds one block at a time.  Each shard keeps
 * a sentinel entry (pointer 0, which no free looks up) so it never empties. */
static entry_t sentinels[SHARDS];

/* A new entry for ptr, linked into the shard; NULL when out of host memory.
 * Shard lock held. */
static entry_t *add_entry(shard_t *s, CUdeviceptr ptr)
{
    CUPOOL_ASSERT_SPIN_HELD(&s->lock);
    if (!s->table) {
        HASH_ADD(hh, s->table, origin.ptr, sizeof(CUdeviceptr), &sentinels[s - shards]);
        if (!s->table) return NULL;
    }
    entry_t *e = s->spare;
    if (e) {
        s->spare = e->hh.next;
    } else {
        if (!(e = aligned_alloc(_Alignof(entry_t), sizeof *e))) return NULL;
        /* Written once: other threads' hints read it without this lock. */
        e->shard = (unsigned)(s - shards);
    }
    e->origin.ptr = ptr;
    HASH_ADD(hh, s->table, origin.ptr, sizeof(CUdeviceptr), e);
    if (CUPOOL_UNLIKELY(!e->hh.tbl)) {
        /* uthash could not grow the table: the entry waits as a spare. */
        e->hh.next = s->spare;
        s->spare = e;
        return NULL;
    }
    return e;
}

/* The entry of ptr, found in the table or added to it; NULL when out of
 * host memory.  Out of line: the thread's hint finds the entry nearly
 * always, and the path that does saves no registers.  Shard lock held. */
static __attribute__((noinline)) entry_t *find_or_add(shard_t *s, CUdeviceptr ptr)
{
    CUPOOL_ASSERT_SPIN_HELD(&s->lock);
    entry_t *e = NULL;
    if (CUPOOL_LIKELY(s->table)) HASH_FIND(hh, s->table, &ptr, sizeof ptr, e);
    return e ? e : add_entry(s, ptr);
}

CUPOOL_HOT_PATH int cupool_origin_insert(const cupool_origin_t *origin)
{
    shard_t *s = shard_of(origin->ptr);
    shard_lock(s);
    /* Found: retired, as a rule (its ring slot stays, see retire()); a live
     * one would be a block the driver handed out twice, and the newer
     * record is the one that holds. */
    entry_t *e = hinted(s, cupool_thread.last_retired, origin->ptr);
    if (CUPOOL_UNLIKELY(!e) && !(e = find_or_add(s, origin->ptr))) {
        shard_unlock(s);
        return -1;
    }
    e->origin = *origin;
    e->retired = 0;
    cupool_thread.last_inserted = e;
    shard_unlock(s);
    return 0;
}

int cupool_origin_remove(CUdeviceptr ptr, cupool_origin_t *out)
{
    if (!ptr) return -1; /* the shards' sentinels */
    shard_t *s = shard_of(ptr);
    shard_lock(s);
    entry_t *e = live(s, ptr);
    if (e) {
        *out = e->origin;
        retire(s, e);
    }
    shard_unlock(s);
    return e ? 0 : -1;
}

int cupool_origin_claim(CUdeviceptr ptr, cupool_origin_t *out, int (*keep)(const cupool_origin_t *), int *kept)
{
    *kept = 0;
    if (!ptr) return -1; /* the shards' sentinels */
    shard_t *s = shard_of(ptr);
    int result = -1;
    shard_lock(s);
    entry_t *e = live(s, ptr);
    if (e && e->origin.freed) {
        result = 1;
        *out = e->origin;
    } else if (e) {
        result = 0;
        *out = e->origin;
        if ((*kept = keep(&e->origin))) {
            e->origin.freed = 1;
        } else {
            retire(s, e);
        }
    }
    shard_unlock(s);
    return result;
}

CUPOOL_HOT_PATH enum cupool_origin_action
cupool_origin_take(CUdeviceptr ptr, cupool_origin_t *out,
                   enum cupool_origin_action (*action)(const cupool_origin_t *, const void *), const void *arg)
{
    if (!ptr) return CUPOOL_ORIGIN_LEAVE; /* the shards' sentinels */
    shard_t *s = shard_of(ptr);
    shard_lock(s);
    entry_t *e = live(s, ptr);
    enum cupool_origin_action taken = e && !e->origin.freed ? action(&e->origin, arg) : CUPOOL_ORIGIN_LEAVE;
    if (taken != CUPOOL_ORIGIN_LEAVE) {
        *out = e->origin;
        if (taken == CUPOOL_ORIGIN_KEEP) e->origin.freed = 1;
        else retire(s, e);
    }
    shard_unlock(s);
    return taken;
}

int cupool_origin_mark_exported(CUdeviceptr ptr)
{
    if (!ptr) return -1; /* the shards' sentinels */
    shard_t *s = shard_of(ptr);
    shard_lock(s);
    entry_t *e = live(s, ptr);
    int found = e && !e->origin.freed;
    if (found) e->origin.exported = 1;
    shard_unlock(s);
    return found ? 0 : -1;
}

int cupool_origin_find(CUdeviceptr ptr, cupool_origin_t *out)
{
    if (!ptr) return -1; /* the shards' sentinels */
    shard_t *s = shard_of(ptr);
    shard_lock(s);
    entry_t *e = live(s, ptr);
    if (e) *out = e->origin;
    shard_unlock(s);
    return e ? 0 : -1;
}

void cupool_origin_drain(struct cupool_context *owner, void (*fn)(const cupool_origin_t *, void *), void *arg)
{
    for (int i = 0; i < SHARDS; i++) {
        shard_t *s = &shards[i];
        entry_t *e, *tmp;
        shard_lock(s);
        HASH_ITER(hh, s->table, e, tmp)
        {
            if (e->retired || e->origin.owner != owner || e->origin.freed || !e->origin.ptr) continue;
            fn(&e->origin, arg);
            recycle(s, e); /* not retire(): its eviction could unlink `tmp` */
        }
        shard_unlock(s);
    }
}

void cupool_origin_lock_all(void)
{
    for (int i = 0; i < SHARDS; i++) shard_lock(&shards[i]);
}

void cupool_origin_unlock_all(void)
{
    for (int i = SHARDS - 1; i >= 0; i--) shard_unlock(&shards[i]);
}
