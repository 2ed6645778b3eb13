/* SPDX-License-Identifier: Apache-2.0 */
/*
 * alloc_bench: the cost of one device allocation + free pair, by size and
 * thread count.  Mode `api` issues cuMemAlloc/cuMemFree: the real driver when
 * run plainly ("native"), cupool when run under it.  The `bare-*` modes issue
 * the pool calls each cupool free mode makes for a block it takes from the
 * pool and gives back to it, without cupool:
 *   bare-ordered   cuMemAllocFromPoolAsync + cuMemFreeAsync on CU_STREAM_LEGACY
 *                  (what a plain redirect makes; cupool's `ordered` serves an
 *                  allocation of a size freed before from its store instead,
 *                  after one cuEventRecord on the legacy stream)
 *   bare-sync      alloc on a private non-blocking stream, then cuStreamQuery
 *                  of it (cuStreamSynchronize only if not yet complete);
 *                  free = cuCtxSynchronize + cuMemFreeAsync on CU_STREAM_LEGACY
 *   bare-deferred  free = cuEventRecord on the legacy stream, the block
 *                  queued until cuEventQuery says the event completed
 *                  (cupool's fence with no non-blocking stream in the
 *                  context), then kept ready; alloc = a ready block of the
 *                  size if there is one (no driver call: cupool's ready
 *                  store), else as sync
 * Each thread runs its own loop on the primary context; the time reported is
 * wall time / pairs per thread (so with T threads it is what one thread sees).
 * Each configuration is warmed up, sized to a target time, timed -r times and
 * reported as the median (and min/max) per pair, one CSV row each.
 *
 * -p BARE-MODE (with -m api, under cupool) pairs the two in one process: the
 * timed rounds alternate between cuMemAlloc/cuMemFree and the bare calls,
 * and a second row (label LABEL:BARE-MODE) holds the bare figures.  Where a
 * process's code and data land moves a pair by tenths of a microsecond from
 * one process to the next; alternating rounds in one process gives both the
 * same layout, clocks and GPU state.  The bare calls always go straight to
 * libcuda.so.1 (looked up in its handle with the C library's own dlsym, not
 * the one cupool puts in front of it), so they are the same calls with or
 * without cupool in the process; the bare pool and stream are made there
 * too, out of cupool's sight.
 */
#ifdef HAVE_CONFIG_H
#include "config.h" /* _GNU_SOURCE: dlinfo, RTLD_DEFAULT */
#endif
#include <cuda.h>
#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BENCH_NAME "alloc_bench"
#include "bench_util.h"

enum { MODE_API, MODE_ORDERED, MODE_SYNC, MODE_DEFERRED };
static const char *const mode_names[] = {"api", "bare-ordered", "bare-sync", "bare-deferred"};

#define MAX_LIST 32
#define MAX_THREADS 256

static struct {
    int mode;
    size_t sizes[MAX_LIST];
    int nsizes;
    int threads[MAX_LIST];
    int nthreads;
    long iters;          /* per thread per repetition; 0 = sized to `target` */
    double target;       /* seconds per configuration (all repetitions) */
    int reps;
    uint64_t cap;        /* skip a configuration needing more live bytes */
    const char *csv;
    const char *label;
    int device;
    int paired;          /* MODE_* timed in turn with `mode` in one process, -1 none */
} opt = {.mode = MODE_API, .target = 0.25, .reps = 3, .cap = 32ULL << 30, .device = 0, .paired = -1};

static CUcontext ctx;
static CUmemoryPool pool;
static CUstream private_stream;

/* The driver's own entry points for the bare modes, from libcuda.so.1's
 * handle: never cupool's, even when cupool is preloaded. */
#define DRIVER_CALLS(X)                                                                                     \
    X(cuMemAllocFromPoolAsync) X(cuMemFreeAsync) X(cuStreamQuery) X(cuStreamSynchronize) X(cuCtxSynchronize) \
    X(cuEventCreate) X(cuEventRecord) X(cuEventQuery) X(cuEventSynchronize) X(cuStreamWaitEvent)             \
    X(cuStreamCreate) X(cuStreamDestroy) X(cuMemPoolCreate) X(cuMemPoolSetAttribute) X(cuMemPoolDestroy)
