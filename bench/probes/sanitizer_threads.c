/* SPDX-License-Identifier: Apache-2.0 */
/* test_ptds, test_fork and test_log draw 0 to a few compute-sanitizer reports
 * from run to run ("Use-before-alloc", "Free-before-alloc"), only with
 * several threads allocating and freeing at once.  This probe makes their
 * allocation patterns without cupool: the pool calls cupool makes, on a pool
 * made like cupool's, from THREADS threads at once, ROUNDS blocks each; every
 * block is filled, read back and checked.  Does the sanitizer report them by
 * itself?
 *   sanitizer_threads VARIANT [THREADS]
 * 1 test_ptds under ordered: allocate on the legacy stream, fill on the
 *   thread's per-thread default stream; free odd rounds with cuMemFreeAsync
 *   on the per-thread stream (then synchronize it), even ones on the legacy stream
 * 2 test_fork under sync: allocate on one non-blocking stream all threads
 *   share, cuStreamQuery it (cuStreamSynchronize when not ready); fill on the
 *   thread's own non-blocking stream (thread 0) or the legacy stream (the
 *   others); free = cuCtxSynchronize, then cuMemFreeAsync on the legacy stream
 * 3 as 2 with cuStreamSynchronize in place of the query
 * 4 as 2 with each thread's own allocation stream (none shared)
 * 5 test_fork's own loop under sync: as 2, 400 blocks a thread, the fill not
 *   waited for or read back (the free's cuCtxSynchronize orders it)
 * 6 as 1 with test_ptds' sizes (8 KiB << (round % 8), plus 12 bytes), each
 *   thread's per-thread stream first made to wait on an event of the shared
 *   stream, as cupool does at a thread's first call in a context
 * The same variants with THREADS = 1 are the single-threaded controls.
 * Build: cc -I/usr/local/cuda/include -o PROBE sanitizer_threads.c -lcuda -lpthread */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver_probe.h"

#define ROUNDS 50
#define MAX_THREADS 16

static CUcontext ctx;
static CUmemoryPool pool;
static CUstream shared_stream;
static int variant;

static void fill_and_check(CUdeviceptr p, size_t bytes, unsigned pattern, CUstream s)
{
    CK(cuMemsetD32Async(p, pattern, bytes / 4, s));
    CK(cuStreamSynchronize(s));
    unsigned first = 0, last = 0;
    CK(cuMemcpyDtoH(&first, p, 4));
    CK(cuMemcpyDtoH(&last, p + bytes - 4, 4));
    if (first != pattern || last != pattern) {
        printf("wrong data: 0x%08x 0x%08x, expected 0x%08x\n", first, last, pattern);
        exit(3);
    }
}

static void *worker(void *arg)
{
    int id = (int)(uintptr_t)arg;
    CK(cuCtxSetCurrent(ctx));
    CUstream own = NULL, alloc_stream = shared_stream;
    int per_thread = variant == 1 || variant == 6;
    if (!per_thread && id == 0) CK(cuStreamCreate(&own, CU_STREAM_NON_BLOCKING));
    if (variant == 4) CK(cuStreamCreate(&alloc_stream, CU_STREAM_NON_BLOCKING));
    if (variant == 6) {
        CUevent e;
        CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
        CK(cuEventRecord(e, shared_stream));
        CK(cuStreamWaitEvent(CU_STREAM_PER_THREAD, e, 0));
        CK(cuEventDestroy(e));
    }
    int rounds = variant == 5 ? 8 * ROUNDS : ROUNDS;
    for (int round = 0; round < rounds; round++) {
        size_t bytes = variant == 6 ? ((size_t)8192 << (round % 8)) + 12 : (size_t)(1 + round % ROUNDS) * 4096;
        unsigned pattern = 0x01000000u * (unsigned)(id + 1) + (unsigned)round;
        CUdeviceptr p;
        if (per_thread) {
            CK(cuMemAllocFromPoolAsync(&p, bytes, pool, CU_STREAM_LEGACY));
            fill_and_check(p, bytes, pattern, CU_STREAM_PER_THREAD);
            if (round % 2) {
                CK(cuMemFreeAsync(p, CU_STREAM_PER_THREAD));
                CK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
            } else {
                CK(cuMemFreeAsync(p, CU_STREAM_LEGACY));
            }
            continue;
        }
        CK(cuMemAllocFromPoolAsync(&p, bytes, pool, alloc_stream));
        CUresult q = variant == 3 ? CUDA_ERROR_NOT_READY : cuStreamQuery(alloc_stream);
        if (q == CUDA_ERROR_NOT_READY) CK(cuStreamSynchronize(alloc_stream));
        else CK(q);
        if (variant == 5) CK(cuMemsetD32Async(p, pattern, 1024, own ? own : CU_STREAM_LEGACY));
        else fill_and_check(p, bytes, pattern, own ? own : CU_STREAM_LEGACY);
        CK(cuCtxSynchronize());
        CK(cuMemFreeAsync(p, CU_STREAM_LEGACY));
    }
    CK(cuCtxSynchronize());
    if (own) CK(cuStreamDestroy(own));
    if (variant == 4) CK(cuStreamDestroy(alloc_stream));
    return NULL;
}

int main(int argc, char **argv)
{
    variant = argc > 1 ? atoi(argv[1]) : 0;
    int threads = argc > 2 ? atoi(argv[2]) : 4;
    if (variant < 1 || variant > 6 || threads < 1 || threads > MAX_THREADS) {
        fprintf(stderr, "usage: sanitizer_threads 1-6 [THREADS (1-%d)]\n", MAX_THREADS);
        return 2;
    }
    CUdevice dev;
    ctx = probe_context(&dev);
    pool = probe_pool(dev);
    CK(cuStreamCreate(&shared_stream, CU_STREAM_NON_BLOCKING));
    pthread_t tid[MAX_THREADS];
    for (int i = 0; i < threads; i++) pthread_create(&tid[i], NULL, worker, (void *)(uintptr_t)i);
    for (int i = 0; i < threads; i++) pthread_join(tid[i], NULL);
    CK(cuCtxSynchronize());
    CK(cuStreamDestroy(shared_stream));
    CK(cuMemPoolDestroy(pool));
    if (variant == 5) printf("variant 5, %d threads x %d blocks (fills not read back)\n", threads, 8 * ROUNDS);
    else printf("variant %d, %d threads x %d blocks: data right\n", variant, threads, ROUNDS);
    return 0;
}
