/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proves cupool follows a capture to its end, and a stream or context to
 * its destruction, in the cases where losing track of one would make it
 * hold every later free or hand a block out twice:
 * - cuCtxDestroy on a primary context, which the driver refuses: the
 *   context's live blocks must stay the program's (distinct addresses, both
 *   frees succeed);
 * - a capture of stream 0 in a per-thread-default-stream build (the _ptsz
 *   entry points): its end must be seen, or every later free would be held;
 * - a cuStreamEndCapture that fails (NULL graph pointer) leaves the capture
 *   going: a free during it must not touch the legacy stream and invalidate
 *   it, and the real end must still succeed;
 * - a stream, a context or the primary context (reset, or released for the
 *   last time) destroyed while a stream captures, where the driver lets it
 *   be: the capture is over, or every later free would be held for it;
 * - a non-blocking stream destroyed while its work still writes a block the
 *   program frees afterwards (natively cuMemFree waits for that work), with
 *   deferred fences made per stream (CUPOOL_DEFERRED_FENCE=streams, as under
 *   a CUDA tool): a later fence must still wait for that work, or the block
 *   comes back while it is written.  On the simulator the race checker
 *   stops the process if it does; on a GPU the block must read back as the
 *   program's new fill.
 * Each case runs as its own child process (cupool's state is per process).
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <string.h>

#define MIB (1u << 20)

static int primary_destroy(void)
{
    CUcontext ctx = tl_init(0);
    CUdeviceptr a, b;
    CHECK_CU(cuMemAlloc(&a, MIB));
    CUresult r = cuCtxDestroy(ctx);
    printf("cuCtxDestroy(primary): %s\n", check_result_name(r));
    if (r == CUDA_SUCCESS) return CHECK_SKIP; /* this driver destroys primaries: nothing to compare */
    CHECK_CU(cuMemAlloc(&b, MIB));
    CHECK_NE(a, b);
    CHECK_CU(cuMemFree(a));
    CHECK_CU(cuMemFree(b));
    return 0;
}

/* Built per-thread (tests/helpers/per_thread_capture.c): stream 0 is the
 * per-thread default stream. */
int per_thread_capture(void);

static int failed_end(void)
{
    tl_init(0);
    CUstream s;
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_DEFAULT));
    CUdeviceptr a;
    CHECK_CU(cuMemAlloc(&a, MIB));
    CHECK_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK_CU_EQ(cuStreamEndCapture(s, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_CU(cuMemFree(a));
    CUstreamCaptureStatus status;
    CHECK_CU(cuStreamIsCapturing(s, &status));
    CHECK_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CUgraph g;
    CHECK_CU(cuStreamEndCapture(s, &g));
    CHECK_CU(cuGraphDestroy(g));
    /* The held free went back once the capture ended. */
    CHECK_CU(cuCtxSynchronize());
    if (check_cupool_loaded()) CHECK_EQ(tl_stats(0).in_use, 0);
    CHECK_CU(cuStreamDestroy(s));
    return 0;
}

/* A capture whose stream or context the driver destroyed (where it lets
 * that be) is over: a block freed afterwards is free memory again, not held
 * for the capture.  how: stream, context (one the program created), reset
 * or release (the primary context's last reference). */
static int capture_killed(const char *how)
{
    CUcontext ctx = tl_init(0), own = NULL;
    CUdevice dev;
    CHECK_CU(cuDeviceGet(&dev, 0));
    if (strcmp(how, "context") == 0) CHECK_CU(cuCtxCreate(&own, NULL, 0, dev));
    CUstream s;
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CUresult r = strcmp(how, "stream") == 0    ? cuStreamDestroy(s)
                 : strcmp(how, "context") == 0 ? cuCtxDestroy(own)
                 : strcmp(how, "reset") == 0   ? cuDevicePrimaryCtxReset(dev)
                                               : cuDevicePrimaryCtxRelease(dev);
    printf("%s while capturing: %s\n", how, check_result_name(r));
    if (r != CUDA_SUCCESS) { /* this driver keeps the capture going: nothing to see */
        CUgraph g;
        CHECK_CU(cuStreamEndCapture(s, &g));
        CHECK_CU(cuGraphDestroy(g));
        return CHECK_SKIP;
    }
    if (strcmp(how, "stream") != 0) CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK_CU(cuCtxSetCurrent(ctx));
    /* cuMemGetInfo counts what the pools keep unused as free. */
    size_t free0, free1, total;
    CHECK_CU(cuMemGetInfo(&free0, &total));
    CUdeviceptr a;
    CHECK_CU(cuMemAlloc(&a, 64 * MIB));
    CHECK_CU(cuMemFree(a));
    CHECK_CU(cuCtxSynchronize());
    CHECK_CU(cuMemGetInfo(&free1, &total));
    printf("free memory: %zu MiB before the block, %zu MiB after its free\n", free0 / MIB, free1 / MIB);
    CHECK_TRUE(free1 + 32 * MIB >= free0);
    return 0;
}

static int destroyed_writer(void)
{
    tl_init(0);
    CUstream s;
    CUdeviceptr old_block, block;
    size_t bytes = 16 * MIB;
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)); /* auto -> deferred */
    CHECK_CU(cuMemAlloc(&old_block, bytes));
    CHECK_CU(cuMemsetD8Async(old_block, 1, bytes, s));
    CHECK_CU(cuStreamDestroy(s));
    CHECK_CU(cuMemFree(old_block));
    for (int i = 0; i < 4; i++) {
        CHECK_CU(cuMemAlloc(&block, bytes));
        tl_fill(block, bytes, 0x600d0000u + (unsigned)i);
        CHECK_EQ(tl_spot_check(block, bytes, 0x600d0000u + (unsigned)i), 0);
        CHECK_CU(cuMemFree(block));
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--primary") == 0) return primary_destroy();
    if (argc > 1 && strcmp(argv[1], "--ptds") == 0) return per_thread_capture();
    if (argc > 1 && strcmp(argv[1], "--end") == 0) return failed_end();
    if (argc > 2 && strcmp(argv[1], "--killed") == 0) return capture_killed(argv[2]);
    if (argc > 1 && strcmp(argv[1], "--destroyed-writer") == 0) return destroyed_writer();
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    /* Each case's arguments, and the environment its child runs with. */
    static const char *const per_stream_fences[] = {"CUPOOL_DEFERRED_FENCE=streams", NULL};
    static const struct {
        const char *arg, *arg2;
        const char *const *env;
    } cases[] = {{"--primary", NULL, NULL},          {"--ptds", NULL, NULL},
                 {"--end", NULL, NULL},              {"--killed", "stream", NULL},
                 {"--killed", "context", NULL},      {"--killed", "reset", NULL},
                 {"--killed", "release", NULL},      {"--destroyed-writer", NULL, per_stream_fences}};
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *args[] = {cases[i].arg, cases[i].arg2, NULL};
        tl_child_t native, pooled;
        tl_run_self(args, cases[i].env, 1, 60, &native);
        tl_run_self(args, cases[i].env, 0, 60, &pooled);
        /* What works natively must work with cupool. */
        int ok = native.status != 0 || pooled.status == 0 || pooled.status == CHECK_SKIP;
        char name[64];
        snprintf(name, sizeof name, "%s%s%s", cases[i].arg, cases[i].arg2 ? " " : "",
                 cases[i].arg2 ? cases[i].arg2 : "");
        printf("%-18s native %d, cupool %d: %s\n", name, native.status, pooled.status, ok ? "passed" : "FAILED");
        if (!ok) tl_child_dump(name, &pooled), failed++;
        tl_child_free(&native);
        tl_child_free(&pooled);
    }
    return failed ? 1 : 0;
}
