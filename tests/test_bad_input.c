/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proves bad input gets exactly the driver's own answer through cupool (the
 * libeatmydata rule: keep each function's contract, errors included).  A
 * table of bad calls -- NULL out-pointers, size 0, a bogus pointer, a double
 * free (at once, after enough traffic that cupool has dropped the block's
 * record, and the first free made by another thread), a pointer into the
 * middle of a block, a free after the block's
 * context was destroyed, bad cuMemAllocPitch arguments, cuMemGetInfo with NULL,
 * calls before cuInit and without a context, and NULL out-pointers and
 * parameters, bad devices and a missing exec graph for the other entry
 * points cupool handles (streams, contexts, graph memset nodes,
 * cuGetProcAddress) -- runs natively in a child
 * without cupool and then with cupool in every free mode and with every
 * option set to a bad value; the CUresult of every row must be the same.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static CUcontext primary;

static CUresult before_init(void)
{
    CUdeviceptr p;
    return cuMemAlloc(&p, 4096);
}
static CUresult free_before_init(void) { return cuMemFree((CUdeviceptr)0x10000); }
static CUresult info_before_init(void)
{
    size_t f, t;
    return cuMemGetInfo(&f, &t);
}
static CUresult no_context(void)
{
    CHECK_CU(cuCtxSetCurrent(NULL));
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc(&p, 4096);
    if (r == CUDA_SUCCESS) cuMemFree(p);
    CHECK_CU(cuCtxSetCurrent(primary));
    return r;
}
static CUresult free_no_context(void)
{
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, 4096));
    CHECK_CU(cuCtxSetCurrent(NULL));
    CUresult r = cuMemFree(p);
    CHECK_CU(cuCtxSetCurrent(primary));
    if (r != CUDA_SUCCESS) CHECK_CU(cuMemFree(p));
    return r;
}
static CUresult null_out(void) { return cuMemAlloc(NULL, 4096); }
static CUresult size_zero(void)
{
    CUdeviceptr p = 0;
    return cuMemAlloc(&p, 0);
}
static CUresult null_out_size_zero(void) { return cuMemAlloc(NULL, 0); }
static CUresult huge(void)
{
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc(&p, (size_t)1 << 62);
    if (r == CUDA_SUCCESS) cuMemFree(p);
    return r;
}
static CUresult free_null(void) { return cuMemFree(0); }
static CUresult free_bogus(void) { return cuMemFree((CUdeviceptr)0xdead0000ull); }
static CUresult free_host_pointer(void)
{
    static char host[64];
    return cuMemFree((CUdeviceptr)(uintptr_t)host);
}
static CUresult double_free(void)
{
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, 1 << 20));
    CHECK_CU(cuMemFree(p));
    return cuMemFree(p);
}
static CUresult double_free_later(void)
{
    /* The second free comes after other traffic; nothing lives at p then. */
    CUdeviceptr p, q;
    CHECK_CU(cuMemAlloc(&p, 1 << 16));
    CHECK_CU(cuMemFree(p));
    CHECK_CU(cuMemAlloc(&q, 1 << 20));
    CHECK_CU(cuMemFree(q));
    return cuMemFree(p);
}
static CUresult double_free_after_churn(void)
{
    /* Enough blocks come and go that cupool's table drops the records it
     * keeps of freed blocks (origin.c), p's among them. */
    enum { CHURN = 10000 };
    static CUdeviceptr q[CHURN];
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, 4096));
    CHECK_CU(cuMemFree(p));
    for (int i = 0; i < CHURN; i++) CHECK_CU(cuMemAlloc(&q[i], 4096));
    for (int i = 0; i < CHURN; i++) CHECK_CU(cuMemFree(q[i]));
    return cuMemFree(p);
}
static void *free_on_thread(void *arg)
{
    CHECK_CU(cuCtxSetCurrent(primary));
    CHECK_CU(cuMemFree(*(const CUdeviceptr *)arg));
    return NULL;
}
static CUresult double_free_across_threads(void)
{
    /* The block's first free comes from another thread: the hints this
     * thread keeps of its last entries (origin.c) name a retired one. */
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, 1 << 20));
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, free_on_thread, &p), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    return cuMemFree(p);
}
static CUresult free_interior(void)
{
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, 1 << 20));
    CUresult r = cuMemFree(p + 256);
    if (r != CUDA_SUCCESS) CHECK_CU(cuMemFree(p));
    return r;
}
static CUresult free_end(void)
{
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, 1 << 20));
    CUresult r = cuMemFree(p + (1 << 20));
    CHECK_CU(cuMemFree(p));
    return r;
}
static CUresult free_async_bogus(void) { return cuMemFreeAsync((CUdeviceptr)0xdead0000ull, NULL); }
/* cuMemAllocPitch's bad arguments: one call each, with a NULL out-pointer
 * or pitch where null_ptr or null_pitch says so. */
