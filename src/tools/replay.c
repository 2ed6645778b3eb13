/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cupool-replay: measures one call log's allocation trace natively and under
 * cupool's configurations.  The trace is every successful allocation of the
 * log (cuMemAlloc, and cuMemAllocPitch replayed as a cuMemAlloc of its
 * total size; pinned host memory of cuMemAllocHost and of cuMemHostAlloc
 * with its flags; managed memory of cuMemAllocManaged with its flags) and
 * every successful free matched to one of them by pointer, made with the
 * free of the block's kind (cuMemFree, cuMemFreeHost) whatever call the log
 * shows.  The times of each kind of memory are measured and reported apart.
 * Each thread of the log becomes one replay thread that makes its calls in
 * the logged order on the logged device; a free made by another thread than
 * the allocation waits until the allocation has been replayed, so every
 * block lives as it did.  Gaps between calls are dropped by default
 * (--gap-scale 0) or kept, scaled.
 *
 * Each configuration runs in its own child process, since cupool reads its
 * options once per process: the tool re-executes itself with --child,
 * without libcupool.so for "native" and with LD_PRELOAD=libcupool.so and
 * CUPOOL_POLICY / CUPOOL_FREE for the others.  The child reports one line of
 * numbers through a pipe; the parent prints the table.  The driver is
 * opened with dlopen at run time, as a CUDA program would, so the tool
 * builds from cuda.h alone.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cli.h"
#include "trace.h"

#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uthash.h>

#define PROG "cupool-replay"
#define MAX_DEVICES 64
#define MAX_REPEAT 1000

#ifndef CUPOOL_LIBDIR
#define CUPOOL_LIBDIR "/usr/local/lib"
#endif

extern char **environ;

/* ---- configurations ----------------------------------------------------- */

static const char *const all_configs[] = {
    "native", "dedicated/ordered", "dedicated/deferred", "dedicated/sync", "dedicated/auto", "default/auto", "split/auto",
};
#define CONFIG_COUNT (sizeof all_configs / sizeof *all_configs)

/* Accepts "policy/free" or "policy:free"; returns the canonical name or NULL. */
static const char *canonical_config(const char *name)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", name);
    char *colon = strchr(buf, ':');
    if (colon) *colon = '/';
    if (strcmp(buf, "off") == 0) snprintf(buf, sizeof buf, "native");
    for (size_t i = 0; i < CONFIG_COUNT; i++)
        if (strcmp(buf, all_configs[i]) == 0) return all_configs[i];
    return NULL;
}

/* ---- the trace ------------------------------------------------------- */

enum { OP_ALLOC, OP_FREE };
/* How a block is allocated: its memory (TRACE_MEM_*) and, for pinned host
 * memory, which of the two calls made it. */
enum { API_MEM_ALLOC, API_MEM_ALLOC_HOST, API_MEM_HOST_ALLOC, API_MEM_ALLOC_MANAGED };

typedef struct op {
    uint64_t t;    /* logged start, ns from the first call */
    uint64_t size;
    uint32_t slot; /* the block: index into slots */
    uint8_t kind;
    int32_t dev;
} op_t;

typedef struct slot {
    CUdeviceptr ptr;
    atomic_int state; /* 0 not yet allocated, 1 allocated, 2 allocation failed, 3 freed */
    int dev;          /* the logged device (-1: none), once allocated the replay device */
    uint8_t mem, api; /* TRACE_MEM_*, API_* */
    unsigned flags;   /* cuMemHostAlloc's and cuMemAllocManaged's */
} slot_t;

/* One thread's times and counts for one kind of memory. */
typedef struct counts {
    uint64_t alloc_ns, free_ns, allocs, frees, failures;
} counts_t;

typedef struct replay_thread {
    int tid;
    op_t *ops;
    size_t nops, cap;
    counts_t by_mem[TRACE_MEM_KINDS]; /* results */
    pthread_t handle;
} replay_thread_t;

typedef struct live {
    uint64_t ptr;
    uint32_t slot;
    UT_hash_handle hh;
} live_t;

static replay_thread_t *threads;
static size_t nthreads;
static slot_t *slots;
static size_t nslots;
static uint64_t trace_allocs[TRACE_MEM_KINDS], trace_frees[TRACE_MEM_KINDS];
static int trace_devices; /* highest logged device + 1 */
static const char *const memory_names[TRACE_MEM_KINDS] = {"device", "pinned host memory", "managed memory"};
static const char *const memory_keys[TRACE_MEM_KINDS] = {"device", "host", "managed"}; /* JSON */

/* Whether the trace holds pinned host or managed memory: without, the
 * output is device memory's alone. */
static int other_kinds(void)
{
    for (int m = TRACE_MEM_HOST; m < TRACE_MEM_KINDS; m++)
        if (trace_allocs[m]) return 1;
    return 0;
}

/* The call that makes an allocation of the log again. */
static uint8_t api_of(const trace_t *t, const trace_record_t *r)
{
    if (r->mem == TRACE_MEM_MANAGED) return API_MEM_ALLOC_MANAGED;
    if (r->mem == TRACE_MEM_HOST)
        return strcmp(t->names[r->call], "cuMemHostAlloc") == 0 ? API_MEM_HOST_ALLOC : API_MEM_ALLOC_HOST;
    return API_MEM_ALLOC;
}

static replay_thread_t *thread_of(int tid)
{
    for (size_t i = 0; i < nthreads; i++)
        if (threads[i].tid == tid) return &threads[i];
    threads = trace_xrealloc(threads, (nthreads + 1) * sizeof *threads);
    memset(&threads[nthreads], 0, sizeof *threads);
    threads[nthreads].tid = tid;
    return &threads[nthreads++];
}

