/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proves the ready store of `deferred` mode with CUPOOL_DEFERRED_ORDER=host
 * (src/engine/free/ready_store.c), and of `ordered`: a freed block
 * whose events have completed serves the context's next allocation of the
 * same size without going back to the pool, and is otherwise free memory.
 *   reuse:      after the free has completed, cuMemGetInfo counts the block
 *               as free while the pool still has it in use; the next
 *               allocation of its size is that block, with no pool call,
 *               and holds what the program writes; a second free of it
 *               gets the driver's error and does not hand it out twice; a
 *               second after its free, unused, it goes back to the pool;
 *               CUPOOL_STATS counts the allocations ready blocks served;
 *               a block whose free has not completed serves nothing.
 *   off:        CUPOOL_DEFERRED_READY=0 turns the store off, and so does
 *               CUPOOL_RELEASE_THRESHOLD=0 (threshold0).
 *   cap:        CUPOOL_DEFERRED_READY=8M caps the store at 8 MiB.
 *   limit:      with CUPOOL_LIMIT, the store holds no more than the limit
 *               leaves beside the blocks in use.
 *   leave:      a context moved from `deferred` to `sync` (auto, a second
 *               context) hands its ready blocks back.
 *   release:    cuDevicePrimaryCtxRelease hands the ready blocks back first
 *               (the release may be the last, and compute-sanitizer orders
 *               a give-back after the context's death behind nothing).
 *   oom:        an allocation that needs the memory the store keeps gets
 *               it, in the store's context or another on the device
 *               (simulator only: SIMCUDA_MEM sets the device's size).
 *   capture-*gpu: capture with the frees ordered on the GPU
 *               (CUPOOL_DEFERRED_ORDER=gpu), where the store keeps nothing.
 *   fence-*:    reuse, with each kind of fence CUPOOL_DEFERRED_FENCE
 *               chooses and CUPOOL_VERBOSE saying which: one event for the
 *               whole context (the default), an event on every stream
 *               (streams, auto with a CUDA tool attached, and a driver
 *               that refuses cuCtxRecordEvent, which cupool then warns of
 *               once).
 *   held:       a block freed during a capture goes back to its pool
 *               once the capture has ended.
 *   capture:    captures begun on one thread while another allocates and
 *               frees in `deferred` all survive (a fence recorded under a
 *               capture in progress invalidates it), with either kind of
 *               fence (capture-streams).
 * The same store in `ordered` (src/engine/free/ordered_keep.c), where a freed
 * block may serve once an event has been recorded on the legacy stream
 * after its free, its users still running or not:
 *   ordered-reuse: a freed block is free memory for cuMemGetInfo at once
 *               and still allocated from the pool; the next allocation of
 *               its size is that block with no pool call, after exactly one
 *               event on the legacy stream (simulator: it counts them); one
 *               event serves every block freed before it; an allocation of
 *               another size records none; a second free gets the driver's
 *               error; unused for a second, blocks go back to the pool;
 *               CUPOOL_STATS counts them (ordered-auto: the same under the
 *               default settings).
 *   ordered-off, -threshold0, -cap, -limit, -release, -oom,
 *   -oom-other-context, -held, -capture: as above, in `ordered`.
 *   ordered-many-sizes: 600 sizes freed and taken again, each time the
 *               block of its size (the store drops the lists of sizes it
 *               emptied past 256 and adds them again).
 *   ordered-over-cap: a block larger than CUPOOL_ORDERED_READY is kept
 *               beside the others and serves the next allocation of its
 *               size; the next free hands it back first, and so does a
 *               miss of 1 MiB or more, before the store's oldest block.
 *   ordered-over-cap-stats: the same through the general paths, and
 *               CUPOOL_STATS counts the three such blocks kept.
 *   ordered-over-cap-threads: while the store holds such a block one
 *               thread freed, one another thread frees goes straight back.
 *   ordered-switch: auto moving to `deferred` (two streams given work by
 *               turns) synchronizes the context, so a block `ordered` kept
 *               then serves with no event at all.
 *   ordered-leave: auto moving from `ordered` to `sync` hands them back.
 *   ordered-capture-off, sync-capture: captures survive `ordered`'s pool
 *               calls on the legacy stream (the store off) and `sync`'s
 *               frees made on another thread (a capture waits for the
 *               legacy-stream calls in flight as it begins, src/engine/capture.c).
 *   capture-waits: a capture another thread begins while such a call runs
 *               begins only once it has returned (simulator only: its pool
 *               calls run a test's hook inside them).
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK (4ull << 20)
#define SMALL 256
#define SLACK (2ull << 20) /* what else may move the figures on a real GPU */
#define MISS (2 * BLOCK + BLOCK / 2)

/* Lets every free so far complete and reach the store (or the pool): the
 * next cupool call after a synchronization sees their events complete. */
static void settle(void)
{
    CUdeviceptr probe;
    CHECK_CU(cuCtxSynchronize());
    CHECK_CU(cuMemAlloc(&probe, SMALL));
    CHECK_CU(cuMemFree(probe));
    CHECK_CU(cuCtxSynchronize());
    CHECK_CU(cuMemAlloc(&probe, SMALL));
    CHECK_CU(cuMemFree(probe));
}

/* What cupool's cuMemGetInfo counts as free beyond the device's own answer
 * (the least of it, against the higher device reading): the pools' idle
 * memory and the ready blocks. */
static int64_t free_beyond_device(void)
{
    size_t seen, total, low, high;
    tl_mem_get_info_bracketed(&seen, &total, &low, &high);
    return (int64_t)seen - (int64_t)high;
}

/* Events recorded on the legacy stream of the current context so far, as
 * the simulator counts them; -1 on a GPU. */
static long long legacy_records(void)
{
    long long (*count)(void) = (long long (*)(void))dlsym(RTLD_DEFAULT, "simcuda_legacy_event_records");
    return count ? count() : -1;
}

/* Checks that `made` events were recorded on the legacy stream since a
 * count of `since` (the simulator alone counts). */
static void check_records(long long since, long long made)
{
    if (since >= 0) CHECK_EQ(legacy_records(), since + made);
}

/* The store holds two blocks of BLOCK: unused for a second after their
 * frees, they go back to the pool at the next allocation. */
static void check_aged_blocks_go_back(CUmemoryPool pool)
{
    CUdeviceptr again;
    CHECK_TRUE(tl_pool_used(pool) >= 2 * BLOCK);
    usleep(1100 * 1000);
    CHECK_CU(cuMemAlloc(&again, SMALL));
    uint64_t used_aged = tl_pool_used(pool);
    printf("a second later: pool used %llu\n", (unsigned long long)used_aged);
    CHECK_TRUE(used_aged < SLACK);
    CHECK_CU(cuMemFree(again));
}

/* A reuse case's first block, allocated and filled: its pool, the pool's
 * used bytes and what cuMemGetInfo counts free beyond the device. */
static void first_block(CUdeviceptr *a, CUmemoryPool *pool, uint64_t *used_live, int64_t *beyond_live)
{
    CHECK_CU(cuMemAlloc(a, BLOCK));
    tl_fill(*a, BLOCK, 0xA1A1A1A1u);
    *pool = tl_pool_of(*a);
    CHECK_TRUE(*pool != NULL);
    *used_live = tl_pool_used(*pool);
    *beyond_live = free_beyond_device();
}

/* In `ordered`, the next allocation of `size` is `freed`, from the store
 * after exactly one event on the legacy stream, the pool's use (`used`)
 * unchanged; it is filled with `pattern` and checked. */
static CUdeviceptr take_again(CUdeviceptr freed, size_t size, CUmemoryPool pool, uint64_t used, uint32_t pattern)
{
    CUdeviceptr again;
    long long since = legacy_records();
    CHECK_CU(cuMemAlloc(&again, size));
    CHECK_EQ(again, freed);
    check_records(since, 1);
    CHECK_EQ(tl_pool_used(pool), used);
    tl_fill(again, size, pattern);
    CHECK_TRUE(tl_spot_check(again, size, pattern) == 0);
    return again;
}

static int reuse(void)
{
    tl_init(0);
    CUdeviceptr a, b, c1, c2;
    CUmemoryPool pool;
    uint64_t used_live;
    int64_t beyond_live;
    first_block(&a, &pool, &used_live, &beyond_live);
    CHECK_CU(cuMemFree(a));
    settle();
    /* Free for the program, still allocated from the pool. */
    uint64_t used_free = tl_pool_used(pool);
    int64_t beyond_free = free_beyond_device();
    printf("freed: counted free beyond the device %lld -> %lld, pool used %llu -> %llu\n", (long long)beyond_live,
           (long long)beyond_free, (unsigned long long)used_live, (unsigned long long)used_free);
    CHECK_TRUE(beyond_free + (int64_t)SLACK >= beyond_live + (int64_t)BLOCK);
    CHECK_TRUE(used_free >= used_live);
    /* The next allocation of its size is that block, and the pool is not asked. */
    CHECK_CU(cuMemAlloc(&b, BLOCK));
    CHECK_EQ(b, a);
    CHECK_EQ(tl_pool_used(pool), used_free);
    tl_fill(b, BLOCK, 0xB2B2B2B2u);
    CHECK_TRUE(tl_spot_check(b, BLOCK, 0xB2B2B2B2u) == 0);
    cupool_stats_t s = tl_stats(0);
    CHECK_EQ(s.in_use, BLOCK);
    /* A second free: the driver's answer, and the block is handed out once. */
    CHECK_CU(cuMemFree(b));
    CHECK_CU_EQ(cuMemFree(b), CUDA_ERROR_INVALID_VALUE);
    settle();
    CHECK_CU_EQ(cuMemFree(b), CUDA_ERROR_INVALID_VALUE);
    CHECK_CU(cuMemAlloc(&c1, BLOCK));
    CHECK_CU(cuMemAlloc(&c2, BLOCK));
    CHECK_NE(c1, c2);
    CHECK_CU(cuMemFree(c1));
    CHECK_CU(cuMemFree(c2));
    settle();
    check_aged_blocks_go_back(pool);
    /* Not before its fence has completed (the simulator's events answer
     * NOT_READY to their first queries): the next block is another. */
    if (!check_real_driver()) {
        CUdeviceptr first, early;
        CHECK_CU(cuMemAlloc(&first, BLOCK));
        CHECK_CU(cuMemFree(first));
        CHECK_CU(cuMemAlloc(&early, BLOCK));
        CHECK_NE(early, first);
        CHECK_CU(cuMemFree(early));
    }
    return 0;
}

static int ordered_reuse(void)
{
    tl_init(0);
    CUdeviceptr a, b, c1, c2, d1, d2, other;
    CUmemoryPool pool;
    uint64_t used_live;
    int64_t beyond_live;
    first_block(&a, &pool, &used_live, &beyond_live);
    /* No synchronization anywhere below: `ordered` needs none. */
    CHECK_CU(cuMemFree(a));
    CHECK_EQ(tl_pool_used(pool), used_live);
    CHECK_TRUE(free_beyond_device() + (int64_t)SLACK >= beyond_live + (int64_t)BLOCK);
    b = take_again(a, BLOCK, pool, used_live, 0xB2B2B2B2u);
    CHECK_EQ(tl_stats(0).in_use, BLOCK);
    CHECK_CU(cuMemFree(b));
    CHECK_CU_EQ(cuMemFree(b), CUDA_ERROR_INVALID_VALUE);
    /* Two blocks freed before the next allocations: one event serves both. */
    CHECK_CU(cuMemAlloc(&c1, BLOCK));
    CHECK_CU(cuMemAlloc(&c2, BLOCK));
    CHECK_EQ(c1, b);
    CHECK_NE(c1, c2);
    CHECK_CU(cuMemFree(c1));
    CHECK_CU(cuMemFree(c2));
    long long since = legacy_records();
    CHECK_CU(cuMemAlloc(&d1, BLOCK));
    CHECK_CU(cuMemAlloc(&d2, BLOCK));
    check_records(since, 1);
    CHECK_TRUE((d1 == c1 && d2 == c2) || (d1 == c2 && d2 == c1));
    /* Another size takes no kept block and records no event. */
    CHECK_CU(cuMemFree(d1));
    since = legacy_records();
    CHECK_CU(cuMemAlloc(&other, SMALL));
    check_records(since, 0);
    CHECK_NE(other, d1);
    CHECK_CU(cuMemFree(other));
    CHECK_CU(cuMemFree(d2));
    check_aged_blocks_go_back(pool);
    return 0;
}

/* Many sizes, each freed and taken again three times over: every
 * allocation after the first round is the block its size freed (the lists
 * of sizes emptied by the takes outnumber what the store keeps of them,
 * so some are dropped and added again). */
#define MANY_SIZES 600

static int ordered_many_sizes(void)
{
    tl_init(0);
    static CUdeviceptr first[MANY_SIZES], again[MANY_SIZES];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < MANY_SIZES; i++) CHECK_CU(cuMemAlloc(&again[i], (size_t)SMALL * (i + 1)));
        for (int i = 0; i < MANY_SIZES; i++) {
            if (round == 0) first[i] = again[i];
            else CHECK_EQ(again[i], first[i]);
        }
        for (int i = 0; i < MANY_SIZES; i++) CHECK_CU(cuMemFree(again[i]));
    }
    return 0;
}

/* With CUPOOL_ORDERED_READY=8M: a block larger than the whole store (BIG)
 * is kept beside a block of BLOCK and serves the next allocation of its
 * size from the store; a miss of 10 MiB hands it back (not the older
 * block), and so does the next free. */
#define BIG (4 * BLOCK)

/* The store hands back a block unused for a second after its free: on a
 * loaded machine that much can pass inside one case, and the store is then
 * rightly emptier than the case expects.  Such a run says so and stops
 * checking what the store holds. */
static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int store_aged(double freed_at)
{
    if (seconds_now() - freed_at < 1.0) return 0;
    printf("over a second since the first free (a loaded machine): the store may have handed its blocks back; "
           "what it holds is not checked\n");
    return 1;
}

static int ordered_over_cap(void)
{
    tl_init(0);
    CUdeviceptr big, small[2], miss, taken;
    CHECK_CU(cuMemAlloc(&big, BIG));
    for (int i = 0; i < 2; i++) CHECK_CU(cuMemAlloc(&small[i], BLOCK));
    CUmemoryPool pool = tl_pool_of(big);
    CHECK_TRUE(pool != NULL);
    double freed_at = seconds_now();
    CHECK_CU(cuMemFree(small[0]));
    CHECK_CU(cuMemFree(big));
    CHECK_CU(cuCtxSynchronize());
    uint64_t kept = tl_pool_used(pool);
    CHECK_TRUE(kept >= BIG + 2 * BLOCK);
    CHECK_CU(cuMemFree(take_again(big, BIG, pool, kept, 0xD4D4D4D4u)));
    /* The pool serves the miss from BIG's memory: it uses less than before. */
    CHECK_CU(cuMemAlloc(&miss, MISS));
    tl_fill(miss, MISS, 0xE5E5E5E5u);
    CHECK_CU(cuCtxSynchronize());
    uint64_t after_miss = tl_pool_used(pool);
    printf("over the cap: pool used %llu with 16 MiB and 4 MiB stored, %llu after a miss of 10 MiB\n",
           (unsigned long long)kept, (unsigned long long)after_miss);
    CHECK_TRUE(after_miss < kept);
    CHECK_TRUE(tl_spot_check(miss, MISS, 0xE5E5E5E5u) == 0);
    /* small[0] stayed in the store: the pool is not asked. */
    CHECK_CU(cuMemAlloc(&taken, BLOCK));
    CHECK_CU(cuCtxSynchronize());
    uint64_t after_take = tl_pool_used(pool);
    int aged = store_aged(freed_at);
    if (!aged) {
        CHECK_EQ(taken, small[0]);
        CHECK_EQ(after_take, after_miss);
    }
    /* MISS is kept over the cap in its turn, until the next free. */
    CHECK_CU(cuMemFree(miss));
    CHECK_CU(cuMemFree(taken));
    CHECK_CU(cuMemFree(small[1]));
    CHECK_CU(cuCtxSynchronize());
    uint64_t used = tl_pool_used(pool);
    printf("then two frees of 4 MiB: pool used %llu\n", (unsigned long long)used);
    if (!aged && !store_aged(freed_at)) CHECK_TRUE(used >= 2 * BLOCK && used < 2 * BLOCK + SLACK);
    return 0;
}

/* Frees a block (arg) on another thread, in the context current here. */
static CUcontext elsewhere_ctx;

static void *free_elsewhere(void *arg)
{
    CHECK_CU(cuCtxSetCurrent(elsewhere_ctx));
    CHECK_CU(cuMemFree((CUdeviceptr)(uintptr_t)arg));
    return NULL;
}

/* With CUPOOL_ORDERED_READY=8M: while the store holds BIG, which this
 * thread freed, a block larger than the store another thread frees goes
 * straight back to its pool, and BIG stays to serve the next allocation
 * of its size. */
static int ordered_over_cap_threads(void)
{
    elsewhere_ctx = tl_init(0);
    CUdeviceptr big, other;
    CHECK_CU(cuMemAlloc(&big, BIG));
    CHECK_CU(cuMemAlloc(&other, BIG + BLOCK));
    CUmemoryPool pool = tl_pool_of(big);
    CHECK_TRUE(pool != NULL);
    CHECK_CU(cuMemFree(big));
    pthread_t t;
    CHECK_TRUE(pthread_create(&t, NULL, free_elsewhere, (void *)(uintptr_t)other) == 0);
    CHECK_TRUE(pthread_join(t, NULL) == 0);
    CHECK_CU(cuCtxSynchronize());
    uint64_t used = tl_pool_used(pool);
    printf("over the cap, two threads: pool used %llu after freeing 16 MiB here and 20 MiB on another thread\n",
           (unsigned long long)used);
    CHECK_TRUE(used >= BIG && used < BIG + SLACK);
    CHECK_CU(cuMemFree(take_again(big, BIG, pool, used, 0xF6F6F6F6u)));
    return 0;
}

/* Two blocks of BLOCK in the store: a miss of a small size leaves them
 * there; a miss of a larger one (MISS, 10 MiB: also larger than the store
 * may keep under CUPOOL_ORDERED_READY=8M) first hands back the oldest, as
 * many bytes as it asks, and the pool serves it from them without growing
 * the memory in use.  Then BLOCK is no longer in the store. */
static int ordered_miss(void)
{
    tl_init(0);
    CUdeviceptr blocks[2], small, miss, again;
    for (int i = 0; i < 2; i++) CHECK_CU(cuMemAlloc(&blocks[i], BLOCK));
    CUmemoryPool pool = tl_pool_of(blocks[0]);
    CHECK_TRUE(pool != NULL);
    for (int i = 0; i < 2; i++) CHECK_CU(cuMemFree(blocks[i]));
    /* Kept allocated, not freed as settle() does: under an 8 MiB store its
     * free would push out the oldest block. */
    CHECK_CU(cuMemAlloc(&small, SMALL));
    CHECK_CU(cuStreamSynchronize(CU_STREAM_LEGACY));
    uint64_t kept = tl_pool_used(pool);
    CHECK_TRUE(kept >= 2 * BLOCK);
    CHECK_CU(cuMemAlloc(&miss, MISS));
    tl_fill(miss, MISS, 0xC3C3C3C3u);
    CHECK_CU(cuStreamSynchronize(CU_STREAM_LEGACY));
    uint64_t used = tl_pool_used(pool);
    printf("a miss of 10 MiB: pool used %llu -> %llu with 8 MiB stored\n", (unsigned long long)kept,
           (unsigned long long)used);
    CHECK_TRUE(tl_pool_of(miss) == pool);
    CHECK_TRUE(used <= MISS + SLACK);
    CHECK_TRUE(tl_spot_check(miss, MISS, 0xC3C3C3C3u) == 0);
    long long since = legacy_records();
    CHECK_CU(cuMemAlloc(&again, BLOCK));
    check_records(since, 0);
    CHECK_CU(cuMemFree(again));
    CHECK_CU(cuMemFree(miss));
    CHECK_CU(cuMemFree(small));
    return 0;
}

static int ordered_switch(void)
{
    tl_init(0);
    CUdeviceptr a, b, t[2];
    CUstream s[2];
    CHECK_CU(cuMemAlloc(&a, BLOCK));
    for (int i = 0; i < 2; i++) CHECK_CU(cuMemAlloc(&t[i], SMALL));
    CHECK_CU(cuMemFree(a));
    for (int i = 0; i < 2; i++) CHECK_CU(cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING));
    /* Work by turns, more than the order stream may follow in a second:
     * auto -> deferred, synchronizing. */
    for (int i = 0; i < 100; i++) CHECK_CU(cuMemsetD8Async(t[i % 2], (unsigned char)i, SMALL, s[i % 2]));
    long long since = legacy_records();
    CHECK_CU(cuMemAlloc(&b, BLOCK));
    CHECK_EQ(b, a);
    check_records(since, 0);
    CHECK_CU(cuMemFree(b));
    CHECK_CU(cuCtxSynchronize());
    for (int i = 0; i < 2; i++) CHECK_CU(cuMemFree(t[i]));
    for (int i = 0; i < 2; i++) CHECK_CU(cuStreamDestroy(s[i]));
    return 0;
}

