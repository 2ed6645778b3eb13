/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proves data stays correct in every free mode (ordered, deferred, sync,
 * auto), each in its own process: allocate, fill (cuMemsetD32Async and
 * cuMemcpyHtoDAsync), read back, free, on the legacy stream, on several
 * blocking streams, on per-thread default streams, on non-blocking streams,
 * across two contexts of one device and on a second device.  It proves the
 * deferred ways too: with SIMCUDA_EVENT_DELAY=3 (events answer NOT_READY
 * three times) a freed block goes back to its pool at once, its free
 * ordered behind a fence (CUPOOL_DEFERRED_ORDER=gpu, mode "deferred"), or
 * stays in use in its pool at the free and goes back only after later
 * allocations or a synchronization (`host`, mode "deferred-host"), never by
 * a host wait in the free.  Under auto it proves the mode follows the program:
 * `ordered` on a non-blocking stream too, its order stream moving to the
 * stream given work (docs/DESIGN.md, "The order stream"), -> deferred when
 * four streams are given work by turns, -> sync at a second context.  At the end the pools hold no used bytes beyond a probe block.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *mode;
static int sim;

/* ---- filling and checking ------------------------------------------------ */

static const size_t sizes[] = {256, 4096 + 12, 65536, 1 << 20, (3 << 20) + 4};

/* Fills a block on a stream: the whole with a word pattern, then its first
 * KiB from the host, reads both back on the same stream and frees the block
 * without a host synchronization in between. */
static void round_trip(CUstream s, size_t size, uint32_t pattern)
{
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, size));
    size_t words = size / 4;
    uint32_t head[256], back_head[256], back_tail = 0;
    for (int i = 0; i < 256; i++) head[i] = pattern ^ (uint32_t)i;
    CHECK_CU(cuMemsetD32Async(p, pattern, words, s));
    size_t head_bytes = size < sizeof head ? size / 4 * 4 : sizeof head;
    CHECK_CU(cuMemcpyHtoDAsync(p, head, head_bytes, s));
    CHECK_CU(cuMemcpyDtoHAsync(back_head, p, head_bytes, s));
    CHECK_CU(cuMemcpyDtoHAsync(&back_tail, p + (words - 1) * 4, 4, s));
    CHECK_CU(cuStreamSynchronize(s));
    CHECK_CU(cuMemFree(p));
    for (size_t i = 0; i < head_bytes / 4; i++)
        if (back_head[i] != head[i]) CHECK_FAIL("%s: word %zu of %zu bytes: 0x%08x != 0x%08x", mode, i, size, back_head[i], head[i]);
    if (words * 4 > head_bytes) CHECK_EQ(back_tail, pattern);
}

/* Several live blocks on several streams at once, filled, checked, freed. */
static void streams_scenario(CUstream *streams, int n, uint32_t seed)
{
    CUdeviceptr live[16];
    int k = 0;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < n; i++)
            for (size_t j = 0; j < sizeof sizes / sizeof sizes[0]; j++)
                round_trip(streams[i], sizes[j], seed + (uint32_t)(round * 100 + i * 10 + (int)j));
        /* Blocks that outlive a stream's work and are freed later, out of order. */
        for (int i = 0; i < n && k < 16; i++, k++) {
            CHECK_CU(cuMemAlloc(&live[k], 1 << 16));
            CHECK_CU(cuMemsetD32Async(live[k], seed + (uint32_t)k, (1 << 16) / 4, streams[i]));
        }
    }
    for (int i = 0; i < n; i++) CHECK_CU(cuStreamSynchronize(streams[i]));
    for (int i = k - 1; i >= 0; i--) {
        CHECK_EQ(tl_spot_check(live[i], 1 << 16, seed + (uint32_t)i), 0);
        CHECK_CU(cuMemFree(live[i]));
    }
}

static CUcontext primary0;

static void *ptds_thread(void *arg)
{
    uint32_t seed = (uint32_t)(uintptr_t)arg;
    CHECK_CU(cuCtxSetCurrent(primary0));
    CUstream s = CU_STREAM_PER_THREAD;
    streams_scenario(&s, 1, seed);
    return NULL;
}

/* ---- the deferred way ------------------------------------------------------ */