static void add_op(replay_thread_t *th, op_t op)
{
    if (th->nops == th->cap) {
        th->cap = th->cap ? th->cap * 2 : 256;
        th->ops = trace_xrealloc(th->ops, th->cap * sizeof *th->ops);
    }
    th->ops[th->nops++] = op;
}

/* Reads the log and builds the per-thread operation lists; -1 on error. */
static int load_trace(const char *path, int quiet)
{
    trace_t t = {0};
    /* The parent has named the malformed lines: its children read quietly. */
    t.quiet = quiet;
    if (trace_read(&t, path, PROG) != 0) return -1;
    trace_sort(&t);
    live_t *live = NULL, *l, *tmp;
    size_t cap_slots = 0;
    uint64_t t0 = t.count ? t.records[0].t : 0;
    for (size_t i = 0; i < t.count; i++) {
        const trace_record_t *r = &t.records[i];
        if (!r->ok || (r->kind != TRACE_ALLOC && r->kind != TRACE_FREE) || !r->ptr) continue;
        uint64_t ptr = r->ptr;
        HASH_FIND(hh, live, &ptr, sizeof ptr, l);
        if (r->kind == TRACE_ALLOC) {
            if (!r->size) continue;
            if (l) { /* the free of the earlier block was not logged: it lives on */
                HASH_DEL(live, l);
                free(l);
            }
            if (nslots == cap_slots) {
                cap_slots = cap_slots ? cap_slots * 2 : 1024;
                slots = trace_xrealloc(slots, cap_slots * sizeof *slots);
            }
            /* Pinned host and managed memory lines name no device (-1): such
             * a block is made in the context current on its replay thread. */
            int dev = r->dev >= 0 ? r->dev : r->mem == TRACE_MEM_DEVICE ? 0 : -1;
            if (dev >= MAX_DEVICES) dev %= MAX_DEVICES;
            if (dev + 1 > trace_devices) trace_devices = dev + 1;
            slots[nslots].ptr = 0;
            atomic_init(&slots[nslots].state, 0);
            slots[nslots].dev = dev;
            slots[nslots].mem = r->mem;
            slots[nslots].api = api_of(&t, r);
            /* A managed allocation needs CU_MEM_ATTACH_GLOBAL or _HOST: a
             * line without its flags gets the default of cudaMallocManaged. */
            slots[nslots].flags = r->has_flags                  ? r->flags
                                  : r->mem == TRACE_MEM_MANAGED ? CU_MEM_ATTACH_GLOBAL
                                                                : 0;
            l = trace_xrealloc(NULL, sizeof *l);
            l->ptr = ptr;
            l->slot = (uint32_t)nslots;
            HASH_ADD(hh, live, ptr, sizeof l->ptr, l);
            add_op(thread_of(r->tid), (op_t){r->t - t0, r->size, (uint32_t)nslots, OP_ALLOC, dev});
            nslots++;
            trace_allocs[r->mem]++;
        } else if (l) {
            add_op(thread_of(r->tid), (op_t){r->t - t0, 0, l->slot, OP_FREE, slots[l->slot].dev});
            trace_frees[slots[l->slot].mem]++;
            HASH_DEL(live, l);
            free(l);
        }
    }
    HASH_ITER(hh, live, l, tmp)
    {
        HASH_DEL(live, l);
        free(l);
    }
    if (nslots && trace_devices < 1) trace_devices = 1;
    trace_free(&t);
    return 0;
}

/* ---- the driver -------------------------------------------------------- */

#define DRIVER_FUNCTIONS(X)                                                                                 \
    X(cuInit) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent)             \
    X(cuCtxSynchronize) X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemGetInfo_v2) X(cuGetErrorName)                \
    X(cuMemAllocHost_v2) X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemAllocManaged)

#define DRIVER_POINTER(name) static __typeof__(name) *drv_##name;
DRIVER_FUNCTIONS(DRIVER_POINTER)
#undef DRIVER_POINTER

static int device_count;
static CUcontext contexts[MAX_DEVICES];
static size_t baseline_used[MAX_DEVICES];
static atomic_ullong peak_used[MAX_DEVICES];
static int sample_memory = 1;
/* --stats: a cupool run's CUPOOL_STATS summary goes to standard error. */
static int show_stats;
static double gap_scale = 0;
static uint64_t replay_start_ns;

static const char *result_name(CUresult r)
{
    const char *name = NULL;
    if (drv_cuGetErrorName && drv_cuGetErrorName(r, &name) == CUDA_SUCCESS && name) return name;
    return "an unknown CUresult";
}

static int load_driver(void)
{
    /* Through dlsym, which cupool (when preloaded) answers with its shims. */
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!driver) {
        fprintf(stderr, PROG ": cannot load the CUDA driver: %s\n", dlerror());
        return -1;
    }
