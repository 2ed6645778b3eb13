/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proves the simulator's race checker (tests/sim/sim_race.c) finds what
 * CUDA's stream order leaves unordered and nothing else, so that a test
 * passing on the simulator means no access raced in it.  Each case makes a
 * few driver calls without cupool and says whether a race must be reported:
 * work on a non-blocking stream unordered with the allocation, the free or
 * another write, next to the same patterns made safe by an event, the
 * legacy stream's implicit order (which outlives a destroyed blocking
 * stream), a host synchronization or disjoint ranges.  SIMCUDA_RACES=count keeps the process going after a report; by
 * default the first report ends the process with status 3, which the last
 * case checks.  Simulator only: skipped on the real driver.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define BYTES 4096

static long long (*races)(void);
static CUstream nb_a, nb_b, blocking; /* two non-blocking streams and a blocking one */
static CUdeviceptr plain;            /* cuMemAlloc memory, usable on every stream at once */

static void memset_on(CUdeviceptr p, size_t bytes, CUstream s)
{
    CHECK_CU(cuMemsetD32Async(p, 0x5a5a5a5a, bytes / 4, s));
}

static CUdeviceptr pool_block(CUstream s)
{
    CUdeviceptr p;
    CHECK_CU(cuMemAllocAsync(&p, BYTES, s));
    return p;
}

/* ---- the cases ------------------------------------------------------------ */

static void use_before_alloc(void) { memset_on(pool_block(nb_a), BYTES, nb_b); }

static void use_after_event(void)
{
    CUdeviceptr p = pool_block(nb_a);
    CUevent e;
    CHECK_CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CHECK_CU(cuEventRecord(e, nb_a));
    CHECK_CU(cuStreamWaitEvent(nb_b, e, 0));
    memset_on(p, BYTES, nb_b);
    CHECK_CU(cuMemFreeAsync(p, nb_b));
    CHECK_CU(cuEventDestroy(e));
}

/* A pool block's life: allocated on one stream, written on another, freed on a third. */
static void block_life(CUstream alloc_on, CUstream write_on, CUstream free_on)
{
    CUdeviceptr p = pool_block(alloc_on);
    memset_on(p, BYTES, write_on);
    CHECK_CU(cuMemFreeAsync(p, free_on));
}

static void legacy_then_blocking(void) { block_life(CU_STREAM_LEGACY, blocking, CU_STREAM_LEGACY); }
static void legacy_then_per_thread(void) { block_life(CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, CU_STREAM_LEGACY); }
static void free_on_legacy_after_non_blocking_write(void) { block_life(nb_a, nb_a, CU_STREAM_LEGACY); }
static void free_on_its_stream(void) { block_life(nb_a, nb_a, nb_a); }

/* A block written on a stream that is destroyed before the free. */
static void free_after_writer_destroyed(unsigned flags)
{
    CUstream s;
    CHECK_CU(cuStreamCreate(&s, flags));
    CUdeviceptr p = pool_block(s);
    memset_on(p, BYTES, s);
    CHECK_CU(cuStreamDestroy(s));
    CHECK_CU(cuMemFreeAsync(p, CU_STREAM_LEGACY));
}

static void blocking_writer_destroyed(void) { free_after_writer_destroyed(CU_STREAM_DEFAULT); }
static void non_blocking_writer_destroyed(void) { free_after_writer_destroyed(CU_STREAM_NON_BLOCKING); }

/* A context-wide event recorded after the writer was destroyed still
 * covers its work ("all the activities of the context"). */
static void context_event_after_writer_destroyed(void)
{
    CUstream s;
    CUcontext ctx;
    CUevent e;
    CHECK_CU(cuCtxGetCurrent(&ctx));
    CHECK_CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr p = pool_block(s);
    memset_on(p, BYTES, s);
    CHECK_CU(cuStreamDestroy(s));
    CHECK_CU(cuCtxRecordEvent(ctx, e));
    CHECK_CU(cuStreamWaitEvent(nb_b, e, 0));
    CHECK_CU(cuMemFreeAsync(p, nb_b));
    CHECK_CU(cuEventDestroy(e));
}

static void two_writers(void)
{
    memset_on(plain, BYTES, nb_a);
    memset_on(plain, BYTES, nb_b);
}

static void writers_with_stream_sync(void)
{
    memset_on(plain, BYTES, nb_a);
    CHECK_CU(cuStreamSynchronize(nb_a));
    memset_on(plain, BYTES, nb_b);
}

static void writers_with_event_query(void)
{
    CUevent e;
    CHECK_CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    memset_on(plain, BYTES, nb_a);
    CHECK_CU(cuEventRecord(e, nb_a));
    CHECK_CU(cuEventQuery(e));
    memset_on(plain, BYTES, nb_b);
    CHECK_CU(cuEventDestroy(e));
}

static void writers_with_context_event(void)
{
    CUcontext ctx;
    CUevent e;
    CHECK_CU(cuCtxGetCurrent(&ctx));
    CHECK_CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    memset_on(plain, BYTES, nb_a);
    CHECK_CU(cuCtxRecordEvent(ctx, e));
    CHECK_CU(cuStreamWaitEvent(nb_b, e, 0));
    memset_on(plain, BYTES, nb_b);
    CHECK_CU(cuEventDestroy(e));
}

static void two_readers(void)
{
    CUdeviceptr x, y;
    CHECK_CU(cuMemAlloc(&x, BYTES));
    CHECK_CU(cuMemAlloc(&y, BYTES));
    CHECK_CU(cuMemcpyDtoDAsync(x, plain, BYTES, nb_a));
    CHECK_CU(cuMemcpyDtoDAsync(y, plain, BYTES, nb_b));
    CHECK_CU(cuMemFree(x));
    CHECK_CU(cuMemFree(y));
}

