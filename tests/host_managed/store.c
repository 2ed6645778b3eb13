/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cases of test_host_managed about what the kept store keeps: reuse by
 * call, flags, size and kind, oldest first; fences (pending, and the race
 * checker on blocks the device still used at their free); blocks given
 * advice, attached or prefetched; the limits; out of memory; a free during a
 * capture; contexts destroyed with blocks kept.
 */
#define _GNU_SOURCE
#include "host_managed.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reuse ------------------------------------------------------------------------ */

/* In this order, each differing from the one before in one thing only:
 * the call, the flags, the size or the kind. */
static const block_key_t reuse_keys[] = {
    HOST(4096),
    HOSTALLOC(0, 4096),
    HOSTALLOC(PORTABLE, 4096),
    HOSTALLOC(PORTABLE, 4097),
    HOSTALLOC(PORTABLE | DEVICEMAP | WC, 4097),
    HOST(4097),
    MANAGED(GLOBAL, 4096),
    MANAGED(ATTACH_HOST, 4096),
    MANAGED(ATTACH_HOST, (3 << 20) + 1),
    HOST((3 << 20) + 1),
};

int hm_case_reuse(void)
{
    hm_init();
    enum { ROUNDS = 100 };
    for (size_t i = 0; i < sizeof reuse_keys / sizeof reuse_keys[0]; i++) {
        const block_key_t *k = &reuse_keys[i];
        int m = hm_is_managed(k);
        long long before = hm_made(m);
        for (int r = 0; r < ROUNDS; r++) {
            void *p = hm_take(k, NULL);
            hm_use(p, k->size, (unsigned char)r);
            hm_give(k, p);
        }
        long long by_driver = hm_made(m) - before, want = hm_kept(m) ? 1 : ROUNDS;
        printf("%-44s %d allocations, %lld by the driver\n", hm_key_name(k), ROUNDS, by_driver);
        if (by_driver != want) CHECK_FAIL("%s: %lld allocations by the driver, expected %lld", hm_key_name(k), by_driver, want);
    }
    /* Oldest first. */
    for (int m = 0; m < 2; m++) {
        block_key_t k = m ? (block_key_t)MANAGED(GLOBAL, 8192) : (block_key_t)HOSTALLOC(DEVICEMAP, 8192);
        void *b[3], *again[3];
        for (int i = 0; i < 3; i++) b[i] = hm_take(&k, NULL);
        for (int i = 0; i < 3; i++) hm_give(&k, b[i]);
        for (int i = 0; i < 3; i++) again[i] = hm_take(&k, NULL);
        if (hm_kept(m))
            for (int i = 0; i < 3; i++)
                if (again[i] != b[i]) CHECK_FAIL("%s: allocation %d after three frees is %p, expected the block freed %s (%p)",
                                                 hm_key_name(&k), i, again[i], i == 0 ? "first" : i == 1 ? "second" : "third", b[i]);
        for (int i = 0; i < 3; i++) hm_give(&k, again[i]);
    }
    printf("kept blocks serve the oldest first\n");
    return 0;
}

/* ---- fences ------------------------------------------------------------------------ */

/* SIMCUDA_EVENT_DELAY=3: no event is complete at its first queries. */
int hm_case_fence_pending(void)
{
    hm_init();
    CUstream s;
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    static const block_key_t keys[] = {HOSTALLOC(PORTABLE, 65536), MANAGED(GLOBAL, 65536)};
    for (int i = 0; i < 2; i++) {
        const block_key_t *k = &keys[i];
        int fresh;
        void *p1 = hm_take(k, NULL);
        CHECK_CU(cuMemsetD8Async((CUdeviceptr)(uintptr_t)p1, 1, k->size, s));
        hm_give(k, p1);
        void *p2 = hm_take(k, &fresh);
        if (!fresh || p2 == p1)
            CHECK_FAIL("%s: the block freed with its fence pending served the next allocation", hm_key_name(k));
        CHECK_CU(cuCtxSynchronize());
        hm_give(k, p2);
        CHECK_CU(cuCtxSynchronize());
        void *p3 = hm_take(k, &fresh), *p4 = hm_take(k, NULL);
        if (fresh || p3 != p1 || p4 != p2)
            CHECK_FAIL("%s: once the context was synchronized, %p and %p served, expected the kept %p and %p", hm_key_name(k), p3,
                       p4, p1, p2);
        hm_use(p3, k->size, 3);
        hm_use(p4, k->size, 4);
        hm_give(k, p3);
        hm_give(k, p4);
        printf("%s: a block whose fence is pending serves nothing, then serves\n", hm_key_name(k));
    }
    CHECK_CU(cuStreamDestroy(s));
    return 0;
}

