/* Shared by the driver-API sanitizer probes (sanitizer-module-probe.c,
 * sanitizer-api-graph-probe.c): a check that prints the failing call and
 * stops, and device 0's primary context made current. */
#ifndef DRIVER_PROBE_H
#define DRIVER_PROBE_H

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

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

#endif
