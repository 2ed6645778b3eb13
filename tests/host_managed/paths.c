/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cases of test_host_managed about the ways programs reach the kept
 * store: threads at once, cuGetProcAddress and dlsym, and what the log and
 * the statistics say of it.
 */
#define _GNU_SOURCE
#include "host_managed.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- threads ---------------------------------------------------------------------- */

enum { THREADS = 4, THREAD_ROUNDS = 300, HELD = 4, CONTENDED_ROUNDS = 3000 };

static const block_key_t thread_keys[] = {HOST(4096), HOSTALLOC(PORTABLE, 65536), MANAGED(GLOBAL, 4096), MANAGED(GLOBAL, 65536)};

typedef struct {
    int id;
    long long allocations[2]; /* pinned, managed */
} worker_t;

static void *worker(void *arg)
{
    worker_t *w = arg;
    CHECK_CU(cuCtxSetCurrent(hm_primary));
    CUstream s;
    CUdeviceptr d;
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK_CU(cuMemAlloc(&d, 65536));
    struct {
        const block_key_t *k;
        void *p;
        unsigned char value;
    } held[HELD] = {{0}};
    uint64_t rng = 0x1234567ull + (uint64_t)w->id * 7919;
    for (int r = 0; r < THREAD_ROUNDS; r++) {
        int slot = (int)(tl_rand(&rng) % HELD);
        if (held[slot].p) {
            /* What it wrote is still there: nobody else had the block. */
            const unsigned char *b = held[slot].p;
            size_t n = held[slot].k->size;
            hm_host_access(b, n, 0);
            if (b[0] != held[slot].value || b[n / 2] != held[slot].value || b[n - 1] != held[slot].value)
                CHECK_FAIL("thread %d: block %p holds %02x, expected %02x: another thread had it", w->id, (void *)b, b[0],
                           held[slot].value);
            hm_give(held[slot].k, held[slot].p);
            held[slot].p = NULL;
            continue;
        }
        const block_key_t *k = &thread_keys[tl_rand(&rng) % (sizeof thread_keys / sizeof thread_keys[0])];
        void *p = hm_take(k, NULL);
        unsigned char value = (unsigned char)(w->id * 64 + r % 64);
        hm_host_access(p, k->size, 1);
        memset(p, value, k->size);
        /* Out to the device and back, on the thread's stream. */
        CHECK_CU(cuMemcpyHtoDAsync(d, p, k->size, s));
        CHECK_CU(cuMemcpyDtoHAsync(p, d, k->size, s));
        if (r % 3 == 0) CHECK_CU(cuStreamSynchronize(s));
        else {
            /* Freed with the copies in flight, now and then. */
            hm_give(k, p);
            w->allocations[hm_is_managed(k)]++;
            continue;
        }
        held[slot].k = k;
        held[slot].p = p;
        held[slot].value = value;
        w->allocations[hm_is_managed(k)]++;
        sched_yield();
    }
    for (int i = 0; i < HELD; i++)
        if (held[i].p) hm_give(held[i].k, held[i].p);
    /* Then all at once on two keys: a block two threads got at once would
     * hold the other's bytes. */
    for (int r = 0; r < CONTENDED_ROUNDS; r++) {
        const block_key_t *k = &thread_keys[r % 2 * 2]; /* pinned, managed */
        unsigned char *p = hm_take(k, NULL), value = (unsigned char)(w->id + 1);
        hm_host_access(p, k->size, 1);
        memset(p, value, k->size);
        sched_yield();
        hm_host_access(p, k->size, 0);
        for (size_t i = 0; i < k->size; i += 512)
            if (p[i] != value) CHECK_FAIL("thread %d: block %p holds %02x, expected %02x: another thread had it", w->id, (void *)p, p[i], value);
        hm_give(k, p);
        w->allocations[hm_is_managed(k)]++;
    }
    CHECK_CU(cuStreamSynchronize(s));
    CHECK_CU(cuMemFree(d));
    CHECK_CU(cuStreamDestroy(s));
    return NULL;
}

