/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CUPOOL_MEMSET=auto: the probe tells a driver that refuses memset nodes on
 * stream-ordered memory (the simulator with SIMCUDA_MEMSET_BUG=1, like CUDA
 * 12.0/12.1) from one that takes them, and only on the former are memset
 * nodes on pool memory (cupool's blocks, interior pointers, the program's own
 * cuMemAllocAsync memory) rewritten; memory cupool did not pool stays native.
 * The filled bytes are exact either way.  The parent runs one child per
 * driver behaviour (and, on the simulator, a CUPOOL_MEMSET=native child that
 * shows the refusal is real) and never touches CUDA itself.
 */
#define _GNU_SOURCE
#include "memset_test.h"

#include <sys/wait.h>

#define POOLED_SIZE (256u << 10)
#define NATIVE_SIZE (2u << 20) /* above CUPOOL_MAX_SIZE below: cuMemAlloc */
#define ASYNC_SIZE (128u << 10)

typedef struct region {
    CUdeviceptr base;
    size_t size;
    unsigned char *before, *expect;
} region_t;

static void region_init(region_t *r, CUdeviceptr base, size_t size, uint64_t seed)
{
    r->base = base;
    r->size = size;
    r->before = malloc(size);
    r->expect = malloc(size);
    CHECK_TRUE(r->before && r->expect);
    memset_test_noise(r->before, size, seed);
    memcpy(r->expect, r->before, size);
    CHECK_CU(cuMemcpyHtoD(base, r->before, size));
}

static void region_free(region_t *r)
{
    free(r->before);
    free(r->expect);
}

static void region_check(const region_t *r, const char *what)
{
    unsigned char *got = malloc(r->size);
    CHECK_TRUE(got != NULL);
    CHECK_CU(cuMemcpyDtoH(got, r->base, r->size));
    long long at = memset_test_diff(got, r->expect, r->size);
    if (at >= 0) CHECK_FAIL("%s: byte %lld is 0x%02x, expected 0x%02x", what, at, got[at], r->expect[at]);
    free(got);
}

/* Adds a memset node, applying it to the region's expected bytes too. */
static CUgraphNode add(CUgraph g, region_t *r, size_t offset, unsigned es, size_t width, size_t height, size_t pitch,
                       unsigned value, CUcontext ctx)
{
    CUDA_MEMSET_NODE_PARAMS p = {r->base + offset, pitch, value, es, width, height};
    CUgraphNode n;
    CHECK_CU(cuGraphAddMemsetNode(&n, g, NULL, 0, &p, ctx));
    memset_test_reference(r->expect + offset, &p);
    CUgraphNodeType type;
    CHECK_CU(cuGraphNodeGetType(n, &type));
    CHECK_EQ(type, CU_GRAPH_NODE_TYPE_MEMSET);
    return n;
}