#define DRIVER_LOAD(name)                                                                                    \
    if (!(drv_##name = (__typeof__(name) *)dlsym(driver, #name))) {                                          \
        fprintf(stderr, PROG ": the CUDA driver lacks %s\n", #name);                                         \
        return -1;                                                                                           \
    }
    DRIVER_FUNCTIONS(DRIVER_LOAD)
#undef DRIVER_LOAD
    CUresult r;
    if ((r = drv_cuInit(0)) != CUDA_SUCCESS || (r = drv_cuDeviceGetCount(&device_count)) != CUDA_SUCCESS) {
        fprintf(stderr, PROG ": cannot start the CUDA driver: %s\n", result_name(r));
        return -1;
    }
    if (device_count < 1) {
        fprintf(stderr, PROG ": no CUDA device\n");
        return -1;
    }
    if (device_count > MAX_DEVICES) device_count = MAX_DEVICES;
    return 0;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The replay device of a logged device: logs from bigger machines wrap. */
static int replay_device(int dev)
{
    return dev % device_count;
}

static int use_device(int dev)
{
    if (!contexts[dev]) {
        CUdevice d;
        CUresult r = drv_cuDeviceGet(&d, dev);
        if (r == CUDA_SUCCESS) r = drv_cuDevicePrimaryCtxRetain(&contexts[dev], d);
        if (r != CUDA_SUCCESS) {
            fprintf(stderr, PROG ": cannot use device %d: %s\n", dev, result_name(r));
            return -1;
        }
    }
    CUresult r = drv_cuCtxSetCurrent(contexts[dev]);
    if (r != CUDA_SUCCESS) fprintf(stderr, PROG ": cannot make device %d current: %s\n", dev, result_name(r));
    return r == CUDA_SUCCESS ? 0 : -1;
}

/* Device memory in use by everything on the current device, as
 * cuMemGetInfo sees it (under cupool: without pool memory held unused). */
static size_t used_now(void)
{
    size_t free_bytes = 0, total = 0;
    if (drv_cuMemGetInfo_v2(&free_bytes, &total) != CUDA_SUCCESS || free_bytes > total) return 0;
    return total - free_bytes;
}

static void raise_peak(atomic_ullong *peak, unsigned long long value)
{
    unsigned long long old = atomic_load_explicit(peak, memory_order_relaxed);
    while (value > old && !atomic_compare_exchange_weak(peak, &old, value)) {
    }
}

static void *run_thread(void *arg)
{
    replay_thread_t *th = arg;
    int current = -1;
    for (size_t i = 0; i < th->nops; i++) {
        const op_t *op = &th->ops[i];
        slot_t *s = &slots[op->slot];
        if (gap_scale > 0) {
            uint64_t due = replay_start_ns + (uint64_t)((double)op->t * gap_scale);
            struct timespec ts = {(time_t)(due / 1000000000u), (long)(due % 1000000000u)};
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
            }
        }
        int dev = op->dev >= 0 ? replay_device(op->dev) : current >= 0 ? current : 0;
        counts_t *c = &th->by_mem[s->mem];
        if (op->kind == OP_ALLOC) {
            if (dev != current) {
                if (use_device(dev) != 0) {
                    atomic_store_explicit(&s->state, 2, memory_order_release);
                    c->failures++;
                    continue;
                }
                current = dev;
            }
            CUdeviceptr p = 0;
            void *host = NULL;
            CUresult r;
            uint64_t start = now_ns();
            switch (s->api) {
            case API_MEM_ALLOC_HOST: r = drv_cuMemAllocHost_v2(&host, (size_t)op->size); break;
            case API_MEM_HOST_ALLOC: r = drv_cuMemHostAlloc(&host, (size_t)op->size, s->flags); break;
            case API_MEM_ALLOC_MANAGED: r = drv_cuMemAllocManaged(&p, (size_t)op->size, s->flags); break;
            default: r = drv_cuMemAlloc_v2(&p, (size_t)op->size); break;
            }
            c->alloc_ns += now_ns() - start;
            c->allocs++;
            if (r != CUDA_SUCCESS) {
                c->failures++;
                atomic_store_explicit(&s->state, 2, memory_order_release);
                continue;
            }
            s->ptr = host ? (CUdeviceptr)(uintptr_t)host : p;
            s->dev = dev; /* the replay device, for the free of a block the log never freed */
            atomic_store_explicit(&s->state, 1, memory_order_release);
            /* Device memory's footprint only: pinned host memory is the
             * host's, and managed memory occupies a device once touched. */
            if (sample_memory && s->mem == TRACE_MEM_DEVICE) {
                size_t used = used_now();
                raise_peak(&peak_used[dev], used > baseline_used[dev] ? used - baseline_used[dev] : 0);
            }
        } else {
            int state;
            /* A block of another thread: wait for its allocation. */
            for (unsigned spin = 0; (state = atomic_load_explicit(&s->state, memory_order_acquire)) == 0; spin++)
                if (spin > 64) sched_yield();
            if (state != 1) continue;
            /* A thread whose first call is a free has no context yet. */
            if (current < 0 && use_device(dev) == 0) current = dev;
            uint64_t start = now_ns();
            CUresult r = s->mem == TRACE_MEM_HOST ? drv_cuMemFreeHost((void *)(uintptr_t)s->ptr) : drv_cuMemFree_v2(s->ptr);
            c->free_ns += now_ns() - start;
            c->frees++;
            if (r != CUDA_SUCCESS) c->failures++;
            atomic_store_explicit(&s->state, 3, memory_order_relaxed);
        }
    }
    return NULL;
}

/* One kind of memory's numbers of a run (in the table: medians of runs). */
typedef struct kind_result {
    double alloc_ns, free_ns; /* mean per call */
    uint64_t allocs, frees, failures;
} kind_result_t;

typedef struct result {
    double wall_ns;
    kind_result_t mem[TRACE_MEM_KINDS]; /* [TRACE_MEM_*] */
    uint64_t peak_used, peak_reserved;
    int has_reserved;
    int ok;
} result_t;

/* cupool's statistics, when it is loaded (include/cupool.h's layout). */
typedef struct stats_view {
    uint64_t pooled_allocs, native_allocs, pooled_frees, in_use, peak_in_use, peak_reserved, trims, oom_retries,
        rewritten_memsets;
} stats_view_t;

static int run_child(const char *config, const char *path)
{
    int pooled = strcmp(config, "native") != 0;
    int (*get_stats)(int, stats_view_t *) = (int (*)(int, stats_view_t *))dlsym(RTLD_DEFAULT, "cupool_get_stats");
    if (pooled && !get_stats) {
        fprintf(stderr, PROG ": %s: libcupool.so is not loaded in the replay\n", config);
        return 3;
    }
    if (!pooled && get_stats) {
        fprintf(stderr, PROG ": native: libcupool.so is loaded although it should not be\n");
        return 3;
    }
    if (load_trace(path, 1) != 0 || load_driver() != 0) return 1;
    for (int d = 0; d < device_count && d < trace_devices; d++) {
        if (use_device(d) != 0) return 1;
        baseline_used[d] = used_now();
    }
    replay_start_ns = now_ns();
    for (size_t i = 0; i < nthreads; i++)
        if (pthread_create(&threads[i].handle, NULL, run_thread, &threads[i]) != 0) {
            fprintf(stderr, PROG ": cannot start a replay thread\n");
            return 1;
        }
    for (size_t i = 0; i < nthreads; i++) pthread_join(threads[i].handle, NULL);
    for (int d = 0; d < device_count && d < trace_devices; d++)
        if (contexts[d] && drv_cuCtxSetCurrent(contexts[d]) == CUDA_SUCCESS) drv_cuCtxSynchronize();
    uint64_t wall = now_ns() - replay_start_ns;

    counts_t total[TRACE_MEM_KINDS];
    memset(total, 0, sizeof total);
    for (size_t i = 0; i < nthreads; i++)
        for (int m = 0; m < TRACE_MEM_KINDS; m++) {
            const counts_t *c = &threads[i].by_mem[m];
            total[m].allocs += c->allocs;
            total[m].frees += c->frees;
            total[m].failures += c->failures;
            total[m].alloc_ns += c->alloc_ns;
            total[m].free_ns += c->free_ns;
        }
    result_t res = {0};
    for (int d = 0; d < MAX_DEVICES; d++) res.peak_used += atomic_load(&peak_used[d]);
    if (get_stats)
        for (int d = 0; d < device_count; d++) {
            stats_view_t s;
            if (get_stats(d, &s) == 0) res.peak_reserved += s.peak_reserved;
        }
    /* Blocks the log never freed are freed now, outside the measurement. */
    for (size_t i = 0; i < nslots; i++)
        if (atomic_load(&slots[i].state) == 1) {
            use_device(replay_device(slots[i].dev));
            if (slots[i].mem == TRACE_MEM_HOST) drv_cuMemFreeHost((void *)(uintptr_t)slots[i].ptr);
            else drv_cuMemFree_v2(slots[i].ptr);
        }
    /* Device memory's line, then one per other kind the trace holds. */
    printf("result %llu %llu %llu %llu %llu %llu %llu %llu\n", (unsigned long long)wall,
           (unsigned long long)total[0].alloc_ns, (unsigned long long)total[0].allocs,
           (unsigned long long)total[0].free_ns, (unsigned long long)total[0].frees,
           (unsigned long long)total[0].failures, (unsigned long long)res.peak_used,
           (unsigned long long)res.peak_reserved);
    for (int m = TRACE_MEM_HOST; m < TRACE_MEM_KINDS; m++)
        if (trace_allocs[m])
            printf("memory %d %llu %llu %llu %llu %llu\n", m, (unsigned long long)total[m].alloc_ns,
                   (unsigned long long)total[m].allocs, (unsigned long long)total[m].free_ns,
                   (unsigned long long)total[m].frees, (unsigned long long)total[m].failures);
    fflush(stdout);
    /* CUPOOL_STATS=1 (set so that cupool tracks peak_reserved) prints its
     * summary at exit, after the replay's numbers: asked for (--stats), it
     * follows a line naming the run; else it is dropped. */
    if (show_stats && strcmp(config, "native") != 0) {
        fprintf(stderr, PROG ": %s: cupool's summary of the replay (CUPOOL_STATS):\n", config);
        return 0;
    }
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, STDERR_FILENO);
    return 0;
}

