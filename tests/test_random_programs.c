/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proves cupool keeps random correct programs correct in every free mode:
 * each program, generated from a seed, is a sequence of driver calls that is
 * free of races natively (cuMemAlloc memory is usable on every stream at
 * once, cuMemFree waits for the device), and under cupool it must stay so.
 * The simulator's race checker (tests/sim/sim_race.c) is the judge: it stops
 * the process at the first access or free that CUDA's stream order leaves
 * unordered.  Data is checked too, each buffer read back against the byte
 * it was last set to.
 *
 * A program creates and destroys blocking and non-blocking streams,
 * allocates buffers of 1 byte to 4 MiB (cuMemAlloc and cuMemAllocPitch),
 * each owned by one stream (the legacy stream, the per-thread stream or a
 * created one), writes them there (cuMemsetD8Async, or from the host with
 * cuMemcpyHtoD on the legacy stream), copies between buffers of one owner,
 * hands a buffer to another stream with an event, reads it back, writes it
 * through a graph (built, or captured), synchronizes a stream or the
 * context now and then, makes and frees stream-ordered blocks of its own
 * (which cupool passes on), and frees buffers in any order; one program in
 * four meets a second context.  It also allocates pinned host memory
 * (cuMemAllocHost, cuMemHostAlloc with any flags) and managed memory
 * (cuMemAllocManaged), of a few sizes so that cupool's kept store serves
 * them again, each owned by the host or by the stream last given device
 * work on it: the host writes and reads them (reported to the checker with
 * simcuda_host_access) once it has synchronized with their owner, streams
 * copy between them and device buffers, set them and prefetch managed ones
 * after an event hand-over, and they are freed with that work in flight (a
 * free waits for the device natively), the second context's work among it.
 * The modes: native (which checks the generator), auto, deferred and
 * sync; `ordered` and `auto` once more on programs whose streams are all
 * blocking, the programs `ordered` is made for; then again with 1 MiB
 * stores (blocks handed back all the time, the kept store's too), the split
 * policy and every graph memset rewritten into a kernel node.  Under cupool
 * some pinned or managed allocations must have been served by kept blocks.
 * Simulator only.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPS 400
#define MAX_STREAMS 6
#define MAX_BUFFERS 12

typedef struct {
    CUdeviceptr ptr;
    size_t bytes;
    CUstream owner;
    unsigned char value;
} buffer_t;

/* Pinned host or managed memory; owner NULL: the host may touch it now. */
typedef struct {
    unsigned char *ptr;
    size_t bytes;
    int call; /* 0: cuMemAllocHost, 1: cuMemHostAlloc, 2: cuMemAllocManaged */
    unsigned flags;
    int managed;
    CUstream owner;
    unsigned char value;
} host_buffer_t;

#define MAX_HOST_BUFFERS 6

#define THREADS 4
#define SCRATCH_BYTES ((size_t)4 << 20)

/* The simulator's hooks: the host's loads and stores for the race checker,
 * and the driver's own pinned and managed allocations. */
static void (*sim_host_access)(const void *p, size_t bytes, int write);
static long long (*sim_host_allocations)(int managed);
static _Atomic long long host_allocations;

/* Each thread runs programs of its own. */
static int blocking_only;
static CUcontext primary;
static __thread uint64_t rng;
static __thread int threaded;
static __thread CUstream streams[MAX_STREAMS + 2]; /* [0] legacy, [1] per-thread, then created ones */
static __thread int nstreams;
static __thread buffer_t buffers[MAX_BUFFERS];
static __thread int nbuffers;
static __thread unsigned char *scratch;
static __thread host_buffer_t hbufs[MAX_HOST_BUFFERS];
static __thread int nhbufs;

/* The thread's host buffer for reads and host writes, made at its first use. */
static unsigned char *host_buffer(void)
{
    if (!scratch && !(scratch = malloc(SCRATCH_BYTES))) CHECK_FAIL("no memory for the host buffer");
    return scratch;
}

static unsigned pick(unsigned n) { return (unsigned)(tl_rand(&rng) % n); }

static CUstream any_stream(void) { return streams[pick((unsigned)nstreams)]; }

/* Orders `to` after everything enqueued on `from` so far. */
static void hand_over(CUstream from, CUstream to)
{
    CUevent e;
    CHECK_CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CHECK_CU(cuEventRecord(e, from));
    CHECK_CU(cuStreamWaitEvent(to, e, 0));
    CHECK_CU(cuEventDestroy(e));
}

static void op_create_stream(void)
{
    if (nstreams == MAX_STREAMS + 2) return;
    unsigned flags = blocking_only || pick(2) ? CU_STREAM_DEFAULT : CU_STREAM_NON_BLOCKING;
    CHECK_CU(cuStreamCreate(&streams[nstreams++], flags));
}

static void op_destroy_stream(void)
{
    if (nstreams <= 2) return;
    int i = 2 + (int)pick((unsigned)nstreams - 2);
    CUstream s = streams[i];
    for (int b = 0; b < nbuffers; b++) {
        if (buffers[b].owner != s) continue;
        hand_over(s, CU_STREAM_LEGACY);
        buffers[b].owner = CU_STREAM_LEGACY;
    }
    for (int h = 0; h < nhbufs; h++) {
        if (hbufs[h].owner != s) continue;
        hand_over(s, CU_STREAM_LEGACY);
        hbufs[h].owner = CU_STREAM_LEGACY;
    }
    CHECK_CU(cuStreamDestroy(s));
    streams[i] = streams[--nstreams];
}

static void op_alloc(void)
{
    if (nbuffers == MAX_BUFFERS) return;
    buffer_t *b = &buffers[nbuffers];
    size_t bytes = 1 + (size_t)(tl_rand(&rng) % ((size_t)1 << pick(23)));
    if (pick(8) == 0) {
        size_t pitch, width = 1 + bytes % 4096, height = 1 + pick(64);
        CHECK_CU(cuMemAllocPitch(&b->ptr, &pitch, width, height, 4));
        bytes = pitch * height;
    } else {
        CHECK_CU(cuMemAlloc(&b->ptr, bytes));
    }
    b->bytes = bytes;
    b->owner = any_stream();
    b->value = (unsigned char)pick(256);
    CHECK_CU(cuMemsetD8Async(b->ptr, b->value, bytes, b->owner));
    nbuffers++;
}

static void op_free(void)
{
    if (nbuffers == 0) return;
    int i = (int)pick((unsigned)nbuffers);
    CHECK_CU(cuMemFree(buffers[i].ptr));
    buffers[i] = buffers[--nbuffers];
}

static void op_write(void)
{
    if (nbuffers == 0) return;
    buffer_t *b = &buffers[pick((unsigned)nbuffers)];
    b->value = (unsigned char)pick(256);
    CHECK_CU(cuMemsetD8Async(b->ptr, b->value, b->bytes, b->owner));
}

/* A copy between two buffers of one size: the source is handed to the
 * destination's stream first. */
static void op_copy(void)
{
    if (nbuffers < 2) return;
    buffer_t *src = &buffers[pick((unsigned)nbuffers)], *dst = &buffers[pick((unsigned)nbuffers)];
    if (src == dst) return;
    size_t bytes = src->bytes < dst->bytes ? src->bytes : dst->bytes;
    if (src->owner != dst->owner) {
        hand_over(src->owner, dst->owner);
        src->owner = dst->owner;
    }
    CHECK_CU(cuMemcpyDtoDAsync(dst->ptr, src->ptr, bytes, dst->owner));
    if (bytes < dst->bytes) CHECK_CU(cuMemsetD8Async(dst->ptr + bytes, src->value, dst->bytes - bytes, dst->owner));
    dst->value = src->value;
}

static void op_hand_over(void)
{
    if (nbuffers == 0) return;
    buffer_t *b = &buffers[pick((unsigned)nbuffers)];
    CUstream to = any_stream();
    if (to == b->owner) return;
    hand_over(b->owner, to);
    b->owner = to;
}

static void op_read_back(void)
{
    if (nbuffers == 0) return;
    buffer_t *b = &buffers[pick((unsigned)nbuffers)];
    unsigned char *host = host_buffer();
    CHECK_CU(cuMemcpyDtoHAsync(host, b->ptr, b->bytes, b->owner));
    CHECK_CU(cuStreamSynchronize(b->owner));
    for (size_t i = 0; i < b->bytes; i++)
        if (host[i] != b->value) CHECK_FAIL("byte %zu of a %zu-byte buffer is %u, not %u", i, b->bytes, host[i], b->value);
}

static void op_synchronize(void)
{
    if (pick(3) == 0) CHECK_CU(cuCtxSynchronize());
    else CHECK_CU(cuStreamSynchronize(any_stream()));
}

/* A write as a graph's memset node (which cupool may rewrite into a kernel
 * node), built by hand or captured from the owner stream (not the legacy or
 * per-thread one, which cannot be captured here), launched there.  With
 * threads, a capture is relaxed and on a non-blocking stream: a global one
 * forbids the other threads' allocations and synchronizations, and their
 * legacy-stream work would join a blocking stream's capture. */
static void op_graph_write(void)
{
    if (nbuffers == 0) return;
    buffer_t *b = &buffers[pick((unsigned)nbuffers)];
    CUcontext ctx;
    CUgraph g;
    CUgraphExec exec;
    CHECK_CU(cuCtxGetCurrent(&ctx));
    b->value = (unsigned char)pick(256);
    int captured = b->owner != CU_STREAM_LEGACY && b->owner != CU_STREAM_PER_THREAD && pick(2);
    if (captured && threaded) {
        unsigned flags;
        CHECK_CU(cuStreamGetFlags(b->owner, &flags));
        captured = flags == CU_STREAM_NON_BLOCKING;
    }
    if (captured) {
        int global = !threaded && pick(2);
        CHECK_CU(cuStreamBeginCapture(b->owner, global ? CU_STREAM_CAPTURE_MODE_GLOBAL : CU_STREAM_CAPTURE_MODE_RELAXED));
        CHECK_CU(cuMemsetD8Async(b->ptr, b->value, b->bytes, b->owner));
        CHECK_CU(cuStreamEndCapture(b->owner, &g));
    } else {
        CUgraphNode node;
        CUDA_MEMSET_NODE_PARAMS p = {
            .dst = b->ptr, .pitch = b->bytes, .value = b->value, .elementSize = 1, .width = b->bytes, .height = 1,
        };
        CHECK_CU(cuGraphCreate(&g, 0));
        CHECK_CU(cuGraphAddMemsetNode(&node, g, NULL, 0, &p, ctx));
    }
    CHECK_CU(cuGraphInstantiate(&exec, g, 0));
    CHECK_CU(cuGraphLaunch(exec, b->owner));
    CHECK_CU(cuGraphExecDestroy(exec));
    CHECK_CU(cuGraphDestroy(g));
}

static void op_host_free(void);
static void host_owns(host_buffer_t *h);
static void host_alloc_as(int call, unsigned flags, size_t bytes);

/* Another context on the device for a while (auto turns sync): a buffer of
 * its own, written and freed there, one of the program's pinned or managed
 * buffers written by one of its streams and freed (then allocated again) by
 * the program's context with that write in flight, and one of each kind of
 * the program's freed while it is current (the free goes to the context
 * that allocated the block). */
static void op_other_context(void)
{
    CUcontext self, other;
    CUdevice dev;
    CHECK_CU(cuCtxGetCurrent(&self));
    CHECK_CU(cuCtxGetDevice(&dev));
    /* A pinned or managed buffer the host takes back first (its owner is a
     * stream of this context). */
    host_buffer_t *h = nhbufs ? &hbufs[pick((unsigned)nhbufs)] : NULL;
    if (h) host_owns(h);
    CHECK_CU(cuCtxCreate(&other, NULL, 0, dev));
    CUdeviceptr p;
    size_t bytes = 1 + pick(1 << 20);
    CHECK_CU(cuMemAlloc(&p, bytes));
    CHECK_CU(cuMemsetD8Async(p, 0x5a, bytes, CU_STREAM_LEGACY));
    if (h) {
        /* The other context's stream writes it; this context frees it with
         * that write in flight, and allocates its like at once, which the
         * host writes. */
        CUstream os;
        CHECK_CU(cuStreamCreate(&os, CU_STREAM_NON_BLOCKING));
        CHECK_CU(cuMemsetD8Async((CUdeviceptr)(uintptr_t)h->ptr, 0x6b, h->bytes, os));
        CHECK_CU(cuCtxSetCurrent(self));
        host_buffer_t like = *h;
        if (h->managed) CHECK_CU(cuMemFree((CUdeviceptr)(uintptr_t)h->ptr));
        else CHECK_CU(cuMemFreeHost(h->ptr));
        *h = hbufs[--nhbufs];
        host_alloc_as(like.call, like.flags, like.bytes);
        CHECK_CU(cuCtxSetCurrent(other));
        CHECK_CU(cuStreamDestroy(os));
    }
    if (nbuffers) op_free();
    if (nhbufs) op_host_free();
    if (pick(2)) CHECK_CU(cuMemFree(p)); /* else it dies with its context */
    CHECK_CU(cuCtxDestroy(other));
    CHECK_CU(cuCtxSetCurrent(self));
}

/* A write from the host (cuMemcpyHtoD, on the legacy stream), the buffer
 * handed to the legacy stream first. */
static void op_host_write(void)
{
    if (nbuffers == 0) return;
    buffer_t *b = &buffers[pick((unsigned)nbuffers)];
    unsigned char *host = host_buffer();
    if (b->owner != CU_STREAM_LEGACY) hand_over(b->owner, CU_STREAM_LEGACY);
    b->owner = CU_STREAM_LEGACY;
    b->value = (unsigned char)pick(256);
    memset(host, b->value, b->bytes);
    CHECK_CU(cuMemcpyHtoD(b->ptr, host, b->bytes));
}

/* ---- pinned host and managed memory ----------------------------------------- */

static void host_touch(const void *p, size_t bytes, int write)
{
    if (sim_host_access) sim_host_access(p, bytes, write);
}

/* The host takes the buffer back: it waits for its owner stream. */
static void host_owns(host_buffer_t *h)
{
    if (h->owner) CHECK_CU(cuStreamSynchronize(h->owner));
    h->owner = NULL;
}

/* The buffer's device work moves to stream s (an event orders s after its
 * owner); the host may no longer touch it without waiting for s. */
static void stream_owns(host_buffer_t *h, CUstream s)
{
    if (h->owner && h->owner != s) hand_over(h->owner, s);
    h->owner = s;
}

/* A new buffer the host writes at once (a fresh allocation is ready for it). */
static void host_alloc_as(int call, unsigned flags, size_t bytes)
{
    if (nhbufs == MAX_HOST_BUFFERS) return;
    host_buffer_t *h = &hbufs[nhbufs];
    void *p = NULL;
    CUdeviceptr m;
    switch (call) {
    case 0: CHECK_CU(cuMemAllocHost(&p, bytes)); break;
    case 1: CHECK_CU(cuMemHostAlloc(&p, bytes, flags)); break;
    default:
        CHECK_CU(cuMemAllocManaged(&m, bytes, flags));
        p = (void *)(uintptr_t)m;
    }
    *h = (host_buffer_t){.ptr = p, .bytes = bytes, .call = call, .flags = flags, .managed = call == 2,
                         .value = (unsigned char)pick(256)};
    host_touch(p, bytes, 1);
    memset(p, h->value, bytes);
    nhbufs++;
    host_allocations++;
}

static void op_host_alloc(void)
{
    /* A few sizes, so that freed blocks serve again, and now and then any. */
    static const size_t sizes[] = {512, 4096, 4096, 65536, 1 << 20};
    size_t bytes = pick(8) ? sizes[pick(sizeof sizes / sizeof sizes[0])] : 1 + pick(1 << 18);
    int call = pick(4) < 2 ? (int)pick(2) : 2;
    unsigned flags = 0;
    if (call == 1) flags = pick(4) ? CU_MEMHOSTALLOC_PORTABLE : pick(2) ? CU_MEMHOSTALLOC_DEVICEMAP : 0;
    if (call == 2) flags = pick(4) ? CU_MEM_ATTACH_GLOBAL : CU_MEM_ATTACH_HOST;
    host_alloc_as(call, flags, bytes);
}

static void op_host_free(void)
{
    if (nhbufs == 0) return;
    int i = (int)pick((unsigned)nhbufs);
    host_buffer_t *h = &hbufs[i];
    if (h->managed) CHECK_CU(cuMemFree((CUdeviceptr)(uintptr_t)h->ptr));
    else CHECK_CU(cuMemFreeHost(h->ptr));
    hbufs[i] = hbufs[--nhbufs];
}

/* The host reads it back, or writes it. */
static void op_host_access(void)
{
    if (nhbufs == 0) return;
    host_buffer_t *h = &hbufs[pick((unsigned)nhbufs)];
    host_owns(h);
    if (pick(2)) {
        host_touch(h->ptr, h->bytes, 0);
        for (size_t i = 0; i < h->bytes; i++)
            if (h->ptr[i] != h->value)
                CHECK_FAIL("byte %zu of a %zu-byte %s buffer is %u, not %u", i, h->bytes, h->managed ? "managed" : "pinned",
                           h->ptr[i], h->value);
    } else {
        h->value = (unsigned char)pick(256);
        host_touch(h->ptr, h->bytes, 1);
        memset(h->ptr, h->value, h->bytes);
    }
}

/* Device work on it: a copy from or to a device buffer on that buffer's
 * stream, a memset, or a prefetch of managed memory. */
static void op_host_device_work(void)
{
    if (nhbufs == 0) return;
    host_buffer_t *h = &hbufs[pick((unsigned)nhbufs)];
    CUdeviceptr hp = (CUdeviceptr)(uintptr_t)h->ptr;
    unsigned what = pick(4);
    if (what < 2 && nbuffers > 0) {
        buffer_t *b = &buffers[pick((unsigned)nbuffers)];
        size_t bytes = b->bytes < h->bytes ? b->bytes : h->bytes;
        stream_owns(h, b->owner);
        if (what == 0) {
            CHECK_CU(cuMemcpyHtoDAsync(b->ptr, h->ptr, bytes, b->owner));
            if (bytes < b->bytes) CHECK_CU(cuMemsetD8Async(b->ptr + bytes, h->value, b->bytes - bytes, b->owner));
            b->value = h->value;
        } else {
            CHECK_CU(cuMemcpyDtoHAsync(h->ptr, b->ptr, bytes, b->owner));
            if (bytes < h->bytes) CHECK_CU(cuMemsetD8Async(hp + bytes, b->value, h->bytes - bytes, b->owner));
            h->value = b->value;
        }
        return;
    }
    CUstream s = any_stream();
    stream_owns(h, s);
    if (what == 3 && h->managed) {
        CUmemLocation loc = {pick(2) ? CU_MEM_LOCATION_TYPE_DEVICE : CU_MEM_LOCATION_TYPE_HOST, 0};
        CHECK_CU(cuMemPrefetchAsync(hp, h->bytes, loc, 0, s));
        return;
    }
    h->value = (unsigned char)pick(256);
    CHECK_CU(cuMemsetD8Async(hp, h->value, h->bytes, s));
}

/* The program's own stream-ordered block, which cupool passes to the
 * driver: allocated, written and freed on one stream. */
static void op_own_async_block(void)
{
    CUstream s = any_stream();
    CUdeviceptr p;
    size_t bytes = 1 + pick(1 << 20);
    CHECK_CU(cuMemAllocAsync(&p, bytes, s));
    CHECK_CU(cuMemsetD8Async(p, 0x33, bytes, s));
    CHECK_CU(cuMemFreeAsync(p, s));
}

static void (*const ops[])(void) = {
    op_create_stream, op_destroy_stream, op_alloc,      op_alloc,       op_alloc,      op_free,
    op_free,          op_free,           op_write,      op_write,       op_copy,       op_hand_over,
    op_read_back,     op_synchronize,    op_graph_write, op_host_write, op_own_async_block,
    op_host_alloc,    op_host_alloc,     op_host_free,   op_host_free,  op_host_access, op_host_device_work,
    op_host_device_work,
};

static void program(uint64_t seed)
{
    rng = seed * 0x9E3779B97F4A7C15ull + 1;
    int with_other_context = !blocking_only && seed % 4 == 0;
    streams[0] = CU_STREAM_LEGACY;
    streams[1] = CU_STREAM_PER_THREAD;
    nstreams = 2;
    for (int i = 0; i < OPS; i++) {
        /* One program in four meets another context once. */
        if (with_other_context && i == OPS / 2) op_other_context();
        ops[pick(sizeof ops / sizeof *ops)]();
    }
    while (nbuffers) {
        op_read_back();
        CHECK_CU(cuMemFree(buffers[--nbuffers].ptr));
    }
    while (nhbufs) op_host_free();
    while (nstreams > 2) CHECK_CU(cuStreamDestroy(streams[--nstreams]));
}

typedef struct {
    uint64_t first, count;
} seeds_t;

static void *run_programs(void *arg)
{
    const seeds_t *seeds = arg;
    threaded = seeds->first > 1000;
    CHECK_CU(cuCtxSetCurrent(primary));
    for (uint64_t seed = seeds->first; seed < seeds->first + seeds->count; seed++) program(seed);
    free(scratch);
    scratch = NULL;
    return NULL;
}

/* Half the programs one after the other, then the other half on THREADS
 * threads at once, each with its own streams and buffers: under cupool
 * they share the pools and stores. */
static int child(void)
{
    /* Under valgrind (tests/test_memcheck.sh) an eighth of them;
     * TEST_RANDOM_PROGRAMS=N runs N, for a longer search. */
    const char *valgrind = getenv("CUPOOL_TEST_VALGRIND"), *asked = getenv("TEST_RANDOM_PROGRAMS");
    uint64_t programs = valgrind && strcmp(valgrind, "1") == 0 ? 8 : 64;
    if (asked && atoi(asked) >= 2 * THREADS) programs = (uint64_t)atoi(asked);
    blocking_only = getenv("TEST_BLOCKING_ONLY") != NULL;
    sim_host_access = (void (*)(const void *, size_t, int))dlsym(RTLD_DEFAULT, "simcuda_host_access");
    sim_host_allocations = (long long (*)(int))dlsym(RTLD_DEFAULT, "simcuda_host_allocations");
    CHECK_TRUE(sim_host_access && sim_host_allocations);
    primary = tl_init(0);
    seeds_t alone = {1, programs / 2}, each[THREADS];
    run_programs(&alone);
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++) {
        each[t] = (seeds_t){1001 + (uint64_t)t * 1000, programs / 2 / THREADS};
        CHECK_EQ(pthread_create(&threads[t], NULL, run_programs, &each[t]), 0);
    }
    for (int t = 0; t < THREADS; t++) CHECK_EQ(pthread_join(threads[t], NULL), 0);
    CHECK_CU(cuCtxSynchronize());
    if (!tl_native()) CHECK_EQ(tl_stats(0).in_use, 0);
    /* Under cupool (unless the kinds pass through) freed blocks served again. */
    long long by_driver = sim_host_allocations(0) + sim_host_allocations(1);
    if (!tl_native() && by_driver >= host_allocations)
        CHECK_FAIL("all %lld pinned and managed allocations were the driver's", by_driver);
    printf("%llu programs of %d calls each (half of them on %d threads at once): no race, every byte as written; "
           "%lld pinned and managed allocations, %lld by the driver\n",
           (unsigned long long)programs, OPS, THREADS, (long long)host_allocations, by_driver);
    return 0;
}

