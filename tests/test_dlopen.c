/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proves cupool works when a program dlopen()s libcupool.so after it has
 * started instead of preloading it: its thread-locals are initial-exec (no
 * __tls_get_addr on the hot path), which a library loaded later gets from
 * glibc's static TLS surplus.  The child runs without the preload, opens the
 * library, and allocates and frees through its exported shims from the main
 * thread and from threads started afterwards; every block must be pooled.
 * Then it dlclose()s the library, which must stay loaded (linked with
 * -z nodelete): the program may still hold pointers to its shims, and
 * threads still run its thread-exit handlers; the shims keep working.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 8
#define PAIRS 100

static CUresult (*shim_alloc)(CUdeviceptr *, size_t);
static CUresult (*shim_free)(CUdeviceptr);
static CUcontext context;

static void *worker(void *arg)
{
    (void)arg;
    CHECK_CU(cuCtxSetCurrent(context));
    for (int i = 0; i < PAIRS; i++) {
        CUdeviceptr p;
        CHECK_CU(shim_alloc(&p, (size_t)(i + 1) * 4096));
        CHECK_CU(shim_free(p));
    }
    return NULL;
}

static int child(void)
{
    const char *path = getenv("CUPOOL_LIBRARY");
    if (!path) CHECK_FAIL("CUPOOL_LIBRARY is not set");
    if (check_cupool_loaded()) CHECK_FAIL("cupool is preloaded in the child");
    context = tl_init(0);
    void *lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!lib) CHECK_FAIL("dlopen %s: %s", path, dlerror());
    shim_alloc = (CUresult(*)(CUdeviceptr *, size_t))dlsym(lib, "cuMemAlloc_v2");
    shim_free = (CUresult(*)(CUdeviceptr))dlsym(lib, "cuMemFree_v2");
    CUresult (*shim_init)(unsigned) = (CUresult(*)(unsigned))dlsym(lib, "cuInit");
    if (!shim_alloc || !shim_free || !shim_init) CHECK_FAIL("libcupool.so lacks its shims");
    /* cupool starts once the program's cuInit succeeded. */
    CHECK_CU(shim_init(0));
    worker(NULL);
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&threads[i], NULL, worker, NULL);
    for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
    if (dlclose(lib) != 0) CHECK_FAIL("dlclose: %s", dlerror());
    if (!dlopen(path, RTLD_NOW | RTLD_NOLOAD)) CHECK_FAIL("libcupool.so was unloaded by dlclose()");
    for (int i = 0; i < THREADS; i++) pthread_create(&threads[i], NULL, worker, NULL);
    for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
    cupool_stats_t s = tl_stats(0);
    printf("pooled %llu frees %llu\n", (unsigned long long)s.pooled_allocs, (unsigned long long)s.pooled_frees);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--child") == 0) return child();
    const char *args[] = {"--child", NULL};
    tl_child_t c;
    tl_run_self(args, NULL, 1, 60, &c);
    char want[64];
    snprintf(want, sizeof want, "pooled %d frees %d", (2 * THREADS + 1) * PAIRS, (2 * THREADS + 1) * PAIRS);
    if (c.status != 0 || !strstr(c.out, want)) {
        tl_child_dump("dlopen child", &c);
        CHECK_FAIL("expected \"%s\" from a child that dlopen()ed libcupool.so", want);
    }
    printf("dlopen: %s\n", want);
    tl_child_free(&c);
    return 0;
}
