/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The helpers of test_host_managed (host_managed.h): the simulator's hooks,
 * found with dlsym so that the program also runs on the real driver, and the
 * blocks the cases allocate, free and use, by call, flags and size.
 */
#define _GNU_SOURCE
#include "host_managed.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

CUcontext hm_primary;

/* ---- the simulator's counts (absent on the real driver) ------------------- */

static long long (*sim_allocations)(int managed);
static long long (*sim_bytes)(int managed);
static void (*sim_host_access)(const void *p, size_t bytes, int write);
static long long (*sim_races)(void);

static void find_sim_hooks(void)
{
    sim_allocations = (long long (*)(int))dlsym(RTLD_DEFAULT, "simcuda_host_allocations");
    sim_bytes = (long long (*)(int))dlsym(RTLD_DEFAULT, "simcuda_host_bytes");
    sim_host_access = (void (*)(const void *, size_t, int))dlsym(RTLD_DEFAULT, "simcuda_host_access");
    sim_races = (long long (*)(void))dlsym(RTLD_DEFAULT, "simcuda_races");
}

CUcontext hm_init(void)
{
    find_sim_hooks();
    hm_primary = tl_init(0);
    return hm_primary;
}

int hm_simulated(void)
{
    return sim_allocations != NULL;
}

long long hm_made(int managed)
{
    return sim_allocations ? sim_allocations(managed) : -1;
}

long long hm_live(int managed)
{
    if (!sim_bytes) CHECK_FAIL("the simulator's simcuda_host_bytes is missing");
    return sim_bytes(managed);
}

void hm_host_access(const void *p, size_t bytes, int write)
{
    if (sim_host_access) sim_host_access(p, bytes, write);
}

long long hm_races(void)
{
    return sim_races ? sim_races() : 0;
}

int hm_kept(int managed)
{
    const char *k = getenv("TEST_KEPT");
    if (!k) k = "host,managed";
    return strstr(k, managed ? "managed" : "host") != NULL;
}

int hm_is_managed(const block_key_t *k)
{
    return k->call == ALLOC_MANAGED;
}

const char *hm_key_name(const block_key_t *k)
{
    static __thread char name[96];
    if (k->call == ALLOC_HOST) snprintf(name, sizeof name, "cuMemAllocHost(%zu)", k->size);
    else snprintf(name, sizeof name, "%s(%zu, flags %u)", k->call == HOST_ALLOC ? "cuMemHostAlloc" : "cuMemAllocManaged",
                  k->size, k->flags);
    return name;
}

CUresult hm_key_alloc(const block_key_t *k, void **p)
{
    CUdeviceptr d = 0;
    CUresult r;
    switch (k->call) {
    case ALLOC_HOST: return cuMemAllocHost(p, k->size);
    case HOST_ALLOC: return cuMemHostAlloc(p, k->size, k->flags);
    default:
        r = cuMemAllocManaged(&d, k->size, k->flags);
        *p = (void *)(uintptr_t)d;
        return r;
    }
}

CUresult hm_key_free(const block_key_t *k, void *p)
{
    return hm_is_managed(k) ? cuMemFree((CUdeviceptr)(uintptr_t)p) : cuMemFreeHost(p);
}

void *hm_take(const block_key_t *k, int *fresh)
{
    long long before = hm_made(hm_is_managed(k));
    void *p = NULL;
    CUresult r = hm_key_alloc(k, &p);
    if (r != CUDA_SUCCESS) CHECK_FAIL("%s returned %s", hm_key_name(k), check_result_name(r));
    if (fresh) *fresh = hm_made(hm_is_managed(k)) != before;
    return p;
}

void hm_give(const block_key_t *k, void *p)
{
    CUresult r = hm_key_free(k, p);
    if (r != CUDA_SUCCESS) CHECK_FAIL("free of %s at %p returned %s", hm_key_name(k), p, check_result_name(r));
}

void hm_use(void *p, size_t size, unsigned char value)
{
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)p;
    CUcontext ctx = NULL;
    CHECK_CU(cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, d));
    hm_host_access(p, size, 1);
    memset(p, value ^ 0xff, size);
    CHECK_CU(cuMemsetD8Async(d, value, size, CU_STREAM_LEGACY));
    CHECK_CU(cuStreamSynchronize(CU_STREAM_LEGACY));
    hm_host_access(p, size, 0);
    const unsigned char *b = p;
    if (b[0] != value || b[size / 2] != value || b[size - 1] != value)
        CHECK_FAIL("block %p of %zu bytes: %02x %02x %02x, expected %02x", p, size, b[0], b[size / 2], b[size - 1], value);
}
