/* SPDX-License-Identifier: Apache-2.0 */
/* The per-thread-default-stream case of tests/test_capture_and_destroy.c,
 * in a file of its own because it is compiled with
 * CUDA_API_PER_THREAD_DEFAULT_STREAM: stream 0 means the per-thread stream
 * and the capture calls are the _ptsz entry points. */
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1
#include "../testlib.h"

int per_thread_capture(void);
int per_thread_capture(void)
{
    tl_init(0);
    CUstream s;
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)); /* auto -> deferred */
    CUgraph g;
    CHECK_CU(cuStreamBeginCapture(0, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK_CU(cuStreamEndCapture(0, &g));
    CHECK_CU(cuGraphDestroy(g));
    CUdeviceptr a;
    for (int i = 0; i < 64; i++) {
        CHECK_CU(cuMemAlloc(&a, 1u << 20));
        CHECK_CU(cuMemFree(a));
    }
    /* With the capture seen as over, the frees went back to the pool. */
    CHECK_CU(cuCtxSynchronize());
    CHECK_CU(cuMemAlloc(&a, 256));
    CUmemoryPool pool = tl_pool_of(a);
    if (pool) CHECK_TRUE(tl_pool_used(pool) < (2u << 20));
    CHECK_CU(cuMemFree(a));
    CHECK_CU(cuStreamDestroy(s));
    return 0;
}
