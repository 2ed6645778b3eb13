/* Smoke test: a linked program's cuMemAlloc/cuMemFree go through cupool's pools. */
#include "check.h"
#include "cupool.h"

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CHECK_CU(cuInit(0));
    CHECK_CU(cuDeviceGet(&dev, 0));
    CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK_CU(cuCtxSetCurrent(ctx));
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, 1 << 20));
    CHECK_CU(cuMemsetD8(p, 7, 1 << 20));
    unsigned char b[16];
    CHECK_CU(cuMemcpyDtoH(b, p + 1000, sizeof b));
    CHECK_EQ(b[3], 7);
    CHECK_CU(cuMemFree(p));
    int (*get)(int, cupool_stats_t *) = (int (*)(int, cupool_stats_t *))dlsym(RTLD_DEFAULT, "cupool_get_stats");
    CHECK_TRUE(get != NULL);
    cupool_stats_t s;
    CHECK_EQ(get(0, &s), 0);
    CHECK_EQ(s.pooled_allocs, 1);
    CHECK_EQ(s.pooled_frees, 1);
    return 0;
}
