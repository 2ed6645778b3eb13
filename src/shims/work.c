/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The work shims.  cupool orders frees on the stream where the program's
 * work runs (engine/order.c, "the order stream"), which holds only if it
 * sees all of it: so every call that gives a stream work (a kernel, a copy,
 * a set, a graph, a host function, a memory operation...) tells the work
 * tracker which stream the work goes to before the driver enqueues it
 * (cupool_stream_work, which may first make that stream wait for the order
 * stream) and again after (cupool_stream_work_done, which catches an order
 * that moved meanwhile), and returns the driver's answer unchanged.  The
 * shims are generated from CUPOOL_WORK_ENTRIES (src/base/work_shims.h,
 * made from cuda.h by scripts/gen_work_shims.py; tests/test_work_shims.sh
 * fails until a stream entry point of a newer cuda.h is classified), but
 * for the multi-device launch, whose streams are in a list, written here.
 * Every path to the driver reaches them (shims/interpose.c).  They run at
 * every kernel launch and copy: no log, no count, a few instructions before
 * and after the driver's own.  Work given before cupool starts (the
 * program's cuInit) or in a forked child is not reported: no free of
 * cupool's can be ordered after it.  The stream-ordered allocations and
 * frees (shims/memory.c) and cuStreamAttachMemAsync (shims/host.c) report
 * their streams too.
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

#define CUPOOL_WORK_SHIM(name, base, version, flavour, params, args, stream, per_thread)         \
    CUPOOL_EXPORT CUresult name params                                                           \
    {                                                                                            \
        if (CUPOOL_UNLIKELY(!cupool_driver_ready() || !real_##name)) return work_missing(#name);  \
        cupool_work_t work = cupool_work_begin(stream, per_thread);                              \
        CUresult r = real_##name args;                                                           \
        cupool_work_end(&work);                                                                  \
        return r;                                                                                \
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
    /* Every stream is reported before the driver sees any.  The tracker
     * looks at the current context, whose order cannot follow a stream of
     * another device's context: under `auto` that moves the context to
     * `deferred` (engine/order.c).  Past MOST streams the later ones are
     * reported before and not looked at after. */
    enum { MOST = 32 };
    cupool_work_t work[MOST];
    unsigned int n = launchParamsList ? numDevices : 0;
    for (unsigned int i = 0; i < n; i++) {
        cupool_work_t w = cupool_work_begin(launchParamsList[i].hStream, 0);
        if (i < MOST) work[i] = w;
    }
    CUresult r = real_cuLaunchCooperativeKernelMultiDevice(launchParamsList, numDevices, flags);
    for (unsigned int i = 0; i < n && i < MOST; i++) cupool_work_end(&work[i]);
    return r;
}