static int ordered_leave(void)
{
    CUcontext primary = tl_init(0), other;
    CUdeviceptr blocks[2];
    for (int i = 0; i < 2; i++) CHECK_CU(cuMemAlloc(&blocks[i], BLOCK));
    CUmemoryPool pool = tl_pool_of(blocks[0]);
    CHECK_TRUE(pool != NULL);
    for (int i = 0; i < 2; i++) CHECK_CU(cuMemFree(blocks[i]));
    uint64_t used = tl_pool_used(pool);
    CHECK_TRUE(used >= 2 * BLOCK);
    CUdevice dev;
    CHECK_CU(cuCtxGetDevice(&dev));
    CHECK_CU(cuCtxCreate(&other, NULL, 0, dev)); /* a second context: -> sync */
    CHECK_CU(cuCtxSetCurrent(primary));
    CHECK_CU(cuCtxSynchronize());
    uint64_t after = tl_pool_used(pool);
    printf("leave ordered: pool used %llu -> %llu at the switch to sync\n", (unsigned long long)used,
           (unsigned long long)after);
    CHECK_TRUE(after < SLACK);
    CHECK_CU(cuCtxDestroy(other));
    return 0;
}

/* Frees n blocks and returns what the pool still uses once they completed. */
static uint64_t free_blocks(int n, CUmemoryPool *pool)
{
    CUdeviceptr blocks[8];
    CHECK_TRUE(n <= 8);
    for (int i = 0; i < n; i++) CHECK_CU(cuMemAlloc(&blocks[i], BLOCK));
    *pool = tl_pool_of(blocks[0]);
    CHECK_TRUE(*pool != NULL);
    for (int i = 0; i < n; i++) CHECK_CU(cuMemFree(blocks[i]));
    settle();
    return tl_pool_used(*pool);
}