/* A reused block the host writes at once: the race checker (SIMCUDA_RACES=count)
 * must find the write ordered after what the device did to the block
 * before its free. */
static void *reused_after(const block_key_t *k, void *p, const char *what)
{
    int fresh;
    hm_give(k, p);
    void *q = hm_take(k, &fresh);
    if (hm_kept(hm_is_managed(k)) && (fresh || q != p)) CHECK_FAIL("%s, %s: not served by the kept block", hm_key_name(k), what);
    long long before = hm_races();
    hm_host_access(q, k->size, 1);
    memset(q, 0x5a, k->size);
    if (hm_races() != before) CHECK_FAIL("%s, %s: the host's write to the block served again races the device", hm_key_name(k), what);
    printf("%s, %s: the host's write is ordered after the device's work\n", hm_key_name(k), what);
    return q;
}

int hm_case_fence_race(void)
{
    hm_init();
    CUdevice dev;
    CUstream s;
    CUdeviceptr d;
    const size_t n = 65536;
    CHECK_CU(cuDeviceGet(&dev, 0));
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK_CU(cuMemAlloc(&d, n));
    CHECK_CU(cuCtxSynchronize()); /* `ordered` allocates on the legacy stream: s is non-blocking */
    /* The checker sees the pattern: the same write without the free races. */
    void *c;
    CHECK_CU(cuMemAllocHost(&c, 512));
    long long before = hm_races();
    CHECK_CU(cuMemcpyDtoHAsync(c, d, 512, s));
    hm_host_access(c, 512, 1);
    if (hm_races() != before + 1) CHECK_FAIL("the race checker did not see a host write racing a copy into pinned memory");
    CHECK_CU(cuStreamSynchronize(s));
    CHECK_CU(cuMemFreeHost(c));

    block_key_t host = HOST(n), portable = HOSTALLOC(PORTABLE, n), managed = MANAGED(GLOBAL, n);
    void *p = hm_take(&host, NULL);
    CHECK_CU(cuMemcpyDtoHAsync(p, d, n, s));
    p = reused_after(&host, p, "the device writing it");
    CHECK_CU(cuMemcpyHtoDAsync(d, p, n, s));
    p = reused_after(&host, p, "the device reading it");
    hm_give(&host, p);
    void *m = hm_take(&managed, NULL);
    CHECK_CU(cuMemsetD8Async((CUdeviceptr)(uintptr_t)m, 7, n, s));
    m = reused_after(&managed, m, "the device writing it");
    CHECK_CU(cuMemcpyDtoDAsync(d, (CUdeviceptr)(uintptr_t)m, n, s));
    m = reused_after(&managed, m, "the device reading it");
    CHECK_CU(cuMemPrefetchAsync((CUdeviceptr)(uintptr_t)m, n, hm_device0, 0, s));
    m = reused_after(&managed, m, "a prefetch in flight");
    hm_give(&managed, m);
    /* The work of another context, on portable pinned memory and on managed memory. */
    CUcontext other;
    CUstream os;
    CUdeviceptr od;
    p = hm_take(&portable, NULL);
    m = hm_take(&managed, NULL);
    CHECK_CU(cuCtxCreate(&other, NULL, 0, dev));
    CHECK_CU(cuStreamCreate(&os, CU_STREAM_NON_BLOCKING));
    CHECK_CU(cuMemAlloc(&od, n));
    CHECK_CU(cuCtxSynchronize());
    CHECK_CU(cuMemcpyDtoHAsync(p, od, n, os));
    CHECK_CU(cuMemsetD8Async((CUdeviceptr)(uintptr_t)m, 9, n, os));
    CHECK_CU(cuCtxSetCurrent(hm_primary));
    p = reused_after(&portable, p, "another context's device writing it");
    m = reused_after(&managed, m, "another context's device writing it");
    hm_give(&portable, p);
    hm_give(&managed, m);
    CHECK_CU(cuCtxSetCurrent(other));
    CHECK_CU(cuStreamDestroy(os));
    CHECK_CU(cuMemFree(od));
    CHECK_CU(cuCtxDestroy(other));
    CHECK_CU(cuCtxSetCurrent(hm_primary));
    /* Another device's primary context, retained and made current, whose
     * legacy stream writes them: nothing else of it passed through cupool. */
    if (tl_device_count() > 1) {
        CUdevice dev1;
        CUcontext primary1;
        CHECK_CU(cuDeviceGet(&dev1, 1));
        p = hm_take(&portable, NULL);
        m = hm_take(&managed, NULL);
        CHECK_CU(cuDevicePrimaryCtxRetain(&primary1, dev1));
        CHECK_CU(cuCtxSetCurrent(primary1));
        CHECK_CU(cuMemsetD8Async((CUdeviceptr)(uintptr_t)p, 3, n, CU_STREAM_LEGACY));
        CHECK_CU(cuMemsetD8Async((CUdeviceptr)(uintptr_t)m, 4, n, CU_STREAM_LEGACY));
        CHECK_CU(cuCtxSetCurrent(hm_primary));
        p = reused_after(&portable, p, "another device's legacy stream writing it");
        m = reused_after(&managed, m, "another device's legacy stream writing it");
        hm_give(&portable, p);
        hm_give(&managed, m);
        CHECK_CU(cuDevicePrimaryCtxRelease(dev1));
    }
    CHECK_CU(cuMemFree(d));
    CHECK_CU(cuStreamDestroy(s));
    return 0;
}