static const struct pitch_case {
    const char *name;
    size_t width, height;
    unsigned element;
    int null_ptr, null_pitch;
} pitch_cases[] = {
    {"cuMemAllocPitch element size 3", 1000, 10, 3, 0, 0},
    {"cuMemAllocPitch element size 0", 1000, 10, 0, 0, 0},
    {"cuMemAllocPitch element size 32", 1000, 10, 32, 0, 0},
    {"cuMemAllocPitch width 0", 0, 10, 4, 0, 0},
    {"cuMemAllocPitch height 0", 1000, 0, 4, 0, 0},
    {"cuMemAllocPitch NULL pitch", 1000, 10, 4, 0, 1},
    {"cuMemAllocPitch NULL pointer", 1000, 10, 4, 1, 0},
    {"cuMemAllocPitch 2^70 bytes", (size_t)1 << 40, (size_t)1 << 30, 4, 0, 0},
};
#define NPITCH (sizeof pitch_cases / sizeof pitch_cases[0])
static CUresult pitch_call(const struct pitch_case *k)
{
    CUdeviceptr p = 0;
    size_t pitch = 0;
    CUresult r = cuMemAllocPitch(k->null_ptr ? NULL : &p, k->null_pitch ? NULL : &pitch, k->width, k->height,
                                 k->element);
    if (r == CUDA_SUCCESS && !k->null_ptr) cuMemFree(p);
    return r;
}
static CUresult info_null_free(void)
{
    size_t total;
    return cuMemGetInfo(NULL, &total);
}
static CUresult info_null_total(void)
{
    size_t f;
    return cuMemGetInfo(&f, NULL);
}
static CUresult info_null_both(void) { return cuMemGetInfo(NULL, NULL); }
static CUresult ipc_null_handle(void)
{
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, 4096));
    CUresult r = cuIpcGetMemHandle(NULL, p);
    CHECK_CU(cuMemFree(p));
    return r;
}
static CUresult free_after_ctx_destroy(void)
{
    CUdevice dev;
    CUcontext c;
    CHECK_CU(cuDeviceGet(&dev, 0));
    CHECK_CU(cuCtxCreate(&c, NULL, 0, dev));
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, 1 << 20));
    CHECK_CU(cuCtxDestroy(c));
    CHECK_CU(cuCtxSetCurrent(primary));
    return cuMemFree(p);
}
static CUresult alloc_in_destroyed_ctx(void)
{
    CUdevice dev;
    CUcontext c;
    CHECK_CU(cuDeviceGet(&dev, 0));
    CHECK_CU(cuCtxCreate(&c, NULL, 0, dev));
    CHECK_CU(cuCtxDestroy(c));
    /* Destroying the current context leaves... whatever the driver leaves. */
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc(&p, 4096);
    if (r == CUDA_SUCCESS) cuMemFree(p);
    CHECK_CU(cuCtxSetCurrent(primary));
    return r;
}

/* ---- the other entry points cupool handles: NULL out-pointers and
 * parameters, a bad device, no exec graph ----------------------------------- */