int hm_case_threads(void)
{
    hm_init();
    pthread_t t[THREADS];
    worker_t w[THREADS];
    long long before[2] = {hm_made(0), hm_made(1)}, allocations[2] = {0, 0};
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker_t){i, {0, 0}};
        CHECK_EQ(pthread_create(&t[i], NULL, worker, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) CHECK_EQ(pthread_join(t[i], NULL), 0);
    for (int m = 0; m < 2; m++) {
        for (int i = 0; i < THREADS; i++) allocations[m] += w[i].allocations[m];
        long long by_driver = hm_made(m) - before[m];
        const char *kind = m ? "managed" : "pinned";
        printf("%d threads: %lld %s allocations, %lld by the driver\n", THREADS, allocations[m], kind, by_driver);
        /* Late fences (SIMCUDA_EVENT_DELAY) send some to the driver. */
        if (hm_kept(m) && by_driver > allocations[m] * 3 / 4)
            CHECK_FAIL("%lld of %lld %s allocations by the driver: kept blocks served too few", by_driver, allocations[m], kind);
        if (!hm_kept(m) && by_driver != allocations[m])
            CHECK_FAIL("%lld of %lld %s allocations by the driver: kept blocks served a kind passed through", by_driver,
                       allocations[m], kind);
    }
    printf("no block handed out twice, no race\n");
    return 0;
}

/* ---- cuGetProcAddress and dlsym ----------------------------------------------------- */

typedef CUresult advise_v1_t(CUdeviceptr, size_t, CUmem_advise, CUdevice);
typedef CUresult attach_t(CUstream, CUdeviceptr, size_t, unsigned);
typedef CUresult alloc_host_t(void **, size_t);
typedef CUresult host_alloc_t(void **, size_t, unsigned);
typedef CUresult managed_t(CUdeviceptr *, size_t, unsigned);
typedef CUresult free_host_t(void *);
typedef CUresult mem_free_t(CUdeviceptr);
typedef CUresult advise_v2_t(CUdeviceptr, size_t, CUmem_advise, CUmemLocation);
typedef CUresult alloc_host_legacy_t(void **, unsigned int);

static int in_cupool(void *fn)
{
    Dl_info info;
    return fn && dladdr(fn, &info) && info.dli_fname && strstr(info.dli_fname, "libcupool");
}

static void *resolve(const char *name, int version, cuuint64_t flags)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult status;
    CHECK_CU(cuGetProcAddress(name, &fn, version, flags, &status));
    CHECK_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
    if (!in_cupool(fn)) CHECK_FAIL("cuGetProcAddress(%s, %d, %llu) is not cupool's shim", name, version, (unsigned long long)flags);
    printf("cuGetProcAddress(%s, %d, %s): cupool's shim\n", name, version,
           flags == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM ? "per-thread" : "default");
    return fn;
}

