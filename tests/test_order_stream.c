/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The order stream (docs/DESIGN.md, "The order stream"): under the default
 * settings a program whose work runs on one non-blocking stream has its
 * frees ordered on that stream, so the memory it frees serves its next
 * allocations at once even while the GPU runs far behind the host; work
 * that moves between streams stays correct; streams used by turns move the
 * context to `deferred`.
 *
 * On the simulator, whose events complete only SIMCUDA_EVENT_DELAY after
 * they are recorded (a GPU steps behind the host), and whose race checker
 * (SIMCUDA_RACES=count) reports every access or free CUDA's stream order
 * does not place after the last one: one-stream frees 24 blocks of 64 MiB
 * with every fence pending and must hold one of them at most, with no race;
 * its control, the same program with CUPOOL_FREE=deferred, holds them while
 * their fences are pending and must fail.  moves and destroyed move the
 * order between the legacy, blocking and non-blocking streams and destroy
 * the order stream with its work queued; threads move it from four
 * threads at once; capture-moves moves it during a capture; by-turns
 * alternates two streams.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#define BLOCK (64ull << 20)
#define BLOCKS 24
#define WORDS (BLOCK / 4)

static long long (*races)(void);

static void find_races(void)
{
    races = (long long (*)(void))dlsym(RTLD_DEFAULT, "simcuda_races");
    CHECK_TRUE(races != NULL);
}

/* A training step's shape: allocate, give the block work on `stream`, free
 * it, the host never waiting for the GPU. */
static int one_stream(void)
{
    tl_init(0);
    find_races();
    CUstream s;
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    uint64_t most = 0;
    for (int i = 0; i < BLOCKS; i++) {
        CUdeviceptr b;
        CHECK_CU(cuMemAlloc(&b, BLOCK));
        CHECK_CU(cuMemsetD32Async(b, (unsigned)i, WORDS, s));
        CHECK_CU(cuMemFree(b));
        uint64_t held = tl_held();
        if (held > most) most = held;
    }
    CUdeviceptr probe;
    CHECK_CU(cuMemAlloc(&probe, BLOCK));
    CUmemoryPool pool = tl_pool_of(probe);
    CHECK_TRUE(pool != NULL);
    cuuint64_t reserved = 0;
    CHECK_CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &reserved));
    printf("%d x 64 MiB freed with every fence pending: at most %llu MiB held at once, the pool reserved %llu MiB "
           "at most; races %lld\n",
           BLOCKS, (unsigned long long)(most >> 20), (unsigned long long)(reserved >> 20), races());
    CHECK_CU(cuMemsetD32Async(probe, 7, WORDS, s));
    CHECK_CU(cuStreamSynchronize(s));
    CHECK_EQ(tl_spot_check(probe, BLOCK, 7), 0);
    CHECK_CU(cuMemFree(probe));
    CHECK_CU(cuStreamDestroy(s));
    CHECK_EQ(races(), 0);
    CHECK_TRUE(most <= BLOCK);
    CHECK_TRUE(reserved <= 2 * BLOCK);
    return 0;
}

/* Blocks freed on one stream and reused on another, every kind in turn:
 * each use must follow the last use of the block before it.  Two rounds
 * move the order 16 times, as many as `auto` follows within 10 s. */
