/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The two comparisons of test_host_managed with a run without cupool: every
 * answer the driver gives about pinned and managed blocks (fresh, served
 * again, advised, in another context), and the results of bad input, printed
 * by a child natively and under cupool in each setting, must be the same.
 */
#define _GNU_SOURCE
#include "host_managed.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- queries: the same answers natively and under cupool ---------------------- */

typedef enum { V_BOOL, V_UINT, V_INT, V_SIZE, V_ADDR, V_PTR, V_MAPPING, V_CTX, V_SET } vtype_t;

static const struct pattr {
    CUpointer_attribute attr;
    const char *name;
    vtype_t type;
} pattrs[] = {
    {CU_POINTER_ATTRIBUTE_CONTEXT, "CONTEXT is the current", V_CTX},
    {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, "MEMORY_TYPE", V_UINT},
    {CU_POINTER_ATTRIBUTE_DEVICE_POINTER, "DEVICE_POINTER", V_ADDR},
    {CU_POINTER_ATTRIBUTE_HOST_POINTER, "HOST_POINTER", V_PTR},
    {CU_POINTER_ATTRIBUTE_IS_MANAGED, "IS_MANAGED", V_BOOL},
    {CU_POINTER_ATTRIBUTE_MAPPED, "MAPPED", V_BOOL},
    {CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, "DEVICE_ORDINAL", V_INT},
    {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, "RANGE_START_ADDR", V_ADDR},
    {CU_POINTER_ATTRIBUTE_RANGE_SIZE, "RANGE_SIZE", V_SIZE},
    {CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, "MAPPING_BASE_ADDR", V_MAPPING},
    {CU_POINTER_ATTRIBUTE_MAPPING_SIZE, "MAPPING_SIZE", V_SIZE},
    {CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, "SYNC_MEMOPS", V_BOOL},
    {CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, "IS_LEGACY_CUDA_IPC_CAPABLE", V_BOOL},
    {CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, "ACCESS_FLAGS", V_UINT},
    {CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, "MEMPOOL_HANDLE is set", V_SET},
    {CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, "ALLOWED_HANDLE_TYPES", V_SIZE},
};
#define NPATTRS (sizeof pattrs / sizeof pattrs[0])

/* A value as text that does not depend on where the block lies: addresses
 * as offsets from base.  The driver places pinned and managed blocks inside
 * larger mappings (2 MiB here), so where a block's mapping begins depends on
 * what was allocated before it, natively as under cupool: the mapping base
 * is compared only as a page-aligned address at or below the block. */
static void value_text(char *out, size_t len, vtype_t type, const uint64_t *raw, uintptr_t base)
{
    switch (type) {
    case V_BOOL: snprintf(out, len, "%d", (int)*(const bool *)raw); break;
    case V_UINT: snprintf(out, len, "%u", *(const unsigned *)raw); break;
    case V_INT: snprintf(out, len, "%d", *(const int *)raw); break;
    case V_SIZE: snprintf(out, len, "%llu", (unsigned long long)*raw); break;
    case V_ADDR:
    case V_PTR: snprintf(out, len, "%+lld", *raw ? (long long)(*raw - base) : -1LL); break;
    case V_MAPPING:
        snprintf(out, len, "%s", *raw && *raw <= base && *raw % 4096 == 0 ? "at or below the block" : "elsewhere");
        break;
    case V_CTX: {
        CUcontext cur = NULL;
        CHECK_CU(cuCtxGetCurrent(&cur));
        snprintf(out, len, "%d", *(const CUcontext *)raw == cur);
        break;
    }
    case V_SET: snprintf(out, len, "%d", *raw != 0); break;
    }
}

static void say(const char *label, const char *what, CUresult r, const char *value)
{
    printf("%s: %s -> %s%s%s\n", label, what, check_result_name(r), value && r == CUDA_SUCCESS ? " " : "",
           value && r == CUDA_SUCCESS ? value : "");
}

static const struct rattr {
    CUmem_range_attribute attr;
    const char *name;
    size_t size;
} rattrs[] = {
    {CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, "READ_MOSTLY", sizeof(int)},
    {CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, "PREFERRED_LOCATION", sizeof(int)},
    {CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, "ACCESSED_BY", 4 * sizeof(int)},
    {CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, "LAST_PREFETCH_LOCATION", sizeof(int)},
    {CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, "PREFERRED_LOCATION_TYPE", sizeof(CUmemLocationType)},
    {CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID, "PREFERRED_LOCATION_ID", sizeof(int)},
    {CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE, "LAST_PREFETCH_LOCATION_TYPE", sizeof(CUmemLocationType)},
    {CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID, "LAST_PREFETCH_LOCATION_ID", sizeof(int)},
};
#define NRATTRS (sizeof rattrs / sizeof rattrs[0])

static void ints_text(char *out, size_t len, const int *v, size_t n)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && used < len; i++) used += (size_t)snprintf(out + used, len - used, "%s%d", i ? "," : "", v[i]);
}