static CUresult stream_create_null(void) { return cuStreamCreate(NULL, CU_STREAM_NON_BLOCKING); }
static CUresult stream_create_priority_null(void) { return cuStreamCreateWithPriority(NULL, 0, 0); }
static CUresult end_capture_null(void)
{
    CUstream s;
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUresult r = cuStreamEndCapture(s, NULL);
    CHECK_CU(cuStreamDestroy(s));
    return r;
}
static CUresult ctx_create_null(void)
{
    CUdevice dev;
    CHECK_CU(cuDeviceGet(&dev, 0));
    CUresult r = cuCtxCreate(NULL, NULL, 0, dev);
    CHECK_CU(cuCtxSetCurrent(primary));
    return r;
}
static CUresult primary_retain_null(void)
{
    CUdevice dev;
    CHECK_CU(cuDeviceGet(&dev, 0));
    return cuDevicePrimaryCtxRetain(NULL, dev);
}
static CUresult primary_retain_bad_device(void)
{
    CUcontext c;
    return cuDevicePrimaryCtxRetain(&c, 9999);
}
static CUresult primary_release_bad_device(void) { return cuDevicePrimaryCtxRelease(9999); }
static CUresult primary_reset_bad_device(void) { return cuDevicePrimaryCtxReset(9999); }

/* A graph with one memset node on a pooled block, for the graph rows. */
typedef struct {
    CUgraph graph;
    CUgraphNode node;
    CUdeviceptr block;
    CUDA_MEMSET_NODE_PARAMS params;
} memset_graph_t;
static memset_graph_t memset_graph(void)
{
    memset_graph_t m;
    CHECK_CU(cuMemAlloc(&m.block, 4096));
    m.params = (CUDA_MEMSET_NODE_PARAMS){m.block, 0, 7, 1, 64, 1};
    CHECK_CU(cuGraphCreate(&m.graph, 0));
    CHECK_CU(cuGraphAddMemsetNode(&m.node, m.graph, NULL, 0, &m.params, primary));
    return m;
}
static void memset_graph_done(memset_graph_t *m)
{
    CHECK_CU(cuGraphDestroy(m->graph));
    CHECK_CU(cuMemFree(m->block));
}
static CUresult memset_add_null_params(void)
{
    memset_graph_t m = memset_graph();
    CUgraphNode n;
    CUresult r = cuGraphAddMemsetNode(&n, m.graph, NULL, 0, NULL, primary);
    memset_graph_done(&m);
    return r;
}
static CUresult memset_get_params_null(void)
{
    memset_graph_t m = memset_graph();
    CUresult r = cuGraphMemsetNodeGetParams(m.node, NULL);
    memset_graph_done(&m);
    return r;
}
static CUresult memset_node_type_null(void)
{
    memset_graph_t m = memset_graph();
    CUresult r = cuGraphNodeGetType(m.node, NULL);
    memset_graph_done(&m);
    return r;
}
static CUresult memset_clone_null(void)
{
    memset_graph_t m = memset_graph();
    CUresult r = cuGraphClone(NULL, m.graph);
    memset_graph_done(&m);
    return r;
}
static CUresult memset_exec_set_no_exec(void)
{
    memset_graph_t m = memset_graph();
    CUresult r = cuGraphExecMemsetNodeSetParams(NULL, m.node, &m.params, primary);
    memset_graph_done(&m);
    return r;
}
static CUresult proc_address_null_name(void)
{
    void *fn;
    return cuGetProcAddress(NULL, &fn, 12000, 0, NULL);
}
static CUresult proc_address_null_out(void) { return cuGetProcAddress("cuMemAlloc", NULL, 12000, 0, NULL); }