static int moves(void)
{
    tl_init(0);
    find_races();
    CUstream nb1, nb2, blocking;
    CHECK_CU(cuStreamCreate(&nb1, CU_STREAM_NON_BLOCKING));
    CHECK_CU(cuStreamCreate(&nb2, CU_STREAM_NON_BLOCKING));
    CHECK_CU(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
    CUstream order[] = {nb1, CU_STREAM_LEGACY, nb2, blocking, nb1, CU_STREAM_PER_THREAD, nb2, nb1};
    size_t n = sizeof order / sizeof order[0];
    for (size_t round = 0; round < 2; round++) {
        for (size_t i = 0; i < n; i++) {
            CUdeviceptr b;
            CHECK_CU(cuMemAlloc(&b, 1 << 20));
            CHECK_CU(cuMemsetD32Async(b, (unsigned)i, (1 << 20) / 4, order[i]));
            CHECK_CU(cuMemFree(b));
        }
    }
    CHECK_CU(cuCtxSynchronize());
    printf("moves: races %lld\n", races());
    CHECK_EQ(races(), 0);
    CHECK_CU(cuStreamDestroy(nb1));
    CHECK_CU(cuStreamDestroy(nb2));
    CHECK_CU(cuStreamDestroy(blocking));
    return 0;
}

/* The order stream destroyed with its work queued: the order goes back to
 * the legacy stream after that work. */
static int destroyed(void)
{
    tl_init(0);
    find_races();
    for (int round = 0; round < 4; round++) {
        CUstream s;
        CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CUdeviceptr b;
        CHECK_CU(cuMemAlloc(&b, 1 << 20));
        CHECK_CU(cuMemsetD32Async(b, 1, (1 << 20) / 4, s));
        CHECK_CU(cuMemFree(b));
        CHECK_CU(cuStreamDestroy(s));
        CHECK_CU(cuMemAlloc(&b, 1 << 20));
        CHECK_CU(cuMemsetD32Async(b, 2, (1 << 20) / 4, CU_STREAM_LEGACY));
        CHECK_CU(cuMemFree(b));
    }
    CHECK_CU(cuCtxSynchronize());
    printf("destroyed: races %lld\n", races());
    CHECK_EQ(races(), 0);
    return 0;
}

/* Threads, each giving work to a stream of its own while the others move
 * the order away (a forced `ordered` moves it at every launch): a launch
 * or a pool call that missed a move is joined to the new order stream.
 * threads-late makes every memset wait 300 us in the driver before it
 * enqueues, so that other threads move the order between cupool's look at
 * the call and the enqueue. */
#define THREADS 4
static void *one_thread(void *arg)
{
    CUcontext ctx = arg;
    CHECK_CU(cuCtxSetCurrent(ctx));
    CUstream s;
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < 300; i++) {
        CUdeviceptr b;
        size_t size = (size_t)(1 + i % 5) << 16;
        CHECK_CU(cuMemAlloc(&b, size));
        CHECK_CU(cuMemsetD32Async(b, (unsigned)i, size / 4, s));
        CHECK_CU(cuMemFree(b));
    }
    CHECK_CU(cuStreamSynchronize(s));
    CHECK_CU(cuStreamDestroy(s));
    return NULL;
}

static int threads(void)
{
    CUcontext ctx = tl_init(0);
    find_races();
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) CHECK_TRUE(pthread_create(&t[i], NULL, one_thread, ctx) == 0);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    CHECK_CU(cuCtxSynchronize());
    printf("threads: races %lld\n", races());
    CHECK_EQ(races(), 0);
    return 0;
}

/* A block the order stream reused just before a capture began, given work
 * during it on another non-blocking stream (a move that needs no legacy
 * stream) and on a blocking stream (a move to the legacy stream's order,
 * the host waiting for the stream left): both follow the block's last use. */
