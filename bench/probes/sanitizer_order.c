/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Which orderings does compute-sanitizer's stream-ordered race checker see?
 * No cupool here: plain stream-ordered allocations (cuMemAllocFromPoolAsync
 * on a pool of our own, or cuMemAllocAsync), each variant the pattern one of
 * cupool's free modes or one of its test programs makes.  Each variant runs
 * 3 rounds with sizes 4, 8 and 12 KiB, so a report's size says which round.
 * Results on the H200: sanitizer_order.txt.  Build and run (one process per
 * variant):
 *   gcc -O1 -pthread -o sanitizer_order sanitizer_order.c -I/usr/local/cuda/include -lcuda
 *   compute-sanitizer --tool memcheck --track-stream-ordered-races all \
 *       --report-api-errors no ./sanitizer_order N
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#define CK(x) do { CUresult r_ = (x); if (r_) { printf("%s -> %d\n", #x, r_); return 2; } } while (0)

typedef struct { int v, id; CUmemoryPool pool; CUstream P; CUcontext ctx; } targ_t;
static void *thread_main(void *arg)
{
    targ_t *a = arg;
    cuCtxSetCurrent(a->ctx);
    for (int i = 0; i < 20; i++) {
        size_t sz = 4096 * (size_t)(1 + (i % 3));
        CUdeviceptr p;
        if (a->v == 21) {
            cuMemAllocFromPoolAsync(&p, sz, a->pool, CU_STREAM_LEGACY);
            cuMemsetD8Async(p, (unsigned char)a->id, sz, CU_STREAM_PER_THREAD);
            cuStreamSynchronize(CU_STREAM_PER_THREAD);
            cuMemFreeAsync(p, CU_STREAM_LEGACY);
        } else {
            cuMemAllocFromPoolAsync(&p, sz, a->pool, a->P);
            cuStreamSynchronize(a->P);
            if (a->v == 22) {
                cuMemsetD8Async(p, (unsigned char)a->id, sz, CU_STREAM_PER_THREAD);
                cuStreamSynchronize(CU_STREAM_PER_THREAD);
            } else {
                cuMemsetD8(p, (unsigned char)a->id, sz);
            }
            cuCtxSynchronize();
            cuMemFreeAsync(p, a->P);
        }
    }
    return NULL;
}
static int run_threads(int v, CUmemoryPool pool, CUstream P)
{
    pthread_t t[2]; targ_t a[2]; CUcontext ctx; cuCtxGetCurrent(&ctx);
    for (int i = 0; i < 2; i++) { a[i] = (targ_t){v, i, pool, P, ctx}; pthread_create(&t[i], NULL, thread_main, &a[i]); }
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    cuCtxSynchronize();
    printf("variant %d done\n", v);
    return 0;
}
int main(int argc, char **argv)
{
    int v = atoi(argv[1]);
    CUdevice dev; CUcontext ctx; CUmemoryPool pool; CUstream P, X, N; CUevent e;
    CK(cuInit(0)); CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
    CUmemPoolProps props = {0};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED; props.location.type = CU_MEM_LOCATION_TYPE_DEVICE; props.location.id = 0;
    CK(cuMemPoolCreate(&pool, &props));
    CK(cuStreamCreate(&P, CU_STREAM_NON_BLOCKING)); CK(cuStreamCreate(&X, CU_STREAM_DEFAULT));
    CK(cuStreamCreate(&N, CU_STREAM_NON_BLOCKING));
    CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CUdeviceptr p;
    for (int round = 0; round < 3; round++) {
        size_t SZ = 4096 * (size_t)(round + 1);
        switch (v) {
        case 1: /* private alloc + stream sync, use on blocking X */
            CK(cuMemAllocFromPoolAsync(&p, SZ, pool, P)); CK(cuStreamSynchronize(P));
            CK(cuMemsetD8Async(p, 1, SZ, X)); CK(cuStreamSynchronize(X)); break;
        case 2: /* private alloc + ctx sync, use on X */
            CK(cuMemAllocFromPoolAsync(&p, SZ, pool, P)); CK(cuCtxSynchronize());
            CK(cuMemsetD8Async(p, 1, SZ, X)); CK(cuStreamSynchronize(X)); break;
        case 3: /* private alloc + event sync, use on X */
            CK(cuMemAllocFromPoolAsync(&p, SZ, pool, P)); CK(cuEventRecord(e, P)); CK(cuEventSynchronize(e));
            CK(cuMemsetD8Async(p, 1, SZ, X)); CK(cuStreamSynchronize(X)); break;
        case 4: /* legacy alloc, use on blocking X (implicit order) */
            CK(cuMemAllocFromPoolAsync(&p, SZ, pool, CU_STREAM_LEGACY));
            CK(cuMemsetD8Async(p, 1, SZ, X)); CK(cuStreamSynchronize(X)); break;
        case 5: /* legacy alloc, use on legacy */
            CK(cuMemAllocFromPoolAsync(&p, SZ, pool, CU_STREAM_LEGACY));
            CK(cuMemsetD8Async(p, 1, SZ, CU_STREAM_LEGACY)); CK(cuStreamSynchronize(CU_STREAM_LEGACY)); break;
        case 6: /* private alloc + stream sync, use on per-thread stream */
            CK(cuMemAllocFromPoolAsync(&p, SZ, pool, P)); CK(cuStreamSynchronize(P));
            CK(cuMemsetD8Async(p, 1, SZ, CU_STREAM_PER_THREAD)); CK(cuStreamSynchronize(CU_STREAM_PER_THREAD)); break;
        case 7: /* private alloc + stream sync, use on legacy */
            CK(cuMemAllocFromPoolAsync(&p, SZ, pool, P)); CK(cuStreamSynchronize(P));
            CK(cuMemsetD8Async(p, 1, SZ, CU_STREAM_LEGACY)); CK(cuStreamSynchronize(CU_STREAM_LEGACY)); break;
        case 8: /* private alloc + stream sync, use on non-blocking N */
            CK(cuMemAllocFromPoolAsync(&p, SZ, pool, P)); CK(cuStreamSynchronize(P));
            CK(cuMemsetD8Async(p, 1, SZ, N)); CK(cuStreamSynchronize(N)); break;
        case 9: /* legacy alloc + legacy sync, use on X */
            CK(cuMemAllocFromPoolAsync(&p, SZ, pool, CU_STREAM_LEGACY)); CK(cuStreamSynchronize(CU_STREAM_LEGACY));
            CK(cuMemsetD8Async(p, 1, SZ, X)); CK(cuStreamSynchronize(X)); break;
        case 10: /* legacy alloc + ctx sync, use on X */
            CK(cuMemAllocFromPoolAsync(&p, SZ, pool, CU_STREAM_LEGACY)); CK(cuCtxSynchronize());
            CK(cuMemsetD8Async(p, 1, SZ, X)); CK(cuStreamSynchronize(X)); break;
        case 11: /* private alloc + event, legacy waits the event, use on X */
            CK(cuMemAllocFromPoolAsync(&p, SZ, pool, P)); CK(cuEventRecord(e, P));
            CK(cuStreamWaitEvent(CU_STREAM_LEGACY, e, 0));
            CK(cuMemsetD8Async(p, 1, SZ, X)); CK(cuStreamSynchronize(X)); break;
        case 12: /* alloc with cuMemAllocAsync default pool on P + sync, use on X */
            CK(cuMemAllocAsync(&p, SZ, P)); CK(cuStreamSynchronize(P));
            CK(cuMemsetD8Async(p, 1, SZ, X)); CK(cuStreamSynchronize(X)); break;
        case 13: /* private alloc, no sync at all, use on X (must be flagged) */
            CK(cuMemAllocFromPoolAsync(&p, SZ, pool, P));
            CK(cuMemsetD8Async(p, 1, SZ, X)); CK(cuStreamSynchronize(X)); break;
        case 14: /* private alloc + stream sync, synchronous cuMemsetD8 (legacy) */
            CK(cuMemAllocFromPoolAsync(&p, SZ, pool, P)); CK(cuStreamSynchronize(P));
            CK(cuMemsetD8(p, 1, SZ)); break;
        case 15: /* legacy alloc, use on per-thread stream (implicit) */
            CK(cuMemAllocFromPoolAsync(&p, SZ, pool, CU_STREAM_LEGACY));
            CK(cuMemsetD8Async(p, 1, SZ, CU_STREAM_PER_THREAD)); CK(cuStreamSynchronize(CU_STREAM_PER_THREAD)); break;
        case 16: /* private alloc + ctx sync, use on per-thread stream */
            CK(cuMemAllocFromPoolAsync(&p, SZ, pool, P)); CK(cuCtxSynchronize());
            CK(cuMemsetD8Async(p, 1, SZ, CU_STREAM_PER_THREAD)); CK(cuStreamSynchronize(CU_STREAM_PER_THREAD)); break;
        case 17: /* private alloc + event, per-thread stream waits it (explicit) */
            CK(cuMemAllocFromPoolAsync(&p, SZ, pool, P)); CK(cuEventRecord(e, P));
            CK(cuStreamWaitEvent(CU_STREAM_PER_THREAD, e, 0));
            CK(cuMemsetD8Async(p, 1, SZ, CU_STREAM_PER_THREAD)); CK(cuStreamSynchronize(CU_STREAM_PER_THREAD)); break;
        case 18: /* per-thread stream touched first, then private alloc + stream sync, use on it */
            CK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
            CK(cuMemAllocFromPoolAsync(&p, SZ, pool, P)); CK(cuStreamSynchronize(P));
            CK(cuMemsetD8Async(p, 1, SZ, CU_STREAM_PER_THREAD)); CK(cuStreamSynchronize(CU_STREAM_PER_THREAD)); break;
        case 19: /* private alloc + stream sync, synchronous memset then copy (tl_fill-like) on legacy */
            CK(cuMemAllocFromPoolAsync(&p, SZ, pool, P)); CK(cuStreamSynchronize(P));
            CK(cuMemsetD8(p, 1, SZ)); { char b[16]; CK(cuMemcpyDtoH(b, p, 16)); } break;
        case 20: /* blocking X used first; legacy alloc; use on X (implicit) */
            CK(cuMemsetD8Async(0, 0, 0, X));
            CK(cuMemAllocFromPoolAsync(&p, SZ, pool, CU_STREAM_LEGACY));
            CK(cuMemsetD8Async(p, 1, SZ, X)); CK(cuStreamSynchronize(X)); break;
        case 24: /* native: alloc on P + stream sync, THEN a blocking stream is created and used */
            { CUstream Y; CK(cuMemAllocAsync(&p, SZ, P)); CK(cuStreamSynchronize(P)); CK(cuStreamCreate(&Y, 0));
              CK(cuMemsetD8Async(p, 1, SZ, Y)); CK(cuStreamSynchronize(Y)); CK(cuStreamDestroy(Y)); } break;
        case 25: /* as 24, the new stream first waits an event recorded on P */
            { CUstream Y; CK(cuMemAllocAsync(&p, SZ, P)); CK(cuStreamSynchronize(P)); CK(cuStreamCreate(&Y, 0));
              CK(cuEventRecord(e, P)); CK(cuStreamWaitEvent(Y, e, 0));
              CK(cuMemsetD8Async(p, 1, SZ, Y)); CK(cuStreamSynchronize(Y)); CK(cuStreamDestroy(Y)); } break;
        case 26: /* native: legacy alloc, THEN a blocking stream is created and used (implicit order) */
            { CUstream Y; CK(cuMemAllocAsync(&p, SZ, CU_STREAM_LEGACY)); CK(cuStreamCreate(&Y, 0));
              CK(cuMemsetD8Async(p, 1, SZ, Y)); CK(cuStreamSynchronize(Y)); CK(cuStreamDestroy(Y)); } break;
        case 21: /* two threads: ordered mode pattern with ptds (see thread_main) */
        case 22: /* two threads: sync mode pattern with ptds */
        case 23: /* two threads: sync mode pattern with legacy synchronous memsets */
            return run_threads(v, pool, P);
        }
        /* free like sync mode: ctx sync then free on P */
        CK(cuCtxSynchronize()); CK(cuMemFreeAsync(p, P)); CK(cuStreamSynchronize(P));
    }
    printf("variant %d done\n", v);
    return 0;
}