/* ---- advice, attachment, prefetch ------------------------------------------------ */

typedef CUresult advise_v1_t(CUdeviceptr, size_t, CUmem_advise, CUdevice);
typedef CUresult attach_t(CUstream, CUdeviceptr, size_t, unsigned);

static CUstream touch_stream;

static void advise_read_mostly(CUdeviceptr m, size_t n)
{
    CHECK_CU(cuMemAdvise(m, n, CU_MEM_ADVISE_SET_READ_MOSTLY, hm_device0));
}
static void advise_preferred_part(CUdeviceptr m, size_t n)
{
    CHECK_CU(cuMemAdvise(m + n / 2, n / 4, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, hm_on_host));
}
static void advise_accessed_by_legacy(CUdeviceptr m, size_t n)
{
    advise_v1_t *legacy = (advise_v1_t *)dlsym(RTLD_DEFAULT, "cuMemAdvise");
    CHECK_TRUE(legacy != NULL);
    CHECK_CU(legacy(m + 4096, n - 4096, CU_MEM_ADVISE_SET_ACCESSED_BY, 0));
}
static void advise_unset(CUdeviceptr m, size_t n)
{
    /* Advice that leaves the range as it was is advice all the same. */
    CHECK_CU(cuMemAdvise(m, n, CU_MEM_ADVISE_UNSET_READ_MOSTLY, hm_device0));
}
static void attach_single(CUdeviceptr m, size_t n)
{
    (void)n;
    CHECK_CU(cuStreamAttachMemAsync(touch_stream, m, 0, CU_MEM_ATTACH_SINGLE));
    CHECK_CU(cuStreamSynchronize(touch_stream));
}
static void attach_host_ptsz(CUdeviceptr m, size_t n)
{
    attach_t *ptsz = (attach_t *)dlsym(RTLD_DEFAULT, "cuStreamAttachMemAsync_ptsz");
    CHECK_TRUE(ptsz != NULL);
    CHECK_CU(ptsz(NULL, m, n, CU_MEM_ATTACH_HOST));
    CHECK_CU(cuStreamSynchronize(CU_STREAM_PER_THREAD));
}

static int range_int(CUdeviceptr m, size_t n, CUmem_range_attribute attr)
{
    int v = -5;
    CHECK_CU(cuMemRangeGetAttribute(&v, sizeof v, attr, m, n));
    return v;
}

