/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Interposition and start-up: how every path a program can take to a driver
 * entry point reaches cupool's shim, and cupool's start once the program's
 * cuInit has succeeded.  Programs linked with -lcuda bind to the exported
 * shims through LD_PRELOAD; programs that dlopen libcuda and dlsym an entry
 * point go through the dlsym override below; runtimes and frameworks that
 * resolve everything through cuGetProcAddress get the shims from the
 * wrapped resolver.  Anything cupool does not handle keeps the real pointer,
 * so unhandled calls cost nothing.  The real driver itself is loaded by
 * base/real_driver.c.
 */
#include "../engine/engine.h"
#include "../engine/share.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the table generated from symbols.h ---------------------------------- */

typedef struct handled_row {
    const char *name;    /* exported symbol */
    const char *base;    /* name cuGetProcAddress is asked for */
    int version;         /* CUDA version that introduced this variant */
    int flavour;         /* CUPOOL_ANY / CUPOOL_LEGACY / CUPOOL_PTDS */
    void *shim;          /* cupool's exported function */
    void **real;         /* where the real pointer lives */
} handled_row_t;

/* Every handled entry point: CUPOOL_HANDLED's, then the work entry points of
 * CUPOOL_WORK_ENTRIES (src/shims/work.c), all interposed the same way. */
static const handled_row_t handled[] = {
#define CUPOOL_TABLE_ROW(name, base, version, flavour) \
    {#name, base, version, flavour, (void *)&name, (void **)&real_##name},
#define CUPOOL_WORK_TABLE_ROW(name, base, version, flavour, params, args, stream, per_thread) \
    CUPOOL_TABLE_ROW(name, base, version, flavour)
    CUPOOL_HANDLED(CUPOOL_TABLE_ROW)
    CUPOOL_WORK_ENTRIES(CUPOOL_WORK_TABLE_ROW)
#undef CUPOOL_WORK_TABLE_ROW
#undef CUPOOL_TABLE_ROW
};

CUPOOL_NOT_SANITIZED static int handled_index(const char *name)
{
    if (!name || name[0] != 'c' || name[1] != 'u') return -1;
    for (size_t i = 0; i < CUPOOL_ARRAY_SIZE(handled); i++)
        if (strcmp(handled[i].name, name) == 0) return (int)i;
    return -1;
}

/* ---- start-up and exit --------------------------------------------------- */

static pthread_once_t start_once = PTHREAD_ONCE_INIT;

static void at_exit(void)
{
    /* The driver may already be gone: only our own memory is touched here.
     * The live page's thread asks the driver: it is stopped first. */
    cupool_live_stop();
    cupool_share_stop();
    cupool_ipc_stop();
    /* The log first: the summary says how many of its lines were lost. */
    cupool_log_flush();
    if (cupool_option(CUPOOL_OPT_STATS)) cupool_stats_print();
}

/* A forked child that calls exit() after cupool served allocations in its
 * parent dies in the driver's exit-time teardown (SIGSEGV inside
 * libcuda.so.1, driver 580, on an H100 and an H200), where a native child
 * of a process that allocated from pools of its own exits cleanly; which of
 * the objects cupool made (pools, streams, events) trips the teardown is
 * not known.  The child cannot use CUDA anyway, and the
 * driver has nothing of the child's to release: so such a child's exit
 * ends here, with its status and its stdio flushed, once the handlers
 * registered after cuInit have run. */
static int child_of_pools;

static void fork_child(void)
{
    child_of_pools = cupool_pools_in_use();
}

static void leave_child(int status, void *arg)
{
    (void)arg;
    if (!child_of_pools) return;
    fflush(NULL);
    _exit(status);
}

static void start(void)
{
    if (cupool_option(CUPOOL_OPT_VERBOSE)) cupool_options_print();
    cupool_log_open();
    cupool_hot.timing = cupool_log_level >= 0 || cupool_option(CUPOOL_OPT_STATS);
    cupool_hot.count_used = cupool_hot.timing || cupool_option(CUPOOL_OPT_LIMIT) != CUPOOL_SIZE_UNLIMITED;
    on_exit(leave_child, NULL);
    atexit(at_exit);
    pthread_atfork(NULL, NULL, fork_child);
    cupool_engine_start();
    cupool_kept_start();
    cupool_live_start();
    cupool_share_start();
    atomic_store(&cupool_hot.started, 1);
}

CUPOOL_EXPORT CUresult cuInit(unsigned int flags)
{
    CUPOOL_SHIM_BEGIN(call, cuInit);
    CUresult result = real_cuInit(flags);
    /* cupool starts only after the program's own cuInit succeeded. */
    if (result == CUDA_SUCCESS) pthread_once(&start_once, start);
    return cupool_call_end(&call, result);
}

/* ---- cuGetProcAddress ---------------------------------------------------- */

/* The shim to hand out instead of the real function the driver resolved, or
 * the real one.  The driver has already chosen the variant (cudaVersion,
 * per-thread flags); the row whose real pointer it returned names our shim.
 * Should a driver return an address other than its exported symbol, the
 * newest row of that base name the version allows is used instead. */
static void *substitute(const char *symbol, void *fn, int cuda_version, cuuint64_t flags)
{
    int want = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ? CUPOOL_PTDS : CUPOOL_LEGACY;
    const handled_row_t *best = NULL;
    for (size_t i = 0; i < CUPOOL_ARRAY_SIZE(handled); i++) {
        const handled_row_t *row = &handled[i];
        if (strcmp(row->base, symbol) != 0) continue;
        if (*row->real == fn) return row->shim;
        if (row->version > cuda_version) continue;
        if (row->flavour != CUPOOL_ANY && row->flavour != want) continue;
        if (!best || row->version > best->version) best = row;
    }
    if (best && *best->real) {
        cupool_message(CUPOOL_MSG_INFO, "cuGetProcAddress(%s, %d): driver address is not the exported one; using %s",
                       symbol, cuda_version, best->name);
        return best->shim;
    }
    return fn;
}

CUPOOL_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                           CUdriverProcAddressQueryResult *symbolStatus)
{
    CUPOOL_SHIM_BEGIN(call, cuGetProcAddress_v2);
    CUresult result = real_cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (result == CUDA_SUCCESS && symbol && pfn && *pfn) *pfn = substitute(symbol, *pfn, cudaVersion, flags);
    return cupool_call_end(&call, result);
}