static int off(void)
{
    tl_init(0);
    CUmemoryPool pool;
    uint64_t used = free_blocks(1, &pool);
    printf("store off: pool used %llu after the free\n", (unsigned long long)used);
    CHECK_TRUE(used < SLACK);
    return 0;
}

static int cap(void)
{
    tl_init(0);
    CUmemoryPool pool;
    uint64_t used = free_blocks(6, &pool);
    printf("cap 8 MiB: pool used %llu after freeing 6 x 4 MiB\n", (unsigned long long)used);
    /* Two blocks at most: the probe's frees then push out the oldest. */
    CHECK_TRUE(used >= BLOCK);
    CHECK_TRUE(used <= 2 * BLOCK + 2 * SMALL);
    return 0;
}

/* With CUPOOL_LIMIT=17M: the ready blocks and the blocks in use together
 * stay within the limit, the store giving back as the program takes more. */
static int limit(void)
{
    tl_init(0);
    CUdeviceptr live[2], gone[2], more[2];
    for (int i = 0; i < 2; i++) CHECK_CU(cuMemAlloc(&live[i], BLOCK));
    for (int i = 0; i < 2; i++) CHECK_CU(cuMemAlloc(&gone[i], BLOCK));
    CUmemoryPool pool = tl_pool_of(live[0]);
    CHECK_TRUE(pool != NULL);
    for (int i = 0; i < 2; i++) CHECK_CU(cuMemFree(gone[i]));
    settle();
    CHECK_TRUE(tl_pool_used(pool) >= 4 * BLOCK); /* two in use, two ready */
    /* Two more blocks in use, of another size: the store makes room. */
    for (int i = 0; i < 2; i++) CHECK_CU(cuMemAlloc(&more[i], BLOCK / 2));
    settle();
    uint64_t used = tl_pool_used(pool);
    printf("limit 17 MiB: pool used %llu with 12 MiB in use\n", (unsigned long long)used);
    CHECK_TRUE(tl_pool_of(more[1]) == pool);
    CHECK_TRUE(used <= (17u << 20));
    for (int i = 0; i < 2; i++) CHECK_CU(cuMemFree(live[i]));
    for (int i = 0; i < 2; i++) CHECK_CU(cuMemFree(more[i]));
    return 0;
}

