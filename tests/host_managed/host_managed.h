/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the parts of test_host_managed share: the simulator's counts of the
 * driver's own pinned and managed allocations, the blocks the cases
 * allocate (by call, flags and size) and the helpers that allocate, free and
 * use them (blocks.c); the two comparisons with a run without cupool
 * (native.c); and the cases (store.c, paths.c), whose table
 * test_host_managed.c runs.
 */
#ifndef CUPOOL_TEST_HOST_MANAGED_H
#define CUPOOL_TEST_HOST_MANAGED_H

#include "../testlib.h"

#include <stddef.h>

/* Per-thread-default-stream forms cuda.h declares only for their own builds. */
CUresult CUDAAPI cuStreamAttachMemAsync_ptsz(CUstream s, CUdeviceptr p, size_t n, unsigned int flags);

extern CUcontext hm_primary;
static const CUmemLocation hm_device0 = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
static const CUmemLocation hm_on_host = {CU_MEM_LOCATION_TYPE_HOST, 0};

/* cuInit, device 0's primary context current (hm_primary), the
 * simulator's hooks looked up. */
CUcontext hm_init(void);
/* Whether the simulator's counts are there (not on the real driver). */
int hm_simulated(void);
/* The driver's pinned (managed 0) or managed (1) allocations so far (-1
 * without the simulator), and the bytes of them live now. */
long long hm_made(int managed);
long long hm_live(int managed);
/* A host load or store the race checker must find ordered (simcuda_host_access),
 * and the races it has reported (SIMCUDA_RACES=count). */
void hm_host_access(const void *p, size_t bytes, int write);
long long hm_races(void);
/* Whether this run keeps freed blocks of the kind (TEST_KEPT, a list of
 * "host" and "managed", or "none"; both by default). */
int hm_kept(int managed);

/* ---- blocks by call, flags and size ------------------------------------------ */

enum call { ALLOC_HOST, HOST_ALLOC, ALLOC_MANAGED };

typedef struct {
    enum call call;
    unsigned flags;
    size_t size;
} block_key_t;

/* Initialisers of block_key_t. */
#define HOST(size) {ALLOC_HOST, 0, size}
#define HOSTALLOC(flags, size) {HOST_ALLOC, flags, size}
#define MANAGED(flags, size) {ALLOC_MANAGED, flags, size}
#define PORTABLE CU_MEMHOSTALLOC_PORTABLE
#define DEVICEMAP CU_MEMHOSTALLOC_DEVICEMAP
#define WC CU_MEMHOSTALLOC_WRITECOMBINED
#define GLOBAL CU_MEM_ATTACH_GLOBAL
#define ATTACH_HOST CU_MEM_ATTACH_HOST

int hm_is_managed(const block_key_t *k);
const char *hm_key_name(const block_key_t *k); /* "cuMemHostAlloc(4096, flags 1)" */
CUresult hm_key_alloc(const block_key_t *k, void **p);
CUresult hm_key_free(const block_key_t *k, void *p); /* cuMemFreeHost, or cuMemFree for managed memory */
/* An allocation that must succeed; *fresh (may be NULL): whether the driver
 * made it (0 on the real driver, which does not say). */
void *hm_take(const block_key_t *k, int *fresh);
void hm_give(const block_key_t *k, void *p);
/* The block is the program's: the driver knows it, the host and the device
 * write it, and the bytes read back are the last written. */
void hm_use(void *p, size_t size, unsigned char value);

/* native.c: the children that print every answer about
 * blocks, and the bad-input table's results, and their comparisons with a
 * run without cupool under every setting (the number that differed). */
int hm_queries(size_t key); /* the answers about query key number `key` */
int hm_table(void);
int hm_compare_queries(void);
int hm_compare_table(void);

/* The cases (each runs in a child of its own). */
int hm_case_reuse(void);
int hm_case_fence_pending(void);
int hm_case_fence_race(void);
int hm_case_advised(void);
int hm_case_advice_mapping(void);
int hm_case_prefetched(void);
int hm_case_keep_limit(void);
int hm_case_keep_default(void);
int hm_case_oom(void);
int hm_case_oom_device(void);
int hm_case_capture(void);
int hm_case_ctx_destroy(void);
int hm_case_threads(void);
int hm_case_proc_address(void);
int hm_case_log_and_stats(void);
/* What log-and-stats runs with CUPOOL_LOG and CUPOOL_STATS. */
int hm_workload(void);

#endif