/* The range attributes of [d, d + n), one by one and all at once. */
static void report_range(const char *label, CUdeviceptr d, size_t n, const char *where)
{
    char what[128], text[512];
    int values[NRATTRS][4];
    void *data[NRATTRS];
    size_t sizes[NRATTRS];
    CUmem_range_attribute attrs[NRATTRS];
    for (size_t i = 0; i < NRATTRS; i++) {
        memset(values[i], 0x7f, sizeof values[i]);
        CUresult r = cuMemRangeGetAttribute(values[i], rattrs[i].size, rattrs[i].attr, d, n);
        ints_text(text, sizeof text, values[i], rattrs[i].size / sizeof(int));
        snprintf(what, sizeof what, "cuMemRangeGetAttribute(%s, %s)", rattrs[i].name, where);
        say(label, what, r, text);
        memset(values[i], 0x7f, sizeof values[i]);
        data[i] = values[i];
        sizes[i] = rattrs[i].size;
        attrs[i] = rattrs[i].attr;
    }
    CUresult r = cuMemRangeGetAttributes(data, sizes, attrs, NRATTRS, d, n);
    size_t used = 0;
    for (size_t i = 0; i < NRATTRS; i++) {
        used += (size_t)snprintf(text + used, sizeof text - used, "%s", i ? " " : "");
        ints_text(text + used, sizeof text - used, values[i], sizes[i] / sizeof(int));
        used = strlen(text);
    }
    snprintf(what, sizeof what, "cuMemRangeGetAttributes(all, %s)", where);
    say(label, what, r, text);
}

/* Every answer about the block at p of `size` bytes. */
static void report(const char *label, void *p, size_t size)
{
    uintptr_t base = (uintptr_t)p;
    const size_t offsets[] = {0, size / 2, size - 1};
    char what[128], text[1024];
    for (size_t o = 0; o < 3; o++) {
        void *at = (char *)p + offsets[o];
        CUdeviceptr d = (CUdeviceptr)(uintptr_t)at;
        const char *where = o == 0 ? "start" : o == 1 ? "middle" : "last byte";
        unsigned flags = 0;
        CUresult r = cuMemHostGetFlags(&flags, at);
        snprintf(what, sizeof what, "cuMemHostGetFlags(%s)", where);
        snprintf(text, sizeof text, "%u", flags);
        say(label, what, r, text);
        CUdeviceptr dp = 0;
        r = cuMemHostGetDevicePointer(&dp, at, 0);
        snprintf(what, sizeof what, "cuMemHostGetDevicePointer(%s)", where);
        snprintf(text, sizeof text, "%+lld", (long long)(dp - base));
        say(label, what, r, text);
        uint64_t raw[NPATTRS];
        void *data[NPATTRS];
        CUpointer_attribute attrs[NPATTRS];
        for (size_t i = 0; i < NPATTRS; i++) {
            raw[i] = 0;
            r = cuPointerGetAttribute(&raw[i], pattrs[i].attr, d);
            value_text(text, sizeof text, pattrs[i].type, &raw[i], base);
            snprintf(what, sizeof what, "cuPointerGetAttribute(%s, %s)", pattrs[i].name, where);
            say(label, what, r, text);
            raw[i] = 0;
            data[i] = &raw[i];
            attrs[i] = pattrs[i].attr;
        }
        r = cuPointerGetAttributes(NPATTRS, attrs, data, d);
        size_t used = 0;
        for (size_t i = 0; i < NPATTRS && used < sizeof text; i++) {
            char one[64];
            value_text(one, sizeof one, pattrs[i].type, &raw[i], base);
            used += (size_t)snprintf(text + used, sizeof text - used, "%s%s", i ? " " : "", one);
        }
        snprintf(what, sizeof what, "cuPointerGetAttributes(all, %s)", where);
        say(label, what, r, text);
    }
    report_range(label, (CUdeviceptr)base, size, "whole");
    report_range(label, (CUdeviceptr)base + size / 2, 1, "one byte");
}

/* Device work on the block: a copy out and back on a non-blocking stream. */
static void device_work(void *p, size_t size, CUstream s)
{
    CUdeviceptr d;
    CHECK_CU(cuMemAlloc(&d, size));
    CHECK_CU(cuCtxSynchronize()); /* `ordered` allocates on the legacy stream: s is non-blocking */
    CHECK_CU(cuMemcpyHtoDAsync(d, p, size, s));
    CHECK_CU(cuMemcpyDtoHAsync(p, d, size, s));
    CHECK_CU(cuStreamSynchronize(s));
    CHECK_CU(cuMemFree(d));
}