/* Whether the 4 MiB block freed is free again: an allocation of its size
 * takes no more from the pool than the pool used with the block in use
 * (it is the block itself, kept ready, or the memory it gave back).  Told
 * by the pool's used bytes, not cuMemGetInfo, which moves on its own under
 * compute-sanitizer. */
static int free_again(CUmemoryPool pool, uint64_t used_with_block)
{
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, 4 << 20));
    int again = tl_pool_used(pool) < used_with_block + (2 << 20);
    CHECK_CU(cuMemFree(p));
    return again;
}

/* What a free does with a block, as the mode in force says. */
enum free_kind {
    FREED_NOW, /* `sync`: back in the pool at once */
    KEPT,      /* `ordered`: kept for the next allocation of its size */
    DEFERRED,  /* `deferred`, CUPOOL_DEFERRED_ORDER=host: back in the pool (or kept) once its users are done */
    GPU_ORDERED, /* `deferred`, CUPOOL_DEFERRED_ORDER=gpu: back in the pool at once, its free ordered behind a fence */
};

/* After a free, does the memory in use drop at once, or only later? */
static void check_free_timing(enum free_kind kind)
{
    int expect_deferred = kind == DEFERRED;
    CUdeviceptr keep, big, drain;
    /* Let earlier deferred frees (some of several MiB) go back first. */
    CHECK_CU(cuCtxSynchronize());
    CHECK_CU(cuMemAlloc(&drain, 256));
    CHECK_CU(cuMemFree(drain));
    CHECK_CU(cuMemAlloc(&keep, 4096));
    CHECK_CU(cuMemAlloc(&big, 4 << 20));
    CUmemoryPool pool = tl_pool_of(keep);
    CHECK_TRUE(pool != NULL);
    CHECK_TRUE(tl_pool_of(big) == pool);
    uint64_t held_before = tl_held(), pool_before = tl_pool_used(pool);
    uint64_t before = expect_deferred ? held_before : pool_before;
    CHECK_CU(cuMemFree(big));
    uint64_t pool_at_free = tl_pool_used(pool), held_at_free = tl_held();
    uint64_t at_free = expect_deferred ? held_at_free : pool_at_free;
    /* A free may hand back older deferred blocks (all far smaller than
     * 2 MiB at this point): what matters is whether the 4 MiB block went. */
    if (kind == GPU_ORDERED) {
        /* Back in its pool while its fence is still pending (the
         * simulator's events answer NOT_READY): the pool holds none of it
         * for cupool, at the free or, where a batch of the per-stream
         * fan-in waits for company (up to a millisecond), after later
         * allocations.  The race checker proves the free ordered after
         * every use; test_kernel_race does with work in flight. */
        int i;
        for (i = 0; sim && i < 50 && tl_pool_used(pool) + (2 << 20) > pool_before; i++) {
            CUdeviceptr t;
            usleep(2000);
            CHECK_CU(cuMemAlloc(&t, 256));
            CHECK_CU(cuMemFree(t));
        }
        if (i == 50)
            CHECK_FAIL("%s: the freed block is still in its pool's use (%llu -> %llu): held by cupool", mode,
                       (unsigned long long)pool_before, (unsigned long long)tl_pool_used(pool));
        printf("%s: the freed block went back to its pool after %d later allocations\n", mode, i);
    } else if (expect_deferred) {
        /* The block waits for its events: still used right after the free.
         * Only the simulator (SIMCUDA_EVENT_DELAY) guarantees an event is
         * still pending here; an idle GPU completes it at once, and
         * test_kernel_race covers deferred frees behind real work. */
        if (!check_real_driver() && at_free + (2 << 20) < before)
            CHECK_FAIL("%s: the memory in use dropped at the free (%llu -> %llu): not deferred", mode,
                       (unsigned long long)before, (unsigned long long)at_free);
        /* ... and is free again (back in the pool, or kept ready for the
         * next allocation of its size) after later allocations, with no
         * synchronization. */
        int i;
        for (i = 0; i < 50; i++) {
            CUdeviceptr t;
            CHECK_CU(cuMemAlloc(&t, 256));
            CHECK_CU(cuMemFree(t));
            if (tl_held() + (2 << 20) < before) break;
            /* cuMemGetInfo moves on its own under compute-sanitizer (by
             * gigabytes): on a GPU, ten allocations, then the test below. */
            if (check_real_driver() && i == 9) break;
        }
        if (i == 50)
            CHECK_FAIL("%s: the deferred block never became free again (in use %llu)", mode,
                       (unsigned long long)tl_held());
        if (check_real_driver() && !free_again(pool, pool_at_free))
            CHECK_FAIL("%s: the deferred block never became free again", mode);
        printf("%s: deferred block returned after %d later allocations\n", mode, i + 1);
        /* ... or after a synchronization and one allocation. */
        CHECK_CU(cuMemAlloc(&big, 4 << 20));
        before = tl_held();
        uint64_t with_big = tl_pool_used(pool);
        CHECK_CU(cuMemFree(big));
        if (!check_real_driver()) CHECK_TRUE(tl_held() + (2 << 20) >= before);
        CHECK_CU(cuCtxSynchronize());
        CUdeviceptr t;
        CHECK_CU(cuMemAlloc(&t, 256));
        if (!free_again(pool, with_big))
            CHECK_FAIL("%s: after cuCtxSynchronize the deferred block is still in use", mode);
        CHECK_CU(cuMemFree(t));
    } else if (kind == KEPT && sim) {
        /* Free for the program at once (cuMemGetInfo), still allocated from
         * the pool, and the next allocation of its size is that block (on
         * a GPU cuMemGetInfo moves on its own; test_ordered_ready). */
        if (held_at_free + (2 << 20) >= held_before)
            CHECK_FAIL("%s: the memory in use did not drop at the free (%llu -> %llu)", mode,
                       (unsigned long long)held_before, (unsigned long long)held_at_free);
        if (pool_at_free + (2 << 20) < pool_before)
            CHECK_FAIL("%s: the block went back to the pool at its free: not kept for reuse", mode);
        CUdeviceptr again;
        CHECK_CU(cuMemAlloc(&again, 4 << 20));
        CHECK_EQ(again, big);
        CHECK_EQ(tl_pool_used(pool), pool_at_free);
        CHECK_CU(cuMemFree(again));
    } else if (sim) {
        /* The simulator runs the stream-ordered free at once. */
        if (at_free + (2 << 20) >= before)
            CHECK_FAIL("%s: the pool's used bytes did not drop at the free (%llu -> %llu)", mode,
                       (unsigned long long)before, (unsigned long long)at_free);
    }
    CHECK_CU(cuMemFree(keep));
}

