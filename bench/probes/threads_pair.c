/* SPDX-License-Identifier: Apache-2.0 */
/* Where cupool's extra time goes at 4 and 16 threads (docs/BENCHMARKS.md:
 * cupool / its bare pool calls 1.06-1.10 at one thread, up to 1.24 at 16).
 * Each thread runs its own loop of the bare `ordered` pair
 * (cuMemAllocFromPoolAsync + cuMemFreeAsync on the legacy stream, one pool
 * for all, 1 MiB), with or without pieces of what cupool adds, timed side
 * by side in interleaved rounds in one process:
 *   bare      the two pool calls
 *   get2      and two cuCtxGetCurrent (cupool's context lookups)
 *   table     and an origin-table record of the block: a spin-locked shard
 *             chosen by the address, its entry written at the allocation
 *             and at the free (the pool hands a block freed by one thread
 *             to the next, so entries and locks move between cores)
 *   both      get2 and table
 *   spin      an empty loop of about 20 ns before each of the two calls: work
 *             outside the driver that touches no shared line
 *   mutex     each of the two calls under one process-wide pthread mutex
 *   ttas      each of the two calls under one process-wide spin lock (test
 *             and test-and-set, pause, sched_yield after 256 tries): does
 *             queueing the threads before the driver's lock beat the
 *             driver's own handling of contention?
 *   pools     each thread its own pool (is the contention the pool's?)
 *   get       cuCtxGetCurrent alone, ns a call
 *
 * Build on the GPU machine:
 *   cc -O2 -I/usr/local/cuda/include -o threads_pair threads_pair.c -lcuda -lpthread */

#include "driver_probe.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define PAIRS 2000
#define ROUNDS 7
#define SHARDS 64
#define SIZE (1u << 20)

enum { BARE, GET2, TABLE, BOTH, SPIN, MUTEX, TTAS, POOLS, GET, VARIANTS };
static const char *const names[VARIANTS] = {"bare", "get2", "table", "both", "spin", "mutex", "ttas", "pools", "get"};

typedef struct {
    atomic_int lock;
    CUdeviceptr ptr;
    size_t size;
    int owner;
} __attribute__((aligned(64))) entry_t;

static entry_t shards[SHARDS];
static CUcontext ctx;
static CUmemoryPool pool, thread_pools[64];
static pthread_barrier_t start;
static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static atomic_int spin_lock;
static volatile unsigned sink;
static int variant;

static entry_t *shard_of(CUdeviceptr p)
{
    uint64_t h = (uint64_t)p >> 8;
    h ^= h >> 17;
    h *= 0x9E3779B97F4A7C15ull;
    return &shards[h >> 58];
}

static void record(CUdeviceptr p, size_t size, int owner)
{
    entry_t *e = shard_of(p);
    while (atomic_exchange_explicit(&e->lock, 1, memory_order_acquire)) __builtin_ia32_pause();
    e->ptr = p;
    e->size = size;
    e->owner = owner;
    atomic_store_explicit(&e->lock, 0, memory_order_release);
}

static void lock(int v)
{
    if (v == MUTEX) pthread_mutex_lock(&mutex);
    if (v != TTAS) return;
    for (int tries = 0;; tries++) {
        if (!atomic_load_explicit(&spin_lock, memory_order_relaxed) &&
            !atomic_exchange_explicit(&spin_lock, 1, memory_order_acquire))
            return;
        if (tries > 256) sched_yield();
        else __builtin_ia32_pause();
    }
}

static void unlock(int v)
{
    if (v == MUTEX) pthread_mutex_unlock(&mutex);
    if (v == TTAS) atomic_store_explicit(&spin_lock, 0, memory_order_release);
}

/* About 20 ns on a 2-3 GHz core. */
static void spin(void)
{
    for (unsigned i = 0; i < 40; i++) sink = i;
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    CK(cuCtxSetCurrent(ctx));
    pthread_barrier_wait(&start);
    double t0 = now_ns();
    int get = variant == GET2 || variant == BOTH, table = variant == TABLE || variant == BOTH;
    CUmemoryPool mine = variant == POOLS ? thread_pools[id] : pool;
    for (int i = 0; i < PAIRS; i++) {
        CUcontext c;
        if (variant == GET) {
            CK(cuCtxGetCurrent(&c));
            continue;
        }
        CUdeviceptr p;
        if (get) CK(cuCtxGetCurrent(&c));
        if (variant == SPIN) spin();
        lock(variant);
        CK(cuMemAllocFromPoolAsync(&p, SIZE, mine, CU_STREAM_LEGACY));
        unlock(variant);
        if (table) record(p, SIZE, id);
        if (get) CK(cuCtxGetCurrent(&c));
        if (table) record(p, 0, -1);
        if (variant == SPIN) spin();
        lock(variant);
        CK(cuMemFreeAsync(p, CU_STREAM_LEGACY));
        unlock(variant);
    }
    double *ns = malloc(sizeof *ns);
    *ns = (now_ns() - t0) / PAIRS;
    return ns;
}

/* Mean over the threads of each thread's time per pair (or call). */
static double run(int threads, int v)
{
    pthread_t t[64];
    variant = v;
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    double sum = 0;
    for (int i = 0; i < threads; i++) {
        void *r;
        pthread_join(t[i], &r);
        sum += *(double *)r;
        free(r);
    }
    pthread_barrier_destroy(&start);
    CK(cuCtxSynchronize());
    return sum / threads;
}

int main(void)
{
    CUdevice dev;
    ctx = probe_context(&dev);
    pool = probe_pool(dev);
    for (int i = 0; i < 64; i++) thread_pools[i] = probe_pool(dev);
    static const int counts[] = {1, 2, 4, 8, 16};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        int threads = counts[k];
        double ns[VARIANTS][ROUNDS], ratio[VARIANTS][ROUNDS];
        run(threads, BARE); /* warm-up: the pool holds a block per thread */
        run(threads, POOLS);
        for (int r = 0; r < ROUNDS; r++)
            for (int v = 0; v < VARIANTS; v++) ns[v][r] = run(threads, v);
        for (int r = 0; r < ROUNDS; r++)
            for (int v = 0; v < VARIANTS; v++) ratio[v][r] = ns[v][r] / ns[BARE][r];
        printf("%2d threads, us a pair (ratio to bare):", threads);
        for (int v = 0; v < VARIANTS; v++) {
            double m = median(ns[v], ROUNDS), q = median(ratio[v], ROUNDS);
            if (v == GET) printf("  %s %.0f ns a call", names[v], m);
            else printf("  %s %.2f (%.3f)", names[v], m / 1000, q);
        }
        printf("\n");
    }
    return 0;
}
