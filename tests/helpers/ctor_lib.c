/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helper library of test_ctor: makes CUDA calls from its constructor, before
 * the program's main runs (the case of libfaketime's snippet tests), and
 * keeps what happened for the test to check.
 */
#define _GNU_SOURCE
#include "cupool.h"

#include <cuda.h>
#include <dlfcn.h>
#include <string.h>

int ctor_ran, ctor_init, ctor_alloc, ctor_free, ctor_data_ok;
unsigned long long ctor_pooled, ctor_ptr;

__attribute__((constructor)) static void ctor_lib_early(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p = 0;
    ctor_ran = 1;
    ctor_init = (int)cuInit(0);
    if (ctor_init != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return;
    ctor_alloc = (int)cuMemAlloc(&p, 1 << 20);
    if (ctor_alloc != CUDA_SUCCESS) return;
    ctor_ptr = p;
    unsigned char back[64];
    if (cuMemsetD8(p, 0x3c, 1 << 20) == CUDA_SUCCESS && cuMemcpyDtoH(back, p + 4000, sizeof back) == CUDA_SUCCESS) {
        ctor_data_ok = 1;
        for (size_t i = 0; i < sizeof back; i++) ctor_data_ok &= back[i] == 0x3c;
    }
    int (*get)(int, cupool_stats_t *) = (int (*)(int, cupool_stats_t *))dlsym(RTLD_DEFAULT, "cupool_get_stats");
    cupool_stats_t s;
    if (get && get(0, &s) == 0) ctor_pooled = s.pooled_allocs;
    ctor_free = (int)cuMemFree(p);
}
