/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The driver queue (src/engine/queue.c): threads allocating and freeing at once in
 * `ordered` have their pool calls made by the thread in front of the queue.
 * Every case turns the ordered store off (CUPOOL_ORDERED_READY=0), so that
 * each allocation and free is a pool call.
 *   threads   8 threads allocate, fill, check and free blocks of their own
 *             size; each gets its own block back, whole, whichever thread
 *             made the call; the pools end with nothing in use.  On the
 *             simulator, whose pool calls hold its lock 20 us each
 *             (SIMCUDA_POOL_CALL_US), some allocations must have been made
 *             by another thread than the one that asked (simcuda_alloc_caller)
 *   auto      the same in `auto`, which is `ordered` here
 *   stats     the same with CUPOOL_STATS: the summary counts the calls made
 *             for waiting threads
 *   tool      with a CUDA tool attached the queue is off: every call is the
 *             asking thread's own, and CUPOOL_VERBOSE says why
 *   off       the same with CUPOOL_DRIVER_QUEUE=off
 *   tool-on   CUPOOL_DRIVER_QUEUE=on keeps the queue under a tool
 *   slow      pool calls of 3 ms (a pool growing by gigabytes): the
 *             waiting threads go from spinning to sleeping and are still
 *             served, each its own block
 *   callback  a function run inside each pool call (as a tool's callback
 *             runs inside the driver's) allocates and frees: it must not wait
 *             for the thread it runs on, which is in front of the queue
 *             (simulator only: the hook is the simulator's)
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define THREADS 8

static CUcontext ctx;
static int pairs;
static int (*alloc_caller)(CUdeviceptr);        /* the simulator's, or NULL */
static void (*set_hook)(void (*)(void));        /* the simulator's, or NULL */
static long served_by_others, nested;

static void *worker(void *arg)
{
    int id = (int)(uintptr_t)arg;
    size_t size = (size_t)(id + 1) * 4096 + (size_t)id; /* a size of its own, not a multiple of 4 */
    CHECK_CU(cuCtxSetCurrent(ctx));
    long others = 0;
    for (int i = 0; i < pairs; i++) {
        CUdeviceptr p;
        CHECK_CU(cuMemAlloc(&p, size));
        if (alloc_caller && alloc_caller(p) != (int)gettid()) others++;
        uint32_t pattern = ((uint32_t)id << 24) | (uint32_t)i;
        tl_fill(p, size, pattern);
        if (tl_spot_check(p, size, pattern) != 0)
            CHECK_FAIL("thread %d: block %d of %zu bytes at 0x%llx does not hold its pattern", id, i, size,
                       (unsigned long long)p);
        CHECK_EQ(tl_pool_of(p) != NULL, 1);
        CHECK_CU(cuMemFree(p));
    }
    __atomic_add_fetch(&served_by_others, others, __ATOMIC_RELAXED);
    return NULL;
}

static void run_threads(void)
{
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) CHECK_EQ(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i), 0);
    for (int i = 0; i < THREADS; i++) CHECK_EQ(pthread_join(t[i], NULL), 0);
    CHECK_CU(cuCtxSynchronize());
    cupool_stats_t s = tl_stats(0);
    printf("%llu pooled allocations, %llu pooled frees, %llu in use; made by another thread: %ld\n",
           (unsigned long long)s.pooled_allocs, (unsigned long long)s.pooled_frees, (unsigned long long)s.in_use,
           served_by_others);
    CHECK_EQ(s.in_use, 0);
    CHECK_EQ(s.pooled_allocs, (unsigned long long)THREADS * pairs + (unsigned long long)nested);
    CHECK_EQ(s.pooled_frees, s.pooled_allocs);
}

static int threads(void)
{
    run_threads();
    if (alloc_caller) CHECK_TRUE(served_by_others > 0);
    return 0;
}

static int tool(void)
{
    run_threads();
    if (alloc_caller) CHECK_EQ(served_by_others, 0);
    return 0;
}

static int slow(void)
{
    pairs = 5; /* 8 threads x 5 pairs x 2 calls x 3 ms, one at a time */
    return threads();
}

/* Inside every pool call: an allocation and a free of its own, unless the
 * thread is in the hook already (the calls it makes there run the hook
 * too, and so may calls of other threads that it makes in front of the
 * queue meanwhile). */
