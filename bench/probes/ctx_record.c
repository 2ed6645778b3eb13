/* SPDX-License-Identifier: Apache-2.0 */
/* Could cuCtxRecordEvent (CUDA 12.5+: one event that captures all the work
 * of a context at the time of the call) replace the fan-in of `deferred`'s
 * fences (src/engine/free/deferred_fence.c: an event recorded on the legacy stream and on
 * every live non-blocking stream, each waited on by cupool's fence stream)?
 * Under PyTorch, which creates 128 streams, a fan-in costs about 70 us, so
 * fences are set 2 ms apart and freed blocks wait that long for reuse.
 *
 *   ctx_record cost [STREAMS]   ns per fence, fan-in against
 *                                     cuCtxRecordEvent, with STREAMS live
 *                                     non-blocking streams (default 128)
 *   ctx_record cover            work queued on a non-blocking stream,
 *                                     on the legacy stream and on the
 *                                     per-thread stream (each alone, about
 *                                     20 ms of memsets): the context's event
 *                                     must stay NOT_READY until the work's
 *                                     own event completes; also in a context
 *                                     made with cuCtxCreate
 *   ctx_record free             for compute-sanitizer
 *                                     --track-stream-ordered-races all: a
 *                                     pool block written on a non-blocking
 *                                     stream, then freed on another stream
 *                                     after a wait on the context's event;
 *                                     a report means the sanitizer does not
 *                                     order the free after the write
 *   ctx_record free-host        the same, the host waiting on the
 *                                     event (query, synchronize) before a
 *                                     free with no GPU dependency, as
 *                                     free/deferred_fence.c does; then the block is
 *                                     allocated again and written elsewhere
 *
 * Build on the GPU machine:
 *   cc -O2 -I/usr/local/cuda/include -o ctx_record ctx_record.c -lcuda */

#include "driver_probe.h"

#define MAX_STREAMS 1024
#define REPS 1000


static int cost(int nstreams)
{
    static CUstream streams[MAX_STREAMS];
    static double fan_in[REPS], whole[REPS];
    CUdevice dev;
    CUcontext ctx = probe_context(&dev);
    CUstream fence_stream;
    CUevent scratch, fence;
    CK(cuStreamCreate(&fence_stream, CU_STREAM_NON_BLOCKING));
    CK(cuEventCreate(&scratch, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&fence, CU_EVENT_DISABLE_TIMING));
    for (int i = 0; i < nstreams; i++) CK(cuStreamCreate(&streams[i], CU_STREAM_NON_BLOCKING));
    for (int rep = 0; rep < REPS; rep++) {
        /* As record_batch() does it. */
        double t0 = now_ns();
        for (int i = -1; i < nstreams; i++) {
            CK(cuEventRecord(scratch, i < 0 ? CU_STREAM_LEGACY : streams[i]));
            CK(cuStreamWaitEvent(fence_stream, scratch, 0));
        }
        CK(cuEventRecord(fence, fence_stream));
        double t1 = now_ns();
        CK(cuCtxRecordEvent(ctx, fence));
        double t2 = now_ns();
        fan_in[rep] = t1 - t0;
        whole[rep] = t2 - t1;
        if (rep % 64 == 0) CK(cuCtxSynchronize());
    }
    printf("%d non-blocking streams: fan-in %.0f ns, cuCtxRecordEvent %.0f ns per fence (medians of %d)\n", nstreams,
           median(fan_in, REPS), median(whole, REPS), REPS);
    return 0;
}

/* About 20 ms of work on `stream`: memsets of a 1 GiB buffer. */
static void queue_work(CUdeviceptr buf, size_t bytes, CUstream stream)
{
    for (int i = 0; i < 8; i++) CK(cuMemsetD32Async(buf, (unsigned)i, bytes / 4, stream));
}

/* 0 when the context's event covered the work queued on `stream`. */
static int covers(CUcontext ctx, CUdeviceptr buf, size_t bytes, CUstream stream, const char *what)
{
    CUevent work_done, all;
    CK(cuEventCreate(&work_done, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&all, CU_EVENT_DISABLE_TIMING));
    CK(cuCtxSynchronize());
    queue_work(buf, bytes, stream);
    CK(cuEventRecord(work_done, stream));
    CK(cuCtxRecordEvent(ctx, all));
    int early = 0, polls = 0;
    for (;;) {
        CUresult all_r = cuEventQuery(all), work_r = cuEventQuery(work_done);
        if (all_r == CUDA_SUCCESS && work_r == CUDA_ERROR_NOT_READY) early = 1;
        if (all_r != CUDA_ERROR_NOT_READY && all_r != CUDA_SUCCESS) CK(all_r);
        polls++;
        if (all_r == CUDA_SUCCESS) break;
    }
    printf("%-40s %s (%d polls)\n", what, early ? "NOT COVERED: the context's event completed first" : "covered", polls);
    CK(cuEventDestroy(work_done));
    CK(cuEventDestroy(all));
    return early;
}