/* A block with no advice, attachment or prefetch: as cuMemAllocManaged makes it. */
static void expect_pristine(CUdeviceptr m, size_t n, const char *after)
{
    int accessed[4];
    CHECK_CU(cuMemRangeGetAttribute(accessed, sizeof accessed, CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, m, n));
    int rm = range_int(m, n, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY),
        pl = range_int(m, n, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION),
        lp = range_int(m, n, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION);
    if (rm != 0 || pl != CU_DEVICE_INVALID || lp != CU_DEVICE_INVALID || accessed[0] != CU_DEVICE_INVALID)
        CHECK_FAIL("the block allocated after %s has READ_MOSTLY %d, PREFERRED_LOCATION %d, LAST_PREFETCH_LOCATION %d, "
                   "ACCESSED_BY %d (a fresh block: 0, %d, %d, %d)",
                   after, rm, pl, lp, accessed[0], CU_DEVICE_INVALID, CU_DEVICE_INVALID, CU_DEVICE_INVALID);
}

int hm_case_advised(void)
{
    hm_init();
    CHECK_CU(cuStreamCreate(&touch_stream, CU_STREAM_NON_BLOCKING));
    static const struct {
        const char *name;
        void (*touch)(CUdeviceptr, size_t);
    } touches[] = {
        {"cuMemAdvise(SET_READ_MOSTLY)", advise_read_mostly},
        {"cuMemAdvise(SET_PREFERRED_LOCATION host) on a quarter of it", advise_preferred_part},
        {"cuMemAdvise (the CUDA 8.0 form) SET_ACCESSED_BY device 0 on all but its first page", advise_accessed_by_legacy},
        {"cuMemAdvise(UNSET_READ_MOSTLY)", advise_unset},
        {"cuStreamAttachMemAsync(SINGLE)", attach_single},
        {"cuStreamAttachMemAsync_ptsz(HOST)", attach_host_ptsz},
    };
    block_key_t k = MANAGED(GLOBAL, 65536);
    /* A block is kept, so the first touched block is a served one. */
    hm_give(&k, hm_take(&k, NULL));
    for (size_t i = 0; i < sizeof touches / sizeof touches[0]; i++) {
        int fresh;
        void *p = hm_take(&k, NULL);
        CUdeviceptr m = (CUdeviceptr)(uintptr_t)p;
        touches[i].touch(m, k.size);
        hm_give(&k, p);
        if (hm_live(1) != 0) CHECK_FAIL("after %s the block was kept (%lld managed bytes live)", touches[i].name, hm_live(1));
        p = hm_take(&k, &fresh);
        if (!fresh) CHECK_FAIL("after %s a kept block served", touches[i].name);
        expect_pristine((CUdeviceptr)(uintptr_t)p, k.size, touches[i].name);
        hm_give(&k, p);
        if (hm_live(1) != (hm_kept(1) ? (long long)k.size : 0)) CHECK_FAIL("an untouched block was not kept");
        printf("after %s: the driver frees it, the next block has none\n", touches[i].name);
    }
    /* Advice the driver refuses changes nothing; advice on another block
     * reaches this one only through a shared mapping (advice-mapping). */
    void *p = hm_take(&k, NULL), *q = hm_take(&k, NULL);
    CUmemLocation bad = {CU_MEM_LOCATION_TYPE_DEVICE, 99};
    CHECK_CU_EQ(cuMemAdvise((CUdeviceptr)(uintptr_t)p, k.size, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, bad),
                CUDA_ERROR_INVALID_DEVICE);
    advise_read_mostly((CUdeviceptr)(uintptr_t)q, k.size);
    hm_give(&k, q);
    if (hm_live(1) != (long long)k.size) CHECK_FAIL("a block given advice beside another was kept");
    hm_give(&k, p);
    CHECK_CU(cuStreamDestroy(touch_stream));
    return 0;
}

static CUdeviceptr mapping_base(const void *p)
{
    CUdeviceptr base = 0;
    CHECK_CU(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, (CUdeviceptr)(uintptr_t)p));
    return base;
}

/* Advice lives in pages the driver's shared mappings hold: advice on one
 * managed block hands back the kept blocks of its mapping at once, and a
 * block in use beside it is not kept at its free; kept blocks of other
 * mappings stay and serve. */