/* needs_init: the row runs after cuInit and a current context. */
static const struct row {
    const char *name;
    CUresult (*call)(void);
    int needs_init;
} rows[] = {
    {"cuMemAlloc before cuInit", before_init, 0},
    {"cuMemFree before cuInit", free_before_init, 0},
    {"cuMemGetInfo before cuInit", info_before_init, 0},
    {"cuMemAlloc without a context", no_context, 1},
    {"cuMemFree without a context", free_no_context, 1},
    {"cuMemAlloc(NULL, 4096)", null_out, 1},
    {"cuMemAlloc(&p, 0)", size_zero, 1},
    {"cuMemAlloc(NULL, 0)", null_out_size_zero, 1},
    {"cuMemAlloc(&p, 2^62)", huge, 1},
    {"cuMemFree(0)", free_null, 1},
    {"cuMemFree(bogus)", free_bogus, 1},
    {"cuMemFree(host pointer)", free_host_pointer, 1},
    {"double cuMemFree", double_free, 1},
    {"double cuMemFree after other traffic", double_free_later, 1},
    {"double cuMemFree after 10,000 blocks came and went", double_free_after_churn, 1},
    {"double cuMemFree, the first by another thread", double_free_across_threads, 1},
    {"cuMemFree(p + 256)", free_interior, 1},
    {"cuMemFree(p + size)", free_end, 1},
    {"cuMemFreeAsync(bogus)", free_async_bogus, 1},
    {"cuMemGetInfo(NULL, &total)", info_null_free, 1},
    {"cuMemGetInfo(&free, NULL)", info_null_total, 1},
    {"cuMemGetInfo(NULL, NULL)", info_null_both, 1},
    {"cuIpcGetMemHandle(NULL, p)", ipc_null_handle, 1},
    {"cuMemFree after cuCtxDestroy", free_after_ctx_destroy, 1},
    {"cuMemAlloc after destroying the current context", alloc_in_destroyed_ctx, 1},
    {"cuStreamCreate(NULL, ...)", stream_create_null, 1},
    {"cuStreamCreateWithPriority(NULL, ...)", stream_create_priority_null, 1},
    {"cuStreamEndCapture(not capturing, NULL)", end_capture_null, 1},
    {"cuCtxCreate(NULL, ...)", ctx_create_null, 1},
    {"cuDevicePrimaryCtxRetain(NULL, dev)", primary_retain_null, 1},
    {"cuDevicePrimaryCtxRetain(&c, 9999)", primary_retain_bad_device, 1},
    {"cuDevicePrimaryCtxRelease(9999)", primary_release_bad_device, 1},
    {"cuDevicePrimaryCtxReset(9999)", primary_reset_bad_device, 1},
    {"cuGraphAddMemsetNode(..., NULL params)", memset_add_null_params, 1},
    {"cuGraphMemsetNodeGetParams(node, NULL)", memset_get_params_null, 1},
    {"cuGraphNodeGetType(memset node, NULL)", memset_node_type_null, 1},
    {"cuGraphClone(NULL, graph with a memset)", memset_clone_null, 1},
    {"cuGraphExecMemsetNodeSetParams(NULL exec, ...)", memset_exec_set_no_exec, 1},
    {"cuGetProcAddress(NULL, ...)", proc_address_null_name, 1},
    {"cuGetProcAddress(name, NULL, ...)", proc_address_null_out, 1},
};
#define NROWS (sizeof rows / sizeof rows[0])

/* Every case: the rows, then the cuMemAllocPitch cases (after cuInit). */
#define NCASES (NROWS + NPITCH)
static const char *case_name(size_t i) { return i < NROWS ? rows[i].name : pitch_cases[i - NROWS].name; }
static int case_needs_init(size_t i) { return i < NROWS ? rows[i].needs_init : 1; }
static CUresult case_call(size_t i) { return i < NROWS ? rows[i].call() : pitch_call(&pitch_cases[i - NROWS]); }

/* A row whose call the real driver may answer by crashing the process is
 * left out there: nothing to compare.  Driver 580 dies of SIGSEGV in
 * cuGetProcAddress with a NULL name and with a NULL out-pointer, and in
 * cuGraphExecMemsetNodeSetParams with a NULL exec graph in some processes
 * (CUDA_ERROR_INVALID_VALUE in others). */
