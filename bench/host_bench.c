/* SPDX-License-Identifier: Apache-2.0 */
/*
 * host_bench: what pinned host and managed allocations cost a program, run
 * plainly ("native", the driver's calls) or under cupool, which keeps freed
 * blocks for the next allocation of the same call, flags and size.  Driver
 * API only, so it builds without nvcc and runs on the simulated driver.
 *
 *   -m pairs    allocation + free pairs, timed by kind and size:
 *                 host0      cuMemHostAlloc(flags 0)         + cuMemFreeHost
 *                 host-pm    cuMemHostAlloc(PORTABLE|DEVICEMAP) + cuMemFreeHost
 *                 allochost  cuMemAllocHost                  + cuMemFreeHost
 *                 managed    cuMemAllocManaged(GLOBAL)       + cuMemFree
 *               each warmed up, sized to a target time, timed -r times,
 *               reported as the median (and min/max) per pair.
 *   -m staging  a program that pins a staging buffer per iteration:
 *               cuMemHostAlloc, the host fills it, cuMemcpyHtoDAsync into a
 *               device buffer on a non-blocking stream, cuMemsetD8Async and
 *               cuMemcpyDtoDAsync change it there, cuMemcpyDtoHAsync back
 *               into the pinned buffer, cuStreamSynchronize, the host folds
 *               the buffer into the checksum, cuMemFreeHost.
 *   -m managed  per iteration cuMemAllocManaged, the host writes it,
 *               cuMemPrefetchAsync to the device (where the device has
 *               concurrent managed access, or with -P 1), cuMemsetD32Async
 *               on a quarter of it, cuStreamSynchronize, the host reads it
 *               into the checksum, cuMemFree.
 * staging and managed run a fixed number of iterations per round (-n, or
 * one derived from the size alone), so two runs with the same options compute
 * the same checksum: a run under cupool must print the native run's.  Each
 * iteration's data is also checked word by word against what the host
 * expects (the "wrong" column counts 64-bit words that differ).
 *
 * Every row is one CSV line:
 *   label,mode,kind,cupool,size,iters,reps,us_median,us_min,us_max,alloc_us,checksum,wrong,prefetch,status
 * us_* per pair (pairs) or per iteration (staging, managed); alloc_us the
 * median time per iteration spent in the allocation and free calls.
 *
 * On the simulated driver the host's loads and stores are reported to its
 * race checker (simcuda_host_access, looked up at run time), which stops the
 * process if the host touches a block the device may still be using.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BENCH_NAME "host_bench"
#include "bench_util.h"

enum { MODE_PAIRS, MODE_STAGING, MODE_MANAGED };
static const char *const mode_names[] = {"pairs", "staging", "managed"};

/* The kinds of the pairs mode. */
#define PAIR_KINDS(X)                                                                                       \
    X(HOST0, "host0", "cuMemHostAlloc(0)")                                                                  \
    X(HOST_PM, "host-pm", "cuMemHostAlloc(PORTABLE|DEVICEMAP)")                                             \
    X(ALLOCHOST, "allochost", "cuMemAllocHost")                                                             \
    X(MANAGED, "managed", "cuMemAllocManaged(GLOBAL)")
enum {
#define KIND_ENUM(e, name, call) KIND_##e,
    PAIR_KINDS(KIND_ENUM)
#undef KIND_ENUM
    NKINDS
};
static const char *const kind_names[] = {
#define KIND_NAME(e, name, call) name,
    PAIR_KINDS(KIND_NAME)
#undef KIND_NAME
};
static const char *const kind_calls[] = {
#define KIND_CALL(e, name, call) call,
    PAIR_KINDS(KIND_CALL)
#undef KIND_CALL
};

#define MAX_LIST 32
#define MAX_REPS 64

