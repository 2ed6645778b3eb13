/* SPDX-License-Identifier: Apache-2.0 */
/*
 * memset_bench: what a graph memset node costs natively against the kernel
 * node cupool puts in its place (src/shims/graph.c), side by side in one run, by
 * size (4 KiB to 1 GiB) and element size.  The benchmark does not go through
 * cupool: it loads cupool's fill kernels from the very PTX the library carries
 * (src/shims/fill_ptx.h) and gives the kernel nodes the launch shape cupool gives
 * them (src/shims/graph.h), so both columns run on the same plain cuMemAlloc
 * memory and differ only in the node.  (Run under cupool with
 * CUPOOL_MEMSET=kernel, every memset node would be rewritten and there would
 * be no native column left to compare with.)
 *
 * Per size and node kind: the GPU time of one graph launch (cuEvent pair
 * around it, the stream otherwise idle; median over many launches,
 * alternating native and kernel so clocks and temperature treat both alike),
 * the bandwidth that makes, the host cost of cuGraphLaunch (a burst of
 * launches, averaged) and launch-to-completion latency (launch +
 * cuStreamSynchronize, median).  A table on stdout; with -o FILE one CSV row
 * per size and element size.  Each kernel fill is checked afterwards.
 *
 *   memset_bench [-o FILE] [-e 1,4] [-m MAX_BYTES] [-t SECONDS] [-d DEVICE] [-b BLOCKS_PER_SM]
 *
 * -b tries another grid cap than cupool's (CUPOOL_FILL_BLOCKS_PER_SM in
 * src/shims/graph.h), for tuning on a new GPU.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "../src/shims/fill_ptx.h"
#include "../src/shims/graph.h"

#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SAMPLES 4000
#define MIN_SAMPLES 15

static struct {
    const char *csv;
    unsigned elems[3];
    int nelems;
    size_t max_size;
    double target; /* seconds of timed launches per size, element size and node kind */
    int device;
    int blocks_per_sm; /* the kernel's grid cap; cupool uses CUPOOL_FILL_BLOCKS_PER_SM */
} opt = {.elems = {1, 4}, .nelems = 2, .max_size = (size_t)1 << 30, .target = 0.3, .device = 0,
         .blocks_per_sm = CUPOOL_FILL_BLOCKS_PER_SM};

static CUstream stream;
static CUfunction fill[3];
static unsigned max_blocks;

#define CU(call)                                                                                            \
    do {                                                                                                    \
        CUresult r_ = (call);                                                                               \
        if (r_ != CUDA_SUCCESS) {                                                                           \
            const char *name_ = NULL;                                                                       \
            cuGetErrorName(r_, &name_);                                                                     \
            fprintf(stderr, "memset_bench: %s failed: %s (line %d)\n", #call, name_ ? name_ : "?", __LINE__); \
            exit(1);                                                                                        \
        }                                                                                                   \
    } while (0)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- the two graphs ----------------------------------------------------------- */

typedef struct bench_graph {
    CUgraph graph;
    CUgraphExec exec;
    CUevent start, stop;
    double *gpu_us;
    int n;
} bench_graph_t;

static void finish_graph(bench_graph_t *b)
{
    CU(cuGraphInstantiate(&b->exec, b->graph, 0));
    CU(cuGraphUpload(b->exec, stream));
    CU(cuEventCreate(&b->start, CU_EVENT_DEFAULT));
    CU(cuEventCreate(&b->stop, CU_EVENT_DEFAULT));
    b->gpu_us = malloc(MAX_SAMPLES * sizeof *b->gpu_us);
    if (!b->gpu_us) exit(1);
    b->n = 0;
}

static void native_graph(bench_graph_t *b, const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
    CUgraphNode n;
    CU(cuGraphCreate(&b->graph, 0));
    CU(cuGraphAddMemsetNode(&n, b->graph, NULL, 0, p, ctx));
    finish_graph(b);
}

/* Exactly the node src/shims/graph.c makes for these parameters. */
static cupool_fill_shape_t kernel_graph(bench_graph_t *b, const CUDA_MEMSET_NODE_PARAMS *p)
{
    cupool_fill_shape_t shape = cupool_fill_geometry(p->width, p->height, p->elementSize, max_blocks);
    unsigned long long dst = p->dst, pitch = p->height > 1 ? p->pitch : p->width * p->elementSize;
    unsigned long long width = p->width, height = p->height;
    unsigned value = p->value;
    void *args[] = {&dst, &pitch, &width, &height, &value};
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&kp, 0, sizeof kp);
    kp.func = fill[p->elementSize == 1 ? 0 : p->elementSize == 2 ? 1 : 2];
    kp.gridDimX = shape.grid[0];
    kp.gridDimY = shape.grid[1];
    kp.gridDimZ = 1;
    kp.blockDimX = shape.block[0];
    kp.blockDimY = shape.block[1];
    kp.blockDimZ = 1;
    kp.kernelParams = args;
    CUgraphNode n;
    CU(cuGraphCreate(&b->graph, 0));
    CU(cuGraphAddKernelNode(&n, b->graph, NULL, 0, &kp));
    finish_graph(b);
    return shape;
}