/* Whether a free synchronizes: in `sync` each pooled free first
 * synchronizes the block's context, whichever path serves it; in `ordered`
 * (and `auto` before it leaves `ordered`) none does.  The simulator counts
 * the synchronizations, whose effect on data it cannot show: its work is
 * done when queued (test_kernel_race shows it on a GPU). */
static void check_free_synchronizes(void)
{
    if (!sim) return;
    long long (*synchronizations)(void) = (long long (*)(void))dlsym(RTLD_DEFAULT, "simcuda_ctx_synchronizations");
    CHECK_TRUE(synchronizations != NULL);
    enum { PAIRS = 16 };
    long long before = synchronizations();
    for (int i = 0; i < PAIRS; i++) {
        CUdeviceptr p;
        CHECK_CU(cuMemAlloc(&p, 4096));
        CHECK_CU(cuMemFree(p));
    }
    long long made = synchronizations() - before;
    if (strcmp(mode, "sync") == 0 && made < PAIRS)
        CHECK_FAIL("sync: %lld context synchronizations for %d frees", made, PAIRS);
    if ((strcmp(mode, "ordered") == 0 || strcmp(mode, "auto") == 0) && made != 0)
        CHECK_FAIL("%s: %lld context synchronizations for %d frees; expected none", mode, made, PAIRS);
}

/* ---- the child: one mode -------------------------------------------------- */

/* The flags of the streams outside the legacy stream's order.  `ordered` is
 * correct only while every stream waits for the legacy stream (DESIGN.md),
 * so forced, it gets blocking streams in their place: on the simulator its
 * race checker stops the process at the first non-blocking use, and on a GPU
 * that use can read or clobber a reused block (test_kernel_race shows it). */