static void reader_after_writer(void)
{
    CUdeviceptr x;
    CHECK_CU(cuMemAlloc(&x, BYTES));
    memset_on(plain, BYTES, nb_a);
    CHECK_CU(cuMemcpyDtoDAsync(x, plain, BYTES, nb_b));
    CHECK_CU(cuMemFree(x));
}

static void disjoint_halves(void)
{
    memset_on(plain, BYTES / 2, nb_a);
    memset_on(plain + BYTES / 2, BYTES / 2, nb_b);
}

static void copy_to_host_on_legacy(void)
{
    static unsigned char host[BYTES];
    memset_on(plain, BYTES, nb_a);
    CHECK_CU(cuMemcpyDtoH(host, plain, BYTES)); /* the legacy stream does not wait for nb_a */
}

static void graph_then_other_stream(void)
{
    CUgraph g;
    CUgraphExec exec;
    CUgraphNode node;
    CUcontext ctx;
    CHECK_CU(cuCtxGetCurrent(&ctx));
    CUDA_MEMSET_NODE_PARAMS p = {
        .dst = plain, .pitch = BYTES, .value = 7, .elementSize = 4, .width = BYTES / 4, .height = 1,
    };
    CHECK_CU(cuGraphCreate(&g, 0));
    CHECK_CU(cuGraphAddMemsetNode(&node, g, NULL, 0, &p, ctx));
    CHECK_CU(cuGraphInstantiate(&exec, g, 0));
    CHECK_CU(cuGraphLaunch(exec, nb_a));
    memset_on(plain, BYTES, nb_b);
    CHECK_CU(cuGraphExecDestroy(exec));
    CHECK_CU(cuGraphDestroy(g));
}

static const struct {
    const char *name;
    void (*run)(void);
    int race;
} cases[] = {
    { "use before the allocation is ordered", use_before_alloc, 1 },
    { "use after an event from the allocation", use_after_event, 0 },
    { "allocated on legacy, used on a blocking stream", legacy_then_blocking, 0 },
    { "allocated on legacy, used on the per-thread stream", legacy_then_per_thread, 0 },
    { "freed on legacy after a non-blocking write", free_on_legacy_after_non_blocking_write, 1 },
    { "freed on the writer's stream", free_on_its_stream, 0 },
    { "freed on legacy after its blocking writer was destroyed", blocking_writer_destroyed, 0 },
    { "freed on legacy after its non-blocking writer was destroyed", non_blocking_writer_destroyed, 1 },
    { "freed after a context event, its writer destroyed before", context_event_after_writer_destroyed, 0 },
    { "two writers on non-blocking streams", two_writers, 1 },
    { "two writers, stream synchronized between", writers_with_stream_sync, 0 },
    { "two writers, event queried complete between", writers_with_event_query, 0 },
    { "two writers, context event waited between", writers_with_context_event, 0 },
    { "two readers", two_readers, 0 },
    { "a reader after an unordered writer", reader_after_writer, 1 },
    { "writers of disjoint halves", disjoint_halves, 0 },
    { "synchronous copy to host after a non-blocking write", copy_to_host_on_legacy, 1 },
    { "graph launch, then a writer on another stream", graph_then_other_stream, 1 },
};

static int child(void)
{
    races = (long long (*)(void))dlsym(RTLD_DEFAULT, "simcuda_races");
    CHECK_TRUE(races != NULL);
    tl_init(0);
    CHECK_CU(cuStreamCreate(&nb_a, CU_STREAM_NON_BLOCKING));
    CHECK_CU(cuStreamCreate(&nb_b, CU_STREAM_NON_BLOCKING));
    CHECK_CU(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
    CHECK_CU(cuMemAlloc(&plain, BYTES));
    if (getenv("SIMCUDA_RACES") == NULL) { /* the fatal default: this must not return */
        use_before_alloc();
        return 0;
    }
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        CHECK_CU(cuCtxSynchronize()); /* nothing earlier is left unordered */
        long long before = races();
        cases[i].run();
        long long found = races() - before;
        int ok = cases[i].race ? found > 0 : found == 0;
        printf("%-55s %lld race(s) reported, %s: %s\n", cases[i].name, found, cases[i].race ? "wanted" : "none wanted",
               ok ? "ok" : "WRONG");
        failed |= !ok;
    }
    CHECK_CU(cuCtxSynchronize());
    CHECK_CU(cuMemFree(plain));
    return failed;
}

int main(int argc, char **argv)
{
    if (check_real_driver()) {
        printf("test_sim_races: tests the simulator's race checker: skipped on the real driver\n");
        return CHECK_SKIP;
    }
    if (argc > 1 && strcmp(argv[1], "--child") == 0) return child();
    const char *args[] = { "--child", NULL };
    const char *count[] = { "SIMCUDA_RACES=count", NULL }, *fatal[] = { "SIMCUDA_RACES", NULL };
    tl_child_t c;
    tl_run_self(args, count, 1, 60, &c);
    printf("%s", c.out);
    if (c.status != 0) {
        tl_child_dump("SIMCUDA_RACES=count", &c);
        return 1;
    }
    tl_child_free(&c);
    tl_run_self(args, fatal, 1, 60, &c);
    int stopped = c.status == 3 && tl_count_substr(c.err, "simcuda: stream-ordered race: memset on non-blocking") == 1;
    printf("SIMCUDA_RACES unset: status %d, %s\n", c.status, stopped ? "stopped at the first race" : "NOT STOPPED");
    if (!stopped) tl_child_dump("SIMCUDA_RACES unset", &c);
    tl_child_free(&c);
    return stopped ? 0 : 1;
}
