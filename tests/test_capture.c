/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proves a program that captures a graph in CU_STREAM_CAPTURE_MODE_GLOBAL on
 * a blocking stream, while another thread allocates and frees, gets no
 * failure from cupool that it would not get natively: each call's result is
 * compared with the same program run without cupool (a child), a call that
 * succeeds natively must succeed with cupool, and the capture itself must
 * end, instantiate and launch exactly as natively, the graph's memset
 * landing in memory cupool allocated.  Runs in every free mode.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

enum { OP_ALLOC_SMALL, OP_FREE_SMALL, OP_FREE_EARLIER, OP_ALLOC_LARGE, OP_MEMSET_PRIVATE, OP_FREE_LARGE,
       OP_END_CAPTURE, OP_INSTANTIATE, OP_LAUNCH, OP_SYNC, OP_DATA, OP_AFTER_ALLOC, OP_COUNT };
static const char *const op_names[OP_COUNT] = {
    "other thread: cuMemAlloc 4 KiB", "other thread: cuMemFree of it", "other thread: cuMemFree of a block from before",
    "other thread: cuMemAlloc 1 MiB", "other thread: cuMemsetD32 on its own stream", "other thread: cuMemFree 1 MiB",
    "cuStreamEndCapture", "cuGraphInstantiate", "cuGraphLaunch", "cuStreamSynchronize", "graph memset landed",
    "cuMemAlloc after the capture"};

static CUresult results[OP_COUNT];
static CUcontext ctx;
static CUdeviceptr earlier;
static pthread_barrier_t started, done;
static int relaxed;

static void *other(void *arg)
{
    (void)arg;
    CHECK_CU(cuCtxSetCurrent(ctx));
    CUstream own;
    CHECK_CU(cuStreamCreate(&own, CU_STREAM_NON_BLOCKING));
    if (relaxed) {
        /* This thread opts out of the global prohibition: natively its
         * allocations are then allowed during the other thread's capture. */
        CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
        CHECK_CU(cuThreadExchangeStreamCaptureMode(&m));
    }
    pthread_barrier_wait(&started);
    CUdeviceptr small = 0, large = 0;
    results[OP_ALLOC_SMALL] = cuMemAlloc(&small, 4096);
    results[OP_FREE_SMALL] = results[OP_ALLOC_SMALL] == CUDA_SUCCESS ? cuMemFree(small) : CUDA_ERROR_UNKNOWN;
    results[OP_FREE_EARLIER] = cuMemFree(earlier);
    results[OP_ALLOC_LARGE] = cuMemAlloc(&large, 1 << 20);
    if (results[OP_ALLOC_LARGE] == CUDA_SUCCESS) {
        results[OP_MEMSET_PRIVATE] = cuMemsetD32Async(large, 5, (1 << 20) / 4, own);
        if (results[OP_MEMSET_PRIVATE] == CUDA_SUCCESS) results[OP_MEMSET_PRIVATE] = cuStreamSynchronize(own);
        results[OP_FREE_LARGE] = cuMemFree(large);
    } else {
        results[OP_MEMSET_PRIVATE] = results[OP_FREE_LARGE] = CUDA_ERROR_UNKNOWN;
    }
    pthread_barrier_wait(&done);
    cuStreamDestroy(own);
    return NULL;
}