static int leave(void)
{
    CUcontext primary = tl_init(0), other;
    CUstream s;
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)); /* auto -> deferred */
    CUmemoryPool pool;
    uint64_t used = free_blocks(2, &pool);
    CHECK_TRUE(used >= 2 * BLOCK);
    CUdevice dev;
    CHECK_CU(cuCtxGetDevice(&dev));
    CHECK_CU(cuCtxCreate(&other, NULL, 0, dev)); /* a second context: -> sync */
    CHECK_CU(cuCtxSetCurrent(primary));
    uint64_t after = tl_pool_used(pool);
    printf("leave: pool used %llu -> %llu at the switch to sync\n", (unsigned long long)used,
           (unsigned long long)after);
    CHECK_TRUE(after < SLACK);
    CHECK_CU(cuCtxDestroy(other));
    CHECK_CU(cuStreamDestroy(s));
    return 0;
}

static int release(void)
{
    CUcontext primary = tl_init(0), again;
    CUdevice dev;
    CHECK_CU(cuCtxGetDevice(&dev));
    CHECK_CU(cuDevicePrimaryCtxRetain(&again, dev));
    CHECK_TRUE(again == primary);
    CUmemoryPool pool;
    CHECK_TRUE(free_blocks(2, &pool) >= 2 * BLOCK);
    CHECK_CU(cuDevicePrimaryCtxRelease(dev)); /* not the last reference */
    uint64_t after = tl_pool_used(pool);
    printf("release: pool used %llu after a primary context release\n", (unsigned long long)after);
    CHECK_TRUE(after < SLACK);
    return 0;
}

