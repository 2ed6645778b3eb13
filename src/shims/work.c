/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The work shims.  cupool orders frees on the stream where the program's
 * work runs, and can order a free only after work it has seen: so every
 * call that gives a stream work (a kernel, a copy, a set, a graph, a host
 * function, a memory operation...) tells the work tracker (engine/order.c,
 * cupool_stream_work) which stream the work goes to, then passes the call
 * to the driver and returns its answer unchanged; the synchronizations the
 * program asks for (cuCtxSynchronize, cuStreamSynchronize) tell it which
 * work has completed.  The shims are generated from CUPOOL_WORK_ENTRIES
 * (src/base/work_shims.h, made from cuda.h by scripts/gen_work_shims.py;
 * tests/test_work_shims.sh fails until a stream entry point of a newer
 * cuda.h is classified), but for the multi-device launch, whose streams
 * are in a list, and the synchronizations, written here.  Every path to
 * the driver reaches them (shims/interpose.c).  They run at every kernel
 * launch and copy: no log, no count, a few instructions before the
 * driver's own.  Work given before cupool starts (the program's cuInit) or
 * in a forked child is not reported: no free of cupool's can be ordered
 * after it.  The stream-ordered allocations and frees (shims/memory.c) and
 * cuStreamAttachMemAsync (shims/host.c) report their streams too.
 */
#include "../engine/engine.h"

/* What a work shim returns without the real function: the driver's answer
 * for an entry point it does not have, or cupool_missing's when there is
 * no driver at all. */
static __attribute__((cold, noinline)) CUresult work_missing(const char *name)
{
    return cupool_driver_ready() ? CUDA_ERROR_NOT_FOUND : cupool_missing(name);
}

/* ---- the generated work shims ---------------------------------------------- */

#define CUPOOL_WORK_SHIM(name, base, version, flavour, params, args, stream, per_thread)           \
    CUPOOL_EXPORT CUresult name params                                                             \
    {                                                                                              \
        if (CUPOOL_UNLIKELY(!cupool_driver_ready() || !real_##name)) return work_missing(#name);    \
        if (cupool_active()) cupool_stream_work(stream, per_thread);                               \
        return real_##name args;                                                                   \
    }
CUPOOL_WORK_ENTRIES(CUPOOL_WORK_SHIM)
#undef CUPOOL_WORK_SHIM

/* The deprecated multi-device launch gives work to one stream per device,
 * each in its entry of the list. */
CUPOOL_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *launchParamsList, unsigned int numDevices,
                                                            unsigned int flags)
{
    if (CUPOOL_UNLIKELY(!cupool_driver_ready() || !real_cuLaunchCooperativeKernelMultiDevice))
        return work_missing("cuLaunchCooperativeKernelMultiDevice");
    if (cupool_active() && launchParamsList)
        for (unsigned int i = 0; i < numDevices; i++) cupool_stream_work(launchParamsList[i].hStream, 0);
    return real_cuLaunchCooperativeKernelMultiDevice(launchParamsList, numDevices, flags);
}

/* ---- synchronizations ------------------------------------------------------ */

/* The mark is taken before the driver waits: the work the tracker saw
 * before it has completed once the wait succeeded, and work given by other
 * threads meanwhile may not have. */

CUPOOL_EXPORT CUresult cuStreamSynchronize(CUstream hStream)
{
    if (CUPOOL_UNLIKELY(!cupool_driver_ready() || !real_cuStreamSynchronize)) return work_missing("cuStreamSynchronize");
    if (!cupool_active()) return real_cuStreamSynchronize(hStream);
    uint64_t mark = cupool_work_mark();
    CUresult r = real_cuStreamSynchronize(hStream);
    if (r == CUDA_SUCCESS) cupool_work_completed(mark, hStream, 0);
    return r;
}

CUPOOL_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
    if (CUPOOL_UNLIKELY(!cupool_driver_ready() || !real_cuStreamSynchronize_ptsz))
        return work_missing("cuStreamSynchronize_ptsz");
    if (!cupool_active()) return real_cuStreamSynchronize_ptsz(hStream);
    uint64_t mark = cupool_work_mark();
    CUresult r = real_cuStreamSynchronize_ptsz(hStream);
    if (r == CUDA_SUCCESS) cupool_work_completed(mark, hStream, 1);
    return r;
}

CUPOOL_EXPORT CUresult cuCtxSynchronize(void)
{
    if (CUPOOL_UNLIKELY(!cupool_driver_ready() || !real_cuCtxSynchronize)) return work_missing("cuCtxSynchronize");
    if (!cupool_active()) return real_cuCtxSynchronize();
    uint64_t mark = cupool_work_mark();
    CUresult r = real_cuCtxSynchronize();
    if (r == CUDA_SUCCESS) cupool_work_completed(mark, CUPOOL_ALL_STREAMS, 0);
    return r;
}

/* cuCtxSynchronize of a given context (NULL: the current one).
 * CUPOOL_ALL_STREAMS names the current context's streams, so the wait for
 * another context is not reported: its work stays outstanding to the
 * tracker until a synchronization it can place. */
CUPOOL_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    if (CUPOOL_UNLIKELY(!cupool_driver_ready() || !real_cuCtxSynchronize_v2)) return work_missing("cuCtxSynchronize_v2");
    if (!cupool_active()) return real_cuCtxSynchronize_v2(ctx);
    uint64_t mark = cupool_work_mark();
    CUresult r = real_cuCtxSynchronize_v2(ctx);
    CUcontext current = NULL;
    if (r == CUDA_SUCCESS &&
        (!ctx || (real_cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == ctx)))
        cupool_work_completed(mark, CUPOOL_ALL_STREAMS, 0);
    return r;
}