static struct {
    int mode;
    size_t sizes[MAX_LIST];
    int nsizes;
    int kinds[NKINDS]; /* pairs: which kinds, in order */
    int nkinds;
    long iters;     /* pairs: per round, 0 = sized to `target`; staging/managed: per round, 0 = from the size */
    double target;  /* pairs: seconds per configuration (all rounds) */
    size_t round_bytes; /* staging/managed with -n 0: iterations per round = round_bytes / size, in [3, 64] */
    int reps;
    int prefetch;   /* managed: -1 when the device has concurrent managed access, else 0 or 1 */
    const char *csv;
    const char *label;
    int device;
} opt = {.mode = MODE_PAIRS, .target = 0.2, .round_bytes = 64ULL << 20, .reps = 3, .prefetch = -1};

static CUdevice dev;
static CUcontext ctx;
static CUstream stream;
static void (*host_access)(const void *p, size_t bytes, int write); /* the simulator's, else NULL */

/* ---- helpers --------------------------------------------------------------- */

static int parse_sizes(const char *arg)
{
    char *copy = strdup(arg), *save = NULL;
    opt.nsizes = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        if (opt.nsizes == MAX_LIST || parse_size(tok, &opt.sizes[opt.nsizes++]) != 0) {
            free(copy);
            return -1;
        }
    free(copy);
    return opt.nsizes ? 0 : -1;
}

static int parse_kinds(const char *arg)
{
    char *copy = strdup(arg), *save = NULL;
    opt.nkinds = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int k = 0;
        while (k < NKINDS && strcmp(tok, kind_names[k]) != 0) k++;
        if (k == NKINDS || opt.nkinds == NKINDS) {
            free(copy);
            return -1;
        }
        opt.kinds[opt.nkinds++] = k;
    }
    free(copy);
    return opt.nkinds ? 0 : -1;
}

