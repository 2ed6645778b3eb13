/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proves a kernel launch and an async copy reach cupool's work shims
 * (src/shims/work.c, which tell the work tracker of the stream before the
 * driver runs the call) by every path a program takes to the driver: linked
 * with -lcuda, dlopen("libcuda.so.1") + dlsym (and dlsym(RTLD_DEFAULT)), and
 * cuGetProcAddress, asked for itself first as the frameworks do, with the
 * legacy and the per-thread flags.  The tracker's hook shows nothing a test
 * can read, so arrival is proven by identity: every pointer a path hands
 * out is the function libcupool.so exports under that variant's name
 * (dlsym on cupool's own handle), and a call through it does the work (the
 * launch succeeds, the copy's bytes arrive).  The shims return the driver's
 * answer unchanged: calls with bad arguments answer what a run without
 * cupool answers.  On the simulated driver, which lacks cuLaunchHostFunc,
 * cupool's shim of it answers CUDA_ERROR_NOT_FOUND.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#define BYTES 4096

typedef CUresult gpa_t(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult launch_t(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                          unsigned int, unsigned int, CUstream, void **, void **);
typedef CUresult copy_t(CUdeviceptr, CUdeviceptr, size_t, CUstream);
typedef CUresult host_func_t(CUstream, CUhostFn, void *);

/* An empty kernel the simulator knows by name (and a GPU can run). */
static const char busy_ptx[] = ".version 7.0\n.target sm_75\n.address_size 64\n"
                               ".visible .entry sim_busy()\n{\n\tret;\n}\n";

static void *cupool;
static CUfunction busy;
static CUstream stream;
static CUdeviceptr src, dst;
static uint32_t pattern = 0x5a000000;

/* libcupool.so's own function of that name. */
static void *ours(const char *name)
{
    void *fn = dlsym(cupool, name);
    Dl_info info;
    if (!fn || !dladdr(fn, &info) || !info.dli_fname || !strstr(info.dli_fname, "libcupool"))
        CHECK_FAIL("libcupool.so does not export %s", name);
    return fn;
}

static void same(void *fn, const char *name, const char *path)
{
    if (fn != ours(name)) CHECK_FAIL("path %s: %s is %p, not libcupool.so's %p", path, name, fn, ours(name));
}

/* A launch and a copy through the given pointers do their work. */
static void work(launch_t *launch, copy_t *copy, const char *path)
{
    pattern++;
    tl_fill(src, BYTES, pattern);
    CHECK_CU(cuMemsetD8(dst, 0, BYTES));
    CHECK_CU(launch(busy, 1, 1, 1, 32, 1, 1, 0, stream, NULL, NULL));
    CHECK_CU(copy(dst, src, BYTES, stream));
    CHECK_CU(cuStreamSynchronize(stream));
    if (tl_spot_check(dst, BYTES, pattern) != 0) CHECK_FAIL("path %s: the copy did not arrive", path);
    printf("path %-44s reaches the work shims\n", path);
}

/* Calls the driver refuses; the child prints "ROW RESULT" for each, with
 * or without cupool. */
static void bad_calls(void)
{
    CUresult r[5];
    r[0] = cuLaunchKernel(NULL, 1, 1, 1, 32, 1, 1, 0, stream, NULL, NULL);
    r[1] = cuLaunchKernel(busy, 0, 1, 1, 32, 1, 1, 0, stream, NULL, NULL);
    r[2] = cuMemcpyAsync(0, src, BYTES, stream);
    r[3] = cuMemcpyHtoD(0, &pattern, sizeof pattern);
    r[4] = cuMemsetD32Async(0, 0, 16, stream);
    for (int i = 0; i < 5; i++) printf("%d %d\n", i, (int)r[i]);
}

static void setup(void)
{
    tl_init(0);
    CUmodule module;
    CHECK_CU(cuModuleLoadData(&module, busy_ptx));
    CHECK_CU(cuModuleGetFunction(&busy, module, "sim_busy"));
    CHECK_CU(cuStreamCreate(&stream, CU_STREAM_DEFAULT));
    CHECK_CU(cuMemAlloc(&src, BYTES));
    CHECK_CU(cuMemAlloc(&dst, BYTES));
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--bad-calls") == 0) {
        setup();
        bad_calls();
        return 0;
    }
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    const char *library = getenv("CUPOOL_LIBRARY");
    cupool = dlopen(library ? library : "libcupool.so", RTLD_NOW | RTLD_NOLOAD);
    CHECK_TRUE(cupool != NULL);
    setup();

    /* 1. linked with -lcuda. */
    same((void *)cuLaunchKernel, "cuLaunchKernel", "linked -lcuda");
    same((void *)cuMemcpyAsync, "cuMemcpyAsync", "linked -lcuda");
    work(cuLaunchKernel, cuMemcpyAsync, "linked -lcuda");

    /* 2. dlopen + dlsym of the exported variants, and dlsym(RTLD_DEFAULT). */
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    CHECK_TRUE(h != NULL);
    static const char *const names[] = {"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuMemcpyAsync", "cuMemcpyAsync_ptsz",
                                        "cuMemcpyHtoDAsync_v2", "cuMemsetD8_v2", "cuMemsetD8_v2_ptds"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        same(dlsym(h, names[i]), names[i], "dlopen + dlsym");
        same(dlsym(RTLD_DEFAULT, names[i]), names[i], "dlsym(RTLD_DEFAULT)");
    }
    work((launch_t *)dlsym(h, "cuLaunchKernel"), (copy_t *)dlsym(h, "cuMemcpyAsync"), "dlopen + dlsym");
    work((launch_t *)dlsym(h, "cuLaunchKernel_ptsz"), (copy_t *)dlsym(h, "cuMemcpyAsync_ptsz"), "dlopen + dlsym, _ptsz");

    /* 3. cuGetProcAddress, asked for itself first. */
    gpa_t *gpa = NULL;
    CUdriverProcAddressQueryResult st;
    CHECK_CU(((gpa_t *)dlsym(h, "cuGetProcAddress_v2"))("cuGetProcAddress", (void **)&gpa, 12000,
                                                         CU_GET_PROC_ADDRESS_DEFAULT, &st));
    same((void *)gpa, "cuGetProcAddress_v2", "cuGetProcAddress");
    static const struct {
        const char *symbol;
        int version;
        cuuint64_t flags;
        const char *variant;
    } asks[] = {
        {"cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuLaunchKernel"},
        {"cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuLaunchKernel_ptsz"},
        {"cuMemcpyAsync", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuMemcpyAsync"},
        {"cuMemcpyAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemcpyAsync_ptsz"},
        {"cuMemcpyHtoDAsync", 12000, CU_GET_PROC_ADDRESS_DEFAULT, "cuMemcpyHtoDAsync_v2"},
        {"cuMemcpyHtoDAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemcpyHtoDAsync_v2_ptsz"},
        {"cuMemsetD8", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuMemsetD8_v2"},
        {"cuMemsetD8", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemsetD8_v2_ptds"},
    };
    void *fn[sizeof asks / sizeof asks[0]];
    for (size_t i = 0; i < sizeof asks / sizeof asks[0]; i++) {
        fn[i] = NULL;
        CHECK_CU(gpa(asks[i].symbol, &fn[i], asks[i].version, asks[i].flags, &st));
        CHECK_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
        same(fn[i], asks[i].variant, "cuGetProcAddress");
    }
    work((launch_t *)fn[0], (copy_t *)fn[2], "cuGetProcAddress, legacy stream");
    work((launch_t *)fn[1], (copy_t *)fn[3], "cuGetProcAddress, per-thread stream");

    /* 4. The driver's answers, unchanged: the same refused calls natively. */
    {
        const char *args[] = {"--bad-calls", NULL};
        tl_child_t with, without;
        tl_run_self(args, NULL, 0, 60, &with);
        tl_run_self(args, NULL, 1, 60, &without);
        if (with.status != 0 || without.status != 0) {
            tl_child_dump("with cupool", &with);
            tl_child_dump("without cupool", &without);
            CHECK_FAIL("a child of the refused calls failed");
        }
        CUresult a[5], b[5];
        CHECK_EQ(tl_parse_results(with.out, a, 5), 5);
        CHECK_EQ(tl_parse_results(without.out, b, 5), 5);
        for (int i = 0; i < 5; i++) {
            if (a[i] == CUDA_SUCCESS) CHECK_FAIL("refused call %d succeeded", i);
            if (a[i] != b[i])
                CHECK_FAIL("refused call %d: %s with cupool, %s without", i, check_result_name(a[i]),
                           check_result_name(b[i]));
        }
        tl_child_free(&with);
        tl_child_free(&without);
        printf("refused calls answer as without cupool\n");
    }

    /* 5. An entry point the driver lacks: the shim answers, no call through NULL. */
    if (!check_real_driver()) {
        CHECK_TRUE(dlsym(h, "cuLaunchHostFunc") == NULL);
        host_func_t *host_func = (host_func_t *)dlsym(RTLD_DEFAULT, "cuLaunchHostFunc");
        same((void *)host_func, "cuLaunchHostFunc", "dlsym(RTLD_DEFAULT)");
        CHECK_CU_EQ(host_func(stream, NULL, NULL), CUDA_ERROR_NOT_FOUND);
    }

    CHECK_CU(cuMemFree(src));
    CHECK_CU(cuMemFree(dst));
    CHECK_CU(cuStreamDestroy(stream));
    dlclose(h);
    printf("test_work_calls: launches, copies and synchronizations reach cupool by every path\n");
    return 0;
}