static struct {
#define DRIVER_FIELD(name) __typeof__(name) *name;
    DRIVER_CALLS(DRIVER_FIELD)
#undef DRIVER_FIELD
} drv;

/* ---- helpers --------------------------------------------------------------- */


static int parse_list(const char *arg, int sizes, void *out, int *n)
{
    char *copy = strdup(arg), *save = NULL;
    *n = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_LIST) goto bad;
        if (sizes) {
            if (parse_size(tok, &((size_t *)out)[*n]) != 0) goto bad;
        } else {
            char *end;
            long v = strtol(tok, &end, 10);
            if (*end || v < 1 || v > MAX_THREADS) goto bad;
            ((int *)out)[*n] = (int)v;
        }
        (*n)++;
    }
    free(copy);
    return *n ? 0 : -1;
bad:
    free(copy);
    return -1;
}

/* Is libcupool.so loaded into this process? Its version, or 0. */
static int cupool_loaded(void)
{
    int (*version)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "cupool_version");
    return version ? version() : 0;
}

/* The file the loader found for libcuda.so.1 (the real or the simulated driver). */
static const char *driver_path(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    struct link_map *map = NULL;
    if (!h || dlinfo(h, RTLD_DI_LINKMAP, &map) != 0 || !map) return "?";
    return map->l_name;
}

/* ---- the deferred queue of bare-deferred (mirrors cupool's) ----------------- */

typedef struct deferred {
    CUdeviceptr ptr;
    size_t size;
    CUevent ev;
    struct deferred *next;
} deferred_t;

static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static deferred_t *head, *tail, *spare; /* spare: nodes with their events, for reuse */
static deferred_t *ready;               /* completed: kept for the next allocation of their size */

/* Called with queue_lock held: moves every block whose event completed to
 * the ready list. */
static CUresult reclaim_locked(int wait)
{
    while (head) {
        CUresult r = wait ? drv.cuEventSynchronize(head->ev) : drv.cuEventQuery(head->ev);
        if (r == CUDA_ERROR_NOT_READY) return CUDA_SUCCESS;
        if (r != CUDA_SUCCESS) return r;
        deferred_t *d = head;
        head = d->next;
        if (!head) tail = NULL;
        r = drv.cuStreamWaitEvent(private_stream, d->ev, 0);
        d->next = ready;
        ready = d;
        if (r != CUDA_SUCCESS) return r;
    }
    return CUDA_SUCCESS;
}

/* Called with queue_lock held: a ready block of this size (0: none); the
 * ready blocks of other sizes (an earlier round's) go back to the pool. */
static CUdeviceptr take_ready(size_t size)
{
    while (ready && ready->size != size) {
        deferred_t *d = ready;
        ready = d->next;
        CUresult r = drv.cuMemFreeAsync(d->ptr, private_stream);
        d->next = spare;
        spare = d;
        if (r != CUDA_SUCCESS) return 0;
    }
    if (!ready) return 0;
    deferred_t *d = ready;
    ready = d->next;
    d->next = spare;
    spare = d;
    return d->ptr;
}