static int child(int is_relaxed)
{
    relaxed = is_relaxed;
    ctx = tl_init(0);
    CUstream s;
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_DEFAULT));
    CUdeviceptr buf;
    CHECK_CU(cuMemAlloc(&buf, 1 << 20));
    CHECK_CU(cuMemsetD32(buf, 0, (1 << 20) / 4));
    CHECK_CU(cuMemAlloc(&earlier, 1 << 16));
    pthread_barrier_init(&started, NULL, 2);
    pthread_barrier_init(&done, NULL, 2);
    pthread_t t;
    pthread_create(&t, NULL, other, NULL);

    CHECK_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK_CU(cuMemsetD32Async(buf, 0x77777777, (1 << 20) / 4, s));
    pthread_barrier_wait(&started);
    pthread_barrier_wait(&done);
    pthread_join(t, NULL);
    CUgraph g = NULL;
    CUgraphExec ge = NULL;
    results[OP_END_CAPTURE] = cuStreamEndCapture(s, &g);
    results[OP_INSTANTIATE] = g ? cuGraphInstantiate(&ge, g, 0) : CUDA_ERROR_UNKNOWN;
    results[OP_LAUNCH] = ge ? cuGraphLaunch(ge, s) : CUDA_ERROR_UNKNOWN;
    results[OP_SYNC] = cuStreamSynchronize(s);
    results[OP_DATA] = tl_spot_check(buf, 1 << 20, 0x77777777) == 0 ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
    CUdeviceptr after;
    results[OP_AFTER_ALLOC] = cuMemAlloc(&after, 1 << 20);
    if (results[OP_AFTER_ALLOC] == CUDA_SUCCESS) CHECK_CU(cuMemFree(after));
    for (int i = 0; i < OP_COUNT; i++) printf("%d %d\n", i, (int)results[i]);
    if (ge) cuGraphExecDestroy(ge);
    if (g) cuGraphDestroy(g);
    if (results[OP_FREE_EARLIER] != CUDA_SUCCESS) cuMemFree(earlier);
    CHECK_CU(cuMemFree(buf));
    CHECK_CU(cuStreamDestroy(s));
    CHECK_CU(cuCtxSynchronize());
    if (check_cupool_loaded()) {
        /* Blocks freed during the capture went back once it ended. */
        CUdeviceptr probe;
        CHECK_CU(cuMemAlloc(&probe, 256));
        CHECK_CU(cuMemFree(probe));
        cupool_stats_t st = tl_stats(0);
        CHECK_EQ(st.in_use, 0);
        CHECK_EQ(st.pooled_allocs, st.pooled_frees);
    }
    return 0;
}

static void parse(const char *out, CUresult *r)
{
    for (int i = 0; i < OP_COUNT; i++) r[i] = (CUresult)-1;
    for (const char *line = out; line && *line;) {
        int i, v;
        if (sscanf(line, "%d %d", &i, &v) == 2 && i >= 0 && i < OP_COUNT) r[i] = (CUresult)v;
        const char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : NULL;
    }
}

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "--child") == 0) return child(strcmp(argv[2], "relaxed") == 0);
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    static const char *const variants[] = {"global", "relaxed"};
    static const char *const modes[] = {"CUPOOL_FREE=auto", "CUPOOL_FREE=ordered", "CUPOOL_FREE=deferred",
                                        "CUPOOL_FREE=sync"};
    int failed = 0;
    for (int v = 0; v < 2; v++) {
        const char *args[] = {"--child", variants[v], NULL};
        tl_child_t native;
        tl_run_self(args, NULL, 1, 60, &native);
        if (native.status != 0) {
            tl_child_dump("native", &native);
            CHECK_FAIL("the native run failed");
        }
        CUresult want[OP_COUNT];
        parse(native.out, want);
        for (int i = 0; i < OP_COUNT; i++)
            printf("%s, native: %-50s %s\n", variants[v], op_names[i], check_result_name(want[i]));
        for (int m = 0; m < 4; m++) {
            const char *env[] = {modes[m], NULL};
            tl_child_t c;
            tl_run_self(args, env, 0, 60, &c);
            CUresult got[OP_COUNT];
            parse(c.out, got);
            int bad = c.status != 0;
            for (int i = 0; i < OP_COUNT; i++) {
                /* What succeeds natively must succeed with cupool; cupool may
                 * do better where the driver refuses a call during a capture. */
                int ok = want[i] != CUDA_SUCCESS || got[i] == CUDA_SUCCESS;
                if (!ok) {
                    fprintf(stderr, "%s, %s: %-50s native %s, cupool %s\n", variants[v], modes[m], op_names[i],
                            check_result_name(want[i]), (int)got[i] == -1 ? "(none)" : check_result_name(got[i]));
                    bad = 1;
                } else if (got[i] != want[i]) {
                    printf("%s, %s: %-50s native %s, cupool %s (allowed)\n", variants[v], modes[m], op_names[i],
                           check_result_name(want[i]), check_result_name(got[i]));
                }
            }
            if (bad) {
                tl_child_dump(modes[m], &c);
                failed++;
            }
            printf("%s, %-22s %s\n", variants[v], modes[m], bad ? "FAILED" : "passed");
            tl_child_free(&c);
        }
        tl_child_free(&native);
    }
    return failed ? 1 : 0;
}