static __thread int in_hook;
static long hook_calls;
static void hook(void)
{
    __atomic_add_fetch(&hook_calls, 1, __ATOMIC_RELAXED);
    if (in_hook) return;
    in_hook = 1;
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, 256));
    CHECK_CU(cuMemFree(p));
    __atomic_add_fetch(&nested, 1, __ATOMIC_RELAXED);
    in_hook = 0;
}

static int callback(void)
{
    set_hook(hook);
    run_threads();
    set_hook(NULL);
    cupool_stats_t s = tl_stats(0);
    printf("allocations made inside a pool call: %ld; pool calls: %ld\n", nested, hook_calls);
    /* Every pooled allocation and free was one pool call, each ran the hook,
     * and the hooks allocated. */
    CHECK_EQ((unsigned long long)hook_calls, s.pooled_allocs + s.pooled_frees);
    CHECK_TRUE(nested > 0);
    return 0;
}

static const tl_case_t cases[] = {
    {"threads", threads, {"CUPOOL_FREE=ordered", "CUPOOL_ORDERED_READY=0", "SIMCUDA_POOL_CALL_US=20", "CUPOOL_VERBOSE=1", NULL}, 0,
     "driver queue: on"},
    {"auto", threads, {"CUPOOL_FREE=auto", "CUPOOL_ORDERED_READY=0", "SIMCUDA_POOL_CALL_US=20", NULL}, 0},
    /* The statistics count the calls the thread in front made for others
     * (printed only when there were some). */
    {"stats", threads, {"CUPOOL_FREE=ordered", "CUPOOL_ORDERED_READY=0", "SIMCUDA_POOL_CALL_US=20", "CUPOOL_STATS=1", NULL}, 0,
     "pool calls made for waiting threads by the one in front of the driver queue"},
    /* The real driver would look for the tool's library. */
    {"tool", tool,
     {"CUPOOL_FREE=ordered", "CUPOOL_ORDERED_READY=0", "SIMCUDA_POOL_CALL_US=20", "CUPOOL_VERBOSE=1", "CUDA_INJECTION64_PATH=/no/tool.so", NULL},
     1, "driver queue: off (a CUDA tool is attached)"},
    {"off", tool, {"CUPOOL_FREE=ordered", "CUPOOL_ORDERED_READY=0", "SIMCUDA_POOL_CALL_US=20", "CUPOOL_VERBOSE=1", "CUPOOL_DRIVER_QUEUE=off", NULL},
     0, "driver queue: off (CUPOOL_DRIVER_QUEUE=off)"},
    {"tool-on", threads,
     {"CUPOOL_FREE=ordered", "CUPOOL_ORDERED_READY=0", "SIMCUDA_POOL_CALL_US=20", "CUPOOL_VERBOSE=1", "CUDA_INJECTION64_PATH=/no/tool.so",
      "CUPOOL_DRIVER_QUEUE=on"},
     1, "driver queue: on"},
    {"slow", slow, {"CUPOOL_FREE=ordered", "CUPOOL_ORDERED_READY=0", "SIMCUDA_POOL_CALL_US=3000", NULL}, 1},
    {"callback", callback, {"CUPOOL_FREE=ordered", "CUPOOL_ORDERED_READY=0", "SIMCUDA_POOL_CALL_US=20", NULL}, 1},
};

/* Under a CUDA tool the queue is off unless the environment turns it on. */
static const char *skip(const tl_case_t *k)
{
    const char *queue = getenv("CUPOOL_DRIVER_QUEUE");
    if (k->run == threads && tl_cuda_tool_attached() && !(queue && strcasecmp(queue, "on") == 0))
        return "a CUDA tool is attached: the queue is off";
    return NULL;
}

int main(int argc, char **argv)
{
    const tl_case_t *asked = tl_case_asked(cases, sizeof cases / sizeof cases[0], argc, argv);
    if (asked) {
        /* cupool's dlsym passes names that are not the driver's through. */
        alloc_caller = (int (*)(CUdeviceptr))dlsym(RTLD_DEFAULT, "simcuda_alloc_caller");
        set_hook = (void (*)(void (*)(void)))dlsym(RTLD_DEFAULT, "simcuda_set_pool_call_hook");
        pairs = check_real_driver() ? 2000 : 200;
        ctx = tl_init(0);
        return asked->run();
    }
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    return tl_run_cases(cases, sizeof cases / sizeof cases[0], skip) ? 1 : 0;
}