static unsigned side_stream_flags(void)
{
    return CU_STREAM_NON_BLOCKING;
}

static int child(void)
{
    mode = getenv("CUPOOL_FREE");
    sim = !check_real_driver();
    int is_auto = strcmp(mode, "auto") == 0, is_deferred = strcmp(mode, "deferred") == 0;
    int is_sync = strcmp(mode, "sync") == 0;
    enum free_kind ordered_kind = is_sync ? FREED_NOW : KEPT;
    const char *order = getenv("CUPOOL_DEFERRED_ORDER");
    enum free_kind deferred_kind = order && strcmp(order, "host") == 0 ? DEFERRED : GPU_ORDERED;
    primary0 = tl_init(0);

    /* The used bytes of one probe block in an otherwise empty pool. */
    CUdeviceptr probe;
    CHECK_CU(cuMemAlloc(&probe, 256));
    CUmemoryPool pool0 = tl_pool_of(probe);
    CHECK_TRUE(pool0 != NULL);
    uint64_t probe_used = tl_pool_used(pool0);
    CHECK_CU(cuMemFree(probe));
    check_free_synchronizes();

    /* A: the legacy stream only. */
    CUstream legacy = NULL;
    streams_scenario(&legacy, 1, 0x10000000);
    check_free_timing(is_deferred ? deferred_kind : ordered_kind);

    /* B: several blocking streams. */
    CUstream blocking[3];
    for (int i = 0; i < 3; i++) CHECK_CU(cuStreamCreate(&blocking[i], CU_STREAM_DEFAULT));
    streams_scenario(blocking, 3, 0x20000000);
    check_free_timing(is_deferred ? deferred_kind : ordered_kind);

    /* C: per-thread default streams from two threads at once. */
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) pthread_create(&threads[i], NULL, ptds_thread, (void *)(uintptr_t)(0x30000000 + i * 0x1000));
    for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);

    /* D: non-blocking streams with blocking ones and the legacy stream, by
     * turns (auto turns deferred here: its order stream would move more
     * than 16 times within 10 s). */
    CUstream nonblocking[2];
    for (int i = 0; i < 2; i++) CHECK_CU(cuStreamCreate(&nonblocking[i], side_stream_flags()));
    CUstream mixed[4] = {nonblocking[0], blocking[0], nonblocking[1], NULL};
    streams_scenario(mixed, 4, 0x40000000);
    check_free_timing(is_deferred || is_auto ? deferred_kind : ordered_kind);
    for (int i = 0; i < 3; i++) CHECK_CU(cuStreamDestroy(blocking[i]));
    CHECK_CU(cuStreamDestroy(nonblocking[1]));
    streams_scenario(nonblocking, 1, 0x48000000);
    CHECK_CU(cuStreamDestroy(nonblocking[0]));

    /* E: a second device, if there is one. */
    int ndev = tl_device_count();
    if (ndev > 1) {
        CUcontext primary1 = tl_init(1);
        (void)primary1;
        CUstream s1;
        CHECK_CU(cuStreamCreate(&s1, side_stream_flags()));
        CUstream on1[2] = {NULL, s1}; /* two streams: auto stays ordered, its order stream moving */
        streams_scenario(on1, 2, 0x50000000);
        check_free_timing(is_deferred ? deferred_kind : ordered_kind);
        CHECK_CU(cuStreamDestroy(s1));
        cupool_stats_t s = tl_stats(1);
        CHECK_TRUE(s.pooled_allocs > 0);
        CHECK_EQ(s.in_use, 0);
        CHECK_CU(cuCtxSetCurrent(primary0));
    } else {
        printf("%s: one device only, second-device scenario skipped\n", mode);
    }

    /* F: two more contexts on device 0 (auto turns sync); a block allocated
     * in one is freed while the other is current. */
    {
        CUdevice dev0;
        CHECK_CU(cuDeviceGet(&dev0, 0));
        CUcontext c1, c2;
        CHECK_CU(cuCtxCreate(&c1, NULL, 0, dev0));
        CHECK_CU(cuCtxCreate(&c2, NULL, 0, dev0));
        CHECK_CU(cuCtxSetCurrent(c1));
        CUdeviceptr p1;
        CHECK_CU(cuMemAlloc(&p1, 1 << 20));
        tl_fill(p1, 1 << 20, 0x60000001);
        CHECK_EQ(tl_spot_check(p1, 1 << 20, 0x60000001), 0);
        CHECK_CU(cuCtxSetCurrent(c2));
        CUstream s2;
        CHECK_CU(cuStreamCreate(&s2, side_stream_flags()));
        streams_scenario(&s2, 1, 0x61000000);
        CHECK_CU(cuMemFree(p1)); /* owned by c1, c2 current */
        CHECK_CU(cuStreamDestroy(s2));
        CHECK_CU(cuCtxSetCurrent(primary0));
        CUstream l = NULL;
        streams_scenario(&l, 1, 0x62000000);
        CHECK_CU(cuCtxDestroy(c1));
        CHECK_CU(cuCtxDestroy(c2));
        CHECK_CU(cuCtxSetCurrent(primary0));
    }

    /* The end: nothing in use, every pooled allocation freed. */
    for (int d = 0; d < ndev && d < 2; d++) {
        cupool_stats_t s = tl_stats(d);
        if (s.in_use != 0 || s.pooled_allocs != s.pooled_frees)
            CHECK_FAIL("%s: device %d: in use %llu, pooled allocs %llu, frees %llu", mode, d,
                       (unsigned long long)s.in_use, (unsigned long long)s.pooled_allocs,
                       (unsigned long long)s.pooled_frees);
        printf("%s: device %d: %llu pooled allocations, all freed\n", mode, d, (unsigned long long)s.pooled_allocs);
    }
    CHECK_CU(cuCtxSynchronize());
    if (!is_sync && !is_auto && !(is_deferred && deferred_kind == GPU_ORDERED)) {
        /* Freed blocks cupool keeps ready for the next allocation of their
         * size stay used in the pool until they have waited a second for a
         * taker: then the next allocation hands them back (auto is `sync`
         * by now, which keeps none, and frees ordered on the GPU are kept
         * by none). */
        CHECK_TRUE(tl_pool_used(pool0) > probe_used);
        usleep(1100 * 1000);
    }
    CHECK_CU(cuMemAlloc(&probe, 256));
    CHECK_TRUE(tl_pool_of(probe) == pool0);
    uint64_t used = tl_pool_used(pool0);
    if (used != probe_used)
        CHECK_FAIL("%s: the pool holds %llu used bytes with one probe block live, expected %llu", mode,
                   (unsigned long long)used, (unsigned long long)probe_used);
    CHECK_CU(cuMemFree(probe));
    printf("%s: ok\n", mode);
    return 0;
}