/* The calls that act on a managed range, their results printed. */
static void advise_all(const char *label, void *p, size_t size, CUstream s)
{
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)p;
    say(label, "cuMemPrefetchAsync(device 0)", cuMemPrefetchAsync(d, size, hm_device0, 0, s), NULL);
    say(label, "cuMemPrefetchAsync(host, first half)", cuMemPrefetchAsync(d, size / 2, hm_on_host, 0, s), NULL);
    CHECK_CU(cuStreamSynchronize(s));
    say(label, "cuMemAdvise(SET_READ_MOSTLY)", cuMemAdvise(d, size, CU_MEM_ADVISE_SET_READ_MOSTLY, hm_device0), NULL);
    say(label, "cuMemAdvise(SET_PREFERRED_LOCATION host)",
        cuMemAdvise(d, size, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, hm_on_host), NULL);
    say(label, "cuMemAdvise(SET_ACCESSED_BY device 0, second half)",
        cuMemAdvise(d + size / 2, size - size / 2, CU_MEM_ADVISE_SET_ACCESSED_BY, hm_device0), NULL);
    say(label, "cuStreamAttachMemAsync(SINGLE)", cuStreamAttachMemAsync(s, d, 0, CU_MEM_ATTACH_SINGLE), NULL);
    say(label, "cuStreamAttachMemAsync(GLOBAL)", cuStreamAttachMemAsync(s, d, 0, CU_MEM_ATTACH_GLOBAL), NULL);
    CHECK_CU(cuStreamSynchronize(s));
}

static const block_key_t query_keys[] = {
    HOST(4096),
    HOST(1000),
    HOSTALLOC(0, 1 << 20),
    HOSTALLOC(PORTABLE, 4096),
    HOSTALLOC(DEVICEMAP, 4096),
    HOSTALLOC(PORTABLE | DEVICEMAP, 12345),
    HOSTALLOC(WC, 4096),
    HOSTALLOC(PORTABLE | DEVICEMAP | WC, 65536),
    MANAGED(GLOBAL, 65536),
    MANAGED(GLOBAL, 3000),
    MANAGED(ATTACH_HOST, 8192),
};

/* Whether an allocation came from the driver as this run expects: always
 * natively and for a kind the run does not keep, never for a block freed
 * just before whose kind it keeps. */
static void expect_fresh(const block_key_t *k, int fresh, int want, const char *what)
{
    if (!hm_simulated()) return;
    if (fresh != want)
        CHECK_FAIL("%s, %s: %s, expected %s (TEST_KEPT=%s)", hm_key_name(k), what,
                   fresh ? "the driver allocated" : "a kept block served it",
                   want ? "the driver's allocation" : "a kept block", getenv("TEST_KEPT") ? getenv("TEST_KEPT") : "");
}

#define NQUERY_KEYS (sizeof query_keys / sizeof query_keys[0])

int hm_queries(size_t key)
{
    CHECK_TRUE(key < NQUERY_KEYS);
    const block_key_t *k = &query_keys[key];
    char label[160];
    int fresh;
    hm_init();
    CUstream s;
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    int keeps_nothing = tl_native();
    void *p = hm_take(k, &fresh);
    expect_fresh(k, fresh, 1, "first allocation");
    device_work(p, k->size, s);
    snprintf(label, sizeof label, "%s fresh", hm_key_name(k));
    report(label, p, k->size);
    hm_give(k, p);
    p = hm_take(k, &fresh);
    expect_fresh(k, fresh, keeps_nothing || !hm_kept(hm_is_managed(k)), "allocated again after its free");
    snprintf(label, sizeof label, "%s again", hm_key_name(k));
    report(label, p, k->size);
    device_work(p, k->size, s);
    advise_all(label, p, k->size, s);
    snprintf(label, sizeof label, "%s advised", hm_key_name(k));
    report(label, p, k->size);
    hm_give(k, p);
    /* After advice or attachment: a block with none. */
    p = hm_take(k, &fresh);
    expect_fresh(k, fresh, !hm_is_managed(k) ? keeps_nothing || !hm_kept(0) : 1, "allocated after advice");
    snprintf(label, sizeof label, "%s after advice", hm_key_name(k));
    report(label, p, k->size);
    hm_give(k, p);
    /* A block freed in one context, the same allocation in another: that
     * context's own block. */
    CUdevice dev;
    CUcontext other;
    CHECK_CU(cuDeviceGet(&dev, 0));
    hm_give(k, hm_take(k, NULL));
    CHECK_CU(cuCtxCreate(&other, NULL, 0, dev));
    p = hm_take(k, &fresh);
    expect_fresh(k, fresh, 1, "in another context");
    snprintf(label, sizeof label, "%s in another context", hm_key_name(k));
    report(label, p, k->size);
    hm_give(k, p);
    CHECK_CU(cuCtxDestroy(other));
    CHECK_CU(cuCtxSetCurrent(hm_primary));
    CHECK_CU(cuStreamDestroy(s));
    return 0;
}

/* ---- bad input: the driver's own results --------------------------------------- */