static void reuse_then(CUstream from, CUstream to, CUstream capture)
{
    CUdeviceptr a, b;
    CHECK_CU(cuMemAlloc(&a, 1 << 20));
    CHECK_CU(cuMemsetD32Async(a, 1, (1 << 20) / 4, from));
    CHECK_CU(cuMemFree(a));
    CHECK_CU(cuMemAlloc(&b, 1 << 20)); /* a again, in the order of `from` */
    CHECK_CU(cuStreamBeginCapture_v2(capture, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK_CU(cuMemsetD32Async(b, 2, (1 << 20) / 4, to));
    CUgraph graph;
    CHECK_CU(cuStreamEndCapture(capture, &graph));
    CHECK_CU(cuGraphDestroy(graph));
    CHECK_CU(cuMemFree(b));
}

static int capture_moves(void)
{
    tl_init(0);
    find_races();
    CUstream s1, s2, blocking, capture;
    CHECK_CU(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CHECK_CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CHECK_CU(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
    CHECK_CU(cuStreamCreate(&capture, CU_STREAM_NON_BLOCKING));
    reuse_then(s1, s2, capture);
    reuse_then(s2, blocking, capture);
    CHECK_CU(cuCtxSynchronize());
    printf("capture-moves: races %lld\n", races());
    CHECK_EQ(races(), 0);
    CHECK_CU(cuStreamDestroy(s1));
    CHECK_CU(cuStreamDestroy(s2));
    CHECK_CU(cuStreamDestroy(blocking));
    CHECK_CU(cuStreamDestroy(capture));
    return 0;
}

/* Two streams given work by turns, faster than the order may move: the
 * context goes to `deferred`, and stays correct. */
static int by_turns(void)
{
    tl_init(0);
    find_races();
    CUstream s[2];
    CHECK_CU(cuStreamCreate(&s[0], CU_STREAM_NON_BLOCKING));
    CHECK_CU(cuStreamCreate(&s[1], CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < 200; i++) {
        CUdeviceptr b;
        CHECK_CU(cuMemAlloc(&b, 1 << 20));
        CHECK_CU(cuMemsetD32Async(b, (unsigned)i, (1 << 20) / 4, s[i % 2]));
        CHECK_CU(cuMemFree(b));
    }
    CHECK_CU(cuCtxSynchronize());
    printf("by-turns: races %lld\n", races());
    CHECK_EQ(races(), 0);
    CHECK_CU(cuStreamDestroy(s[0]));
    CHECK_CU(cuStreamDestroy(s[1]));
    return 0;
}

/* one-stream moves the order twice: to its stream at the first work, and
 * back to the legacy stream for the check's synchronous copies. */
static const tl_case_t cases[] = {
    {"one-stream", one_stream,
     {"CUPOOL_FREE=auto", "SIMCUDA_EVENT_DELAY=1000000", "SIMCUDA_MEM=4G", "SIMCUDA_RACES=count", "CUPOOL_STATS=1", NULL}, 1,
     "moves of the order stream to the stream given work 2"},
    {"moves", moves, {"CUPOOL_FREE=auto", "SIMCUDA_RACES=count", NULL}, 1, NULL},
    {"moves-ordered", moves, {"SIMCUDA_RACES=count", "CUPOOL_FREE=ordered", NULL}, 1, NULL},
    {"threads", threads, {"SIMCUDA_RACES=count", "CUPOOL_FREE=ordered", NULL}, 1, NULL},
    {"capture-moves", capture_moves, {"SIMCUDA_RACES=count", "CUPOOL_FREE=ordered", NULL}, 1, NULL},
    {"capture-moves-auto", capture_moves, {"SIMCUDA_RACES=count", "CUPOOL_FREE=auto", "CUPOOL_VERBOSE=1", NULL}, 1, NULL},
    {"threads-late", threads, {"SIMCUDA_RACES=count", "CUPOOL_FREE=ordered", "SIMCUDA_ENQUEUE_US=300", NULL}, 1, NULL},
    {"destroyed", destroyed, {"CUPOOL_FREE=auto", "SIMCUDA_RACES=count", "SIMCUDA_EVENT_DELAY=1000000", NULL}, 1, NULL},
    {"by-turns", by_turns, {"CUPOOL_FREE=auto", "SIMCUDA_RACES=count", "CUPOOL_VERBOSE=1", NULL}, 1,
     "work on several streams by turns; frees wait for fences"},
};

int main(int argc, char **argv)
{
    /* The control: one-stream with every free waiting for its fence on the
     * host must fail. */
    static const tl_control_t control = {
        "one-stream",
        {"CUPOOL_FREE=deferred", "SIMCUDA_EVENT_DELAY=1000000", "SIMCUDA_MEM=4G", "SIMCUDA_RACES=count", NULL},
        "CUPOOL_FREE=deferred"};
    return tl_sim_cases_main(cases, sizeof cases / sizeof cases[0], argc, argv, &control);
}