int hm_case_proc_address(void)
{
    hm_init();
    alloc_host_t *alloc_host = (alloc_host_t *)resolve("cuMemAllocHost", 12000, CU_GET_PROC_ADDRESS_DEFAULT);
    host_alloc_t *host_alloc = (host_alloc_t *)resolve("cuMemHostAlloc", 12000, CU_GET_PROC_ADDRESS_DEFAULT);
    managed_t *alloc_managed = (managed_t *)resolve("cuMemAllocManaged", 12000, CU_GET_PROC_ADDRESS_DEFAULT);
    free_host_t *free_host = (free_host_t *)resolve("cuMemFreeHost", 12000, CU_GET_PROC_ADDRESS_DEFAULT);
    mem_free_t *mem_free = (mem_free_t *)resolve("cuMemFree", 12000, CU_GET_PROC_ADDRESS_DEFAULT);
    advise_v1_t *advise1 = (advise_v1_t *)resolve("cuMemAdvise", 8000, CU_GET_PROC_ADDRESS_DEFAULT);
    advise_v2_t *advise2 = (advise_v2_t *)resolve("cuMemAdvise", 12020, CU_GET_PROC_ADDRESS_DEFAULT);
    attach_t *attach = (attach_t *)resolve("cuStreamAttachMemAsync", 12000, CU_GET_PROC_ADDRESS_DEFAULT);
    attach_t *attach_ptsz = (attach_t *)resolve("cuStreamAttachMemAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    CHECK_TRUE(attach != attach_ptsz);
    static const char *const exported[] = {"cuMemAllocHost_v2", "cuMemHostAlloc", "cuMemAllocManaged", "cuMemFreeHost",
                                           "cuMemAdvise", "cuMemAdvise_v2", "cuStreamAttachMemAsync",
                                           "cuStreamAttachMemAsync_ptsz"};
    void *driver = dlopen("libcuda.so.1", RTLD_NOW);
    CHECK_TRUE(driver != NULL);
    for (size_t i = 0; i < sizeof exported / sizeof exported[0]; i++) {
        if (!in_cupool(dlsym(driver, exported[i]))) CHECK_FAIL("dlsym(libcuda, %s) is not cupool's shim", exported[i]);
        printf("dlsym(libcuda, %s): cupool's shim\n", exported[i]);
    }
    /* Blocks allocated and freed through them are kept and served again. */
    long long host0 = hm_made(0), managed0 = hm_made(1);
    for (int i = 0; i < 3; i++) {
        void *a, *b;
        CUdeviceptr m;
        CHECK_CU(alloc_host(&a, 4096));
        CHECK_CU(host_alloc(&b, 8192, PORTABLE));
        CHECK_CU(alloc_managed(&m, 4096, GLOBAL));
        hm_use(a, 4096, 1);
        hm_use(b, 8192, 2);
        hm_use((void *)(uintptr_t)m, 4096, 3);
        CHECK_CU(free_host(a));
        CHECK_CU(free_host(b));
        CHECK_CU(mem_free(m));
    }
    if (hm_made(0) - host0 != (hm_kept(0) ? 2 : 6) || hm_made(1) - managed0 != (hm_kept(1) ? 1 : 3))
        CHECK_FAIL("through cuGetProcAddress's pointers: %lld pinned and %lld managed allocations by the driver",
                   hm_made(0) - host0, hm_made(1) - managed0);
    /* Advice and attachment through them mark the block. */
    CUstream s;
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int way = 0; way < 4; way++) {
        CUdeviceptr m;
        CHECK_CU(alloc_managed(&m, 4096, GLOBAL));
        if (way == 0) CHECK_CU(advise1(m, 4096, CU_MEM_ADVISE_SET_READ_MOSTLY, 0));
        if (way == 1) CHECK_CU(advise2(m, 4096, CU_MEM_ADVISE_SET_READ_MOSTLY, hm_device0));
        if (way == 2) CHECK_CU(attach(s, m, 0, CU_MEM_ATTACH_SINGLE));
        if (way == 3) CHECK_CU(attach_ptsz(NULL, m, 0, CU_MEM_ATTACH_GLOBAL));
        CHECK_CU(cuCtxSynchronize());
        CHECK_CU(mem_free(m));
        if (hm_live(1) != 0) CHECK_FAIL("a block given advice or attached through cuGetProcAddress's pointer %d was kept", way);
    }
    CHECK_CU(cuStreamDestroy(s));
    /* The CUDA 2.0 cuMemAllocHost (32-bit size), which cupool leaves alone,
     * and cuMemFreeHost of its block. */
    alloc_host_legacy_t *legacy = NULL;
    CUdriverProcAddressQueryResult status;
    CHECK_CU(cuGetProcAddress("cuMemAllocHost", (void **)&legacy, 2000, CU_GET_PROC_ADDRESS_DEFAULT, &status));
    void *a;
    long long live0 = hm_live(0);
    CHECK_CU(legacy(&a, 4096));
    hm_use(a, 4096, 4);
    CHECK_CU(cuMemFreeHost(a));
    CHECK_CU_EQ(cuMemFreeHost(a), CUDA_ERROR_INVALID_VALUE);
    if (hm_live(0) > live0) CHECK_FAIL("the legacy cuMemAllocHost's block outlived its free");
    return 0;
}

/* ---- log and statistics -------------------------------------------------------------- */

int hm_workload(void)
{
    hm_init();
    for (int i = 0; i < 100; i++) {
        void *p;
        CUdeviceptr m, d;
        CHECK_CU(cuMemAllocHost(&p, 4096));
        CHECK_CU(cuMemAllocManaged(&m, 8192, GLOBAL));
        CHECK_CU(cuMemAlloc(&d, 4096));
        CHECK_CU(cuMemFree(d));
        CHECK_CU(cuMemFree(m));
        CHECK_CU(cuMemFreeHost(p));
    }
    void *q;
    CHECK_CU(cuMemHostAlloc(&q, 12288, PORTABLE | DEVICEMAP));
    CHECK_CU(cuMemFreeHost(q));
    CHECK_CU_EQ(cuMemFreeHost(q), CUDA_ERROR_INVALID_VALUE);
    return 0;
}

/* Lines of the log holding every one of the fragments (NULL-terminated). */
static int log_lines(const char *log, const char *const *fragments)
{
    int n = 0;
    for (const char *line = log; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        int all = 1;
        for (const char *const *f = fragments; *f && all; f++) {
            const char *hit = strstr(line, *f);
            all = hit && hit + strlen(*f) <= line + len;
        }
        n += all;
        line = nl ? nl + 1 : NULL;
    }
    return n;
}