static int child(const char *phase)
{
    int bug = strcmp(phase, "bug") == 0, native = strcmp(phase, "native") == 0;
    CUcontext ctx = tl_init(0);
    CUstream stream;
    CHECK_CU(cuStreamCreate(&stream, 0));
    int cupool = check_cupool_loaded();
    /* Only the simulator can be told to refuse; driver 580 takes these nodes. */
    int refuses = bug && !check_real_driver();

    CUdeviceptr pooled, plain, async;
    CHECK_CU(cuMemAlloc(&pooled, POOLED_SIZE));
    CHECK_CU(cuMemAlloc(&plain, NATIVE_SIZE));
    CHECK_CU(cuMemAllocAsync(&async, ASYNC_SIZE, stream));
    CHECK_CU(cuStreamSynchronize(stream));
    if (cupool) {
        CUmemoryPool pool = NULL;
        CHECK_CU(cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, pooled));
        CHECK_TRUE(pool != NULL);
        CHECK_CU(cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, plain));
        CHECK_TRUE(pool == NULL);
    }
    region_t rp, rn, ra;
    region_init(&rp, pooled, POOLED_SIZE, 1);
    region_init(&rn, plain, NATIVE_SIZE, 2);
    region_init(&ra, async, ASYNC_SIZE, 3);

    if (native) {
        /* The refusal the rewrite exists for. */
        CUgraph g;
        CUgraphNode n;
        CHECK_CU(cuGraphCreate(&g, 0));
        CUDA_MEMSET_NODE_PARAMS p = {pooled, 0, 7, 1, 100, 1};
        CHECK_CU_EQ(cuGraphAddMemsetNode(&n, g, NULL, 0, &p, ctx),
                    cupool && !check_real_driver() ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
        CUDA_MEMSET_NODE_PARAMS q = {plain, 0, 7, 1, 100, 1};
        CHECK_CU(cuGraphAddMemsetNode(&n, g, NULL, 0, &q, ctx));
        CUDA_MEMSET_NODE_PARAMS z = {plain, 0, 7, 1, 0, 1};
        CHECK_CU_EQ(cuGraphAddMemsetNode(&n, g, NULL, 0, &z, ctx), CUDA_ERROR_INVALID_VALUE);
        CHECK_CU(cuGraphDestroy(g));
        CHECK_EQ(memset_test_rewritten(), cupool ? 0 : -1);
        region_free(&rp);
        region_free(&rn);
        region_free(&ra);
        return 0;
    }

    CUgraph g;
    CHECK_CU(cuGraphCreate(&g, 0));
    long long before = memset_test_rewritten();
    add(g, &rp, 0, 1, 5000, 1, 0, 0xA5, ctx);              /* block start: the origin table knows it */
    add(g, &rp, 8192 + 4, 4, 300, 7, 1500, 0x01020304, ctx); /* interior pointer, pitched */
    add(g, &ra, 4096 + 2, 2, 1000, 1, 0, 0xBEEF, ctx);           /* the program's own stream-ordered memory */
    add(g, &rn, 3, 1, 70000, 3, 100000, 0x5C, ctx);        /* cuMemAlloc memory: never rewritten */
    long long expected = refuses && cupool ? 3 : 0;
    if (cupool) CHECK_EQ(memset_test_rewritten() - before, expected);

    /* A 0-byte memset node becomes an empty node whatever the driver does. */
    CUgraphNode empty;
    CUDA_MEMSET_NODE_PARAMS z = {pooled, 0, 7, 1, 0, 1};
    if (cupool) {
        CHECK_CU(cuGraphAddMemsetNode(&empty, g, NULL, 0, &z, ctx));
        CHECK_EQ(memset_test_rewritten() - before, expected + 1);
        CUgraphNodeType type;
        CHECK_CU(cuGraphNodeGetType(empty, &type));
        CHECK_EQ(type, CU_GRAPH_NODE_TYPE_MEMSET);
    } else {
        CHECK_CU_EQ(cuGraphAddMemsetNode(&empty, g, NULL, 0, &z, ctx), CUDA_ERROR_INVALID_VALUE);
    }

    memset_test_launch(g, stream);
    region_check(&rp, "pooled block");
    region_check(&rn, "cuMemAlloc block");
    region_check(&ra, "cuMemAllocAsync block");

    /* A second graph on the same device: the probe's answer is kept. */
    CUgraph g2;
    CHECK_CU(cuGraphCreate(&g2, 0));
    before = memset_test_rewritten();
    add(g2, &rp, 100, 2, 2000, 1, 0, 0x1234, ctx);
    if (cupool) CHECK_EQ(memset_test_rewritten() - before, refuses ? 1 : 0);
    memset_test_launch(g2, stream);
    region_check(&rp, "pooled block, second graph");

    CHECK_CU(cuGraphDestroy(g));
    CHECK_CU(cuGraphDestroy(g2));
    CHECK_CU(cuMemFreeAsync(async, stream));
    CHECK_CU(cuStreamSynchronize(stream));
    CHECK_CU(cuMemFree(pooled));
    CHECK_CU(cuMemFree(plain));
    CHECK_CU(cuStreamDestroy(stream));
    region_free(&rp);
    region_free(&rn);
    region_free(&ra);
    return 0;
}

static int run_child(char **argv, const char *phase, const char *bug, const char *mode)
{
    pid_t pid = fork();
    CHECK_TRUE(pid >= 0);
    if (pid == 0) {
        setenv("SIMCUDA_MEMSET_BUG", bug, 1);
        setenv("CUPOOL_MEMSET", mode, 1);
        setenv("CUPOOL_MAX_SIZE", "1M", 1);
        char *args[] = {argv[0], (char *)phase, NULL};
        execv(tl_self_path(), args);
        _exit(99);
    }
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status)) CHECK_FAIL("phase %s: child died (status %d)", phase, status);
    fprintf(stderr, "phase %s (SIMCUDA_MEMSET_BUG=%s CUPOOL_MEMSET=%s): exit %d\n", phase, bug, mode,
            WEXITSTATUS(status));
    return WEXITSTATUS(status);
}

int main(int argc, char **argv)
{
    if (argc > 1) return child(argv[1]);
    int rc = run_child(argv, "bug", "1", "auto");
    if (rc == 0) rc = run_child(argv, "nobug", "0", "auto");
    if (rc == 0) rc = run_child(argv, "native", "1", "native");
    return rc;
}