/* ---- the parent: one child per configuration and run -------------------- */

/* --library, else CUPOOL_LIBRARY, else the build tree's library when this
 * program runs from its build tree (libcupool.la beside it), else the
 * installed one. */
static const char *library_path(const char *option)
{
    if (option) return option;
    const char *env = getenv("CUPOOL_LIBRARY");
    if (env && *env) return env;
    static char tree[4096];
    ssize_t n = readlink("/proc/self/exe", tree, sizeof tree - 32);
    char *slash = n > 0 ? memrchr(tree, '/', (size_t)n) : NULL;
    if (slash) {
        strcpy(slash + 1, "libcupool.la");
        if (access(tree, F_OK) == 0) {
            strcpy(slash + 1, ".libs/libcupool.so");
            if (access(tree, R_OK) == 0) return tree;
        }
    }
    return CUPOOL_LIBDIR "/libcupool.so";
}

/* The environment of a child: the caller's, without cupool's own settings
 * that the configuration decides, and with libcupool.so preloaded or not. */
static char **child_environment(const char *config, const char *library)
{
    size_t n = 0;
    while (environ[n]) n++;
    char **env = trace_xrealloc(NULL, (n + 8) * sizeof *env);
    size_t o = 0;
    static char preload[8192], policy[64], freemode[64];
    const char *old_preload = "";
    for (size_t i = 0; i < n; i++) {
        const char *e = environ[i];
        if (strncmp(e, "LD_PRELOAD=", 11) == 0) {
            old_preload = e + 11;
            continue;
        }
        if (strncmp(e, "CUPOOL_POLICY=", 14) == 0 || strncmp(e, "CUPOOL_FREE=", 12) == 0 ||
            strncmp(e, "CUPOOL_LOG=", 11) == 0 || strncmp(e, "CUPOOL_STATS=", 13) == 0)
            continue;
        env[o++] = (char *)e;
    }
    /* Keep other preloads, but no cupool of any path. */
    char rest[4096] = "";
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", old_preload);
    for (char *save = NULL, *tok = strtok_r(copy, ": ", &save); tok; tok = strtok_r(NULL, ": ", &save)) {
        if (strstr(tok, "libcupool")) continue;
        if (strlen(rest) + strlen(tok) + 2 < sizeof rest) {
            if (rest[0]) strcat(rest, ":");
            strcat(rest, tok);
        }
    }
    if (strcmp(config, "native") == 0) {
        if (rest[0]) {
            snprintf(preload, sizeof preload, "LD_PRELOAD=%s", rest);
            env[o++] = preload;
        }
    } else {
        snprintf(preload, sizeof preload, "LD_PRELOAD=%s%s%s", library, rest[0] ? ":" : "", rest);
        env[o++] = preload;
        const char *slash = strchr(config, '/');
        snprintf(policy, sizeof policy, "CUPOOL_POLICY=%.*s", (int)(slash - config), config);
        snprintf(freemode, sizeof freemode, "CUPOOL_FREE=%s", slash + 1);
        env[o++] = policy;
        env[o++] = freemode;
        env[o++] = "CUPOOL_STATS=1"; /* makes cupool track peak_reserved */
    }
    env[o] = NULL;
    return env;
}