static void destroy_graph(bench_graph_t *b)
{
    CU(cuGraphExecDestroy(b->exec));
    CU(cuGraphDestroy(b->graph));
    CU(cuEventDestroy(b->start));
    CU(cuEventDestroy(b->stop));
    free(b->gpu_us);
}

/* One timed launch: GPU time between events around it. */
static void timed_launch(bench_graph_t *b)
{
    float ms;
    CU(cuEventRecord(b->start, stream));
    CU(cuGraphLaunch(b->exec, stream));
    CU(cuEventRecord(b->stop, stream));
    CU(cuEventSynchronize(b->stop));
    CU(cuEventElapsedTime(&ms, b->start, b->stop));
    if (b->n < MAX_SAMPLES) b->gpu_us[b->n++] = ms * 1e3;
}

/* Host cost of cuGraphLaunch: a burst without waiting, averaged. */
static double launch_us(bench_graph_t *b, int burst)
{
    CU(cuStreamSynchronize(stream));
    double t0 = now();
    for (int i = 0; i < burst; i++) CU(cuGraphLaunch(b->exec, stream));
    double t1 = now();
    CU(cuStreamSynchronize(stream));
    return (t1 - t0) / burst * 1e6;
}

/* Launch to completion seen by the host, median. */
static double e2e_us(bench_graph_t *b, int n)
{
    double v[64];
    if (n > 64) n = 64;
    for (int i = 0; i < n; i++) {
        double t0 = now();
        CU(cuGraphLaunch(b->exec, stream));
        CU(cuStreamSynchronize(stream));
        v[i] = (now() - t0) * 1e6;
    }
    return median(v, n);
}

/* The kernel node wrote the value everywhere (sampled beyond 64 MiB). */
static void verify(CUdeviceptr d, size_t size, const CUDA_MEMSET_NODE_PARAMS *p, bench_graph_t *k)
{
    /* On the benchmark's own stream: a non-blocking stream does not wait for
     * the legacy stream, so a plain cuMemsetD8 could still be clearing the
     * buffer while the fill runs (H200, 46d0422: a zero at byte 16098176 of
     * 64 MiB). */
    CU(cuMemsetD8Async(d, 0, size, stream));
    CU(cuGraphLaunch(k->exec, stream));
    CU(cuStreamSynchronize(stream));
    size_t chunk = size <= (64u << 20) ? size : (1u << 20);
    unsigned char *h = malloc(chunk);
    if (!h) exit(1);
    size_t where[3] = {0, size / 2 / 16 * 16, size - chunk};
    for (int w = 0; w < (chunk == size ? 1 : 3); w++) {
        CU(cuMemcpyDtoH(h, d + where[w], chunk));
        for (size_t i = 0; i < chunk; i++) {
            unsigned char want = (unsigned char)(p->value >> (8 * ((where[w] + i) % p->elementSize)));
            if (h[i] != want) {
                fprintf(stderr, "memset_bench: kernel fill wrong at byte %zu of %zu: 0x%02x, expected 0x%02x\n",
                        where[w] + i, size, h[i], want);
                exit(1);
            }
        }
    }
    free(h);
}

/* ---- main --------------------------------------------------------------------------- */

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'k': case 'K': v *= 1024; break;
    case 'm': case 'M': v *= 1024 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    default: break;
    }
    return (size_t)v;
}

static void usage(void)
{
    fprintf(stderr, "usage: memset_bench [-o CSV] [-e 1,2,4] [-m MAX_SIZE] [-t SECONDS] [-d DEVICE] [-b BLOCKS_PER_SM]\n");
    exit(2);
}