static int oom(void)
{
    tl_init(0);
    CUmemoryPool pool;
    /* 8 x 4 MiB of a 64 MiB device kept ready: 48 MiB in one block needs them. */
    uint64_t used = free_blocks(8, &pool);
    CHECK_TRUE(used >= 8 * BLOCK);
    CUdeviceptr big;
    CHECK_CU(cuMemAlloc(&big, 48ull << 20));
    CHECK_TRUE(tl_pool_of(big) == pool);
    CHECK_TRUE(tl_stats(0).trims >= 1);
    CHECK_CU(cuMemFree(big));
    return 0;
}

/* The ready blocks of one context are memory another context on the device
 * may need: its out-of-memory trim takes them back too. */
static int oom_other(void)
{
    CUcontext primary = tl_init(0), other;
    CUmemoryPool pool;
    CHECK_TRUE(free_blocks(8, &pool) >= 8 * BLOCK);
    CUdevice dev;
    CHECK_CU(cuCtxGetDevice(&dev));
    CHECK_CU(cuCtxCreate(&other, NULL, 0, dev));
    CUdeviceptr big;
    CHECK_CU(cuMemAlloc(&big, 48ull << 20));
    CHECK_TRUE(tl_pool_of(big) == pool);
    CHECK_CU(cuMemFree(big));
    CHECK_CU(cuCtxDestroy(other));
    CHECK_CU(cuCtxSetCurrent(primary));
    return 0;
}