static CUresult alloc_host_before_init(void)
{
    void *p;
    return cuMemAllocHost(&p, 4096);
}
static CUresult host_alloc_before_init(void)
{
    void *p;
    return cuMemHostAlloc(&p, 4096, 0);
}
static CUresult managed_before_init(void)
{
    CUdeviceptr m;
    return cuMemAllocManaged(&m, 4096, GLOBAL);
}
static CUresult free_host_before_init(void) { return cuMemFreeHost((void *)0x10000); }
static CUresult alloc_host_no_context(void)
{
    void *p = NULL;
    CHECK_CU(cuCtxSetCurrent(NULL));
    CUresult r = cuMemAllocHost(&p, 4096);
    CHECK_CU(cuCtxSetCurrent(hm_primary));
    if (r == CUDA_SUCCESS) cuMemFreeHost(p);
    return r;
}
static CUresult managed_no_context(void)
{
    CUdeviceptr m = 0;
    CHECK_CU(cuCtxSetCurrent(NULL));
    CUresult r = cuMemAllocManaged(&m, 4096, GLOBAL);
    CHECK_CU(cuCtxSetCurrent(hm_primary));
    if (r == CUDA_SUCCESS) cuMemFree(m);
    return r;
}
static CUresult free_host_no_context(void)
{
    void *p;
    CHECK_CU(cuMemAllocHost(&p, 4096));
    CHECK_CU(cuCtxSetCurrent(NULL));
    CUresult r = cuMemFreeHost(p);
    CHECK_CU(cuCtxSetCurrent(hm_primary));
    if (r != CUDA_SUCCESS) CHECK_CU(cuMemFreeHost(p));
    return r;
}
static CUresult alloc_host_null(void) { return cuMemAllocHost(NULL, 4096); }
static CUresult alloc_host_zero(void)
{
    void *p = NULL;
    return cuMemAllocHost(&p, 0);
}
static CUresult alloc_host_null_zero(void) { return cuMemAllocHost(NULL, 0); }
static CUresult host_alloc_null(void) { return cuMemHostAlloc(NULL, 4096, 0); }
static CUresult host_alloc_zero(void)
{
    void *p = NULL;
    return cuMemHostAlloc(&p, 0, PORTABLE);
}
static CUresult host_alloc_bad_flags(void)
{
    void *p = NULL;
    CUresult r = cuMemHostAlloc(&p, 4096, 0x80);
    if (r == CUDA_SUCCESS) cuMemFreeHost(p);
    return r;
}
static CUresult host_alloc_huge(void)
{
    void *p = NULL;
    CUresult r = cuMemHostAlloc(&p, (size_t)1 << 62, 0);
    if (r == CUDA_SUCCESS) cuMemFreeHost(p);
    return r;
}
static CUresult managed_null(void) { return cuMemAllocManaged(NULL, 4096, GLOBAL); }
static CUresult managed_zero(void)
{
    CUdeviceptr m = 0;
    return cuMemAllocManaged(&m, 0, GLOBAL);
}
static CUresult managed_flags(unsigned flags)
{
    CUdeviceptr m = 0;
    CUresult r = cuMemAllocManaged(&m, 4096, flags);
    if (r == CUDA_SUCCESS) cuMemFree(m);
    return r;
}
static CUresult managed_flags_0(void) { return managed_flags(0); }
static CUresult managed_flags_single(void) { return managed_flags(CU_MEM_ATTACH_SINGLE); }
static CUresult managed_huge(void)
{
    CUdeviceptr m = 0;
    CUresult r = cuMemAllocManaged(&m, (size_t)1 << 62, GLOBAL);
    if (r == CUDA_SUCCESS) cuMemFree(m);
    return r;
}
static CUresult free_host_null(void) { return cuMemFreeHost(NULL); }
static CUresult free_host_bogus(void) { return cuMemFreeHost((void *)0xdead0000ull); }
static CUresult free_host_stack(void)
{
    char stack[64];
    return cuMemFreeHost(stack);
}
static CUresult free_host_twice(void)
{
    void *p;
    CHECK_CU(cuMemAllocHost(&p, 4096));
    CHECK_CU(cuMemFreeHost(p));
    return cuMemFreeHost(p);
}
static CUresult host_alloc_free_twice(void)
{
    void *p;
    CHECK_CU(cuMemHostAlloc(&p, 65536, PORTABLE));
    CHECK_CU(cuMemFreeHost(p));
    return cuMemFreeHost(p);
}
static CUresult free_host_twice_later(void)
{
    /* Other blocks of other sizes come and go between the two frees. */
    void *p, *q;
    CHECK_CU(cuMemAllocHost(&p, 8192));
    CHECK_CU(cuMemFreeHost(p));
    for (int i = 0; i < 10; i++) {
        CHECK_CU(cuMemAllocHost(&q, 16384 + (size_t)i));
        CHECK_CU(cuMemFreeHost(q));
    }
    return cuMemFreeHost(p);
}
static CUresult free_host_interior(void)
{
    void *p;
    CHECK_CU(cuMemAllocHost(&p, 4096));
    CUresult r = cuMemFreeHost((char *)p + 64);
    CHECK_CU(cuMemFreeHost(p));
    return r;
}
static CUresult free_host_device(void)
{
    CUdeviceptr d;
    CHECK_CU(cuMemAlloc(&d, 4096));
    CUresult r = cuMemFreeHost((void *)(uintptr_t)d);
    CHECK_CU(cuMemFree(d));
    return r;
}
/* A wrong free, then the right one: both results in one. */
static CUresult both(CUresult wrong, CUresult right)
{
    return (CUresult)((int)wrong * 1000 + (int)right);
}
static CUresult free_host_managed(void)
{
    CUdeviceptr m;
    CHECK_CU(cuMemAllocManaged(&m, 4096, GLOBAL));
    CUresult r = cuMemFreeHost((void *)(uintptr_t)m);
    return both(r, cuMemFree(m));
}
static CUresult free_pinned_with_mem_free(void)
{
    void *p;
    CHECK_CU(cuMemAllocHost(&p, 4096));
    CUresult r = cuMemFree((CUdeviceptr)(uintptr_t)p);
    return both(r, cuMemFreeHost(p));
}
static CUresult free_host_alloc_with_mem_free(void)
{
    void *p;
    CHECK_CU(cuMemHostAlloc(&p, 4096, DEVICEMAP));
    CUresult r = cuMemFree((CUdeviceptr)(uintptr_t)p);
    return both(r, cuMemFreeHost(p));
}
static CUresult free_managed_twice(void)
{
    CUdeviceptr m;
    CHECK_CU(cuMemAllocManaged(&m, 4096, GLOBAL));
    CHECK_CU(cuMemFree(m));
    return cuMemFree(m);
}
static CUresult free_managed_interior(void)
{
    CUdeviceptr m;
    CHECK_CU(cuMemAllocManaged(&m, 4096, GLOBAL));
    CUresult r = cuMemFree(m + 256);
    return both(r, cuMemFree(m));
}
static CUresult free_managed_async(void)
{
    CUdeviceptr m;
    CHECK_CU(cuMemAllocManaged(&m, 4096, GLOBAL));
    CUresult r = cuMemFreeAsync(m, NULL);
    if (r == CUDA_SUCCESS) {
        CHECK_CU(cuStreamSynchronize(NULL));
        return r;
    }
    return both(r, cuMemFree(m));
}
/* A free on a thread with a global capture of its own in progress: the
 * driver's answer, the capture's end, and the block's free after it. */