static int run_config(const char *config, const char *library, const char *path, char **child_args, result_t *res)
{
    int fds[2];
    if (pipe(fds) != 0) return perror("pipe"), -1;
    pid_t pid = fork();
    if (pid < 0) return perror("fork"), -1;
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], STDOUT_FILENO);
        close(fds[1]);
        char **env = child_environment(config, library);
        char *args[16];
        int a = 0;
        args[a++] = (char *)PROG;
        args[a++] = (char *)"--child";
        args[a++] = (char *)config;
        for (int i = 0; child_args[i]; i++) args[a++] = child_args[i];
        args[a++] = (char *)path;
        args[a] = NULL;
        execve("/proc/self/exe", args, env);
        fprintf(stderr, PROG ": cannot run /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    char line[512] = "";
    FILE *in = fdopen(fds[0], "r");
    int got = 0;
    while (in && fgets(line, sizeof line, in)) {
        unsigned long long wall, allocs, frees, failures, used, reserved;
        double alloc_total, free_total;
        int m;
        if (sscanf(line, "result %llu %lf %llu %lf %llu %llu %llu %llu", &wall, &alloc_total, &allocs, &free_total,
                   &frees, &failures, &used, &reserved) == 8) {
            res->wall_ns = (double)wall;
            res->mem[0] = (kind_result_t){allocs ? alloc_total / (double)allocs : 0,
                                          frees ? free_total / (double)frees : 0, allocs, frees, failures};
            res->peak_used = used;
            res->peak_reserved = reserved;
            res->has_reserved = strcmp(config, "native") != 0;
            got = 1;
        } else if (sscanf(line, "memory %d %lf %llu %lf %llu %llu", &m, &alloc_total, &allocs, &free_total, &frees,
                          &failures) == 6 &&
                   m > 0 && m < TRACE_MEM_KINDS) {
            res->mem[m] = (kind_result_t){allocs ? alloc_total / (double)allocs : 0,
                                          frees ? free_total / (double)frees : 0, allocs, frees, failures};
        } else {
            fputs(line, stdout); /* the program's own output, if any */
        }
    }
    if (in) fclose(in);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (WIFSIGNALED(status)) fprintf(stderr, PROG ": %s: replay killed by signal %d\n", config, WTERMSIG(status));
        else fprintf(stderr, PROG ": %s: replay failed (exit status %d)\n", config, WEXITSTATUS(status));
        return -1;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static const char *short_bytes(double bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "K", "M", "G", "T"};
    int u = 0;
    while (bytes >= 1024 && u < 4) bytes /= 1024, u++;
    snprintf(buf, len, u ? "%.1f%s" : "%.0f%s", bytes, units[u]);
    return buf;
}

static void ratio(char *buf, size_t len, double value, double base, int have)
{
    if (!have || base <= 0) snprintf(buf, len, "-");
    else snprintf(buf, len, "%.2f", value / base);
}