int hm_case_advice_mapping(void)
{
    hm_init();
    enum { N = 600 };
    block_key_t k = MANAGED(GLOBAL, 8192);
    static void *blocks[N];
    static CUdeviceptr base[N];
    size_t mapping = 0;
    for (int i = 0; i < N; i++) blocks[i] = hm_take(&k, NULL), base[i] = mapping_base(blocks[i]);
    CHECK_CU(cuPointerGetAttribute(&mapping, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, (CUdeviceptr)(uintptr_t)blocks[0]));
    /* The advised block and one in use beside it: two blocks wholly in the
     * mapping that holds the most blocks, so that it holds others too
     * (where the process's other memory leaves a mapping room for only a
     * few of them, the first mapping may hold no third). */
    int advised = -1, beside = -1, most = 0;
    for (int i = 0; i < N; i++) {
        int with = 0, other = -1;
        for (int j = 0; j < N; j++)
            if (base[j] == base[i] && (uintptr_t)blocks[j] + k.size <= base[j] + mapping) {
                with++;
                if (j != i) other = j;
            }
        if ((uintptr_t)blocks[i] + k.size <= base[i] + mapping && other >= 0 && with > most)
            most = with, advised = i, beside = other;
    }
    CHECK_TRUE(most >= 3);
    uintptr_t lo = base[advised], hi = lo + mapping;
    /* Every other block freed (kept where this run keeps managed memory),
     * those of the mapping and the others in turn, one of the others
     * first: the kept list of the key holds both, not one run of each. */
    static void *inside[N], *outside[N];
    long long in_mapping = 0, elsewhere = 0;
    for (int i = 0; i < N; i++) {
        if (i == advised || i == beside) continue;
        if ((uintptr_t)blocks[i] < hi && lo < (uintptr_t)blocks[i] + k.size) inside[in_mapping++] = blocks[i];
        else outside[elsewhere++] = blocks[i];
    }
    for (long long i = 0; i < in_mapping || i < elsewhere; i++) {
        if (i < elsewhere) hm_give(&k, outside[i]);
        if (i < in_mapping) hm_give(&k, inside[i]);
    }
    CHECK_TRUE(in_mapping > 0 && elsewhere > 0);
    long long live = hm_live(1), kept = hm_kept(1), size = (long long)k.size;
    long long handed_back = kept ? in_mapping * size : 0; /* at the advice, or (capture) at the next allocation */
    /* TEST_ADVICE_IN_CAPTURE: the advice while a stream capture is in
     * progress, when the driver's free would break it. */
    int in_capture = getenv("TEST_ADVICE_IN_CAPTURE") != NULL;
    CUstream cs;
    CHECK_CU(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
    if (in_capture) CHECK_CU(cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK_CU(cuMemAdvise((CUdeviceptr)(uintptr_t)blocks[advised], k.size, CU_MEM_ADVISE_SET_READ_MOSTLY, hm_device0));
    long long want = live - (in_capture ? 0 : handed_back);
    if (hm_live(1) != want)
        CHECK_FAIL("after advice on a block%s, %lld managed bytes are live, expected %lld (%lld kept blocks in its "
                   "mapping, %lld elsewhere)", in_capture ? " during a capture" : "", hm_live(1), want,
                   kept ? in_mapping : 0, kept ? elsewhere : 0);
    if (in_capture) {
        CUgraph g;
        CHECK_CU(cuStreamEndCapture(cs, &g));
        CHECK_CU(cuGraphDestroy(g));
        printf("advice on a block during a capture: no free reached the driver\n");
    } else {
        printf("advice on a block: the %lld kept blocks of its mapping went back to the driver, %lld elsewhere "
               "stayed\n", kept ? in_mapping : 0, kept ? elsewhere : 0);
    }
    CHECK_CU(cuStreamDestroy(cs));
    hm_give(&k, blocks[beside]);
    want -= size;
    if (hm_live(1) != want) CHECK_FAIL("the block in use beside the advised one was kept at its free");
    hm_give(&k, blocks[advised]);
    want -= size;
    if (hm_live(1) != want) CHECK_FAIL("the advised block was kept at its free");
    printf("the advised block and the one beside it went to the driver at their frees\n");
    int fresh;
    void *p = hm_take(&k, &fresh);
    if (kept && (fresh || mapping_base(p) == lo))
        CHECK_FAIL("the next allocation was %s, expected a kept block of another mapping",
                   fresh ? "the driver's" : "a block of the advised mapping");
    want = live - handed_back - 2 * size + (kept ? 0 : size);
    if (hm_live(1) != want)
        CHECK_FAIL("after the next allocation %lld managed bytes are live, expected %lld", hm_live(1), want);
    hm_give(&k, p);
    return 0;
}

/* Prefetches are not undone (README, "Pinned host and managed memory"): a
 * prefetched block is kept, its advice as fresh, and only its
 * LAST_PREFETCH_LOCATION tells the prefetch of its previous allocation. */
int hm_case_prefetched(void)
{
    hm_init();
    CUstream s;
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    block_key_t k = MANAGED(GLOBAL, 65536);
    void *p = hm_take(&k, NULL);
    CUdeviceptr m = (CUdeviceptr)(uintptr_t)p;
    CHECK_CU(cuMemPrefetchAsync(m, k.size, hm_device0, 0, s));
    CHECK_CU(cuStreamSynchronize(s));
    hm_give(&k, p);
    void *again = hm_take(&k, NULL);
    CUdeviceptr n = (CUdeviceptr)(uintptr_t)again;
    /* Not kept, the driver may still hand out the same address afresh. */
    int kept = hm_kept(1);
    if (kept && again != p) CHECK_FAIL("a prefetched managed block was not served again, though managed blocks are kept");
    int lp = range_int(n, k.size, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION);
    int want = kept ? hm_device0.id : CU_DEVICE_INVALID;
    if (lp != want)
        CHECK_FAIL("the block allocated after a prefetched block's free (%s) has LAST_PREFETCH_LOCATION %d, expected %d",
                   kept ? "served again" : "a fresh one", lp, want);
    if (kept) {
        /* Everything else as fresh: prefetch it elsewhere and back, and
         * the advice attributes are a fresh block's. */
        CHECK_CU(cuMemPrefetchAsync(n, k.size, hm_on_host, 0, s));
        CHECK_CU(cuStreamSynchronize(s));
    }
    int accessed[4];
    CHECK_CU(cuMemRangeGetAttribute(accessed, sizeof accessed, CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, n, k.size));
    int rm = range_int(n, k.size, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY),
        pl = range_int(n, k.size, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION);
    if (rm != 0 || pl != CU_DEVICE_INVALID || accessed[0] != CU_DEVICE_INVALID)
        CHECK_FAIL("the block allocated after a prefetched block's free has READ_MOSTLY %d, PREFERRED_LOCATION %d, "
                   "ACCESSED_BY %d (a fresh block: 0, %d, %d)",
                   rm, pl, accessed[0], CU_DEVICE_INVALID, CU_DEVICE_INVALID);
    hm_give(&k, again);
    CHECK_CU(cuStreamDestroy(s));
    printf("the block allocated after a prefetched block's free: %s, LAST_PREFETCH_LOCATION %d, no advice\n",
           kept ? "the same block, kept" : "a fresh one", lp);
    return 0;
}

/* ---- limits ------------------------------------------------------------------------- */

/* Frees n blocks of key k allocated at once; returns nothing. */
static void churn(const block_key_t *k, int n, void **blocks)
{
    for (int i = 0; i < n; i++) blocks[i] = hm_take(k, NULL);
    for (int i = 0; i < n; i++) hm_give(k, blocks[i]);
}

static void expect_live(int managed, long long want, const char *after)
{
    long long got = hm_live(managed);
    if (got != want)
        CHECK_FAIL("after %s: %lld %s bytes live, expected %lld", after, got, managed ? "managed" : "pinned host", want);
    printf("after %s: %lld %s bytes live\n", after, got, managed ? "managed" : "pinned host");
}

/* CUPOOL_HOST_KEEP=64K, CUPOOL_MANAGED_KEEP=128K. */
int hm_case_keep_limit(void)
{
    hm_init();
    void *b[8];
    block_key_t small = HOST(16384), large = HOST(128 << 10), exact = HOST(64 << 10), mid = HOSTALLOC(0, 32768);
    churn(&small, 8, b);
    expect_live(0, 64 << 10, "8 frees of 16 KiB (CUPOOL_HOST_KEEP=64K)");
    long long before = hm_made(0);
    void *again[8];
    for (int i = 0; i < 8; i++) again[i] = hm_take(&small, NULL);
    if (hm_made(0) - before != 4) CHECK_FAIL("8 allocations after that: %lld by the driver, expected 4", hm_made(0) - before);
    for (int i = 0; i < 4; i++)
        if (again[i] != b[4 + i]) CHECK_FAIL("allocation %d is %p, expected the kept %p (the newest freed stay)", i, again[i], b[4 + i]);
    for (int i = 0; i < 8; i++) hm_give(&small, again[i]);
    hm_give(&mid, hm_take(&mid, NULL));
    expect_live(0, 64 << 10, "a 32 KiB free beside 64 KiB kept (the two oldest go)");
    void *l = hm_take(&large, NULL);
    hm_give(&large, l);
    expect_live(0, 64 << 10, "a free of 128 KiB, larger than the limit");
    hm_give(&exact, hm_take(&exact, NULL));
    expect_live(0, 64 << 10, "a free of 64 KiB, as large as the limit");
    int fresh;
    hm_give(&exact, hm_take(&exact, &fresh));
    if (fresh) CHECK_FAIL("the kept block as large as the limit did not serve");
    /* Managed memory has a limit of its own. */
    block_key_t managed = MANAGED(GLOBAL, 32768);
    void *mb[8];
    churn(&managed, 8, mb);
    expect_live(1, 128 << 10, "8 frees of 32 KiB of managed memory (CUPOOL_MANAGED_KEEP=128K)");
    expect_live(0, 64 << 10, "them, for pinned memory");
    return 0;
}

int hm_case_keep_default(void)
{
    hm_init();
    void *b[3];
    block_key_t host = HOSTALLOC(PORTABLE, (size_t)400 << 20), managed = MANAGED(GLOBAL, (size_t)400 << 20);
    churn(&host, 3, b);
    expect_live(0, (long long)800 << 20, "3 frees of 400 MiB (1 GiB kept by default)");
    churn(&managed, 3, b);
    expect_live(1, (long long)800 << 20, "3 frees of 400 MiB of managed memory");
    return 0;
}

/* ---- out of memory ---------------------------------------------------------------- */

/* SIMCUDA_HOST_MEM=1M, SIMCUDA_MANAGED_MEM=1M. */
int hm_case_oom(void)
{
    hm_init();
    void *b[4];
    block_key_t host = HOST(256 << 10), managed = MANAGED(GLOBAL, 256 << 10);
    block_key_t host_big = HOSTALLOC(PORTABLE, 512 << 10), managed_big = MANAGED(GLOBAL, 512 << 10);
    churn(&host, 2, b);
    block_key_t host_other = HOSTALLOC(DEVICEMAP, 256 << 10);
    churn(&host_other, 2, b);
    churn(&managed, 4, b);
    void *p = hm_take(&host_big, NULL);
    expect_live(0, 512 << 10, "a 512 KiB allocation with 1 MiB of pinned memory kept (SIMCUDA_HOST_MEM=1M)");
    expect_live(1, hm_kept(1) ? 1 << 20 : 0, "it, for managed memory");
    void *q = NULL;
    CHECK_CU_EQ(cuMemAllocHost(&q, 1 << 20), CUDA_ERROR_OUT_OF_MEMORY);
    hm_give(&host_big, p);
    p = hm_take(&managed_big, NULL);
    expect_live(1, 512 << 10, "a 512 KiB managed allocation with 1 MiB kept (SIMCUDA_MANAGED_MEM=1M)");
    CUdeviceptr m = 0;
    CHECK_CU_EQ(cuMemAllocManaged(&m, 1 << 20, GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
    hm_give(&managed_big, p);
    /* The blocks allocated since are served again. */
    int fresh;
    hm_give(&host_big, hm_take(&host_big, &fresh));
    if (hm_kept(0) && fresh) CHECK_FAIL("no kept block served after the out-of-memory retry");
    return 0;
}

/* SIMCUDA_MEM=64M: a device allocation the device cannot hold. */
int hm_case_oom_device(void)
{
    hm_init();
    void *b[4];
    block_key_t managed = MANAGED(GLOBAL, 1 << 20);
    churn(&managed, 4, b);
    expect_live(1, hm_kept(1) ? 4 << 20 : 0, "4 frees of 1 MiB of managed memory");
    CUdeviceptr d = 0;
    CHECK_CU_EQ(cuMemAlloc(&d, (size_t)128 << 20), CUDA_ERROR_OUT_OF_MEMORY);
    expect_live(1, 0, "a device allocation that ran out of memory");
    return 0;
}

/* ---- capture --------------------------------------------------------------------- */

int hm_case_capture(void)
{
    hm_init();
    CUstream s;
    CUgraph g;
    block_key_t host = HOSTALLOC(PORTABLE, 65536), managed = MANAGED(GLOBAL, 65536);
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    void *p = hm_take(&host, NULL), *m = hm_take(&managed, NULL);
    CHECK_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK_CU(cuMemsetD8Async((CUdeviceptr)(uintptr_t)p, 1, 16, s));
    hm_give(&host, p);
    hm_give(&managed, m);
    expect_live(0, 0, "a free during a capture");
    expect_live(1, 0, "a managed free during a capture");
    CHECK_CU(cuStreamEndCapture(s, &g));
    CHECK_CU(cuGraphDestroy(g));
    CHECK_CU(cuStreamDestroy(s));
    return 0;
}

/* ---- contexts destroyed ----------------------------------------------------------- */

/* Blocks of key k, allocated in the current context and checked usable. */
static void expect_usable_fresh(const block_key_t *k, int n, void **blocks, const char *after)
{
    for (int i = 0; i < n; i++) {
        int fresh;
        blocks[i] = hm_take(k, &fresh);
        if (!fresh) CHECK_FAIL("after %s, %s was served by a kept block", after, hm_key_name(k));
        hm_use(blocks[i], k->size, (unsigned char)i);
    }
}

static void expect_still_theirs(const block_key_t *k, int n, void **blocks, const char *after)
{
    for (int i = 0; i < n; i++) {
        unsigned flags;
        CUresult r = cuMemHostGetFlags(&flags, blocks[i]);
        if (r != CUDA_SUCCESS) CHECK_FAIL("after %s the program's block %p is gone (%s)", after, blocks[i], check_result_name(r));
        hm_use(blocks[i], k->size, 0x77);
    }
}

/* CUPOOL_HOST_KEEP=64K, CUPOOL_MANAGED_KEEP=64K: frees hand the oldest kept
 * blocks back often. */
int hm_case_ctx_destroy(void)
{
    hm_init();
    CUdevice dev;
    CUcontext c;
    void *b[8], *x[16], *y[8];
    block_key_t host = HOST(8192), managed = MANAGED(GLOBAL, 8192), other = HOSTALLOC(0, 4096), filler = HOST(16384);
    CHECK_CU(cuDeviceGet(&dev, 0));
    for (int way = 0; way < 3; way++) {
        const char *what = way == 0 ? "cuCtxDestroy" : way == 1 ? "cuDevicePrimaryCtxReset" : "cuDevicePrimaryCtxRelease";
        if (way == 0) CHECK_CU(cuCtxCreate(&c, NULL, 0, dev));
        churn(&host, 8, b);
        churn(&managed, 8, b);
        if (way == 0) {
            CHECK_CU(cuCtxDestroy(c));
            CHECK_CU(cuCtxSetCurrent(hm_primary));
        } else {
            if (way == 1) CHECK_CU(cuDevicePrimaryCtxReset(dev));
            else CHECK_CU(cuDevicePrimaryCtxRelease(dev));
            hm_primary = tl_init(0);
        }
        expect_live(0, 0, what);
        expect_live(1, 0, what);
        expect_usable_fresh(&host, 8, b, what);
        expect_usable_fresh(&managed, 8, y, what);
        /* Blocks of the program's at the addresses the dead ones had, while
         * frees make the store hand its oldest blocks back. */
        for (int i = 0; i < 16; i++) x[i] = hm_take(&other, NULL);
        for (int i = 0; i < 8; i++) hm_give(&host, b[i]);
        for (int i = 0; i < 8; i++) hm_give(&managed, y[i]);
        churn(&filler, 8, b);
        expect_still_theirs(&other, 16, x, what);
        for (int i = 0; i < 8; i++) {
            b[i] = hm_take(&host, NULL);
            y[i] = hm_take(&managed, NULL);
        }
        expect_still_theirs(&host, 8, b, what);
        expect_still_theirs(&managed, 8, y, what);
        for (int i = 0; i < 8; i++) {
            hm_give(&host, b[i]);
            hm_give(&managed, y[i]);
        }
        for (int i = 0; i < 16; i++) hm_give(&other, x[i]);
        printf("after %s: its kept blocks serve nothing and are never freed again\n", what);
    }
    return 0;
}
