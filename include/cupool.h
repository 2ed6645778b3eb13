/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cupool's public header.  cupool is used without it: preload libcupool.so
 * (or run `cupool PROGRAM`) and the program's cuMemAlloc/cuMemFree, and all
 * that reach them, are served from CUDA memory pools.  A program that wants
 * to know whether cupool is active, and what it has done so far, can look
 * these functions up with dlsym(RTLD_DEFAULT, ...) without linking to cupool.
 */
#ifndef CUPOOL_H
#define CUPOOL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUPOOL_VERSION_MAJOR 0
#define CUPOOL_VERSION_MINOR 1
#define CUPOOL_VERSION_PATCH 0

/* What cupool has done on one device so far. */
typedef struct cupool_stats {
    uint64_t pooled_allocs;   /* allocations served from a pool */
    uint64_t native_allocs;   /* allocations passed to cuMemAlloc */
    uint64_t pooled_frees;
    uint64_t in_use;          /* pooled bytes allocated and not freed */
    uint64_t peak_in_use;     /* tracked only while CUPOOL_STATS or CUPOOL_LOG is on */
    uint64_t peak_reserved;   /* the most the device's pools held (tracked only
                                 while CUPOOL_STATS or CUPOOL_LOG is on: it
                                 costs a driver query per call) */
    uint64_t trims;           /* pool trims after out-of-memory */
    uint64_t oom_retries;
    uint64_t rewritten_memsets;
} cupool_stats_t;

/* Version of the loaded cupool as MAJOR*10000 + MINOR*100 + PATCH. */
int cupool_version(void);

/* Fills *out for device ordinal `device`; returns 0, or -1 for a bad device
 * or NULL out. */
int cupool_get_stats(int device, cupool_stats_t *out);

#ifdef __cplusplus
}
#endif
#endif
