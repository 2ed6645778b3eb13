/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the driver-API probes (sanitizer_fill_kernel.c,
 * sanitizer_memset_graph.c, sanitizer_threads.c, ctx_query.c,
 * ctx_record.c, host_neighbours.c): a check that prints the failing call and stops,
 * device 0's primary context made current, a pool made like cupool's, and
 * a clock and a median for the timing probes. */
#ifndef DRIVER_PROBE_H
#define DRIVER_PROBE_H

#include <cuda.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* ---- timing ---------------------------------------------------------------- */

static inline double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static inline int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#endif