/* Is libcupool.so loaded into this process? Its version, or 0. */
static int cupool_loaded(void)
{
    int (*version)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "cupool_version");
    return version ? version() : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(const double *v, int n, double *lo, double *hi)
{
    double sorted[MAX_REPS];
    memcpy(sorted, v, sizeof(double) * (size_t)n);
    qsort(sorted, (size_t)n, sizeof(double), cmp_double);
    if (lo) *lo = sorted[0];
    if (hi) *hi = sorted[n - 1];
    return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

static void csv_header(FILE *csv)
{
    fprintf(csv, "label,mode,kind,cupool,size,iters,reps,us_median,us_min,us_max,alloc_us,checksum,wrong,prefetch,"
                 "status\n");
}

/* ---- pairs ------------------------------------------------------------------- */

static CUresult one_pair(int kind, size_t size)
{
    void *h = NULL;
    CUdeviceptr d = 0;
    CUresult r;
    switch (kind) {
    case KIND_HOST0:
        if ((r = cuMemHostAlloc(&h, size, 0)) != CUDA_SUCCESS) return r;
        return cuMemFreeHost(h);
    case KIND_HOST_PM:
        if ((r = cuMemHostAlloc(&h, size, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP)) != CUDA_SUCCESS)
            return r;
        return cuMemFreeHost(h);
    case KIND_ALLOCHOST:
        if ((r = cuMemAllocHost(&h, size)) != CUDA_SUCCESS) return r;
        return cuMemFreeHost(h);
    default: /* KIND_MANAGED */
        if ((r = cuMemAllocManaged(&d, size, CU_MEM_ATTACH_GLOBAL)) != CUDA_SUCCESS) return r;
        return cuMemFree(d);
    }
}

/* n pairs; their wall time in seconds, or a negative number on a failure (*err set). */
static double pairs_round(int kind, size_t size, long n, CUresult *err)
{
    double t0 = now();
    for (long i = 0; i < n; i++)
        if ((*err = one_pair(kind, size)) != CUDA_SUCCESS) return -1;
    return now() - t0;
}

static void measure_pairs(FILE *csv, int kind, size_t size)
{
    const char *label = opt.label ? opt.label : "pairs";
    CUresult err = CUDA_SUCCESS;
    double us[MAX_REPS];
    long n = opt.iters;
    /* Warm-up: the first pair of a size pays what later ones do not (under
     * cupool, the driver's allocation that the free then keeps). */
    double t = pairs_round(kind, size, 1, &err);
    if (t >= 0 && !n) {
        /* Size the rounds: one pair, then doubling until a round takes a
         * twentieth of the target.  A pair that alone fills a round's share
         * (a 256 MiB pinned allocation takes a tenth of a second) makes
         * rounds of one pair. */
        long w = 1;
        t = pairs_round(kind, size, w, &err);
        while (t >= 0 && t < opt.target / 20 && w < (1L << 22)) {
            w *= 2;
            t = pairs_round(kind, size, w, &err);
        }
        double per = t > 0 ? t / (double)w : 0;
        n = per > 0 ? (long)(opt.target / opt.reps / per) : 1000;
        if (n < 1) n = 1;
        if (n > 2000000) n = 2000000;
    }
    for (int k = 0; k < opt.reps && t >= 0; k++) {
        t = pairs_round(kind, size, n, &err);
        us[k] = t / (double)n * 1e6;
    }
    if (t < 0) {
        fprintf(stderr, "host_bench: %s %zu B failed: %s\n", kind_calls[kind], size, errname(err));
        fprintf(csv, "%s,pairs,%s,%d,%zu,0,0,,,,,,,,%s\n", label, kind_names[kind], cupool_loaded(), size,
                errname(err));
        fflush(csv);
        return;
    }
    double lo, hi, med = median_of(us, opt.reps, &lo, &hi);
    fprintf(csv, "%s,pairs,%s,%d,%zu,%ld,%d,%.4f,%.4f,%.4f,,,,,ok\n", label, kind_names[kind], cupool_loaded(), size,
            n, opt.reps, med, lo, hi);
    fflush(csv);
    fprintf(stderr, "host_bench: %-36s %11zu B: %12.3f us/pair (%ld pairs x %d)\n", kind_calls[kind], size, med, n,
            opt.reps);
}

/* ---- the data of staging and managed ---------------------------------------------- */

/* Iteration `it` of a size fills word w with seed(it) ^ w * golden; the
 * device then changes the quarters of the buffer as each mode says. */
static uint64_t seed_of(size_t size, uint64_t it)
{
    uint64_t z = (uint64_t)size * 0x9E3779B97F4A7C15ULL + it + 1;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

#define GOLDEN 0x9E3779B97F4A7C15ULL
#define FOLD(h, w) (((h) ^ (w)) * 0x100000001B3ULL)

static void fill(uint64_t *p, size_t words, uint64_t seed)
{
    for (size_t w = 0; w < words; w++) p[w] = seed ^ (w * GOLDEN);
}

/* Folds p[from, to) into *h and counts the words that differ from the
 * expected: `constant` when is_constant, else the pattern of word w - shift. */
static size_t fold_check(const uint64_t *p, size_t from, size_t to, uint64_t *h, uint64_t seed, size_t shift,
                         int is_constant, uint64_t constant)
{
    size_t wrong = 0;
    uint64_t acc = *h;
    for (size_t w = from; w < to; w++) {
        uint64_t want = is_constant ? constant : seed ^ ((w - shift) * GOLDEN);
        wrong += p[w] != want;
        acc = FOLD(acc, p[w]);
    }
    *h = acc;
    return wrong;
}

/* The quarter the device changes, in bytes: a multiple of 8 (sizes are). */
static size_t quarter_of(size_t size)
{
    return size / 4 & ~(size_t)7;
}

/* ---- staging ------------------------------------------------------------------------ */

typedef struct {
    uint64_t checksum;
    uint64_t wrong;
    double alloc_s; /* in the allocation and free calls */
} tally_t;

static void staging_iteration(CUdeviceptr dbuf, size_t size, uint64_t it, tally_t *t)
{
    size_t q = quarter_of(size), words = size / 8, qw = q / 8;
    uint64_t seed = seed_of(size, it);
    unsigned char v8 = (unsigned char)(it * 7 + 1);
    uint64_t v64 = 0x0101010101010101ULL * v8;
    void *h;
    double t0 = now();
    CU(cuMemHostAlloc(&h, size, 0));
    t->alloc_s += now() - t0;
    uint64_t *p = h;
    if (host_access) host_access(p, size, 1);
    fill(p, words, seed);
    CU(cuMemcpyHtoDAsync(dbuf, p, size, stream));
    CU(cuMemsetD8Async(dbuf + q, v8, q, stream));
    CU(cuMemcpyDtoDAsync(dbuf + 3 * q, dbuf, q, stream));
    CU(cuMemcpyDtoHAsync(p, dbuf, size, stream));
    CU(cuStreamSynchronize(stream));
    if (host_access) host_access(p, size, 0);
    /* quarters: pattern | memset | pattern | copy of the first | pattern (the rest) */
    uint64_t h64 = t->checksum;
    size_t wrong = fold_check(p, 0, qw, &h64, seed, 0, 0, 0);
    wrong += fold_check(p, qw, 2 * qw, &h64, seed, 0, 1, v64);
    wrong += fold_check(p, 2 * qw, 3 * qw, &h64, seed, 0, 0, 0);
    wrong += fold_check(p, 3 * qw, 4 * qw, &h64, seed, 3 * qw, 0, 0);
    wrong += fold_check(p, 4 * qw, words, &h64, seed, 0, 0, 0);
    t->checksum = h64;
    t->wrong += wrong;
    t0 = now();
    CU(cuMemFreeHost(h));
    t->alloc_s += now() - t0;
}

/* ---- managed ------------------------------------------------------------------------- */

static void managed_iteration(size_t size, uint64_t it, tally_t *t)
{
    size_t q = quarter_of(size), words = size / 8, qw = q / 8;
    uint64_t seed = seed_of(size, it);
    unsigned int v32 = (unsigned int)(it * 2654435761u + 1);
    uint64_t v64 = (uint64_t)v32 << 32 | v32;
    CUdeviceptr m;
    double t0 = now();
    CU(cuMemAllocManaged(&m, size, CU_MEM_ATTACH_GLOBAL));
    t->alloc_s += now() - t0;
    uint64_t *p = (uint64_t *)(uintptr_t)m;
    if (host_access) host_access(p, size, 1);
    fill(p, words, seed);
    if (opt.prefetch) {
        CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, dev};
        CU(cuMemPrefetchAsync(m, size, loc, 0, stream));
    }
    CU(cuMemsetD32Async(m + q, v32, q / 4, stream));
    CU(cuStreamSynchronize(stream));
    if (host_access) host_access(p, size, 0);
    uint64_t h64 = t->checksum;
    size_t wrong = fold_check(p, 0, qw, &h64, seed, 0, 0, 0);
    wrong += fold_check(p, qw, 2 * qw, &h64, seed, 0, 1, v64);
    wrong += fold_check(p, 2 * qw, words, &h64, seed, 0, 0, 0);
    t->checksum = h64;
    t->wrong += wrong;
    t0 = now();
    CU(cuMemFree(m));
    t->alloc_s += now() - t0;
}

/* ---- staging and managed: rounds ------------------------------------------------------- */

static long iterations_for(size_t size)
{
    if (opt.iters) return opt.iters;
    long n = (long)(opt.round_bytes / size);
    return n < 3 ? 3 : n > 64 ? 64 : n;
}

static void measure_program(FILE *csv, size_t size)
{
    const char *mode = mode_names[opt.mode];
    const char *label = opt.label ? opt.label : mode;
    long n = iterations_for(size);
    CUdeviceptr dbuf = 0;
    if (opt.mode == MODE_STAGING) CU(cuMemAlloc(&dbuf, size));
    /* Warm-up: one iteration (its checksum is not reported; its data is
     * checked like the others'). */
    tally_t warm = {0, 0, 0};
    if (opt.mode == MODE_STAGING)
        staging_iteration(dbuf, size, UINT64_MAX, &warm);
    else
        managed_iteration(size, UINT64_MAX, &warm);
    double us[MAX_REPS], alloc_us[MAX_REPS];
    tally_t all = {0xCBF29CE484222325ULL, warm.wrong, 0};
    for (int k = 0; k < opt.reps; k++) {
        double before = all.alloc_s, t0 = now();
        for (long i = 0; i < n; i++) {
            uint64_t it = (uint64_t)k * (uint64_t)n + (uint64_t)i;
            if (opt.mode == MODE_STAGING)
                staging_iteration(dbuf, size, it, &all);
            else
                managed_iteration(size, it, &all);
        }
        us[k] = (now() - t0) / (double)n * 1e6;
        alloc_us[k] = (all.alloc_s - before) / (double)n * 1e6;
    }
    if (dbuf) CU(cuMemFree(dbuf));
    double lo, hi, med = median_of(us, opt.reps, &lo, &hi);
    double amed = median_of(alloc_us, opt.reps, NULL, NULL);
    const char *kind = opt.mode == MODE_STAGING ? "host0" : "managed";
    int prefetch = opt.mode == MODE_MANAGED ? opt.prefetch : 0;
    fprintf(csv, "%s,%s,%s,%d,%zu,%ld,%d,%.4f,%.4f,%.4f,%.4f,%016" PRIx64 ",%" PRIu64 ",%d,%s\n", label, mode, kind,
            cupool_loaded(), size, n, opt.reps, med, lo, hi, amed, all.checksum, all.wrong, prefetch,
            all.wrong ? "wrong" : "ok");
    fflush(csv);
    fprintf(stderr,
            "host_bench: %-8s %11zu B: %12.3f us/iteration (allocation + free %.3f us), checksum %016" PRIx64
            ", %" PRIu64 " wrong words (%ld iterations x %d)\n",
            mode, size, med, amed, all.checksum, all.wrong, n, opt.reps);
}

/* ---- main ----------------------------------------------------------------------------- */

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: host_bench [-m MODE] [-s SIZES] [-k KINDS] [-n ITERS] [-T SECONDS] [-b BYTES] [-r REPS]\n"
            "                  [-P 0|1] [-o CSV] [-l LABEL] [-d DEVICE]\n"
            "  -m MODE     pairs, staging or managed (default pairs)\n"
            "  -s SIZES    comma list with K/M/G suffixes (default 4K,1M,16M,256M); staging and\n"
            "              managed want multiples of 8 of at least 64 bytes\n"
            "  -k KINDS    pairs: comma list of host0, host-pm, allochost, managed (default all)\n"
            "  -n ITERS    pairs per timed round (default 0: sized to -T), or iterations per round\n"
            "              of staging and managed (default 0: BYTES / size, 3 to 64)\n"
            "  -T SECONDS  pairs: target time per kind and size (default 0.2)\n"
            "  -b BYTES    staging, managed with -n 0: bytes of iterations per round (default 64M)\n"
            "  -r REPS     timed rounds; the median is reported (default 3, at most %d)\n"
            "  -P 0|1      managed: prefetch to the device (default: where the device has\n"
            "              concurrent managed access)\n"
            "  -o CSV      append rows to CSV (header written when the file is empty; default stdout)\n"
            "  -l LABEL    label of the rows (default: the mode)\n"
            "  -d DEVICE   device ordinal (default 0)\n",
            MAX_REPS);
}