/* auto must switch to deferred and to sync at least once each; a forced
 * mode must never change; cupool must not warn. */
static int switches_as_expected(const char *run_mode, const tl_child_t *c)
{
    int ok = 1;
    int to_deferred = tl_count_substr(c->err, "free mode ordered -> deferred");
    int to_sync = tl_count_substr(c->err, "-> sync");
    int warnings = tl_count_prefix(c->err, "cupool: warning:") + tl_count_prefix(c->err, "cupool: error:");
    if (strcmp(run_mode, "auto") == 0) {
        if (to_deferred < 1 || to_sync < 1) {
            fprintf(stderr, "auto: %d switches to deferred, %d to sync; expected at least one each\n", to_deferred,
                    to_sync);
            ok = 0;
        }
    } else if (to_deferred || to_sync) {
        fprintf(stderr, "%s: the free mode changed although it was forced\n", run_mode);
        ok = 0;
    }
    if (warnings) {
        fprintf(stderr, "%s: cupool warned\n", run_mode);
        ok = 0;
    }
    return ok;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--child") == 0) return child();
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    static const char *const modes[] = {"ordered", "deferred", "deferred-host", "deferred-streams", "sync", "auto"};
    static const char *const env[] = {"SIMCUDA_EVENT_DELAY=3", "CUPOOL_VERBOSE=1", NULL};
    return tl_run_modes(modes, 6, env, 120, switches_as_expected) ? 1 : 0;
}