static CUresult free_during_capture(int managed)
{
    CUstream s;
    CUgraph g = NULL;
    void *p;
    block_key_t k = managed ? (block_key_t)MANAGED(GLOBAL, 4096) : (block_key_t)HOST(4096);
    CHECK_CU(hm_key_alloc(&k, &p));
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUresult r = hm_key_free(&k, p);
    CUresult end = cuStreamEndCapture(s, &g);
    if (g) CHECK_CU(cuGraphDestroy(g));
    CHECK_CU(cuStreamDestroy(s));
    CUresult after = r == CUDA_SUCCESS ? CUDA_SUCCESS : hm_key_free(&k, p);
    return (CUresult)((int)r * 1000000 + (int)end * 1000 + (int)after);
}
/* An allocation on a thread with a global capture of its own in progress,
 * a block of its call, flags and size freed (and its fence complete)
 * before: the allocation's result and the capture's end. */
static CUresult alloc_during_capture(int managed)
{
    CUstream s;
    CUgraph g = NULL;
    void *p, *q = NULL;
    block_key_t k = managed ? (block_key_t)MANAGED(GLOBAL, 4096) : (block_key_t)HOSTALLOC(PORTABLE, 4096);
    CHECK_CU(hm_key_alloc(&k, &p));
    CHECK_CU(hm_key_free(&k, p));
    CHECK_CU(cuCtxSynchronize());
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUresult r = hm_key_alloc(&k, &q);
    CUresult end = cuStreamEndCapture(s, &g);
    if (g) CHECK_CU(cuGraphDestroy(g));
    CHECK_CU(cuStreamDestroy(s));
    if (r == CUDA_SUCCESS) CHECK_CU(hm_key_free(&k, q));
    return both(r, end);
}
static CUresult host_alloc_during_capture(void) { return alloc_during_capture(0); }
static CUresult managed_alloc_during_capture(void) { return alloc_during_capture(1); }
static CUresult free_host_during_capture(void) { return free_during_capture(0); }
static CUresult free_managed_during_capture(void) { return free_during_capture(1); }
/* A block of a context destroyed since, freed from the primary. */
static CUresult free_after_ctx_destroy(int managed, int freed_before)
{
    CUdevice dev;
    CUcontext c;
    void *p;
    block_key_t k = managed ? (block_key_t)MANAGED(GLOBAL, 1 << 16) : (block_key_t)HOST(1 << 16);
    CHECK_CU(cuDeviceGet(&dev, 0));
    CHECK_CU(cuCtxCreate(&c, NULL, 0, dev));
    CHECK_CU(hm_key_alloc(&k, &p));
    if (freed_before) CHECK_CU(hm_key_free(&k, p));
    CHECK_CU(cuCtxDestroy(c));
    CHECK_CU(cuCtxSetCurrent(hm_primary));
    return hm_key_free(&k, p);
}
static CUresult free_host_after_ctx_destroy(void) { return free_after_ctx_destroy(0, 0); }
static CUresult free_managed_after_ctx_destroy(void) { return free_after_ctx_destroy(1, 0); }
static CUresult free_host_twice_ctx_destroyed(void) { return free_after_ctx_destroy(0, 1); }
static CUresult free_managed_twice_ctx_destroyed(void) { return free_after_ctx_destroy(1, 1); }
static CUresult advise_pinned(void)
{
    void *p;
    CHECK_CU(cuMemAllocHost(&p, 4096));
    CUresult r = cuMemAdvise((CUdeviceptr)(uintptr_t)p, 4096, CU_MEM_ADVISE_SET_READ_MOSTLY, hm_device0);
    CHECK_CU(cuMemFreeHost(p));
    return r;
}
static CUresult attach_pinned(void)
{
    void *p;
    CHECK_CU(cuMemAllocHost(&p, 4096));
    CUresult r = cuStreamAttachMemAsync(NULL, (CUdeviceptr)(uintptr_t)p, 0, GLOBAL);
    CHECK_CU(cuMemFreeHost(p));
    return r;
}
static CUresult advise_bogus(void)
{
    return cuMemAdvise((CUdeviceptr)0xdead0000ull, 4096, CU_MEM_ADVISE_SET_READ_MOSTLY, hm_device0);
}
static CUresult attach_bogus(void) { return cuStreamAttachMemAsync(NULL, (CUdeviceptr)0xdead0000ull, 0, GLOBAL); }
static CUresult advise_bad_device(void)
{
    CUdeviceptr m;
    CHECK_CU(cuMemAllocManaged(&m, 4096, GLOBAL));
    CUmemLocation bad = {CU_MEM_LOCATION_TYPE_DEVICE, 99};
    CUresult r = cuMemAdvise(m, 4096, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, bad);
    CHECK_CU(cuMemFree(m));
    return r;
}