int main(int argc, char **argv)
{
    if (check_real_driver()) {
        printf("test_random_programs: the simulator's race checker judges it: skipped on the real driver\n");
        return CHECK_SKIP;
    }
    if (argc > 1 && strcmp(argv[1], "--child") == 0) return child();
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    static const char *const modes[] = {"native", "auto", "deferred", "deferred-streams", "sync"};
    static const char *const blocking_modes[] = {"ordered", "auto"};
    static const char *const blocking[] = {"TEST_BLOCKING_ONLY=1", NULL};
    int failed = tl_run_modes(modes, 5, NULL, 120, NULL);
    printf("-- programs whose streams are all blocking:\n");
    failed += tl_run_modes(blocking_modes, 2, blocking, 120, NULL);
    /* Stores small enough to hand blocks back all the time, the split
     * policy, and every graph memset rewritten into a kernel node. */
    static const char *const small_stores[] = {"CUPOOL_ORDERED_READY=1M", "CUPOOL_DEFERRED_READY=1M",
                                               "CUPOOL_HOST_KEEP=1M", "CUPOOL_MANAGED_KEEP=1M",
                                               "CUPOOL_POLICY=split", "CUPOOL_MEMSET=kernel", NULL};
    static const char *const small_stores_blocking[] = {"CUPOOL_ORDERED_READY=1M", "CUPOOL_HOST_KEEP=1M",
                                                        "CUPOOL_MANAGED_KEEP=1M", "CUPOOL_POLICY=split",
                                                        "CUPOOL_MEMSET=kernel", "TEST_BLOCKING_ONLY=1", NULL};
    printf("-- with 1 MiB stores, the split policy and memset nodes rewritten:\n");
    failed += tl_run_modes(modes + 1, 4, small_stores, 120, NULL);
    failed += tl_run_modes(blocking_modes, 1, small_stores_blocking, 120, NULL);
    return failed ? 1 : 0;
}