static void json_ratio(double value, double base, int have)
{
    if (!have || base <= 0) printf("null");
    else printf("%.4f", value / base);
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: " PROG " [OPTIONS] LOG\n"
            "Replays the allocation trace of a cupool call log (CUPOOL_LOG=path) natively and under\n"
            "cupool's configurations, each in its own process, and compares them.\n"
            "  -n N              runs per configuration; the table shows medians (default 1)\n"
            "  --configs LIST    comma-separated configurations (default all):\n"
            "                    native, dedicated/ordered, dedicated/deferred, dedicated/sync,\n"
            "                    dedicated/auto, default/auto, split/auto (policy:free also accepted)\n"
            "  --gap-scale F     keep the logged gaps between calls, times F (default 0: no gaps)\n"
            "  --no-sample       do not call cuMemGetInfo after each allocation (no peak used)\n"
            "  --stats           print each cupool run's CUPOOL_STATS summary to standard error\n"
            "  --library PATH    libcupool.so to preload (default $CUPOOL_LIBRARY, else the build\n"
            "                    tree's when run from it, else " CUPOOL_LIBDIR "/libcupool.so)\n"
            "  --json            machine-readable output\n"
            "  -h, --help        this help\n"
            "  -V, --version     print the version\n"
            "Every option with a value takes it as --opt VALUE or --opt=VALUE.\n"
            "Other CUPOOL_* variables of the environment (CUPOOL_MAX_SIZE, CUPOOL_LIMIT...) apply to the\n"
            "cupool configurations; CUPOOL_LOG is not passed on.\n"
            "Columns: wall ms = time from the first call to the last thread's end (medians; it\n"
            "includes the cuMemGetInfo sampling: compare wall times with --no-sample);\n"
            "alloc ns, free ns = mean time in one cuMemAlloc / cuMemFree; ns/pair = their sum;\n"
            "peak used = highest (total - free) of cuMemGetInfo after an allocation, less the level\n"
            "before the replay, summed over devices (cupool counts pool memory held unused as free,\n"
            "so this is the memory the blocks occupy); peak reserved = the most cupool's pools held\n"
            "(cupool_get_stats, summed over devices), which is cupool's real footprint;\n"
            "x native = ratio to the native run.\n"
            "Pinned host memory (cuMemAllocHost, cuMemHostAlloc with its flags, cuMemFreeHost) and managed\n"
            "memory (cuMemAllocManaged with its flags, freed by cuMemFree) are replayed too, each with a\n"
            "table of its own alloc and free times; the first table's are device memory's.\n");
}

/* What the command line asks: -n, the configurations, the library, the
 * log, the output form; child_args are the options a configuration's run
 * (--child) takes over. */
typedef struct request {
    int repeat, json;
    const char *configs, *library, *path, *child;
    char *child_args[8];
    const char *chosen[CONFIG_COUNT];
    size_t nchosen;
} request_t;

/* Parses the command line into req (gap_scale and sample_memory into their
 * globals, which the replay itself reads).  Returns -1 to go on, else the
 * exit status. */
static int parse_args(int argc, char **argv, request_t *req)
{
    static const struct option longs[] = {
        {"configs", required_argument, NULL, 'c'}, {"library", required_argument, NULL, 'L'},
        {"gap-scale", required_argument, NULL, 'g'}, {"no-sample", no_argument, NULL, 'S'},
        {"json", no_argument, NULL, 'j'},          {"child", required_argument, NULL, 'C'},
        {"stats", no_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},          {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    static char gap_buf[64];
    int nchild_args = 0;
    req->repeat = 1;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, ":n:hV", longs, NULL)) != -1;) {
        char *end;
        switch (c) {
        case 'n': {
            long n = strtol(optarg, &end, 10);
            if (*end || end == optarg || n < 1 || n > MAX_REPEAT) {
                fprintf(stderr, PROG ": -n wants a number from 1 to %d\n", MAX_REPEAT);
                return 2;
            }
            req->repeat = (int)n;
            break;
        }
        case 'c': req->configs = optarg; break;
        case 'L': req->library = optarg; break;
        case 'g':
            gap_scale = strtod(optarg, &end);
            if (*end || end == optarg || !(gap_scale >= 0) || gap_scale > 1e6) {
                fprintf(stderr, PROG ": --gap-scale wants a number >= 0\n");
                return 2;
            }
            snprintf(gap_buf, sizeof gap_buf, "%.17g", gap_scale);
            req->child_args[nchild_args++] = "--gap-scale";
            req->child_args[nchild_args++] = gap_buf;
            break;
        case 'S':
            sample_memory = 0;
            req->child_args[nchild_args++] = "--no-sample";
            break;
        case 's':
            show_stats = 1;
            req->child_args[nchild_args++] = "--stats";
            break;
        case 'j': req->json = 1; break;
        case 'C': req->child = optarg; break;
        case 'h': return usage(stdout), 0;
        case 'V': return printf(PROG " %s\n", PACKAGE_VERSION), 0;
        default: return cli_refused(PROG, c, argv, longs), usage(stderr), 2;
        }
    }
    if (optind < argc) req->path = argv[optind++];
    if (optind < argc) {
        fprintf(stderr, PROG ": one log at a time\n");
        return 2;
    }
    req->child_args[nchild_args] = NULL;
    if (!req->path) return usage(stderr), 2;
    return -1;
}

/* --configs into req->chosen, in the order given, each once ("all" or none:
 * every configuration).  Returns 0, or 2 on an unknown name. */
static int choose_configs(request_t *req)
{
    if (!req->configs || strcmp(req->configs, "all") == 0) {
        for (size_t i = 0; i < CONFIG_COUNT; i++) req->chosen[req->nchosen++] = all_configs[i];
        return 0;
    }
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", req->configs);
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        const char *c = canonical_config(tok);
        if (!c) {
            fprintf(stderr, PROG ": unknown configuration %s (see --help)\n", tok);
            return 2;
        }
        int dup = 0;
        for (size_t k = 0; k < req->nchosen; k++) dup |= req->chosen[k] == c;
        if (!dup) req->chosen[req->nchosen++] = c;
    }
    return 0;
}

/* Runs one configuration req->repeat times, each in its own process, into
 * res: the median times, the highest peaks and failure counts.  res->ok is
 * 0 when a run failed. */