static int cover(void)
{
    CUdevice dev;
    CUcontext ctx = probe_context(&dev), made;
    size_t bytes = 1ull << 30;
    CUdeviceptr buf;
    CUstream s;
    CK(cuMemAlloc(&buf, bytes));
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    int bad = covers(ctx, buf, bytes, s, "primary: non-blocking stream");
    bad += covers(ctx, buf, bytes, CU_STREAM_LEGACY, "primary: legacy stream");
    bad += covers(ctx, buf, bytes, CU_STREAM_PER_THREAD, "primary: per-thread stream");
    CK(cuStreamDestroy(s));
    CK(cuStreamCreate(&s, CU_STREAM_DEFAULT));
    bad += covers(ctx, buf, bytes, s, "primary: blocking stream");
    CK(cuMemFree(buf));
    CK(cuStreamDestroy(s));
    CUresult r = cuCtxCreate(&made, NULL, 0, dev);
    if (r == CUDA_SUCCESS) {
        CK(cuMemAlloc(&buf, bytes));
        CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        bad += covers(made, buf, bytes, s, "cuCtxCreate'd: non-blocking stream");
        bad += covers(made, buf, bytes, CU_STREAM_LEGACY, "cuCtxCreate'd: legacy stream");
        CK(cuMemFree(buf));
        CK(cuStreamDestroy(s));
        CK(cuCtxDestroy(made));
        CK(cuCtxSetCurrent(ctx));
    } else {
        const char *name = "?";
        cuGetErrorName(r, &name);
        printf("cuCtxCreate: %s\n", name);
    }
    return bad ? 1 : 0;
}

/* As cupool's deferred path would use it: the host sees the context's
 * event complete (query, then synchronize), then frees the block on its
 * private stream with no GPU dependency, allocates the same size again
 * there and writes it from a third stream.  `wait` 1: the private stream
 * waits on the event instead. */
static int free_after(int wait)
{
    CUdevice dev;
    CUcontext ctx = probe_context(&dev);
    CUmemoryPool pool = probe_pool(dev);
    CUstream user, private_stream;
    CUevent all;
    CUdeviceptr p;
    size_t bytes = 64ull << 20;
    CK(cuStreamCreate(&user, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&private_stream, CU_STREAM_NON_BLOCKING));
    CK(cuEventCreate(&all, CU_EVENT_DISABLE_TIMING));
    CK(cuMemAllocFromPoolAsync(&p, bytes, pool, private_stream));
    CK(cuStreamSynchronize(private_stream));
    queue_work(p, bytes, user);
    CK(cuCtxRecordEvent(ctx, all));
    if (wait) {
        CK(cuStreamWaitEvent(private_stream, all, 0));
    } else {
        while (cuEventQuery(all) == CUDA_ERROR_NOT_READY) {
        }
        CK(cuEventSynchronize(all));
    }
    CK(cuMemFreeAsync(p, private_stream));
    CUdeviceptr q;
    CUstream other;
    CK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    CK(cuMemAllocFromPoolAsync(&q, bytes, pool, private_stream));
    CK(cuStreamSynchronize(private_stream));
    CK(cuMemsetD32Async(q, 7u, bytes / 4, other));
    CK(cuStreamSynchronize(other));
    CK(cuMemFreeAsync(q, other));
    CK(cuCtxSynchronize());
    printf("freed after the context's event (%s, %s): see the sanitizer's report\n",
           wait ? "the freeing stream waits on it" : "the host waits on it", q == p ? "same block again" : "another block");
    return 0;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "cost";
    if (strcmp(what, "cost") == 0) {
        int n = argc > 2 ? atoi(argv[2]) : 128;
        if (n < 0 || n > MAX_STREAMS) n = 128;
        return cost(n);
    }
    if (strcmp(what, "cover") == 0) return cover();
    if (strcmp(what, "free") == 0) return free_after(1);
    if (strcmp(what, "free-host") == 0) return free_after(0);
    fprintf(stderr, "usage: ctx_record cost [STREAMS] | cover | free | free-host\n");
    return 2;
}