static const struct row {
    const char *name;
    CUresult (*call)(void);
    int needs_init;
} rows[] = {
    {"cuMemAllocHost before cuInit", alloc_host_before_init, 0},
    {"cuMemHostAlloc before cuInit", host_alloc_before_init, 0},
    {"cuMemAllocManaged before cuInit", managed_before_init, 0},
    {"cuMemFreeHost before cuInit", free_host_before_init, 0},
    {"cuMemAllocHost without a context", alloc_host_no_context, 1},
    {"cuMemAllocManaged without a context", managed_no_context, 1},
    {"cuMemFreeHost without a context", free_host_no_context, 1},
    {"cuMemAllocHost(NULL, 4096)", alloc_host_null, 1},
    {"cuMemAllocHost(&p, 0)", alloc_host_zero, 1},
    {"cuMemAllocHost(NULL, 0)", alloc_host_null_zero, 1},
    {"cuMemHostAlloc(NULL, 4096, 0)", host_alloc_null, 1},
    {"cuMemHostAlloc(&p, 0, PORTABLE)", host_alloc_zero, 1},
    {"cuMemHostAlloc(&p, 4096, 0x80)", host_alloc_bad_flags, 1},
    {"cuMemHostAlloc(&p, 2^62, 0)", host_alloc_huge, 1},
    {"cuMemAllocManaged(NULL, 4096, GLOBAL)", managed_null, 1},
    {"cuMemAllocManaged(&m, 0, GLOBAL)", managed_zero, 1},
    {"cuMemAllocManaged(&m, 4096, 0)", managed_flags_0, 1},
    {"cuMemAllocManaged(&m, 4096, SINGLE)", managed_flags_single, 1},
    {"cuMemAllocManaged(&m, 2^62, GLOBAL)", managed_huge, 1},
    {"cuMemFreeHost(NULL)", free_host_null, 1},
    {"cuMemFreeHost(bogus)", free_host_bogus, 1},
    {"cuMemFreeHost(stack)", free_host_stack, 1},
    {"cuMemFreeHost twice", free_host_twice, 1},
    {"cuMemFreeHost twice (cuMemHostAlloc PORTABLE)", host_alloc_free_twice, 1},
    {"cuMemFreeHost twice, other blocks between", free_host_twice_later, 1},
    {"cuMemFreeHost(p + 64)", free_host_interior, 1},
    {"cuMemFreeHost(device memory)", free_host_device, 1},
    {"cuMemFreeHost(managed), then cuMemFree", free_host_managed, 1},
    {"cuMemFree(cuMemAllocHost), then cuMemFreeHost", free_pinned_with_mem_free, 1},
    {"cuMemFree(cuMemHostAlloc), then cuMemFreeHost", free_host_alloc_with_mem_free, 1},
    {"cuMemFree(managed) twice", free_managed_twice, 1},
    {"cuMemFree(managed + 256), then cuMemFree", free_managed_interior, 1},
    {"cuMemFreeAsync(managed)", free_managed_async, 1},
    {"cuMemFreeHost during a global capture", free_host_during_capture, 1},
    {"cuMemFree(managed) during a global capture", free_managed_during_capture, 1},
    {"cuMemHostAlloc during a global capture, a block freed before", host_alloc_during_capture, 1},
    {"cuMemAllocManaged during a global capture, a block freed before", managed_alloc_during_capture, 1},
    {"cuMemFreeHost after its context was destroyed", free_host_after_ctx_destroy, 1},
    {"cuMemFree(managed) after its context was destroyed", free_managed_after_ctx_destroy, 1},
    {"cuMemFreeHost twice, its context destroyed between", free_host_twice_ctx_destroyed, 1},
    {"cuMemFree(managed) twice, its context destroyed between", free_managed_twice_ctx_destroyed, 1},
    {"cuMemAdvise(pinned memory)", advise_pinned, 1},
    {"cuStreamAttachMemAsync(pinned memory)", attach_pinned, 1},
    {"cuMemAdvise(bogus)", advise_bogus, 1},
    {"cuStreamAttachMemAsync(bogus)", attach_bogus, 1},
    {"cuMemAdvise(managed, device 99)", advise_bad_device, 1},
};
#define NROWS (sizeof rows / sizeof rows[0])