static void measure_config(request_t *req, const char *config, const char *library, result_t *res)
{
    static double walls[MAX_REPEAT], allocs_ns[TRACE_MEM_KINDS][MAX_REPEAT], frees_ns[TRACE_MEM_KINDS][MAX_REPEAT];
    memset(res, 0, sizeof *res);
    for (int k = 0; k < req->repeat; k++) {
        result_t one;
        memset(&one, 0, sizeof one);
        if (run_config(config, library, req->path, req->child_args, &one) != 0) return;
        walls[k] = one.wall_ns;
        if (one.peak_used > res->peak_used) res->peak_used = one.peak_used;
        if (one.peak_reserved > res->peak_reserved) res->peak_reserved = one.peak_reserved;
        res->has_reserved = one.has_reserved;
        for (int m = 0; m < TRACE_MEM_KINDS; m++) {
            allocs_ns[m][k] = one.mem[m].alloc_ns;
            frees_ns[m][k] = one.mem[m].free_ns;
            res->mem[m].allocs = one.mem[m].allocs;
            res->mem[m].frees = one.mem[m].frees;
            if (one.mem[m].failures > res->mem[m].failures) res->mem[m].failures = one.mem[m].failures;
        }
    }
    res->ok = 1;
    res->wall_ns = median(walls, req->repeat);
    for (int m = 0; m < TRACE_MEM_KINDS; m++) {
        res->mem[m].alloc_ns = median(allocs_ns[m], req->repeat);
        res->mem[m].free_ns = median(frees_ns[m], req->repeat);
    }
}

static void json_string(const char *s)
{
    putchar('"');
    for (const char *p = s; *p; p++)
        if (*p == '"' || *p == '\\') printf("\\%c", *p);
        else if ((unsigned char)*p < 0x20) printf("\\u%04x", *p);
        else putchar(*p);
    putchar('"');
}

/* One configuration's object of --json's "configs" array. */
static void print_json_config(const char *config, const result_t *r, const result_t *native)
{
    const kind_result_t *d = &r->mem[0], *nd = native ? &native->mem[0] : NULL;
    printf("{\"config\":\"%s\",\"ok\":%s", config, r->ok ? "true" : "false");
    if (r->ok) {
        printf(",\"wall_ns\":%.0f,\"alloc_ns\":%.1f,\"free_ns\":%.1f,\"pair_ns\":%.1f,\"allocs\":%llu,"
               "\"frees\":%llu,\"failures\":%llu,\"peak_used\":",
               r->wall_ns, d->alloc_ns, d->free_ns, d->alloc_ns + d->free_ns, (unsigned long long)d->allocs,
               (unsigned long long)d->frees, (unsigned long long)d->failures);
        if (sample_memory) printf("%llu", (unsigned long long)r->peak_used);
        else printf("null");
        printf(",\"peak_reserved\":");
        if (r->has_reserved) printf("%llu", (unsigned long long)r->peak_reserved);
        else printf("null");
        printf(",\"wall_x_native\":");
        json_ratio(r->wall_ns, native ? native->wall_ns : 0, native != NULL);
        printf(",\"pair_x_native\":");
        json_ratio(d->alloc_ns + d->free_ns, nd ? nd->alloc_ns + nd->free_ns : 0, native != NULL);
        printf(",\"used_x_native\":");
        json_ratio((double)r->peak_used, native ? (double)native->peak_used : 0, native && sample_memory);
        for (int m = TRACE_MEM_HOST; m < TRACE_MEM_KINDS; m++) {
            if (!trace_allocs[m]) continue;
            const kind_result_t *k = &r->mem[m], *nk = native ? &native->mem[m] : NULL;
            printf(",\"%s\":{\"alloc_ns\":%.1f,\"free_ns\":%.1f,\"pair_ns\":%.1f,\"allocs\":%llu,\"frees\":%llu,"
                   "\"failures\":%llu,\"pair_x_native\":",
                   memory_keys[m], k->alloc_ns, k->free_ns, k->alloc_ns + k->free_ns, (unsigned long long)k->allocs,
                   (unsigned long long)k->frees, (unsigned long long)k->failures);
            json_ratio(k->alloc_ns + k->free_ns, nk ? nk->alloc_ns + nk->free_ns : 0, native != NULL);
            printf("}");
        }
    }
    printf("}");
}

/* --json: the trace's counts and one object per configuration, one line. */
static void print_json(const request_t *req, const result_t *results, const result_t *native)
{
    printf("{\"log\":");
    json_string(req->path);
    printf(",\"allocations\":%llu,\"frees\":%llu,", (unsigned long long)trace_allocs[0],
           (unsigned long long)trace_frees[0]);
    for (int m = TRACE_MEM_HOST; m < TRACE_MEM_KINDS; m++)
        if (trace_allocs[m])
            printf("\"%s\":{\"allocations\":%llu,\"frees\":%llu},", memory_keys[m], (unsigned long long)trace_allocs[m],
                   (unsigned long long)trace_frees[m]);
    printf("\"threads\":%zu,\"devices\":%d,\"repeat\":%d,\"gap_scale\":%g,\"configs\":[", nthreads, trace_devices,
           req->repeat, gap_scale);
    for (size_t c = 0; c < req->nchosen; c++) {
        printf("%s\n", c ? "," : "");
        print_json_config(req->chosen[c], &results[c], native);
    }
    printf("]}\n");
}