static void parse_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) usage();
        const char *v = argv[++i];
        if (!strcmp(a, "-o")) opt.csv = v;
        else if (!strcmp(a, "-m")) opt.max_size = parse_size(v);
        else if (!strcmp(a, "-t")) opt.target = atof(v);
        else if (!strcmp(a, "-d")) opt.device = atoi(v);
        else if (!strcmp(a, "-b") && atoi(v) > 0) opt.blocks_per_sm = atoi(v);
        else if (!strcmp(a, "-e")) {
            opt.nelems = 0;
            for (const char *s = v; *s && opt.nelems < 3; s++) {
                if (*s == '1' || *s == '2' || *s == '4') opt.elems[opt.nelems++] = (unsigned)(*s - '0');
            }
            if (!opt.nelems) usage();
        } else usage();
    }
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    if (dlsym(RTLD_DEFAULT, "cupool_version"))
        fprintf(stderr, "memset_bench: note: running under cupool; the native column is whatever CUPOOL_MEMSET "
                        "makes of a memset node (run without cupool to compare with the driver)\n");
    CUdevice dev;
    CUcontext ctx;
    CU(cuInit(0));
    CU(cuDeviceGet(&dev, opt.device));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    int sms = 0, driver = 0;
    char name[256] = "?";
    CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    cuDeviceGetName(name, sizeof name, dev);
    cuDriverGetVersion(&driver);
    max_blocks = (unsigned)sms * (unsigned)opt.blocks_per_sm;
    CUmodule module;
    CU(cuModuleLoadData(&module, cupool_fill_ptx));
    CU(cuModuleGetFunction(&fill[0], module, "cupool_fill_u8"));
    CU(cuModuleGetFunction(&fill[1], module, "cupool_fill_u16"));
    CU(cuModuleGetFunction(&fill[2], module, "cupool_fill_u32"));

    FILE *csv = NULL;
    if (opt.csv) {
        csv = fopen(opt.csv, "w");
        if (!csv) {
            perror(opt.csv);
            return 1;
        }
        fprintf(csv, "size_bytes,elem_size,native_us,kernel_us,native_gbps,kernel_gbps,ratio,native_launch_us,"
                     "kernel_launch_us,native_e2e_us,kernel_e2e_us,grid_x,grid_y,block_x,block_y,samples\n");
    }
    printf("# %s, %d SMs, driver %d, fill grid cap %d blocks/SM; GPU time per graph launch (median), "
           "GB/s = 1e9 bytes/s\n", name, sms, driver, opt.blocks_per_sm);
    printf("%10s %2s | %10s %8s | %10s %8s | %6s | %14s | %14s\n", "size", "es", "native us", "GB/s", "kernel us",
           "GB/s", "k/n", "launch us n/k", "e2e us n/k");

    double worst_large = -1;
    for (size_t size = 4096; size <= opt.max_size; size *= 4) {
        CUdeviceptr d;
        CU(cuMemAlloc(&d, size));
        for (int e = 0; e < opt.nelems; e++) {
            unsigned es = opt.elems[e];
            CUDA_MEMSET_NODE_PARAMS p = {d, size, es == 1 ? 0x5Au : es == 2 ? 0xA55Au : 0x01020304u, es, size / es, 1};
            bench_graph_t nat, ker;
            native_graph(&nat, &p, ctx);
            cupool_fill_shape_t shape = kernel_graph(&ker, &p);
            /* Warm up, then size the run from one launch of each. */
            for (int i = 0; i < 3; i++) {
                timed_launch(&nat);
                timed_launch(&ker);
            }
            double one = (median(nat.gpu_us, nat.n) + median(ker.gpu_us, ker.n)) / 2;
            nat.n = ker.n = 0;
            int samples = (int)(opt.target / (one * 1e-6 + 20e-6));
            if (samples < MIN_SAMPLES) samples = MIN_SAMPLES;
            if (samples > MAX_SAMPLES) samples = MAX_SAMPLES;
            for (int i = 0; i < samples; i++) {
                timed_launch(&nat);
                timed_launch(&ker);
            }
            double tn = median(nat.gpu_us, nat.n), tk = median(ker.gpu_us, ker.n);
            int burst = samples < 200 ? samples : 200;
            double ln = launch_us(&nat, burst), lk = launch_us(&ker, burst);
            double en = e2e_us(&nat, 31), ek = e2e_us(&ker, 31);
            double gn = (double)size / (tn * 1e-6) / 1e9, gk = (double)size / (tk * 1e-6) / 1e9;
            double ratio = gk / gn;
            if (size >= (64u << 20) && (worst_large < 0 || ratio < worst_large)) worst_large = ratio;
            verify(d, size, &p, &ker);
            char label[32];
            if (size >= (1u << 30)) snprintf(label, sizeof label, "%zu GiB", size >> 30);
            else if (size >= (1u << 20)) snprintf(label, sizeof label, "%zu MiB", size >> 20);
            else snprintf(label, sizeof label, "%zu KiB", size >> 10);
            printf("%10s %2u | %10.2f %8.1f | %10.2f %8.1f | %6.3f | %6.2f / %5.2f | %6.1f / %5.1f\n", label, es, tn,
                   gn, tk, gk, ratio, ln, lk, en, ek);
            fflush(stdout);
            if (csv)
                fprintf(csv, "%zu,%u,%.3f,%.3f,%.2f,%.2f,%.4f,%.3f,%.3f,%.2f,%.2f,%u,%u,%u,%u,%d\n", size, es, tn, tk, gn,
                        gk, ratio, ln, lk, en, ek, shape.grid[0], shape.grid[1], shape.block[0], shape.block[1],
                        samples);
            destroy_graph(&nat);
            destroy_graph(&ker);
        }
        CU(cuMemFree(d));
    }
    if (worst_large >= 0)
        printf("# lowest kernel/native bandwidth ratio at 64 MiB and above: %.3f (target 0.90): %s\n", worst_large,
               worst_large >= 0.90 ? "met" : "NOT met");
    if (csv) fclose(csv);
    CU(cuModuleUnload(module));
    CU(cuStreamDestroy(stream));
    CU(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
