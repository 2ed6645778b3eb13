/*
 * Interposition: how cupool finds the real driver and how every path a
 * program can take to a driver entry point reaches cupool's shim.  Programs
 * linked with -lcuda bind to the exported shims through LD_PRELOAD; programs
 * that dlopen libcuda and dlsym an entry point go through the dlsym override
 * below; runtimes and frameworks that resolve everything through
 * cuGetProcAddress get the shims from the wrapped resolver.  Anything cupool
 * does not handle keeps the real pointer, so unhandled calls cost nothing.
 */
#include "common.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the tables generated from symbols.h --------------------------------- */

#define CUPOOL_REAL_DEF(name, ...) __typeof__(name) *real_##name;
CUPOOL_HANDLED(CUPOOL_REAL_DEF)
CUPOOL_USED(CUPOOL_REAL_DEF)
#undef CUPOOL_REAL_DEF

typedef struct handled_row {
    const char *name;    /* exported symbol */
    const char *base;    /* name cuGetProcAddress is asked for */
    int version;         /* CUDA version that introduced this variant */
    int flavour;         /* CUPOOL_ANY / CUPOOL_LEGACY / CUPOOL_PTDS */
    void *shim;          /* cupool's exported function */
    void **real;         /* where the real pointer lives */
} handled_row_t;

static const handled_row_t handled[] = {
#define CUPOOL_TABLE_ROW(name, base, version, flavour) \
    {#name, base, version, flavour, (void *)&name, (void **)&real_##name},
    CUPOOL_HANDLED(CUPOOL_TABLE_ROW)
#undef CUPOOL_TABLE_ROW
};

typedef struct used_row {
    const char *name;
    void **real;
} used_row_t;

static const used_row_t used[] = {
#define CUPOOL_USED_ROW(name) {#name, (void **)&real_##name},
    CUPOOL_USED(CUPOOL_USED_ROW)
#undef CUPOOL_USED_ROW
};

const char *cupool_symbol_name(int sym)
{
    return sym >= 0 && sym < CUPOOL_SYM_COUNT ? handled[sym].name : "?";
}

CUPOOL_NOT_SANITIZED static int handled_index(const char *name)
{
    if (!name || name[0] != 'c' || name[1] != 'u') return -1;
    for (size_t i = 0; i < CUPOOL_ARRAY_SIZE(handled); i++)
        if (strcmp(handled[i].name, name) == 0) return (int)i;
    return -1;
}

/* ---- the real dlsym ------------------------------------------------------ */

typedef void *dlsym_fn_t(void *, const char *);
static _Atomic(dlsym_fn_t *) real_dlsym_fn;

/* The C library's dlsym.  Found without pthread_once: a sanitizer's runtime
 * (a test build) calls dlsym while it starts, before its pthread_once works.
 * Two threads that look at once find the same function. */
CUPOOL_NOT_SANITIZED static dlsym_fn_t *real_dlsym(void)
{
    dlsym_fn_t *fn = atomic_load_explicit(&real_dlsym_fn, memory_order_relaxed);
    if (CUPOOL_LIKELY(fn)) return fn;
    /* dlvsym is not overridden, so this cannot come back to us. */
    fn = (dlsym_fn_t *)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!fn) fn = (dlsym_fn_t *)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    atomic_store_explicit(&real_dlsym_fn, fn, memory_order_relaxed);
    return fn;
}

/* ---- loading the driver -------------------------------------------------- */

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
cupool_hot_t cupool_hot;
CUPOOL_THREAD_LOCAL cupool_thread_t cupool_thread;
_Static_assert(sizeof(cupool_thread_t) == 64, "what a thread's calls read of its own fits one cache line");
static void *self_base;

static int is_ours(void *fn)
{
    Dl_info info;
    return fn && dladdr(fn, &info) && info.dli_fbase == self_base;
}

static void *resolve_real(void *handle, const char *name)
{
    void *fn = real_dlsym()(handle, name);
    /* Never take our own wrapper for the real function (proxychains' rule). */
    return is_ours(fn) ? NULL : fn;
}

static void load_driver(void)
{
    Dl_info self;
    if (dladdr((void *)&load_driver, &self)) self_base = self.dli_fbase;
    if (!real_dlsym()) {
        cupool_message(CUPOOL_MSG_ERROR, "cannot find the C library's dlsym; passing nothing through");
        return;
    }
    void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_GLOBAL);
    if (!driver) {
        const char *why = dlerror();
        cupool_message(CUPOOL_MSG_ERROR, "cannot load the CUDA driver (libcuda.so.1): %s", why ? why : "unknown");
        return;
    }
    for (size_t i = 0; i < CUPOOL_ARRAY_SIZE(handled); i++) *handled[i].real = resolve_real(driver, handled[i].name);
    for (size_t i = 0; i < CUPOOL_ARRAY_SIZE(used); i++) *used[i].real = resolve_real(driver, used[i].name);
    cupool_hot.ctx_get_current = real_cuCtxGetCurrent;
    cupool_hot.alloc_from_pool = real_cuMemAllocFromPoolAsync;
    cupool_hot.free_async = real_cuMemFreeAsync;
    atomic_store_explicit(&cupool_hot.driver_loaded, 1, memory_order_release);
}