/* The device memory table: a line per configuration. */
static void print_device_table(const request_t *req, const result_t *results, const result_t *native)
{
    printf("%-20s %10s %9s %9s %9s %10s %10s %8s %8s %8s %5s\n", "configuration", "wall ms", "alloc ns", "free ns",
           "ns/pair", "peak used", "peak res", "wall x", "pair x", "used x", "fail");
    for (size_t c = 0; c < req->nchosen; c++) {
        const result_t *r = &results[c];
        if (!r->ok) {
            printf("%-20s %10s\n", req->chosen[c], "failed");
            continue;
        }
        char used[32], reserved[32], w[16], p[16], u[16];
        if (sample_memory) short_bytes((double)r->peak_used, used, sizeof used);
        else snprintf(used, sizeof used, "-");
        if (r->has_reserved) short_bytes((double)r->peak_reserved, reserved, sizeof reserved);
        else snprintf(reserved, sizeof reserved, "-");
        ratio(w, sizeof w, r->wall_ns, native ? native->wall_ns : 0, native != NULL);
        const kind_result_t *d = &r->mem[0], *nd = native ? &native->mem[0] : NULL;
        ratio(p, sizeof p, d->alloc_ns + d->free_ns, nd ? nd->alloc_ns + nd->free_ns : 0, native != NULL);
        ratio(u, sizeof u, (double)r->peak_used, native ? (double)native->peak_used : 0, native && sample_memory);
        printf("%-20s %10.3f %9.0f %9.0f %9.0f %10s %10s %8s %8s %8s %5llu\n", req->chosen[c], r->wall_ns / 1e6,
               d->alloc_ns, d->free_ns, d->alloc_ns + d->free_ns, used, reserved, w, p, u,
               (unsigned long long)d->failures);
    }
}

/* Pinned host or managed memory (kind m): a table of its own calls. */
static void print_kind_table(const request_t *req, const result_t *results, const result_t *native, int m)
{
    printf("%s:\n", memory_names[m]);
    printf("%-20s %9s %9s %9s %8s %5s\n", "configuration", "alloc ns", "free ns", "ns/pair", "pair x", "fail");
    for (size_t c = 0; c < req->nchosen; c++) {
        const result_t *r = &results[c];
        if (!r->ok) {
            printf("%-20s %10s\n", req->chosen[c], "failed");
            continue;
        }
        const kind_result_t *k = &r->mem[m], *nk = native ? &native->mem[m] : NULL;
        char p[16];
        ratio(p, sizeof p, k->alloc_ns + k->free_ns, nk ? nk->alloc_ns + nk->free_ns : 0, native != NULL);
        printf("%-20s %9.0f %9.0f %9.0f %8s %5llu\n", req->chosen[c], k->alloc_ns, k->free_ns, k->alloc_ns + k->free_ns,
               p, (unsigned long long)k->failures);
    }
}

/* The human-readable form: the trace's counts, the tables, their legend. */
static void print_tables(const request_t *req, const result_t *results, const result_t *native)
{
    printf(PROG ": %s: %llu allocations, %llu frees", req->path, (unsigned long long)trace_allocs[0],
           (unsigned long long)trace_frees[0]);
    if (other_kinds()) {
        printf(" (device memory)");
        for (int m = TRACE_MEM_HOST; m < TRACE_MEM_KINDS; m++)
            if (trace_allocs[m])
                printf(", %llu allocations, %llu frees (%s)", (unsigned long long)trace_allocs[m],
                       (unsigned long long)trace_frees[m], memory_names[m]);
    }
    printf(", %zu thread%s, %d device%s; gaps x%g; %s of %d run%s\n", nthreads, nthreads == 1 ? "" : "s", trace_devices,
           trace_devices == 1 ? "" : "s", gap_scale, req->repeat > 1 ? "median" : "result", req->repeat,
           req->repeat == 1 ? "" : "s");
    print_device_table(req, results, native);
    for (int m = TRACE_MEM_HOST; m < TRACE_MEM_KINDS; m++)
        if (trace_allocs[m]) print_kind_table(req, results, native, m);
    printf("wall ms: first call to last thread done; alloc/free ns: mean per call; ns/pair: their sum;\n"
           "peak used: max (total - free) of cuMemGetInfo after allocations, above the start level;\n"
           "peak res: most bytes cupool's pools reserved (cupool_get_stats); x: ratio to native.\n");
    if (other_kinds())
        printf("The first table's calls are device memory's (cuMemAlloc, cuMemFree); pinned host memory's\n"
               "(cuMemAllocHost, cuMemHostAlloc, cuMemFreeHost) and managed memory's (cuMemAllocManaged,\n"
               "cuMemFree) have a table each; peak used and peak res are device memory's.\n");
}

int main(int argc, char **argv)
{
    request_t req = {0};
    int status = parse_args(argc, argv, &req);
    if (status >= 0) return status;
    if (req.child) {
        const char *config = canonical_config(req.child);
        return config ? run_child(config, req.path) : 2;
    }
    if (choose_configs(&req) != 0) return 2;
    const char *library = library_path(req.library);
    int need_library = 0;
    for (size_t i = 0; i < req.nchosen; i++) need_library |= strcmp(req.chosen[i], "native") != 0;
    if (need_library && access(library, R_OK) != 0) {
        fprintf(stderr, PROG ": cannot read %s (set CUPOOL_LIBRARY or use --library)\n", library);
        return 1;
    }
    if (load_trace(req.path, 0) != 0) return 1;
    uint64_t any_allocs = 0;
    for (int m = 0; m < TRACE_MEM_KINDS; m++) any_allocs += trace_allocs[m];
    if (!any_allocs) {
        fprintf(stderr, PROG ": %s holds no successful allocation to replay\n", req.path);
        return 1;
    }

    result_t results[CONFIG_COUNT];
    const result_t *native = NULL;
    int failed = 0;
    for (size_t c = 0; c < req.nchosen; c++) {
        measure_config(&req, req.chosen[c], library, &results[c]);
        failed |= !results[c].ok;
        if (strcmp(req.chosen[c], "native") == 0 && results[c].ok) native = &results[c];
    }
    if (req.json) print_json(&req, results, native);
    else print_tables(&req, results, native);
    return failed;
}