/* The keys the rows use: after the table, each is allocated and freed
 * again and must be the program's every time. */
static const block_key_t table_keys[] = {
    HOST(4096), HOST(8192), HOST(1 << 16), HOSTALLOC(PORTABLE, 65536), HOSTALLOC(DEVICEMAP, 4096),
    MANAGED(GLOBAL, 4096), MANAGED(GLOBAL, 1 << 16),
};

int hm_table(void)
{
    int inited = 0;
    for (size_t i = 0; i < NROWS; i++) {
        if (rows[i].needs_init && !inited) {
            hm_init();
            inited = 1;
        }
        printf("%zu %d\n", i, (int)rows[i].call());
        fflush(stdout);
    }
    /* The program goes on: blocks of every key used above, two at once,
     * each usable, none handed out twice, and served again. */
    int kept_served = 0;
    for (size_t i = 0; i < sizeof table_keys / sizeof table_keys[0]; i++) {
        const block_key_t *k = &table_keys[i];
        for (int round = 0; round < 3; round++) {
            int fresh_a, fresh_b;
            void *a = hm_take(k, &fresh_a), *b = hm_take(k, &fresh_b);
            if (a == b) CHECK_FAIL("%s gave %p twice", hm_key_name(k), a);
            hm_use(a, k->size, 0x11);
            hm_use(b, k->size, 0x22);
            hm_use(a, k->size, 0x33);
            hm_give(k, a);
            hm_give(k, b);
            if (round > 0) kept_served += !fresh_a + !fresh_b;
            CHECK_CU(cuCtxSynchronize()); /* fences that complete late (SIMCUDA_EVENT_DELAY) complete */
        }
    }
    if (hm_simulated() && !tl_native() && (hm_kept(0) || hm_kept(1)) && kept_served == 0)
        CHECK_FAIL("no allocation after the table was served by a kept block");
    printf("the program went on\n");
    return 0;
}

/* Settings the comparisons run under, and the kinds each keeps. */
static const char *const settings[][8] = {
    {"TEST_KEPT=host,managed", NULL},
    {"TEST_KEPT=host,managed", "CUPOOL_FREE=deferred", NULL},
    {"TEST_KEPT=host,managed", "CUPOOL_FREE=sync", NULL},
    {"TEST_KEPT=host,managed", "CUPOOL_FREE=ordered", NULL},
    {"TEST_KEPT=host,managed", "CUPOOL_DEFERRED_FENCE=streams", "CUPOOL_FREE=deferred", NULL},
    {"TEST_KEPT=managed", "CUPOOL_HOST=0", NULL},
    {"TEST_KEPT=host", "CUPOOL_MANAGED=0", NULL},
    {"TEST_KEPT=none", "CUPOOL_POLICY=off", NULL},
    {"TEST_KEPT=host,managed", "CUPOOL_HOST_KEEP=1M", "CUPOOL_MANAGED_KEEP=64K", "CUPOOL_STATS=1", NULL},
};
#define NSETTINGS (sizeof settings / sizeof settings[0])