static CUresult deferred_free(CUdeviceptr p, size_t size)
{
    pthread_mutex_lock(&queue_lock);
    CUresult r = reclaim_locked(0);
    deferred_t *d = spare;
    if (r == CUDA_SUCCESS && d) spare = d->next;
    else if (r == CUDA_SUCCESS) {
        d = malloc(sizeof *d);
        if (!d) r = CUDA_ERROR_OUT_OF_MEMORY;
        else if ((r = drv.cuEventCreate(&d->ev, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) free(d);
    }
    if (r == CUDA_SUCCESS) {
        d->ptr = p;
        d->size = size;
        d->next = NULL;
        r = drv.cuEventRecord(d->ev, CU_STREAM_LEGACY);
        if (tail) tail->next = d;
        else head = d;
        tail = d;
    }
    pthread_mutex_unlock(&queue_lock);
    return r;
}

/* ---- one pair in each mode --------------------------------------------------- */

/* The private stream complete, as cupool makes sure of it (src/engine/alloc.c). */
static CUresult private_stream_done(void)
{
    CUresult r = drv.cuStreamQuery(private_stream);
    return r == CUDA_ERROR_NOT_READY ? drv.cuStreamSynchronize(private_stream) : r;
}

static CUresult pair(int mode, size_t size)
{
    CUdeviceptr p = 0;
    CUresult r;
    switch (mode) {
    case MODE_API:
        if ((r = cuMemAlloc(&p, size)) != CUDA_SUCCESS) return r;
        return cuMemFree(p);
    case MODE_ORDERED:
        if ((r = drv.cuMemAllocFromPoolAsync(&p, size, pool, CU_STREAM_LEGACY)) != CUDA_SUCCESS) return r;
        return drv.cuMemFreeAsync(p, CU_STREAM_LEGACY);
    case MODE_SYNC:
        if ((r = drv.cuMemAllocFromPoolAsync(&p, size, pool, private_stream)) != CUDA_SUCCESS) return r;
        if ((r = private_stream_done()) != CUDA_SUCCESS) return r;
        if ((r = drv.cuCtxSynchronize()) != CUDA_SUCCESS) return r;
        return drv.cuMemFreeAsync(p, CU_STREAM_LEGACY);
    default: /* MODE_DEFERRED */
        if (head || ready) { /* unlocked peek, as cupool does */
            pthread_mutex_lock(&queue_lock);
            r = reclaim_locked(0);
            if (r == CUDA_SUCCESS) p = take_ready(size);
            pthread_mutex_unlock(&queue_lock);
            if (r != CUDA_SUCCESS) return r;
        }
        if (!p) {
            if ((r = drv.cuMemAllocFromPoolAsync(&p, size, pool, private_stream)) != CUDA_SUCCESS) return r;
            if ((r = private_stream_done()) != CUDA_SUCCESS) return r;
        }
        return deferred_free(p, size);
    }
}

/* ---- threads ------------------------------------------------------------------ */

static struct {
    pthread_barrier_t start, end;
    size_t size;
    int mode;       /* of this round: MODE_* */
    long n;         /* pairs per thread in this round */
    int stop;
    CUresult error; /* first failure of the round */
} run;

static void *worker(void *arg)
{
    (void)arg;
    CUresult r = cuCtxSetCurrent(ctx);
    if (r != CUDA_SUCCESS) {
        CUresult expected = CUDA_SUCCESS;
        __atomic_compare_exchange_n(&run.error, &expected, r, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
    for (;;) {
        pthread_barrier_wait(&run.start);
        if (run.stop) break;
        for (long i = 0; i < run.n && __atomic_load_n(&run.error, __ATOMIC_RELAXED) == CUDA_SUCCESS; i++) {
            r = pair(run.mode, run.size);
            if (r != CUDA_SUCCESS) {
                CUresult expected = CUDA_SUCCESS;
                __atomic_compare_exchange_n(&run.error, &expected, r, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
            }
        }
        pthread_barrier_wait(&run.end);
    }
    return NULL;
}

/* One round of n pairs per thread; returns its wall time (threads parked at
 * the start barrier between rounds, so thread creation is not timed). */
static double round_of(int mode, long n)
{
    run.mode = mode;
    run.n = n;
    double t0 = now();
    pthread_barrier_wait(&run.start);
    pthread_barrier_wait(&run.end);
    return now() - t0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void drain(void)
{
    if (opt.mode == MODE_DEFERRED || opt.paired == MODE_DEFERRED) {
        pthread_mutex_lock(&queue_lock);
        CU(reclaim_locked(1));
        take_ready(0); /* no block has size 0: every ready one goes back */
        pthread_mutex_unlock(&queue_lock);
    }
    CU(cuCtxSynchronize());
}

/* One CSV row (and a line on stderr): the median of the rounds, their
 * lowest and highest, from one sorted copy. */
static void report(FILE *csv, const char *label, int mode, size_t size, int threads, long n, const double *us, int reps)
{
    double sorted[64];
    memcpy(sorted, us, sizeof(double) * (size_t)reps);
    qsort(sorted, (size_t)reps, sizeof(double), cmp_double);
    double median = reps % 2 ? sorted[reps / 2] : (sorted[reps / 2 - 1] + sorted[reps / 2]) / 2;
    fprintf(csv, "%s,%s,%d,%zu,%d,%ld,%d,%.4f,%.4f,%.4f,ok\n", label, mode_names[mode], cupool_loaded(), size,
            threads, n, reps, median, sorted[0], sorted[reps - 1]);
    fflush(csv);
    fprintf(stderr, "alloc_bench: %-16s %11zu B x %2d threads: %10.3f us/pair (%ld pairs x %d)\n", label, size,
            threads, median, n, reps);
}

static void measure(FILE *csv, size_t size, int threads)
{
    if (opt.cap && (uint64_t)size * threads > opt.cap) {
        fprintf(stderr, "alloc_bench: skipping %zu B x %d threads (over the %" PRIu64 "-byte cap)\n", size, threads,
                opt.cap);
        return;
    }
    pthread_t tid[MAX_THREADS];
    memset(&run, 0, sizeof run);
    run.size = size;
    pthread_barrier_init(&run.start, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&run.end, NULL, (unsigned)threads + 1);
    for (int i = 0; i < threads; i++)
        if (pthread_create(&tid[i], NULL, worker, NULL) != 0) {
            fprintf(stderr, "alloc_bench: cannot create thread %d\n", i);
            exit(1);
        }

    /* Warm-up: a first round pays one-time costs (the pool's creation, its
     * first reservation, the context's first use of the size) that would
     * otherwise size the timed rounds to a handful of pairs.  Then size the
     * timed rounds: double n until a round takes a twentieth of the target. */
    int paired = opt.paired >= 0;
    long n = opt.iters;
    double per = 0;
    round_of(opt.mode, 16);
    if (paired) round_of(opt.paired, 16);
    if (!n) {
        long w = 1;
        double t = 0;
        for (int k = 0; k < 30 && run.error == CUDA_SUCCESS; k++) {
            t = round_of(opt.mode, w);
            if (t >= opt.target / 20 || w >= (1L << 22)) break;
            w *= 2;
        }
        /* Once more: one slow round (a thread late to start, the pool
         * growing for 16 threads of 1 GiB) sized the timed rounds of
         * 1 GiB x 16 threads to 3 pairs, which measured that and not the
         * pair. */
        double again = run.error == CUDA_SUCCESS ? round_of(opt.mode, w) : t;
        if (again < t) t = again;
        per = t / (double)w;
        /* Paired: the target covers both kinds of rounds. */
        n = per > 0 ? (long)(opt.target / opt.reps / (paired ? 2 : 1) / per) : 1000;
        if (n < 32) n = 32;
        if (n > 2000000) n = 2000000;
    } else {
        round_of(opt.mode, n < 10 ? n : 10);
    }
    drain();

    /* Paired rounds alternate which kind goes first, so neither always
     * follows the other's drain. */
    double us[64], bare_us[64];
    int reps = opt.reps > 64 ? 64 : opt.reps;
    for (int k = 0; k < reps && run.error == CUDA_SUCCESS; k++) {
        if (paired && k % 2) {
            bare_us[k] = round_of(opt.paired, n) / (double)n * 1e6;
            drain();
        }
        us[k] = round_of(opt.mode, n) / (double)n * 1e6;
        drain();
        if (paired && !(k % 2)) {
            bare_us[k] = round_of(opt.paired, n) / (double)n * 1e6;
            drain();
        }
    }
    run.stop = 1;
    pthread_barrier_wait(&run.start);
    for (int i = 0; i < threads; i++) pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&run.start);
    pthread_barrier_destroy(&run.end);

    const char *label = opt.label ? opt.label : mode_names[opt.mode];
    char bare_label[256];
    snprintf(bare_label, sizeof bare_label, "%s:%s", label, paired ? mode_names[opt.paired] : "");
    if (run.error != CUDA_SUCCESS) {
        fprintf(stderr, "alloc_bench: %s %zu B x %d threads failed: %s\n", label, size, threads, errname(run.error));
        fprintf(csv, "%s,%s,%d,%zu,%d,0,0,,,,%s\n", label, mode_names[opt.mode], cupool_loaded(), size, threads,
                errname(run.error));
        fflush(csv);
        return;
    }
    report(csv, label, opt.mode, size, threads, n, us, reps);
    if (paired) report(csv, bare_label, opt.paired, size, threads, n, bare_us, reps);
}

/* ---- main ----------------------------------------------------------------------- */

/* name as libcuda.so.1 itself defines it.  cupool overrides dlsym (that is
 * how it reaches programs that look the driver up), so the C library's own
 * dlsym is taken with dlvsym, which cupool leaves alone. */
static void *driver_symbol(void *driver, const char *name)
{
    typedef void *dlsym_fn_t(void *, const char *);
    static dlsym_fn_t *libc_dlsym;
    if (!libc_dlsym) {
        void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
        void *libdl = dlopen("libdl.so.2", RTLD_LAZY | RTLD_NOLOAD); /* dlsym's home before glibc 2.34 */
        if (libc) libc_dlsym = (dlsym_fn_t *)dlvsym(libc, "dlsym", "GLIBC_2.34");
        if (!libc_dlsym && libdl) libc_dlsym = (dlsym_fn_t *)dlvsym(libdl, "dlsym", "GLIBC_2.2.5");
        if (!libc_dlsym) return NULL;
    }
    return libc_dlsym(driver, name);
}

static int mode_named(const char *name)
{
    for (int i = 0; i < (int)(sizeof mode_names / sizeof *mode_names); i++)
        if (strcmp(name, mode_names[i]) == 0) return i;
    return -1;
}

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: alloc_bench [-m MODE] [-p BARE-MODE] [-s SIZES] [-t THREADS] [-n ITERS] [-T SECONDS]\n"
            "                   [-r REPS] [-c CAP] [-o CSV] [-l LABEL] [-d DEVICE]\n"
            "  -m MODE     api (cuMemAlloc/cuMemFree; cupool when preloaded), bare-ordered,\n"
            "              bare-sync, bare-deferred (default api)\n"
            "  -p BARE     with -m api: alternate its timed rounds with those of a bare mode in\n"
            "              this process; the bare rows are labelled LABEL:BARE\n"
            "  -s SIZES    comma list with K/M/G suffixes (default 256,4K,64K,1M,16M,256M,1G)\n"
            "  -t THREADS  comma list (default 1,4,16)\n"
            "  -n ITERS    pairs per thread per timed round (default 0: sized to -T)\n"
            "  -T SECONDS  target time per configuration (default 0.25)\n"
            "  -r REPS     timed rounds; the median is reported (default 3)\n"
            "  -c CAP      skip configurations needing more than CAP live bytes (default 32G, 0 = none)\n"
            "  -o CSV      append rows to CSV (header written when the file is empty; default stdout)\n"
            "  -l LABEL    label of the rows (default: the mode)\n"
            "  -d DEVICE   device ordinal (default 0)\n");
}

int main(int argc, char **argv)
{
    parse_list("256,4K,64K,1M,16M,256M,1G", 1, opt.sizes, &opt.nsizes);
    parse_list("1,4,16", 0, opt.threads, &opt.nthreads);
    int c;
    while ((c = getopt(argc, argv, "m:p:s:t:n:T:r:c:o:l:d:h")) != -1) {
        char *end = NULL;
        switch (c) {
        case 'm':
            if ((opt.mode = mode_named(optarg)) < 0) goto bad;
            break;
        case 'p':
            if ((opt.paired = mode_named(optarg)) <= MODE_API) goto bad;
            break;
        case 's': if (parse_list(optarg, 1, opt.sizes, &opt.nsizes) != 0) goto bad; break;
        case 't': if (parse_list(optarg, 0, opt.threads, &opt.nthreads) != 0) goto bad; break;
        case 'n': opt.iters = strtol(optarg, &end, 10); if (*end || opt.iters < 0) goto bad; break;
        case 'T': opt.target = strtod(optarg, &end); if (*end || opt.target <= 0) goto bad; break;
        case 'r': opt.reps = (int)strtol(optarg, &end, 10); if (*end || opt.reps < 1 || opt.reps > 64) goto bad; break;
        case 'c': {
            size_t cap = 0;
            if (strcmp(optarg, "0") != 0 && parse_size(optarg, &cap) != 0) goto bad;
            opt.cap = cap;
            break;
        }
        case 'o': opt.csv = optarg; break;
        case 'l': opt.label = optarg; break;
        case 'd': opt.device = (int)strtol(optarg, &end, 10); if (*end || opt.device < 0) goto bad; break;
        case 'h': usage(stdout); return 0;
        default: goto bad;
        }
    }
    if (optind != argc || (opt.paired >= 0 && opt.mode != MODE_API)) goto bad;

    if (opt.mode != MODE_API && cupool_loaded())
        fprintf(stderr, "alloc_bench: warning: %s measures the pool calls without cupool, but cupool is loaded\n",
                mode_names[opt.mode]);

    CUdevice dev;
    CU(cuInit(0));
    fprintf(stderr, "alloc_bench: mode %s, driver %s, cupool %s\n", mode_names[opt.mode], driver_path(),
            cupool_loaded() ? "loaded" : "not loaded");
    CU(cuDeviceGet(&dev, opt.device));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
#define STRINGIFY(x) #x
#define DRIVER_SYMBOL(name) STRINGIFY(name) /* expanded first: cuStreamDestroy is cuStreamDestroy_v2 */
#define DRIVER_LOAD(name)                                                                                   \
    if (!driver || !(*(void **)&drv.name = driver_symbol(driver, DRIVER_SYMBOL(name)))) {                   \
        fprintf(stderr, "alloc_bench: cannot find libcuda.so.1's own %s\n", DRIVER_SYMBOL(name));            \
        return 1;                                                                                           \
    }
    DRIVER_CALLS(DRIVER_LOAD)
    int bare = opt.paired >= 0 ? opt.paired : opt.mode;
    if (bare != MODE_API) {
        /* The pool cupool's `dedicated` policy makes: pinned device memory,
         * no release threshold. */
        CUmemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = dev;
        CU(drv.cuMemPoolCreate(&pool, &props));
        cuuint64_t threshold = UINT64_MAX;
        CU(drv.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
        if (bare != MODE_ORDERED) CU(drv.cuStreamCreate(&private_stream, CU_STREAM_NON_BLOCKING));
    }

    FILE *csv = stdout;
    if (opt.csv) {
        csv = fopen(opt.csv, "a");
        if (!csv) {
            fprintf(stderr, "alloc_bench: cannot open %s: %s\n", opt.csv, strerror(errno));
            return 1;
        }
    }
    if (csv == stdout || (fseek(csv, 0, SEEK_END) == 0 && ftell(csv) == 0))
        fprintf(csv, "label,mode,cupool,size,threads,iters,reps,us_median,us_min,us_max,status\n");

    for (int s = 0; s < opt.nsizes; s++)
        for (int t = 0; t < opt.nthreads; t++) measure(csv, opt.sizes[s], opt.threads[t]);

    drain();
    if (private_stream) drv.cuStreamDestroy(private_stream);
    if (pool) drv.cuMemPoolDestroy(pool);
    cuDevicePrimaryCtxRelease(dev);
    if (csv != stdout) fclose(csv);
    return 0;
bad:
    usage(stderr);
    return 2;
}
