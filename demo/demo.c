/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cupool's demo: a CUDA program written the slow way, allocating and freeing
 * device memory on every iteration around its work (a memset, a copy back
 * and a check), as legacy codes and frameworks with caching off do.  It
 * prints the time per iteration; run-demo.sh runs it natively and under
 * cupool and compares.
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                                      \
    do {                                                                                                 \
        CUresult r_ = (call);                                                                            \
        if (r_ != CUDA_SUCCESS) {                                                                        \
            const char *name_ = "?";                                                                     \
            cuGetErrorName(r_, &name_);                                                                  \
            fprintf(stderr, "demo: %s failed: %s\n", #call, name_);                                      \
            return 1;                                                                                    \
        }                                                                                                \
    } while (0)

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
    int iterations = argc > 1 ? atoi(argv[1]) : 2000;
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));

    static const size_t sizes[] = {256, 4096, 65536, 1 << 20, 4 << 20};
    unsigned char probe[256];
    double start = now_us();
    for (int i = 0; i < iterations; i++) {
        size_t size = sizes[i % (sizeof sizes / sizeof sizes[0])];
        CUdeviceptr a, b;
        CHECK(cuMemAlloc(&a, size));
        CHECK(cuMemAlloc(&b, size));
        CHECK(cuMemsetD8(a, (unsigned char)i, size));
        CHECK(cuMemcpyDtoD(b, a, size));
        CHECK(cuMemcpyDtoH(probe, b + size - sizeof probe, sizeof probe));
        for (size_t k = 0; k < sizeof probe; k++)
            if (probe[k] != (unsigned char)i) {
                fprintf(stderr, "demo: wrong data at iteration %d\n", i);
                return 1;
            }
        CHECK(cuMemFree(a));
        CHECK(cuMemFree(b));
    }
    double per_iteration = (now_us() - start) / iterations;
    printf("%.2f us per iteration (%d iterations, 2 allocations and 2 frees each)\n", per_iteration, iterations);
    CHECK(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