static void setting_text(const char *const *env, char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    for (const char *const *e = env; *e && used < len; e++)
        used += (size_t)snprintf(out + used, len - used, "%s%s", used ? " " : "", *e);
}

/* The lines two outputs differ in, printed; the number of them. */
static int diff_lines(const char *native, const char *got, const char *what)
{
    int differ = 0;
    const char *a = native, *b = got;
    while ((a && *a) || (b && *b)) {
        const char *na = a ? strchr(a, '\n') : NULL, *nb = b ? strchr(b, '\n') : NULL;
        int la = a && *a ? (int)(na ? na - a : (long)strlen(a)) : 0, lb = b && *b ? (int)(nb ? nb - b : (long)strlen(b)) : 0;
        if (la != lb || strncmp(a ? a : "", b ? b : "", (size_t)la) != 0) {
            if (differ < 20) fprintf(stderr, "%s:\n  native: %.*s\n  cupool: %.*s\n", what, la, a ? a : "", lb, b ? b : "");
            differ++;
        }
        a = na ? na + 1 : NULL;
        b = nb ? nb + 1 : NULL;
    }
    return differ;
}

/* Each key's queries run in a child of their own: the driver places small
 * pinned and managed blocks inside shared mappings, and some answers belong
 * to the mapping or the page rather than to the block (MAPPING_BASE_ADDR,
 * a pinned mapping's PORTABLE flag, a managed page's advice and last
 * prefetch location).  A block allocated beside blocks cupool keeps would
 * answer for those neighbours where the native run, which freed them, has
 * none; one key at a time, both runs allocate beside nothing. */
int hm_compare_queries(void)
{
    static const char *const native_env[] = {"TEST_KEPT=none", NULL};
    tl_child_t native[NQUERY_KEYS];
    char key_arg[NQUERY_KEYS][16];
    for (size_t q = 0; q < NQUERY_KEYS; q++) {
        snprintf(key_arg[q], sizeof key_arg[q], "%zu", q);
        const char *args[] = {"--queries", key_arg[q], NULL};
        tl_run_self(args, native_env, 1, 60, &native[q]);
        if (native[q].status != 0) {
            tl_child_dump("queries, native", &native[q]);
            CHECK_FAIL("the queries of %s failed natively", hm_key_name(&query_keys[q]));
        }
    }
    int failed = 0;
    for (size_t k = 0; k < NSETTINGS; k++) {
        char what[256];
        setting_text(settings[k], what, sizeof what);
        int bad = 0;
        for (size_t q = 0; q < NQUERY_KEYS; q++) {
            const char *args[] = {"--queries", key_arg[q], NULL};
            tl_child_t c;
            tl_run_self(args, settings[k], 0, 60, &c);
            if (c.status != 0 || diff_lines(native[q].out, c.out, what) != 0) tl_child_dump(what, &c), bad = 1;
            tl_child_free(&c);
        }
        failed += bad;
        printf("queries, %-60s %s\n", what, bad ? "FAILED" : "the same answers as the driver's");
    }
    for (size_t q = 0; q < NQUERY_KEYS; q++) tl_child_free(&native[q]);
    return failed;
}

int hm_compare_table(void)
{
    const char *args[] = {"--table", NULL}, *native_env[] = {"TEST_KEPT=none", NULL};
    tl_child_t native;
    tl_run_self(args, native_env, 1, 60, &native);
    if (native.status != 0) {
        tl_child_dump("bad input, native", &native);
        CHECK_FAIL("the bad-input table failed natively");
    }
    CUresult expected[NROWS];
    CHECK_EQ(tl_parse_results(native.out, expected, NROWS), NROWS);
    int failed = 0;
    for (size_t k = 0; k < NSETTINGS + 1; k++) {
        /* Fences that complete late: kept blocks serve later. */
        static const char *const late[] = {"TEST_KEPT=host,managed", "SIMCUDA_EVENT_DELAY=3", NULL};
        const char *const *env = k < NSETTINGS ? settings[k] : late;
        if (k == NSETTINGS && check_real_driver()) continue;
        char what[256];
        setting_text(env, what, sizeof what);
        tl_child_t c;
        tl_run_self(args, env, 0, 60, &c);
        CUresult got[NROWS];
        int n = tl_parse_results(c.out, got, NROWS);
        int bad = c.status != 0 || n != (int)NROWS || !strstr(c.out, "the program went on");
        for (size_t i = 0; i < NROWS; i++) {
            if (got[i] == expected[i]) continue;
            fprintf(stderr, "%s: %-56s native %d, cupool %d\n", what, rows[i].name, (int)expected[i], (int)got[i]);
            bad = 1;
        }
        if (bad) tl_child_dump(what, &c), failed++;
        printf("bad input, %-60s %s\n", what, bad ? "FAILED" : "the driver's own results");
        tl_child_free(&c);
    }
    tl_child_free(&native);
    return failed;
}