CUPOOL_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    CUPOOL_SHIM_BEGIN(call, cuGetProcAddress);
    CUresult result = real_cuGetProcAddress(symbol, pfn, cudaVersion, flags);
    if (result == CUDA_SUCCESS && symbol && pfn && *pfn) *pfn = substitute(symbol, *pfn, cudaVersion, flags);
    return cupool_call_end(&call, result);
}

/* ---- dlsym --------------------------------------------------------------- */

/* A program that dlopens libcuda and looks an entry point up by name gets the
 * shim, but only when the lookup found the real driver's function.  Unhandled
 * names return straight from the real dlsym as a tail call, so that glibc
 * still sees the program as the caller (RTLD_NEXT depends on it). */
__attribute__((optimize("O2", "optimize-sibling-calls"))) CUPOOL_NOT_SANITIZED static void *lookup(void *handle,
                                                                                               const char *name)
{
    cupool_dlsym_fn_t *real = cupool_real_dlsym();
    int i = handled_index(name);
    if (i < 0) return real(handle, name);
    void *fn = real(handle, name);
    if (fn && cupool_driver_load() && fn == *handled[i].real) return handled[i].shim;
    return fn;
}

/* dlsym is exported at both versions glibc has used, so old and new binaries
 * alike bind to it.  The symver attribute survives link-time optimisation,
 * where a top-level .symver directive does not; older compilers lack it. */
#ifdef __has_attribute
#if __has_attribute(symver)
#define CUPOOL_SYMVER(name) __attribute__((symver(name)))
#endif
#endif
#ifdef CUPOOL_SYMVER
#define CUPOOL_SYMVER_ASM 0
#else
#define CUPOOL_SYMVER(name)
#define CUPOOL_SYMVER_ASM 1
#endif
#define CUPOOL_DLSYM_ATTRIBUTES                                                                                  \
    __attribute__((optimize("O2", "optimize-sibling-calls"))) CUPOOL_NOT_SANITIZED CUPOOL_EXPORT

CUPOOL_DLSYM_ATTRIBUTES CUPOOL_SYMVER("dlsym@GLIBC_2.2.5") void *cupool_dlsym_2_2_5(void *handle, const char *name)
{
    return lookup(handle, name);
}
CUPOOL_DLSYM_ATTRIBUTES CUPOOL_SYMVER("dlsym@@GLIBC_2.34") void *cupool_dlsym_2_34(void *handle, const char *name)
{
    return lookup(handle, name);
}
#if CUPOOL_SYMVER_ASM
__asm__(".symver cupool_dlsym_2_2_5, dlsym@GLIBC_2.2.5");
__asm__(".symver cupool_dlsym_2_34, dlsym@@GLIBC_2.34");
#endif
