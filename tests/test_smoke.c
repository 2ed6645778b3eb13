/* Smoke test: a linked program's cuMemAlloc/cuMemFree go through cupool's pools. */
#include "check.h"
#include "cupool.h"

#include <pthread.h>

static void *alloc_free_in_thread(void *ctx)
{
    CUdeviceptr p;
    CHECK_CU(cuCtxSetCurrent(ctx));
    CHECK_CU(cuMemAlloc(&p, 4096));
    CHECK_CU(cuMemFree(p));
    return NULL;
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CHECK_CU(cuInit(0));
    CHECK_CU(cuDeviceGet(&dev, 0));
    CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK_CU(cuCtxSetCurrent(ctx));
    int (*get)(int, cupool_stats_t *) = (int (*)(int, cupool_stats_t *))dlsym(RTLD_DEFAULT, "cupool_get_stats");
    CHECK_TRUE(get != NULL);
    cupool_stats_t s;
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, 1 << 20));
    CHECK_EQ(get(0, &s), 0);
    CHECK_EQ(s.pooled_allocs, 1);
    CHECK_EQ(s.in_use, 1 << 20);
    CHECK_CU(cuMemsetD8(p, 7, 1 << 20));
    unsigned char b[16];
    CHECK_CU(cuMemcpyDtoH(b, p + 1000, sizeof b));
    CHECK_EQ(b[3], 7);
    CHECK_CU(cuMemFree(p));
    CHECK_EQ(get(0, &s), 0);
    CHECK_EQ(s.pooled_allocs, 1);
    CHECK_EQ(s.pooled_frees, 1);
    CHECK_EQ(s.in_use, 0);
    /* The same counts from another thread's allocations and frees (each
     * thread counts into its own set). */
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, alloc_free_in_thread, ctx), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(get(0, &s), 0);
    CHECK_EQ(s.pooled_allocs, 2);
    CHECK_EQ(s.pooled_frees, 2);
    CHECK_EQ(s.in_use, 0);
    return 0;
}
