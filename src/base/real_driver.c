/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The real driver: libcuda.so.1 loaded once, and a typed pointer to every
 * entry point cupool handles or calls (real_<name>), generated from the one
 * list in symbols.h; the C library's own dlsym, found without going through
 * cupool's override; the hot lines (cupool_hot, cupool_thread, hot.h) every
 * call reads, and the count of legacy-stream calls (capture_gate.h);
 * cupool's own threads.
 * How a program's calls reach cupool's shims instead is shims/interpose.c.
 */
#include "real_driver.h"
#include "capture_gate.h"
#include "options.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- the tables generated from symbols.h --------------------------------- */

#define CUPOOL_REAL_DEF(name, ...) __typeof__(name) *real_##name;
CUPOOL_HANDLED(CUPOOL_REAL_DEF)
CUPOOL_WORK_ENTRIES(CUPOOL_REAL_DEF)
CUPOOL_USED(CUPOOL_REAL_DEF)
#undef CUPOOL_REAL_DEF

/* Every real pointer with the name it is loaded by: the handled entry
 * points first, in the order of enum cupool_symbol, then the work entry
 * points, then those cupool only calls. */
typedef struct real_row {
    const char *name;
    void **real;
} real_row_t;

static const real_row_t reals[] = {
#define CUPOOL_HANDLED_REAL_ROW(name, ...) {#name, (void **)&real_##name},
    CUPOOL_HANDLED(CUPOOL_HANDLED_REAL_ROW)
    CUPOOL_WORK_ENTRIES(CUPOOL_HANDLED_REAL_ROW)
#undef CUPOOL_HANDLED_REAL_ROW
#define CUPOOL_USED_ROW(name) {#name, (void **)&real_##name},
    CUPOOL_USED(CUPOOL_USED_ROW)
#undef CUPOOL_USED_ROW
};

const char *cupool_symbol_name(int sym)
{
    return sym >= 0 && sym < CUPOOL_SYM_COUNT ? reals[sym].name : "?";
}

/* ---- the real dlsym ------------------------------------------------------ */

static _Atomic(cupool_dlsym_fn_t *) real_dlsym_fn;

/* The C library's dlsym.  Found without pthread_once: a sanitizer's runtime
 * (a test build) calls dlsym while it starts, before its pthread_once works.
 * Two threads that look at once find the same function. */
CUPOOL_NOT_SANITIZED cupool_dlsym_fn_t *cupool_real_dlsym(void)
{
    cupool_dlsym_fn_t *fn = atomic_load_explicit(&real_dlsym_fn, memory_order_relaxed);
    if (CUPOOL_LIKELY(fn)) return fn;
    /* dlvsym is not overridden, so this cannot come back to us. */
    fn = (cupool_dlsym_fn_t *)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!fn) fn = (cupool_dlsym_fn_t *)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
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
    void *fn = cupool_real_dlsym()(handle, name);
    /* Never take our own wrapper for the real function (proxychains' rule). */
    return is_ours(fn) ? NULL : fn;
}

static int driver_simulated;

int cupool_driver_simulated(void)
{
    return driver_simulated;
}

static void load_driver(void)
{
    Dl_info self;
    if (dladdr((void *)&load_driver, &self)) self_base = self.dli_fbase;
    if (!cupool_real_dlsym()) {
        cupool_message(CUPOOL_MSG_ERROR, "cannot find the C library's dlsym; passing nothing through");
        return;
    }
    void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_GLOBAL);
    if (!driver) {
        const char *why = dlerror();
        cupool_message(CUPOOL_MSG_ERROR, "cannot load the CUDA driver (libcuda.so.1): %s", why ? why : "unknown");
        return;
    }
    for (size_t i = 0; i < CUPOOL_ARRAY_SIZE(reals); i++) *reals[i].real = resolve_real(driver, reals[i].name);
    /* The test suite's simulated driver (tests/sim) marks itself. */
    driver_simulated = cupool_real_dlsym()(driver, "simcuda_simulated_driver") != NULL;
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

/* ---- cupool's own threads ------------------------------------------------ */

/* The kernel thread ids of cupool's threads running in this process (0: a
 * free slot).  A program whose main thread calls pthread_exit ends when its
 * last thread does: each of cupool's threads looks now and then whether
 * only cupool's are left (cupool_threads_alone) and ends then, or the
 * process would never exit. */
#define OWN_THREADS 8
static atomic_int own_tids[OWN_THREADS];
static pthread_once_t own_once = PTHREAD_ONCE_INIT;

/* A fork()ed child runs none of its parent's threads. */
static void own_fork_child(void)
{
    for (int i = 0; i < OWN_THREADS; i++) atomic_store(&own_tids[i], 0);
}

static void own_init(void)
{
    pthread_atfork(NULL, NULL, own_fork_child);
}

typedef struct thread_start {
    void *(*main_fn)(void *);
} thread_start_t;

static void *own_thread(void *arg)
{
    thread_start_t start = *(thread_start_t *)arg;
    free(arg);
    int tid = (int)syscall(SYS_gettid), slot = -1;
    for (int i = 0; i < OWN_THREADS && slot < 0; i++) {
        int free_slot = 0;
        if (atomic_compare_exchange_strong(&own_tids[i], &free_slot, tid)) slot = i;
    }
    void *result = start.main_fn(NULL);
    if (slot >= 0) atomic_store(&own_tids[slot], 0);
    return result;
}

static int is_own(int tid)
{
    for (int i = 0; i < OWN_THREADS; i++)
        if (atomic_load_explicit(&own_tids[i], memory_order_relaxed) == tid) return 1;
    return 0;
}

/* Whether the thread of /proc/self/task/TID has ended (a zombie, or gone). */
static int task_ended(int tid)
{
    char path[64], text[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return 0;
    text[n] = '\0';
    /* The state follows the command name, which may hold ')'. */
    const char *p = strrchr(text, ')');
    return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

int cupool_threads_alone(void)
{
    /* The main thread first, one small read: the rest only once it ended. */
    if (!task_ended((int)getpid())) return 0;
    DIR *dir = opendir("/proc/self/task");
    if (!dir) return 0;
    int others = 0, self = (int)syscall(SYS_gettid);
    for (struct dirent *e; !others && (e = readdir(dir));) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        int tid = atoi(e->d_name);
        if (tid == self || tid == (int)getpid() || is_own(tid)) continue;
        others = !task_ended(tid);
    }
    closedir(dir);
    return !others;
}

struct timespec cupool_deadline_after_ns(long long ns)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    long long total = (long long)t.tv_nsec + ns;
    t.tv_sec += (time_t)(total / 1000000000ll);
    t.tv_nsec = (long)(total % 1000000000ll);
    return t;
}

int cupool_thread_start(void *(*main_fn)(void *), const char *name)
{
    pthread_once(&own_once, own_init);
    thread_start_t *start = malloc(sizeof *start);
    if (!start) return -1;
    start->main_fn = main_fn;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_t thread;
    int ok = pthread_attr_init(&attr) == 0;
    /* The default stack size: a program's static TLS lives on every
     * thread's stack, and a small fixed one may not hold it. */
    ok = ok && pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
         pthread_create(&thread, &attr, own_thread, start) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (ok) pthread_setname_np(thread, name);
    else free(start);
    return ok ? 0 : -1;
}

/* In a line of its own: every `ordered` pool call writes it (capture_gate.h). */
atomic_int cupool_legacy_calls __attribute__((aligned(64)));

uint64_t cupool_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void cupool_stop(void)
{
    atomic_store(&cupool_hot.fast, 0);
    atomic_store(&cupool_hot.started, 0);
}
