/* SPDX-License-Identifier: Apache-2.0 */
/*
 * White-box test of the pointer-origin table (src/engine/origin.c, compiled into
 * this program; no driver is involved): a record is found while its block
 * is live and only then, so a double free is caught; the ring of retired
 * entries evicts the oldest; each thread's two hints (its last inserted and
 * last retired entry) are only believed when they still name the pointer
 * asked about, after another thread retired or revived the entry, after
 * the ring recycled it and after a drain; and threads inserting and
 * claiming at once, each freeing blocks another thread allocated, never
 * lose or duplicate a record; out of host memory, an insert fails and the
 * program goes on.
 */
#include <stddef.h>
/* uthash's allocations, made to fail on demand (host_oom). */
static int uthash_fails;
static void *test_uthash_malloc(size_t size);
#define uthash_malloc(size) test_uthash_malloc(size)
#include "../src/engine/origin.c"
#include "check.h"

#include <pthread.h>
#include <sched.h>

/* The thread's hints live in cupool_thread, defined in src/base/real_driver.c, which this
 * program does not link. */
CUPOOL_THREAD_LOCAL cupool_thread_t cupool_thread;

/* The spin lock's contended wait lives in src/base/spin_lock.c: a plain one will do. */
void cupool_spin_wait(cupool_spinlock_t *lock)
{
    while (!cupool_spin_acquire(lock)) sched_yield();
}

/* Block addresses as a pool hands them out: 256-byte aligned, in a range. */
#define BLOCK(i) ((CUdeviceptr)0x7f0000000000ull + ((CUdeviceptr)(i) << 12))

static struct cupool_context *const owner_a = (struct cupool_context *)0x1000;
static struct cupool_context *const owner_b = (struct cupool_context *)0x2000;

static int keep_none(const cupool_origin_t *o)
{
    (void)o;
    return 0;
}

static int keep_all(const cupool_origin_t *o)
{
    (void)o;
    return 1;
}

static void insert(CUdeviceptr ptr, size_t size, struct cupool_context *owner)
{
    cupool_origin_t o = {.ptr = ptr, .size = size, .owner = owner, .pool = (CUmemoryPool)0x10};
    CHECK_EQ(cupool_origin_insert(&o), 0);
}

/* The program frees ptr; returns what claim answered. */
static int claim(CUdeviceptr ptr, size_t *size)
{
    cupool_origin_t o;
    int kept;
    int r = cupool_origin_claim(ptr, &o, keep_none, &kept);
    if (r == 0 && size) *size = o.size;
    return r;
}

static int find(CUdeviceptr ptr)
{
    cupool_origin_t o;
    return cupool_origin_find(ptr, &o);
}

static void single_thread(void)
{
    size_t size = 0;
    insert(BLOCK(1), 4096, owner_a);
    CHECK_EQ(find(BLOCK(1)), 0);
    CHECK_EQ(find(BLOCK(1) + 256), -1); /* only block starts are known */
    CHECK_EQ(claim(BLOCK(1), &size), 0);
    CHECK_EQ(size, 4096);
    CHECK_EQ(claim(BLOCK(1), NULL), -1); /* double free: the driver answers */
    CHECK_EQ(find(BLOCK(1)), -1);
    insert(BLOCK(1), 8192, owner_a); /* the pool hands the address out again */
    CHECK_EQ(claim(BLOCK(1), &size), 0);
    CHECK_EQ(size, 8192);
    CHECK_EQ(claim(0, NULL), -1); /* the shards' sentinels are never found */

    /* A held (deferred) free: found as freed until it is removed. */
    cupool_origin_t o;
    int kept;
    insert(BLOCK(2), 4096, owner_a);
    CHECK_EQ(cupool_origin_claim(BLOCK(2), &o, keep_all, &kept), 0);
    CHECK_EQ(kept, 1);
    CHECK_EQ(cupool_origin_claim(BLOCK(2), &o, keep_all, &kept), 1);
    CHECK_EQ(cupool_origin_remove(BLOCK(2), &o), 0);
    CHECK_EQ(claim(BLOCK(2), NULL), -1);
}

/* More blocks retire than the rings hold: the oldest entries are recycled
 * (the hints of this thread then name recycled or reused entries), and
 * every address still behaves. */
static void ring_eviction(void)
{
    enum { N = 3 * SHARDS * RETIRED_MAX };
    for (int i = 0; i < N; i++) {
        insert(BLOCK(100 + i), 256, owner_a);
        CHECK_EQ(claim(BLOCK(100 + i), NULL), 0);
    }
    for (int i = 0; i < N; i++) CHECK_EQ(claim(BLOCK(100 + i), NULL), -1);
    for (int i = 0; i < N; i += 7) {
        insert(BLOCK(100 + i), 512, owner_a);
        size_t size = 0;
        CHECK_EQ(claim(BLOCK(100 + i), &size), 0);
        CHECK_EQ(size, 512);
    }
}

/* Drained entries (their context went away) are recycled; a hint that
 * names one, or the entry reused for another address, is not believed. */
static void drained(const cupool_origin_t *o, void *arg)
{
    (*(int *)arg)++;
    (void)o;
}

static void drain(void)
{
    insert(BLOCK(50), 4096, owner_b);
    insert(BLOCK(51), 4096, owner_a);
    insert(BLOCK(52), 4096, owner_b); /* this thread's last inserted entry */
    int n = 0;
    cupool_origin_drain(owner_b, drained, &n);
    CHECK_EQ(n, 2);
    CHECK_EQ(find(BLOCK(52)), -1);
    CHECK_EQ(find(BLOCK(50)), -1);
    insert(BLOCK(53), 4096, owner_a); /* may reuse a drained entry */
    CHECK_EQ(find(BLOCK(52)), -1);
    CHECK_EQ(claim(BLOCK(51), NULL), 0);
    CHECK_EQ(claim(BLOCK(53), NULL), 0);
}

