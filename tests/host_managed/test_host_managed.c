/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proves pinned host memory (cuMemAllocHost, cuMemHostAlloc, freed by
 * cuMemFreeHost) and managed memory (cuMemAllocManaged, freed by cuMemFree)
 * under cupool's kept store behave as natively while freed blocks serve
 * later allocations.  Two comparisons with a child run without cupool:
 *   queries:    every answer about a block -- cuMemHostGetFlags,
 *               cuMemHostGetDevicePointer, cuPointerGetAttribute(s) at its
 *               start, middle and last byte, cuMemRangeGetAttribute(s), and
 *               the results of cuMemAdvise, cuMemPrefetchAsync and
 *               cuStreamAttachMemAsync -- on a fresh block, on the block
 *               allocated again after its free (a kept block under cupool),
 *               after advice, prefetch and attachment, on the block
 *               allocated after that, and in a second context; the same
 *               text in every setting (the child checks which allocations
 *               the driver made: a kept block serves the second whenever
 *               the setting keeps its kind, never one after advice or in
 *               another context).  Each kind of block runs in a child of
 *               its own, beside no block of another kind.
 *   bad input:  NULL out-pointers, size 0, bad flags, huge sizes,
 *               cuMemFreeHost of NULL, a bogus, a stack, an interior, a
 *               device and a managed pointer, cuMemFree of pinned memory,
 *               double frees, frees during a global capture and after the
 *               block's context was destroyed, allocations during a global
 *               capture with a block of theirs kept, calls before cuInit and
 *               without a context: the driver's own result in every
 *               setting, and the program goes on (every block allocated
 *               afterwards is the program's, usable and served again).
 * Then cases, each in a child under cupool (the simulator counts the
 * driver's own allocations, simcuda_host_allocations, and the bytes live,
 * simcuda_host_bytes; TEST_KEPT names the kinds the setting keeps):
 *   reuse:          100 allocations of one call, flags and size are one
 *                   driver allocation; a block never serves another call,
 *                   other flags, another size or the other kind; blocks
 *                   serve oldest first; CUPOOL_HOST=0, CUPOOL_MANAGED=0 and
 *                   CUPOOL_POLICY=off pass their kinds to the driver.
 *   fence-pending:  a block whose fence has not completed (SIMCUDA_EVENT_DELAY)
 *                   serves nothing: the driver allocates; it serves once
 *                   the context was synchronized.
 *   fence-race:     blocks the device was writing or reading on a
 *                   non-blocking stream (of this or another context), or on
 *                   the legacy stream of another device's primary context,
 *                   when freed serve the next allocation, and the host's write to
 *                   them is ordered after that work (the race checker stays
 *                   silent; the same write without the free it reports), in
 *                   every free mode and with either kind of fence.
 *   advised:        a managed block given advice (cuMemAdvise, cuMemAdvise_v2,
 *                   on all or part of it) or attached to a stream
 *                   (cuStreamAttachMemAsync, its per-thread form) goes back
 *                   to the driver at its free; the next block has no advice;
 *                   advice the driver refuses changes nothing.
 *   advice-mapping: advice on a block hands the kept blocks of its 2 MiB
 *                   mapping back to the driver at once, and one in use
 *                   beside it is not kept at its free; kept blocks of other
 *                   mappings stay and serve (the simulator reports the
 *                   driver's shared mappings); during a capture they are
 *                   only marked, and freed at the next allocation.
 *   prefetched:     a block prefetched before its free, served again, answers
 *                   CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION as a fresh
 *                   block does.
 *   keep-limit:     CUPOOL_HOST_KEEP and CUPOOL_MANAGED_KEEP bound the bytes
 *                   kept, each for its kind, the oldest going first; a block
 *                   larger than the limit is never kept, one as large is.
 *   keep-default:   1 GiB of each kind by default.
 *   oom:            an allocation the driver refuses for want of memory gets
 *                   the memory of the kept blocks of its kind (SIMCUDA_HOST_MEM,
 *                   SIMCUDA_MANAGED_MEM), not of the other; past that, the
 *                   driver's CUDA_ERROR_OUT_OF_MEMORY.
 *   oom-device:     a device allocation that fails hands kept managed blocks
 *                   back.
 *   capture:        a free during a stream capture goes to the driver.
 *   ctx-destroy:    the kept blocks of a destroyed context (created, or the
 *                   primary reset or released) serve nothing afterwards, and
 *                   cupool never frees them later (a block of the program's
 *                   at the same address stays the program's).
 *   threads:        threads allocating, filling, copying and freeing at once
 *                   (copies in flight at some frees, then all on two keys)
 *                   never get one block twice, the checker stays silent, and
 *                   kept blocks serve most allocations of the kinds kept.
 *   proc-address:   cuGetProcAddress and dlsym resolve every entry point of
 *                   these kinds to cupool's shim, the blocks allocated
 *                   through them are kept and the advice given through them
 *                   counts; the CUDA 2.0 cuMemAllocHost's blocks free.
 *   log-and-stats:  CUPOOL_LOG lines carry "kind" and "flags" and the route,
 *                   CUPOOL_STATS prints a block per kind.
 * A control run of several cases with a setting that makes their
 * expectation wrong must fail, so that each of them can.  On the real
 * driver the comparisons run (without the counts), the cases and controls,
 * which need the simulator, do not.  The parts, in this folder: blocks.c
 * (the helpers), native.c (the comparisons), store.c and paths.c (the
 * cases); this file runs them.
 */
#define _GNU_SOURCE
#include "host_managed.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- cases and controls ------------------------------------------------------------ */

static const tl_case_t cases[] = {
    {"reuse", hm_case_reuse, {NULL}, 1, NULL},
    {"reuse-deferred", hm_case_reuse, {"CUPOOL_FREE=deferred", NULL}, 1, NULL},
    {"reuse-sync", hm_case_reuse, {"CUPOOL_FREE=sync", NULL}, 1, NULL},
    {"reuse-host-off", hm_case_reuse, {"CUPOOL_HOST=0", "TEST_KEPT=managed", NULL}, 1, NULL},
    {"reuse-managed-off", hm_case_reuse, {"CUPOOL_MANAGED=0", "TEST_KEPT=host", NULL}, 1, NULL},
    {"reuse-policy-off", hm_case_reuse, {"CUPOOL_POLICY=off", "TEST_KEPT=none", NULL}, 1, NULL},
    {"fence-pending", hm_case_fence_pending, {"SIMCUDA_EVENT_DELAY=3", NULL}, 1, NULL},
    {"fence-pending-streams", hm_case_fence_pending, {"SIMCUDA_EVENT_DELAY=3", "CUPOOL_DEFERRED_FENCE=streams", NULL}, 1, NULL},
    {"fence-race", hm_case_fence_race, {"SIMCUDA_RACES=count", NULL}, 1, NULL},
    {"fence-race-ordered", hm_case_fence_race, {"SIMCUDA_RACES=count", "CUPOOL_FREE=ordered", NULL}, 1, NULL},
    {"fence-race-deferred", hm_case_fence_race, {"SIMCUDA_RACES=count", "CUPOOL_FREE=deferred", NULL}, 1, NULL},
    {"fence-race-sync", hm_case_fence_race, {"SIMCUDA_RACES=count", "CUPOOL_FREE=sync", NULL}, 1, NULL},
    {"fence-race-streams", hm_case_fence_race, {"SIMCUDA_RACES=count", "CUPOOL_DEFERRED_FENCE=streams", NULL}, 1, NULL},
    {"fence-race-no-ctx-event", hm_case_fence_race, {"SIMCUDA_RACES=count", "SIMCUDA_NO_CTX_RECORD_EVENT=1", NULL}, 1, NULL},
    {"advised", hm_case_advised, {NULL}, 1, NULL},
    {"advice-mapping", hm_case_advice_mapping, {NULL}, 1, NULL},
    {"advice-mapping-managed-off", hm_case_advice_mapping, {"CUPOOL_MANAGED=0", "TEST_KEPT=host", NULL}, 1, NULL},
    {"advice-mapping-capture", hm_case_advice_mapping, {"TEST_ADVICE_IN_CAPTURE=1", NULL}, 1, NULL},
    {"prefetched", hm_case_prefetched, {NULL}, 1, NULL},
    {"prefetched-managed-off", hm_case_prefetched, {"CUPOOL_MANAGED=0", "TEST_KEPT=host", NULL}, 1, NULL},
    {"keep-limit", hm_case_keep_limit, {"CUPOOL_HOST_KEEP=64K", "CUPOOL_MANAGED_KEEP=128K", NULL}, 1, NULL},
    {"keep-default", hm_case_keep_default, {NULL}, 1, NULL},
    {"oom", hm_case_oom, {"SIMCUDA_HOST_MEM=1M", "SIMCUDA_MANAGED_MEM=1M", NULL}, 1, NULL},
    {"oom-host-off", hm_case_oom, {"SIMCUDA_HOST_MEM=1M", "SIMCUDA_MANAGED_MEM=1M", "CUPOOL_HOST=0", "TEST_KEPT=managed", NULL}, 1,
     NULL},
    {"oom-device", hm_case_oom_device, {"SIMCUDA_MEM=64M", NULL}, 1, NULL},
    {"capture", hm_case_capture, {NULL}, 1, NULL},
    {"ctx-destroy", hm_case_ctx_destroy, {"CUPOOL_HOST_KEEP=64K", "CUPOOL_MANAGED_KEEP=64K", NULL}, 1, NULL},
    {"threads", hm_case_threads, {NULL}, 1, NULL},
    {"threads-deferred", hm_case_threads, {"CUPOOL_FREE=deferred", "SIMCUDA_EVENT_DELAY=1", NULL}, 1, NULL},
    {"threads-policy-off", hm_case_threads, {"CUPOOL_POLICY=off", "TEST_KEPT=none", NULL}, 1, NULL},
    {"proc-address", hm_case_proc_address, {NULL}, 1, NULL},
    {"log-and-stats", hm_case_log_and_stats, {NULL}, 1, NULL},
};
#define NCASES (sizeof cases / sizeof cases[0])

/* Cases run with a setting that makes their expectation wrong: each must fail. */
static const struct control {
    const char *name;
    const char *env[8];
    const char *why;
} controls[] = {
    {"reuse", {"CUPOOL_HOST=0", NULL}, "pinned memory passed through"},
    {"reuse", {"CUPOOL_MANAGED=0", NULL}, "managed memory passed through"},
    {"reuse", {"TEST_KEPT=none", NULL}, "blocks kept where none are expected"},
    {"fence-pending", {"SIMCUDA_EVENT_DELAY=0", NULL}, "fences complete at once"},
    {"fence-race", {"SIMCUDA_RACES=count", "CUPOOL_HOST=0", NULL}, "no block served again to race"},
    {"advice-mapping", {"TEST_KEPT=host", NULL}, "no managed blocks kept"},
    {"keep-limit", {NULL}, "no limits"},
    {"keep-limit", {"CUPOOL_HOST_KEEP=64K", "CUPOOL_MANAGED_KEEP=64K", NULL}, "the managed limit as the pinned one"},
    {"oom", {NULL}, "no cap on the driver's memory"},
    {"oom-device", {NULL}, "a device large enough"},
    {"threads", {"CUPOOL_MANAGED=0", NULL}, "managed memory passed through"},
    {"proc-address", {"CUPOOL_HOST=0", NULL}, "pinned memory passed through"},
};
#define NCONTROLS (sizeof controls / sizeof controls[0])

static int run_controls(void)
{
    int failed = 0;
    for (size_t i = 0; i < NCONTROLS; i++) {
        const struct control *k = &controls[i];
        const char *args[] = {"--case", k->name, NULL};
        tl_child_t c;
        tl_run_self(args, k->env, 0, 60, &c);
        int ok = c.status == 1; /* an expectation failed; not a crash, not a time-out */
        if (!ok) tl_child_dump(k->name, &c), failed++;
        printf("control: %s with %s fails%s\n", k->name, k->why, ok ? ", as it must" : " NOT (FAILED)");
        tl_child_free(&c);
    }
    return failed;
}

static const char *skip(const tl_case_t *k)
{
    if (k->run == hm_case_keep_default && getenv("CUPOOL_TEST_VALGRIND")) return "2.4 GiB under valgrind";
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "--queries") == 0) return hm_queries(strtoul(argv[2], NULL, 10));
    if (argc > 1 && strcmp(argv[1], "--table") == 0) return hm_table();
    if (argc > 1 && strcmp(argv[1], "--workload") == 0) return hm_workload();
    const tl_case_t *asked = tl_case_asked(cases, NCASES, argc, argv);
    if (asked) return asked->run();
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    int failed = hm_compare_queries();
    failed += hm_compare_table();
    failed += tl_run_cases(cases, NCASES, skip);
    if (!check_real_driver()) failed += run_controls();
    return failed ? 1 : 0;
}