int main(int argc, char **argv)
{
    parse_sizes("4K,1M,16M,256M");
    for (int k = 0; k < NKINDS; k++) opt.kinds[opt.nkinds++] = k;
    int c;
    while ((c = getopt(argc, argv, "m:s:k:n:T:b:r:P:o:l:d:h")) != -1) {
        char *end = NULL;
        switch (c) {
        case 'm':
            opt.mode = -1;
            for (int i = 0; i < (int)(sizeof mode_names / sizeof *mode_names); i++)
                if (strcmp(optarg, mode_names[i]) == 0) opt.mode = i;
            if (opt.mode < 0) goto bad;
            break;
        case 's': if (parse_sizes(optarg) != 0) goto bad; break;
        case 'k': if (parse_kinds(optarg) != 0) goto bad; break;
        case 'n': opt.iters = strtol(optarg, &end, 10); if (*end || opt.iters < 0) goto bad; break;
        case 'T': opt.target = strtod(optarg, &end); if (*end || opt.target <= 0) goto bad; break;
        case 'b': if (parse_size(optarg, &opt.round_bytes) != 0) goto bad; break;
        case 'r': opt.reps = (int)strtol(optarg, &end, 10); if (*end || opt.reps < 1 || opt.reps > MAX_REPS) goto bad; break;
        case 'P':
            if (strcmp(optarg, "0") && strcmp(optarg, "1")) goto bad;
            opt.prefetch = optarg[0] - '0';
            break;
        case 'o': opt.csv = optarg; break;
        case 'l': opt.label = optarg; break;
        case 'd': opt.device = (int)strtol(optarg, &end, 10); if (*end || opt.device < 0) goto bad; break;
        case 'h': usage(stdout); return 0;
        default: goto bad;
        }
    }
    if (optind != argc) goto bad;
    if (opt.mode != MODE_PAIRS)
        for (int s = 0; s < opt.nsizes; s++)
            if (opt.sizes[s] % 8 || opt.sizes[s] < 64) {
                fprintf(stderr, "host_bench: %s wants sizes that are multiples of 8 of at least 64 bytes (%zu)\n",
                        mode_names[opt.mode], opt.sizes[s]);
                return 2;
            }

    CU(cuInit(0));
    CU(cuDeviceGet(&dev, opt.device));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    if (opt.mode == MODE_MANAGED && opt.prefetch < 0) {
        int concurrent = 0;
        CU(cuDeviceGetAttribute(&concurrent, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, dev));
        opt.prefetch = concurrent != 0;
    }
    *(void **)&host_access = dlsym(RTLD_DEFAULT, "simcuda_host_access");
    char name[128] = "?";
    cuDeviceGetName(name, sizeof name, dev);
    fprintf(stderr, "host_bench: mode %s on %s, cupool %s%s\n", mode_names[opt.mode], name,
            cupool_loaded() ? "loaded" : "not loaded",
            opt.mode == MODE_MANAGED ? (opt.prefetch ? ", prefetching to the device" : ", no prefetch") : "");

    FILE *csv = stdout;
    if (opt.csv) {
        csv = fopen(opt.csv, "a");
        if (!csv) {
            fprintf(stderr, "host_bench: cannot open %s: %s\n", opt.csv, strerror(errno));
            return 1;
        }
    }
    if (csv == stdout || (fseek(csv, 0, SEEK_END) == 0 && ftell(csv) == 0)) csv_header(csv);

    if (opt.mode == MODE_PAIRS) {
        for (int k = 0; k < opt.nkinds; k++)
            for (int s = 0; s < opt.nsizes; s++) measure_pairs(csv, opt.kinds[k], opt.sizes[s]);
    } else {
        for (int s = 0; s < opt.nsizes; s++) measure_program(csv, opt.sizes[s]);
    }

    CU(cuStreamDestroy(stream));
    cuDevicePrimaryCtxRelease(dev);
    if (csv != stdout) fclose(csv);
    return 0;
bad:
    usage(stderr);
    return 2;
}
