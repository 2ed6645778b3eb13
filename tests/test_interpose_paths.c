/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proves every way real programs reach the driver's allocator ends in
 * cupool's shims, each path shown by cupool's own statistics (pooled_allocs
 * grows): a program linked with -lcuda; dlopen("libcuda.so.1") + dlsym of
 * cuMemAlloc_v2; and the frameworks' way, dlsym of cuGetProcAddress_v2 asked
 * for "cuGetProcAddress" itself (at 11030 and 12000) and every entry point
 * resolved through the pointer it returned.  It also proves the resolver is
 * otherwise untouched: per-thread flags pick the _ptsz shim, the legacy flag
 * the plain one; symbolStatus and results for unknown names and too-old
 * versions are what the driver says without cupool (a child run natively);
 * cuMemAlloc at cudaVersion 2000 (the 32-bit legacy entry) is not the shim; an
 * unhandled entry point comes back as exactly the driver's own pointer.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <dlfcn.h>
#include <string.h>

typedef CUresult gpa_v1_t(const char *, void **, int, cuuint64_t);
typedef CUresult gpa_v2_t(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult alloc_t(CUdeviceptr *, size_t);
typedef CUresult free_t(CUdeviceptr);

static int in_cupool(void *fn)
{
    Dl_info info;
    return fn && dladdr(fn, &info) && info.dli_fname && strstr(info.dli_fname, "libcupool");
}

/* One allocation and free through the given pointers must be pooled. */
static void alloc_free_pooled(alloc_t *alloc, free_t *release, const char *path)
{
    cupool_stats_t before = tl_stats(0);
    CUdeviceptr p = 0;
    CHECK_CU(alloc(&p, 4096));
    CHECK_CU(cuMemsetD32(p, 0x5a5a5a5a, 1024));
    CHECK_EQ(tl_spot_check(p, 4096, 0x5a5a5a5a), 0);
    CHECK_CU(release(p));
    cupool_stats_t after = tl_stats(0);
    if (after.pooled_allocs != before.pooled_allocs + 1 || after.pooled_frees != before.pooled_frees + 1)
        CHECK_FAIL("path %s: pooled allocs %llu -> %llu, frees %llu -> %llu (expected +1 each)", path,
                   (unsigned long long)before.pooled_allocs, (unsigned long long)after.pooled_allocs,
                   (unsigned long long)before.pooled_frees, (unsigned long long)after.pooled_frees);
    printf("path %-40s pooled\n", path);
}

/* Queries whose result and symbolStatus must not depend on cupool. */
static const struct query {
    const char *symbol;
    int version;
    cuuint64_t flags;
} queries[] = {
    {"cuNoSuchEntryPoint", 12000, CU_GET_PROC_ADDRESS_DEFAULT},
    {"cuMemFreeAsync", 11000, CU_GET_PROC_ADDRESS_DEFAULT},   /* older than the entry point */
    {"cuMemFreeAsync", 11020, CU_GET_PROC_ADDRESS_DEFAULT},
    {"cuMemFreeAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM},
    {"cuMemAlloc", 2000, CU_GET_PROC_ADDRESS_DEFAULT},
    {"cuMemAlloc", 12000, CU_GET_PROC_ADDRESS_DEFAULT},
    {"cuGetProcAddress", 11030, CU_GET_PROC_ADDRESS_DEFAULT},
    {"cuGetProcAddress", 12000, CU_GET_PROC_ADDRESS_DEFAULT},
    {"cuGetProcAddress", 10000, CU_GET_PROC_ADDRESS_DEFAULT},
    {"cuMemcpyHtoD", 12000, CU_GET_PROC_ADDRESS_DEFAULT},
    {"cuStreamBeginCaptureToGraph", 12000, CU_GET_PROC_ADDRESS_DEFAULT},
    {"cuMemAlloc", 12000, 0x80}, /* an unknown flag */
};

/* Prints "index result status found" per query, with the resolver gpa. */
static void run_queries(gpa_v2_t *gpa, char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof queries / sizeof queries[0]; i++) {
        void *fn = (void *)1;
        CUdriverProcAddressQueryResult status = (CUdriverProcAddressQueryResult)-1;
        CUresult r = gpa(queries[i].symbol, &fn, queries[i].version, queries[i].flags, &status);
        used += (size_t)snprintf(out + used, len - used, "%zu %d %d %d\n", i, (int)r, (int)status, fn != NULL);
    }
    /* Where the unhandled entry point lies inside the driver (pointers
     * differ between processes, offsets do not). */
    void *fn = NULL;
    CUdriverProcAddressQueryResult status;
    Dl_info info;
    if (gpa("cuDeviceGetName", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS && fn &&
        dladdr(fn, &info) && info.dli_fname) {
        const char *base = strrchr(info.dli_fname, '/');
        snprintf(out + used, len - used, "cuDeviceGetName@12000 in %s at +0x%lx\n", base ? base + 1 : info.dli_fname,
                 (unsigned long)((char *)fn - (char *)info.dli_fbase));
    }
}

static gpa_v2_t *driver_gpa(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    CHECK_TRUE(h != NULL);
    gpa_v2_t *gpa = (gpa_v2_t *)dlsym(h, "cuGetProcAddress_v2");
    CHECK_TRUE(gpa != NULL);
    return gpa;
}

int main(int argc, char **argv)
{
    char table[4096];
    if (argc > 1 && strcmp(argv[1], "--queries") == 0) {
        /* The child: the same queries, natively. */
        CHECK_CU(cuInit(0));
        run_queries(driver_gpa(), table, sizeof table);
        fputs(table, stdout);
        return 0;
    }
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    tl_init(0);

    /* 1. linked with -lcuda: cuMemAlloc binds to cuMemAlloc_v2 at load time. */
    alloc_free_pooled(cuMemAlloc, cuMemFree, "linked -lcuda");

    /* 2. dlopen + dlsym of the versioned names. */
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    CHECK_TRUE(h != NULL);
    alloc_t *dl_alloc = (alloc_t *)dlsym(h, "cuMemAlloc_v2");
    free_t *dl_free = (free_t *)dlsym(h, "cuMemFree_v2");
    CHECK_TRUE(in_cupool((void *)dl_alloc));
    CHECK_TRUE(in_cupool((void *)dl_free));
    alloc_free_pooled(dl_alloc, dl_free, "dlopen + dlsym(h, cuMemAlloc_v2)");
    /* dlsym(RTLD_DEFAULT) and dlvsym-free lookups too. */
    alloc_free_pooled((alloc_t *)dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"), (free_t *)dlsym(RTLD_DEFAULT, "cuMemFree_v2"),
                      "dlsym(RTLD_DEFAULT, cuMemAlloc_v2)");

    /* 3. the frameworks' way: cuGetProcAddress_v2 asked for itself. */
    gpa_v2_t *gpa = (gpa_v2_t *)dlsym(h, "cuGetProcAddress_v2");
    CHECK_TRUE(gpa != NULL);
    CHECK_TRUE(in_cupool((void *)gpa));
    {
        void *self = NULL;
        CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
        CHECK_CU(gpa("cuGetProcAddress", &self, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
        CHECK_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
        CHECK_TRUE(in_cupool(self));
        CHECK_TRUE(self == dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2"));
        gpa_v2_t *gpa12 = (gpa_v2_t *)self;
        void *a = NULL, *f = NULL;
        CHECK_CU(gpa12("cuMemAlloc", &a, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
        CHECK_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
        CHECK_CU(gpa12("cuMemFree", &f, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
        CHECK_TRUE(a == dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"));
        CHECK_TRUE(f == dlsym(RTLD_DEFAULT, "cuMemFree_v2"));
        alloc_free_pooled((alloc_t *)a, (free_t *)f, "cuGetProcAddress_v2 -> cuGetProcAddress@12000");
    }
    {
        void *self = NULL;
        CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
        CHECK_CU(gpa("cuGetProcAddress", &self, 11030, CU_GET_PROC_ADDRESS_DEFAULT, &st));
        CHECK_TRUE(in_cupool(self));
        CHECK_TRUE(self == dlsym(RTLD_DEFAULT, "cuGetProcAddress"));
        gpa_v1_t *gpa11 = (gpa_v1_t *)self;
        void *a = NULL, *f = NULL;
        CHECK_CU(gpa11("cuMemAlloc", &a, 11030, CU_GET_PROC_ADDRESS_DEFAULT));
        CHECK_CU(gpa11("cuMemFree", &f, 11030, CU_GET_PROC_ADDRESS_DEFAULT));
        CHECK_TRUE(in_cupool(a));
        CHECK_TRUE(in_cupool(f));
        alloc_free_pooled((alloc_t *)a, (free_t *)f, "cuGetProcAddress_v2 -> cuGetProcAddress@11030");
        /* The v1 resolver asked for itself returns itself again. */
        void *again = NULL;
        CHECK_CU(gpa11("cuGetProcAddress", &again, 11030, CU_GET_PROC_ADDRESS_DEFAULT));
        CHECK_TRUE(again == self);
    }

    /* 4. per-thread and legacy variants. */
    {
        void *ptsz = NULL, *legacy = NULL, *dflt = NULL;
        CUdriverProcAddressQueryResult st;
        CHECK_CU(gpa("cuMemFreeAsync", &ptsz, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
        CHECK_CU(gpa("cuMemFreeAsync", &legacy, 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st));
        CHECK_CU(gpa("cuMemFreeAsync", &dflt, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
        void *our_ptsz = dlsym(RTLD_DEFAULT, "cuMemFreeAsync_ptsz");
        void *our_legacy = dlsym(RTLD_DEFAULT, "cuMemFreeAsync");
        CHECK_TRUE(in_cupool(our_ptsz));
        CHECK_TRUE(in_cupool(our_legacy));
        CHECK_TRUE(ptsz == our_ptsz);
        CHECK_TRUE(legacy == our_legacy);
        CHECK_TRUE(dflt == our_legacy); /* DEFAULT means legacy unless the program was built per-thread */
        CHECK_TRUE(ptsz != legacy);
    }

    /* 5. what cupool does not handle or must not substitute. */
    {
        /* Unknown names and too-new names: the simulator answers as the
         * documentation says; a real driver's exact answer (580 returns
         * CUDA_SUCCESS with a NULL pointer for an unknown name) is compared
         * with the native child's in step 6. */
        void *fn = (void *)1;
        CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
        CUresult r_unknown = gpa("cuNoSuchEntryPoint", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st);
        printf("cuNoSuchEntryPoint: %s, status %d, %p\n", check_result_name(r_unknown), (int)st, fn);
        if (!check_real_driver()) {
            CHECK_CU_EQ(r_unknown, CUDA_ERROR_NOT_FOUND);
            CHECK_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
        }
        CHECK_TRUE(fn == NULL);

        fn = (void *)1;
        st = (CUdriverProcAddressQueryResult)-1;
        CUresult r_old = gpa("cuMemFreeAsync", &fn, 11000, CU_GET_PROC_ADDRESS_DEFAULT, &st);
        printf("cuMemFreeAsync@11000: %s, status %d, %p\n", check_result_name(r_old), (int)st, fn);
        if (!check_real_driver()) {
            CHECK_CU_EQ(r_old, CUDA_ERROR_NOT_FOUND);
            CHECK_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
        }
        CHECK_TRUE(fn == NULL);

        /* cuMemAlloc at 2000 is the 32-bit legacy entry point, never the shim. */
        fn = NULL;
        CUresult r = gpa("cuMemAlloc", &fn, 2000, CU_GET_PROC_ADDRESS_DEFAULT, &st);
        printf("cuMemAlloc@2000: %s, %p\n", check_result_name(r), fn);
        CHECK_TRUE(!in_cupool(fn));
        CHECK_TRUE(fn != dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"));

        /* An unhandled entry point: exactly the driver's own function (the
         * exported symbol on the simulator; a real driver may hand out an
         * internal address, so there the native child's answer decides, in
         * step 6). */
        void *real = dlsym(h, "cuDeviceGetName");
        CHECK_TRUE(real != NULL);
        CHECK_TRUE(!in_cupool(real));
        fn = NULL;
        CHECK_CU(gpa("cuDeviceGetName", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
        CHECK_TRUE(!in_cupool(fn));
        if (!check_real_driver()) CHECK_TRUE(fn == real);
        else printf("cuDeviceGetName@12000 %s the exported cuDeviceGetName\n", fn == real ? "is" : "is not");
    }

    /* 6. results and symbolStatus of every query match the driver's own. */
    {
        run_queries(gpa, table, sizeof table);
        const char *args[] = {"--queries", NULL};
        tl_child_t native;
        tl_run_self(args, NULL, 1, 60, &native);
        if (native.status != 0) {
            tl_child_dump("native queries", &native);
            CHECK_FAIL("native child failed");
        }
        if (strcmp(native.out, table) != 0) {
            fprintf(stderr, "index result symbolStatus found\nnative:\n%swith cupool:\n%s", native.out, table);
            CHECK_FAIL("cuGetProcAddress answers differ with cupool");
        }
        tl_child_free(&native);
    }
    dlclose(h);
    printf("test_interpose_paths: all paths pooled, resolver answers unchanged\n");
    return 0;
}