/* Another thread frees the block this thread allocated last, and allocates
 * at the same address again: this thread's hints name that entry all along. */
static void *other_claims(void *arg)
{
    CHECK_EQ(claim(*(CUdeviceptr *)arg, NULL), 0);
    return NULL;
}

static void *other_inserts(void *arg)
{
    insert(*(CUdeviceptr *)arg, 1024, owner_b);
    return NULL;
}

static void run_on_thread(void *(*fn)(void *), CUdeviceptr ptr)
{
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, fn, &ptr), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
}

static void stale_hints(void)
{
    CUdeviceptr p = BLOCK(60);
    insert(p, 4096, owner_a);
    run_on_thread(other_claims, p);
    CHECK_EQ(claim(p, NULL), -1); /* freed over there: a double free here */
    run_on_thread(other_inserts, p);
    cupool_origin_t o;
    CHECK_EQ(cupool_origin_find(p, &o), 0);
    CHECK_EQ(o.size, 1024); /* the other thread's record, not the hint's old one */
    CHECK_TRUE(o.owner == owner_b);
    CHECK_EQ(claim(p, NULL), 0);
}

/* Threads allocate and free at once; each frees the blocks the thread
 * before it allocated, so every free meets another thread's entry. */
enum { THREADS = 8, PER_THREAD = 512, ROUNDS = 200 };
static CUdeviceptr handoff[THREADS][PER_THREAD];
static pthread_barrier_t barrier;

static void *worker(void *arg)
{
    int me = (int)(intptr_t)arg, prev = (me + THREADS - 1) % THREADS;
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < PER_THREAD; i++) {
            /* Addresses come back round after round, as from a pool. */
            CUdeviceptr p = BLOCK(100000 + (me * PER_THREAD + i) * 4 + round % 4);
            insert(p, (size_t)(me + 1) << 8, owner_a);
            handoff[me][i] = p;
        }
        pthread_barrier_wait(&barrier);
        for (int i = 0; i < PER_THREAD; i++) {
            size_t size = 0;
            CHECK_EQ(claim(handoff[prev][i], &size), 0);
            CHECK_EQ(size, (size_t)(prev + 1) << 8);
            CHECK_EQ(claim(handoff[prev][i], NULL), -1);
        }
        pthread_barrier_wait(&barrier);
    }
    return NULL;
}

static void threads(void)
{
    pthread_t t[THREADS];
    CHECK_EQ(pthread_barrier_init(&barrier, NULL, THREADS), 0);
    for (intptr_t i = 0; i < THREADS; i++) CHECK_EQ(pthread_create(&t[i], NULL, worker, (void *)i), 0);
    for (int i = 0; i < THREADS; i++) CHECK_EQ(pthread_join(t[i], NULL), 0);
    pthread_barrier_destroy(&barrier);
    for (int me = 0; me < THREADS; me++)
        for (int i = 0; i < PER_THREAD; i++) CHECK_EQ(find(handoff[me][i]), -1);
}

static void *test_uthash_malloc(size_t size)
{
    return uthash_fails ? NULL : malloc(size);
}

/* Out of host memory, an insert fails and the program goes on (uthash's
 * default would exit()): first with no table in any shard, then when the
 * shards' tables would have to grow.  What failed is not found; inserted
 * again once memory is back, it is. */
#define OOM_BLOCKS 30000
static void host_oom(void)
{
    static unsigned char failed[OOM_BLOCKS];
    uthash_fails = 1;
    for (int i = 0; i < 64; i++) {
        cupool_origin_t o = {.ptr = BLOCK(100000 + i), .size = 256, .owner = owner_a};
        CHECK_EQ(cupool_origin_insert(&o), -1);
        CHECK_EQ(find(BLOCK(100000 + i)), -1);
    }
    uthash_fails = 0;
    for (int i = 0; i < 64; i++) insert(BLOCK(100000 + i), 256, owner_a);
    /* Tables exist now: enough entries that they must grow, which fails. */
    int nfailed = 0;
    uthash_fails = 1;
    for (int i = 0; i < OOM_BLOCKS; i++) {
        cupool_origin_t o = {.ptr = BLOCK(200000 + i), .size = 256, .owner = owner_a};
        failed[i] = cupool_origin_insert(&o) != 0;
        nfailed += failed[i];
    }
    uthash_fails = 0;
    CHECK_TRUE(nfailed > 0);
    for (int i = 0; i < OOM_BLOCKS; i++) {
        CHECK_EQ(find(BLOCK(200000 + i)), failed[i] ? -1 : 0);
        if (failed[i]) insert(BLOCK(200000 + i), 256, owner_a);
    }
    for (int i = 0; i < OOM_BLOCKS; i++) CHECK_EQ(claim(BLOCK(200000 + i), NULL), 0);
    for (int i = 0; i < 64; i++) CHECK_EQ(claim(BLOCK(100000 + i), NULL), 0);
    printf("origin table out of host memory: %d of %d inserts failed, none exited\n", nfailed, OOM_BLOCKS);
}

int main(void)
{
    host_oom();
    single_thread();
    ring_eviction();
    drain();
    stale_hints();
    threads();
    printf("origin table: records, double frees, ring evictions, stale hints, %d threads: passed\n", THREADS);
    return 0;
}