static void expect_log(const char *log, int want, const char *const *fragments)
{
    int got = log_lines(log, fragments);
    char text[512];
    size_t used = 0;
    for (const char *const *f = fragments; *f; f++) used += (size_t)snprintf(text + used, sizeof text - used, " %s", *f);
    if (got != want) CHECK_FAIL("%d log lines with%s, expected %d", got, text, want);
    printf("%3d log lines with%s\n", got, text);
}

int hm_case_log_and_stats(void)
{
    const char *args[] = {"--workload", NULL}, *env[] = {"CUPOOL_LOG=-", "CUPOOL_STATS=1", NULL};
    tl_child_t c;
    tl_run_self(args, env, 0, 60, &c);
    if (c.status != 0) {
        tl_child_dump("workload", &c);
        CHECK_FAIL("the workload failed");
    }
    const char *log = c.err;
    expect_log(log, 1, (const char *const[]){"\"call\":\"cuMemAllocHost_v2\"", "\"kind\":\"host\"", "\"flags\":0",
                                            "\"route\":\"native\"", "\"size\":4096", NULL});
    expect_log(log, 99, (const char *const[]){"\"call\":\"cuMemAllocHost_v2\"", "\"kind\":\"host\"", "\"flags\":0",
                                             "\"route\":\"pool\"", "\"size\":4096", NULL});
    expect_log(log, 100, (const char *const[]){"\"call\":\"cuMemFreeHost\"", "\"kind\":\"host\"", "\"route\":\"pool\"",
                                              "\"size\":4096", NULL});
    expect_log(log, 1, (const char *const[]){"\"call\":\"cuMemAllocManaged\"", "\"kind\":\"managed\"", "\"flags\":1",
                                            "\"route\":\"native\"", "\"size\":8192", NULL});
    expect_log(log, 99, (const char *const[]){"\"call\":\"cuMemAllocManaged\"", "\"kind\":\"managed\"", "\"flags\":1",
                                             "\"route\":\"pool\"", "\"size\":8192", NULL});
    expect_log(log, 100, (const char *const[]){"\"call\":\"cuMemFree_v2\"", "\"kind\":\"managed\"", "\"route\":\"pool\"",
                                              "\"size\":8192", NULL});
    expect_log(log, 1, (const char *const[]){"\"call\":\"cuMemHostAlloc\"", "\"kind\":\"host\"", "\"flags\":3",
                                            "\"route\":\"native\"", "\"size\":12288", NULL});
    expect_log(log, 1, (const char *const[]){"\"call\":\"cuMemFreeHost\"", "\"kind\":\"host\"", "\"flags\":3",
                                            "\"route\":\"pool\"", "\"size\":12288", NULL});
    /* The second free of that block: the driver's answer. */
    expect_log(log, 1, (const char *const[]){"\"call\":\"cuMemFreeHost\"", "CUDA_ERROR_INVALID_VALUE", NULL});
    /* Device memory has no kind. */
    expect_log(log, 0, (const char *const[]){"\"call\":\"cuMemAlloc_v2\"", "\"kind\"", NULL});
    expect_log(log, 100, (const char *const[]){"\"call\":\"cuMemAlloc_v2\"", NULL});
    expect_log(log, 100, (const char *const[]){"\"call\":\"cuMemFree_v2\"", "\"size\":4096", NULL});
    expect_log(log, 0, (const char *const[]){"\"call\":\"cuMemFree_v2\"", "\"size\":4096", "\"kind\"", NULL});
    static const char *const stats[] = {
        "cupool:   pinned host memory:\n",
        "cupool:     allocations 101 (served by kept blocks 99), frees 101 (kept 101)\n",
        "cupool:   managed memory:\n",
        "cupool:     allocations 100 (served by kept blocks 99), frees 100 (kept 100)\n",
        "handed back: for the limit 0, out of memory 0\n",
        "handed back: for the limit 0, out of memory 0, advice in their mapping 0\n",
    };
    for (size_t i = 0; i < sizeof stats / sizeof stats[0]; i++) {
        if (!strstr(c.err, stats[i])) {
            tl_child_dump("workload", &c);
            CHECK_FAIL("CUPOOL_STATS printed no \"%.*s\"", (int)strlen(stats[i]) - 1, stats[i]);
        }
        printf("statistics: %s", stats[i]);
    }
    tl_child_free(&c);
    return 0;
}