int cupool_driver_load(void)
{
    pthread_once(&load_once, load_driver);
    return atomic_load_explicit(&cupool_hot.driver_loaded, memory_order_acquire);
}

CUresult cupool_missing(const char *name)
{
    cupool_message_once(CUPOOL_MSG_ERROR, "the CUDA driver was not found or lacks %s; returning CUDA_ERROR_NOT_INITIALIZED",
                        name);
    return CUDA_ERROR_NOT_INITIALIZED;
}

const char *cupool_result_name(CUresult result)
{
    /* Nearly every logged call succeeded: no need to ask the driver. */
    if (result == CUDA_SUCCESS) return "CUDA_SUCCESS";
    const char *name = NULL;
    if (real_cuGetErrorName && real_cuGetErrorName(result, &name) == CUDA_SUCCESS && name) return name;
    return "CUDA_ERROR_UNKNOWN";
}

/* ---- the spin lock's contended case (common.h) --------------------------- */

void cupool_spin_wait(cupool_spinlock_t *lock)
{
    do {
        for (unsigned tries = 0; atomic_load_explicit(lock, memory_order_relaxed); tries++)
            cupool_wait_turn(tries, 100);
    } while (atomic_exchange_explicit(lock, 1, memory_order_acquire));
}

/* ---- the call bracket ---------------------------------------------------- */

uint64_t cupool_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

CUresult cupool_call_end_timed(cupool_call_t *c, CUresult result)
{
    uint64_t served = 0, end = cupool_now_ns();
    /* Time in cupool means the calls cupool served itself; the rest is the
     * driver's own time, which the program would spend anyway. */
    if (c->route == CUPOOL_ROUTE_POOL || c->route == CUPOOL_ROUTE_REWRITTEN) served = end - c->start_ns;
    if (cupool_log_level >= 0) cupool_log_call(c, result, end);
    cupool_stats_call(c->sym, served);
    return result;
}

/* ---- start-up and exit --------------------------------------------------- */

static pthread_once_t start_once = PTHREAD_ONCE_INIT;

void cupool_pools_start(void); /* context.c */

static void at_exit(void)
{
    /* The driver may already be gone: only our own memory is touched here.
     * The live page's thread asks the driver: it is stopped first. */
    cupool_live_stop();
    if (cupool_option(CUPOOL_OPT_STATS)) cupool_stats_print();
    cupool_log_flush();
}

/* A tool's callbacks run inside the driver's calls and may allocate or
 * wait there: under a tool, by default, no thread waits for another's
 * driver call. */
static void decide_queue(void)
{
    uint64_t q = cupool_option(CUPOOL_OPT_DRIVER_QUEUE);
    cupool_hot.queue = q == CUPOOL_QUEUE_ON || (q == CUPOOL_QUEUE_AUTO && !cupool_cuda_tool_attached());
    cupool_message(CUPOOL_MSG_INFO, "driver queue: %s",
                   cupool_hot.queue ? "on" : q == CUPOOL_QUEUE_OFF ? "off (CUPOOL_DRIVER_QUEUE=off)"
                                                                   : "off (a CUDA tool is attached)");
}

static void start(void)
{
    if (cupool_option(CUPOOL_OPT_VERBOSE)) cupool_options_print();
    cupool_log_open();
    cupool_hot.timing = cupool_log_level >= 0 || cupool_option(CUPOOL_OPT_STATS);
    cupool_hot.count_used = cupool_hot.timing || cupool_option(CUPOOL_OPT_LIMIT) != CUPOOL_SIZE_UNLIMITED;
    atexit(at_exit);
    cupool_pools_start();
    decide_queue();
    cupool_live_start();
    /* Under CUPOOL_LIMIT the store keeps no block larger than itself
     * (deferred.c, keep_ordered): the limit's room is already tight. */
    uint64_t keep = cupool_option(CUPOOL_OPT_ORDERED_READY), threshold = cupool_option(CUPOOL_OPT_RELEASE_THRESHOLD);
    if (keep && cupool_option(CUPOOL_OPT_LIMIT) == CUPOOL_SIZE_UNLIMITED) keep = UINT64_MAX;
    cupool_hot.ordered_keep_max = keep < threshold ? keep : threshold;
    int mode = (int)cupool_option(CUPOOL_OPT_FREE);
    atomic_store(&cupool_hot.fast, !cupool_hot.count_used && mode != CUPOOL_FREE_DEFERRED);
    atomic_store(&cupool_hot.started, 1);
}

void cupool_stop(void)
{
    atomic_store(&cupool_hot.fast, 0);
    atomic_store(&cupool_hot.started, 0);
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
    dlsym_fn_t *real = real_dlsym();
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