/* A block freed while a capture is in progress stays allocated until the
 * capture ends, then goes back to its pool at the next call. */
static int held(void)
{
    tl_init(0);
    CUdeviceptr p, q;
    CUstream s;
    CUgraph g;
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK_CU(cuMemAlloc(&p, BLOCK));
    CUmemoryPool pool = tl_pool_of(p);
    CHECK_TRUE(pool != NULL);
    tl_fill(p, BLOCK, 0x5A5A5A5Au);
    CHECK_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK_CU(cuMemsetD32Async(p, 1u, 1, s));
    CHECK_CU(cuMemFree(p));
    uint64_t during = tl_pool_used(pool);
    CHECK_CU(cuStreamEndCapture(s, &g));
    CHECK_CU(cuGraphDestroy(g));
    CHECK_CU(cuMemAlloc(&q, SMALL));
    uint64_t after = tl_pool_used(pool);
    printf("held: pool used %llu during the capture, %llu after it\n", (unsigned long long)during,
           (unsigned long long)after);
    CHECK_TRUE(during >= BLOCK);
    CHECK_TRUE(after < BLOCK);
    CHECK_CU(cuMemFree(q));
    CHECK_CU(cuStreamDestroy(s));
    return 0;
}

#define CAPTURES 2000

static void *capture_loop(void *arg)
{
    CHECK_CU(cuCtxSetCurrent((CUcontext)arg));
    CUstream s;
    CUdeviceptr buf;
    /* Blocking: an event on the legacy stream (the per-stream fence) would
     * invalidate its capture as well as a context-wide one would. */
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_DEFAULT));
    CHECK_CU(cuMemAlloc(&buf, 4096));
    long lost = 0;
    for (unsigned i = 0; i < CAPTURES; i++) {
        CUgraph g = NULL;
        CHECK_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
        CHECK_CU(cuMemsetD32Async(buf, i, 1024, s));
        CUresult r = cuStreamEndCapture(s, &g);
        if (r != CUDA_SUCCESS) lost++;
        if (g) CHECK_CU(cuGraphDestroy(g));
    }
    CHECK_CU(cuMemFree(buf));
    CHECK_CU(cuStreamDestroy(s));
    return (void *)lost;
}

