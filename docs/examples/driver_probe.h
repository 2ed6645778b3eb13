/* Shared by the driver-API probes (sanitizer-module-probe.c,
 * sanitizer-api-graph-probe.c, sanitizer-threads-probe.c, ctx-query-probe.c):
 * a check that prints the failing call and stops, device 0's primary context
 * made current, and a pool made like cupool's. */
#ifndef DRIVER_PROBE_H
#define DRIVER_PROBE_H

#include <cuda.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                    \
    do {                                                                         \
        CUresult r_ = (x);                                                       \
        if (r_ != CUDA_SUCCESS) {                                                \
            const char *n_ = "?";                                                \
            cuGetErrorName(r_, &n_);                                             \
            printf("%s -> %s\n", #x, n_);                                        \
            exit(2);                                                             \
        }                                                                        \
    } while (0)

static inline CUcontext probe_context(CUdevice *dev)
{
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, *dev));
    CK(cuCtxSetCurrent(ctx));
    return ctx;
}

/* The pool cupool's `dedicated` policy makes: pinned device memory, no
 * release threshold. */
static inline CUmemoryPool probe_pool(CUdevice dev)
{
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev;
    CUmemoryPool pool;
    CK(cuMemPoolCreate(&pool, &props));
    cuuint64_t keep = UINT64_MAX;
    CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
    return pool;
}

#endif
