/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kept store (kept_store.c): pinned host memory (cuMemAllocHost,
 * cuMemHostAlloc) and managed memory (cuMemAllocManaged) kept for reuse.
 *
 * Each block is the driver's own allocation, so every query the program
 * makes of it (cuMemHostGetFlags, cuMemHostGetDevicePointer,
 * cuPointerGetAttribute, cuMemRangeGetAttribute, ...) answers as natively:
 * the driver's pools of these kinds answer several of them differently
 * (docs/DESIGN.md, "Pinned host and managed memory").  What cupool saves is
 * the driver's allocation and free, the pinning and unpinning of pages above
 * all.  A block the program frees is kept with a fence in every context
 * cupool knows (an event after all the work submitted so far) and serves
 * the next allocation of the same call, flags and size once every fence has
 * completed: the host never gets back a block the device may still use.
 */
#ifndef CUPOOL_KEPT_STORE_H
#define CUPOOL_KEPT_STORE_H

#include "origin.h"

/* The kinds of memory the store keeps; the call that made a block is part
 * of its kind, so that a block only ever serves the call that made it. */
enum cupool_kept_kind {
    CUPOOL_KEPT_ALLOC_HOST, /* cuMemAllocHost */
    CUPOOL_KEPT_HOST_ALLOC, /* cuMemHostAlloc */
    CUPOOL_KEPT_MANAGED,    /* cuMemAllocManaged */
    CUPOOL_KEPT_KINDS
};

/* The two classes the store keeps apart, each with its own list, limit
 * and statistics (cupool_kept_stats[class], base/stats.h, whose indices
 * these are): pinned host memory (cuMemAllocHost, cuMemHostAlloc) and
 * managed memory (cuMemAllocManaged). */
enum cupool_kept_class {
    CUPOOL_KEPT_CLASS_MANAGED = CUPOOL_KEPT_STATS_MANAGED,
    CUPOOL_KEPT_CLASS_HOST = CUPOOL_KEPT_STATS_HOST,
    CUPOOL_KEPT_CLASSES = 2
};

/* Its fork handlers and its part in a context's teardown; after
 * cupool_engine_start(), so that at a fork its lock is taken before the
 * registry's, as everywhere else. */
void cupool_kept_start(void);

/* Whether the store serves this kind now (cupool started, the policy not
 * off, CUPOOL_HOST or CUPOOL_MANAGED on). */
int cupool_kept_serves(enum cupool_kept_kind kind);

/* An allocation: a kept block of this kind, flags and size whose fences
 * have all completed, else the driver's allocation (made by `driver`),
 * remembered so that its free is kept.  *route says which
 * (CUPOOL_ROUTE_POOL: a kept block; CUPOOL_ROUTE_NATIVE: the driver's).
 * The driver's answer on failure, after handing back every kept block of
 * the kind and asking again when it was out of memory. */
typedef CUresult cupool_kept_driver_alloc_fn(uintptr_t *ptr, size_t size, unsigned flags);
CUresult cupool_kept_alloc(enum cupool_kept_kind kind, cupool_kept_driver_alloc_fn *driver, uintptr_t *ptr,
                           size_t size, unsigned flags, int *route);

/* A free of ptr as pinned host (cuMemFreeHost: CUPOOL_KEPT_CLASS_HOST) or
 * managed (cuMemFree: CUPOOL_KEPT_CLASS_MANAGED) memory: 0 when cupool
 * does not track such a block there (the caller asks the driver).  Else
 * 1: the block is kept, or freed by the driver (a managed block the
 * program gave advice for or attached to a stream, a block larger than the
 * limit, a fence that cannot be set), *result is CUDA_SUCCESS or that
 * free's answer, and *size, *flags and *route (CUPOOL_ROUTE_POOL: kept)
 * describe it. */
int cupool_kept_free(enum cupool_kept_class cls, uintptr_t ptr, size_t *size, unsigned *flags, int *route,
                     CUresult *result);

/* The program gave advice for or attached to a stream the managed range
 * [ptr, ptr + size) (size 0: the block at ptr).  Every managed block in the
 * driver's mappings the range meets (advice lives in pages those mappings
 * share) is freed by the driver: a kept one now, one in use at its free,
 * so that no later allocation inherits advice it was not given. */
void cupool_kept_mark_touched(uintptr_t ptr, size_t size);

/* Hands every kept block of the class back to the driver: memory is
 * short. */
void cupool_kept_release(enum cupool_kept_class cls);

/* Its statistics: cupool_kept_stats (base/stats.h). */

#endif