static int capture(void)
{
    tl_init(0);
    CUcontext ctx;
    CHECK_CU(cuCtxGetCurrent(&ctx));
    pthread_t t;
    CHECK_TRUE(pthread_create(&t, NULL, capture_loop, ctx) == 0);
    for (unsigned i = 0; i < 20 * CAPTURES; i++) {
        CUdeviceptr p;
        CHECK_CU(cuMemAlloc(&p, SMALL << (i % 4)));
        CHECK_CU(cuMemFree(p));
    }
    void *lost;
    CHECK_TRUE(pthread_join(t, &lost) == 0);
    printf("captures invalidated: %ld of %d\n", (long)lost, CAPTURES);
    CHECK_EQ((long)lost, 0);
    return 0;
}

/* capture-waits: a capture begun on another thread while cupool's pool
 * call on the legacy stream runs (the simulator's hook runs inside the
 * call, as a tool's callback does) begins only once the call returns. */
static CUcontext waits_ctx;
static CUstream waits_stream;
static atomic_int waits_hooked, waits_begun;
static pthread_t waits_thread;

static void *begin_capture(void *arg)
{
    (void)arg;
    CUgraph g;
    CHECK_CU(cuCtxSetCurrent(waits_ctx));
    CHECK_CU(cuStreamBeginCapture(waits_stream, CU_STREAM_CAPTURE_MODE_RELAXED));
    atomic_store(&waits_begun, 1);
    CHECK_CU(cuStreamEndCapture(waits_stream, &g));
    CHECK_CU(cuGraphDestroy(g));
    return NULL;
}

static void hook_begin_capture(void)
{
    if (atomic_exchange(&waits_hooked, 1)) return;
    CHECK_TRUE(pthread_create(&waits_thread, NULL, begin_capture, NULL) == 0);
    usleep(100 * 1000);
    CHECK_EQ(atomic_load(&waits_begun), 0);
}

static int capture_waits(void)
{
    waits_ctx = tl_init(0);
    void (*set_hook)(void (*)(void)) = (void (*)(void (*)(void)))dlsym(RTLD_DEFAULT, "simcuda_set_pool_call_hook");
    CHECK_TRUE(set_hook != NULL);
    CHECK_CU(cuStreamCreate(&waits_stream, CU_STREAM_DEFAULT));
    CUdeviceptr p;
    /* What cupool does once per device comes first. */
    CHECK_CU(cuMemAlloc(&p, BLOCK));
    CHECK_CU(cuMemFree(p));
    set_hook(hook_begin_capture);
    CHECK_CU(cuMemAlloc(&p, SMALL));
    set_hook(NULL);
    CHECK_TRUE(pthread_join(waits_thread, NULL) == 0);
    CHECK_EQ(atomic_load(&waits_begun), 1);
    CHECK_CU(cuMemFree(p));
    CHECK_CU(cuStreamDestroy(waits_stream));
    return 0;
}