static int crashes_real_driver(const struct row *r)
{
    return r->call == proc_address_null_name || r->call == proc_address_null_out ||
           r->call == memset_exec_set_no_exec;
}

/* Runs every case, printing "index result" for each. */
static int table(void)
{
    int inited = 0;
    for (size_t i = 0; i < NCASES; i++) {
        if (i < NROWS && crashes_real_driver(&rows[i]) && check_real_driver()) {
            printf("%zu %d\n", i, -1);
            fflush(stdout); /* the rows before a crash must be seen, to name the one that crashed */
            continue;
        }
        if (case_needs_init(i) && !inited) {
            primary = tl_init(0);
            inited = 1;
        }
        printf("%zu %d\n", i, (int)case_call(i));
        fflush(stdout);
    }
    /* And the program still works. */
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, 1 << 20));
    tl_fill(p, 1 << 20, 0xabcdef01);
    CHECK_EQ(tl_spot_check(p, 1 << 20, 0xabcdef01), 0);
    CHECK_CU(cuMemFree(p));
    if (check_cupool_loaded()) {
        cupool_stats_t s = tl_stats(0);
        printf("pooled %llu\n", (unsigned long long)s.pooled_allocs);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--table") == 0) return table();
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");

    const char *args[] = {"--table", NULL};
    tl_child_t native;
    tl_run_self(args, NULL, 1, 60, &native);
    if (native.status != 0) {
        tl_child_dump("native", &native);
        CHECK_FAIL("the table failed natively");
    }
    CUresult expected[NCASES];
    CHECK_EQ(tl_parse_results(native.out, expected, NCASES), NCASES);

    static const char *const runs[][8] = {
        {"CUPOOL_FREE=auto", NULL},
        {"CUPOOL_FREE=ordered", NULL},
        {"CUPOOL_FREE=deferred", NULL},
        {"CUPOOL_FREE=sync", NULL},
        {"CUPOOL_FREE=deferred", "SIMCUDA_EVENT_DELAY=3", NULL},
        {"CUPOOL_POLICY=split", NULL},
        {"CUPOOL_MEMSET=kernel", NULL}, /* every memset node rewritten: the graph rows reach cupool's own answers */
        {"CUPOOL_POLICY=off", NULL},
        {"CUPOOL_POLICY=bad", "CUPOOL_FREE=bad", "CUPOOL_MIN_SIZE=-1", "CUPOOL_LIMIT=1.5", "CUPOOL_MEMSET=?",
         "CUPOOL_STATS=2", "CUPOOL_VERBOSE=x", NULL},
    };
    int failed = 0;
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        char what[256] = "";
        for (const char *const *e = runs[k]; *e; e++) {
            strcat(what, *e);
            strcat(what, " ");
        }
        tl_child_t c;
        tl_run_self(args, runs[k], 0, 60, &c);
        CUresult got[NCASES];
        int n = tl_parse_results(c.out, got, NCASES);
        int bad = c.status != 0 || n != (int)NCASES;
        for (size_t i = 0; i < NCASES; i++) {
            if (got[i] == expected[i]) continue;
            fprintf(stderr, "%s: %-48s native %s (%d), cupool %s (%d)\n", what, case_name(i),
                    check_result_name(expected[i]), (int)expected[i],
                    (int)got[i] == -1 ? "(no result)" : check_result_name(got[i]), (int)got[i]);
            bad = 1;
        }
        int policy_off = strstr(what, "POLICY=off") != NULL;
        if (!policy_off && !strstr(c.out, "pooled ") ) bad = 1;
        if (!policy_off && strstr(c.out, "pooled 0\n")) {
            fprintf(stderr, "%s: nothing was pooled\n", what);
            bad = 1;
        }
        if (bad) {
            tl_child_dump(what, &c);
            failed++;
        }
        printf("%-60s %s\n", what, bad ? "FAILED" : "same results as the driver");
        tl_child_free(&c);
    }
    tl_child_free(&native);
    return failed ? 1 : 0;
}