static const tl_case_t cases[] = {
    {"reuse", reuse, {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=host", "SIMCUDA_EVENT_DELAY=3", "CUPOOL_STATS=1", NULL}, 0,
     "allocations served by a ready block"},
    {"off", off, {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=host", "CUPOOL_DEFERRED_READY=0", NULL}, 0},
    {"threshold0", off, {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=host", "CUPOOL_RELEASE_THRESHOLD=0", NULL}, 0},
    {"cap", cap, {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=host", "CUPOOL_DEFERRED_READY=8M", NULL}, 0},
    {"limit", limit, {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=host", "CUPOOL_LIMIT=17M", NULL}, 0},
    {"leave", leave, {"CUPOOL_FREE=auto", "CUPOOL_DEFERRED_ORDER=host", "CUPOOL_VERBOSE=1", NULL}, 0},
    {"release", release, {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=host", NULL}, 0},
    {"oom", oom, {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=host", "SIMCUDA_MEM=64M", NULL}, 1},
    {"oom-other-context", oom_other, {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=host", "SIMCUDA_MEM=64M", NULL}, 1},
    {"fence-context", reuse, {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=host", "SIMCUDA_EVENT_DELAY=3", "CUPOOL_VERBOSE=1", NULL}, 0,
     "deferred fences: one event for the whole context"},
    {"fence-streams", reuse,
     {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=host", "SIMCUDA_EVENT_DELAY=3", "CUPOOL_VERBOSE=1", "CUPOOL_DEFERRED_FENCE=streams", NULL}, 0,
     "deferred fences: an event on every stream (CUPOOL_DEFERRED_FENCE=streams)"},
    /* The real driver would look for the tool's library. */
    {"fence-tool", reuse,
     {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=host", "SIMCUDA_EVENT_DELAY=3", "CUPOOL_VERBOSE=1", "CUDA_INJECTION64_PATH=/no/tool.so", NULL}, 1,
     "deferred fences: an event on every stream (a CUDA tool is attached)"},
    {"fence-sanitizer", reuse,
     {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=host", "SIMCUDA_EVENT_DELAY=3", "CUPOOL_VERBOSE=1", "NV_SANITIZER_INJECTION_PORT_BASE=49152",
      NULL},
     1, "deferred fences: an event on every stream (a CUDA tool is attached)"},
    /* A driver that has cuCtxRecordEvent but refuses it. */
    {"fence-refused", reuse, {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=host", "SIMCUDA_EVENT_DELAY=3", "SIMCUDA_NO_CTX_RECORD_EVENT=1", NULL}, 1,
     "cuCtxRecordEvent failed (CUDA_ERROR_NOT_SUPPORTED); deferred fences record an event on every stream"},
    {"held", held, {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=host", "SIMCUDA_EVENT_DELAY=3", NULL}, 0},
    {"capture", capture, {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=host", NULL}, 0},
    {"capture-streams", capture, {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=host", "CUPOOL_DEFERRED_FENCE=streams", NULL}, 0},
    /* Captures with the frees ordered on the GPU. */
    {"capture-gpu", capture, {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=gpu", NULL}, 0},
    {"capture-streams-gpu", capture,
     {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=gpu", "CUPOOL_DEFERRED_FENCE=streams", NULL}, 0},

    {"ordered-reuse", ordered_reuse, {"CUPOOL_FREE=ordered", "CUPOOL_STATS=1", NULL}, 0,
     "allocations served by a ready block"},
    {"ordered-auto", ordered_reuse, {"CUPOOL_FREE=auto", "CUPOOL_DEFERRED_ORDER=host", NULL}, 0},
    {"ordered-off", off, {"CUPOOL_FREE=ordered", "CUPOOL_ORDERED_READY=0", NULL}, 0},
    {"ordered-threshold0", off, {"CUPOOL_FREE=ordered", "CUPOOL_RELEASE_THRESHOLD=0", NULL}, 0},
    {"ordered-cap", cap, {"CUPOOL_FREE=ordered", "CUPOOL_ORDERED_READY=8M", NULL}, 0},
    {"ordered-many-sizes", ordered_many_sizes, {"CUPOOL_FREE=ordered", NULL}, 0},
    {"ordered-over-cap", ordered_over_cap, {"CUPOOL_FREE=ordered", "CUPOOL_ORDERED_READY=8M", NULL}, 0},
    {"ordered-over-cap-stats", ordered_over_cap, {"CUPOOL_FREE=ordered", "CUPOOL_ORDERED_READY=8M", "CUPOOL_STATS=1", NULL},
     0, "freed blocks the store kept though larger than itself 3"},
    {"ordered-over-cap-threads", ordered_over_cap_threads, {"CUPOOL_FREE=ordered", "CUPOOL_ORDERED_READY=8M", NULL}, 0},
    {"ordered-miss", ordered_miss, {"CUPOOL_FREE=ordered", "CUPOOL_STATS=1", NULL}, 0,
     "large allocations the store made room for 1 (stored blocks handed back 8.0 MiB)"},
    {"ordered-miss-over-cap", ordered_miss, {"CUPOOL_FREE=ordered", "CUPOOL_ORDERED_READY=8M", NULL}, 0},
    {"ordered-limit", limit, {"CUPOOL_FREE=ordered", "CUPOOL_LIMIT=17M", NULL}, 0},
    {"ordered-release", release, {"CUPOOL_FREE=ordered", NULL}, 0},
    {"ordered-oom", oom, {"CUPOOL_FREE=ordered", "SIMCUDA_MEM=64M", NULL}, 1},
    {"ordered-oom-other-context", oom_other, {"CUPOOL_FREE=ordered", "SIMCUDA_MEM=64M", NULL}, 1},
    {"ordered-held", held, {"CUPOOL_FREE=ordered", NULL}, 0},
    {"ordered-capture", capture, {"CUPOOL_FREE=ordered", NULL}, 0},
    /* The pool calls on the legacy stream without the store, and `sync`'s
     * free after its synchronization, against captures on another thread. */
    {"ordered-capture-off", capture, {"CUPOOL_FREE=ordered", "CUPOOL_ORDERED_READY=0", NULL}, 0},
    {"sync-capture", capture, {"CUPOOL_FREE=sync", NULL}, 0},
    {"capture-waits", capture_waits, {"CUPOOL_FREE=ordered", "CUPOOL_ORDERED_READY=0", NULL}, 1},
    {"ordered-switch", ordered_switch, {"CUPOOL_FREE=auto", "CUPOOL_DEFERRED_ORDER=host", "CUPOOL_VERBOSE=1", NULL}, 0,
     "free mode ordered -> deferred"},
    {"ordered-leave", ordered_leave, {"CUPOOL_FREE=auto", "CUPOOL_DEFERRED_ORDER=host", NULL}, 0},
};

/* Under a CUDA tool auto records an event on every stream. */
static const char *skip(const tl_case_t *k)
{
    if (k->run == reuse && k->says && strstr(k->says, "context") && tl_cuda_tool_attached())
        return "a CUDA tool is attached";
    return NULL;
}

int main(int argc, char **argv)
{
    const tl_case_t *asked = tl_case_asked(cases, sizeof cases / sizeof cases[0], argc, argv);
    if (asked) return asked->run();
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    return tl_run_cases(cases, sizeof cases / sizeof cases[0], skip) ? 1 : 0;
}
