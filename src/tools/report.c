/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cupool-report: reads one or more cupool call logs (CUPOOL_LOG) and prints
 * what happened per device (calls, pooled and native allocations, bytes,
 * peaks, failures, call durations, a size histogram), then draws bytes in
 * use and bytes reserved over time per device, and the size histogram, into
 * one self-contained SVG (or HTML holding it).  Pinned host memory
 * (cuMemAllocHost, cuMemHostAlloc) and managed memory (cuMemAllocManaged)
 * are summarized and drawn apart from device memory, each as one section
 * and one panel over all devices: their allocations are counted as served
 * by a kept block ("route":"pool") or by the driver, and their bytes in use
 * drawn alone (the pools' reservation is device memory's).
 *
 * Bytes in use: the running sum of the sizes of successful allocations,
 * pooled and native, minus each successful free matched to its allocation
 * by pointer (per log, since pointers of different processes are unrelated).
 * Bytes reserved: the "reserved" field of pooled allocation and free lines,
 * which cupool fills with the device's pool reservation after the call;
 * with several logs, the latest value of each log is summed.  Logs of
 * several processes share one time axis (CLOCK_MONOTONIC is system-wide).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cli.h"
#include "trace.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#define PROG "cupool-report"
#define MAX_DEVICES 64
#define NO_DEVICE MAX_DEVICES /* the slot for calls of no known device */
#define BUCKETS 64

/* ---- state -------------------------------------------------------------- */

typedef struct u64_vec {
    uint64_t *v;
    size_t n, cap;
} u64_vec_t;

typedef struct point {
    uint64_t t, in_use, reserved;
} point_t;

/* What the report gathers for one device, or for one kind of memory other
 * than device memory (then the reservation stays 0: pools hold device
 * memory only). */
typedef struct device {
    int seen;
    uint64_t *calls;    /* per interned name */
    uint64_t *failures; /* per interned result name */
    uint64_t pooled_allocs, native_allocs, pooled_bytes, native_bytes;
    uint64_t pooled_frees, native_frees, unmatched_frees;
    uint64_t in_use, peak_in_use, reserved, peak_reserved;
    uint64_t *reserved_by_file;
    u64_vec_t alloc_ns, free_ns;
    u64_vec_t store_ns, pool_ns; /* pooled allocations: served by a ready store, made by the pool */
    uint64_t hist[BUCKETS];
    uint64_t hist_ns[BUCKETS]; /* time in the allocations of each size bucket and in their blocks' frees */
    point_t *points;
    size_t npoints, cap_points;
} device_t;

typedef struct block_key {
    uint64_t ptr, file;
} block_key_t;

typedef struct block {
    block_key_t key;
    uint64_t size;
    int dev;
    int mem; /* TRACE_MEM_* */
    UT_hash_handle hh;
} block_t;

static device_t devices[MAX_DEVICES + 1];
static device_t memories[TRACE_MEM_KINDS]; /* [TRACE_MEM_HOST], [TRACE_MEM_MANAGED] */
static block_t *blocks;
static uint64_t hist_all[BUCKETS];

static void push(u64_vec_t *vec, uint64_t x)
{
    if (vec->n == vec->cap) {
        vec->cap = vec->cap ? vec->cap * 2 : 256;
        vec->v = trace_xrealloc(vec->v, vec->cap * sizeof *vec->v);
    }
    vec->v[vec->n++] = x;
}

static int slot(int dev)
{
    return dev >= 0 && dev < MAX_DEVICES ? dev : NO_DEVICE;
}

/* The section a call is counted in: its device's for device memory, its
 * kind's for pinned host and managed memory. */
static device_t *section(const trace_t *t, int mem, int dev)
{
    device_t *d = mem == TRACE_MEM_DEVICE ? &devices[slot(dev)] : &memories[mem];
    if (!d->seen) {
        d->seen = 1;
        d->calls = trace_xrealloc(NULL, t->name_count * sizeof *d->calls);
        d->failures = trace_xrealloc(NULL, t->name_count * sizeof *d->failures);
        d->reserved_by_file = trace_xrealloc(NULL, t->files * sizeof *d->reserved_by_file);
        memset(d->calls, 0, t->name_count * sizeof *d->calls);
        memset(d->failures, 0, t->name_count * sizeof *d->failures);
        memset(d->reserved_by_file, 0, t->files * sizeof *d->reserved_by_file);
    }
    return d;
}

static void add_point(device_t *d, uint64_t t)
{
    if (d->npoints && d->points[d->npoints - 1].in_use == d->in_use &&
        d->points[d->npoints - 1].reserved == d->reserved)
        return;
    if (d->npoints == d->cap_points) {
        d->cap_points = d->cap_points ? d->cap_points * 2 : 1024;
        d->points = trace_xrealloc(d->points, d->cap_points * sizeof *d->points);
    }
    d->points[d->npoints++] = (point_t){t, d->in_use, d->reserved};
}

static int bucket(uint64_t size)
{
    int b = 0;
    while (size >>= 1) b++;
    return b;
}

/* ---- the pass over the trace ------------------------------------------- */

static block_t *find_block(uint64_t ptr, uint64_t file)
{
    block_key_t key;
    memset(&key, 0, sizeof key);
    key.ptr = ptr;
    key.file = file;
    block_t *b;
    HASH_FIND(hh, blocks, &key, sizeof key, b);
    return b;
}

static void release(block_t *b, uint64_t t)
{
    device_t *d = b->mem == TRACE_MEM_DEVICE ? &devices[slot(b->dev)] : &memories[b->mem];
    d->in_use -= b->size;
    add_point(d, t);
    HASH_DEL(blocks, b);
    free(b);
}

static void account(const trace_t *t, const trace_record_t *r)
{
    if (r->kind == TRACE_START || r->kind == TRACE_MESSAGE || r->kind == TRACE_END) return;
    int dev = r->dev, mem = r->kind == TRACE_ALLOC || r->kind == TRACE_FREE ? r->mem : TRACE_MEM_DEVICE;
    block_t *b = NULL;
    if (r->kind == TRACE_FREE && r->ptr) {
        b = find_block(r->ptr, r->file);
        if (b && dev < 0) dev = b->dev; /* native frees do not know their device */
        if (b) mem = b->mem;            /* cuMemFree frees managed memory too */
    } else if (r->kind == TRACE_OTHER && dev < 0 && r->ptr) {
        /* A call of no device on a pinned host or managed block (cuMemAdvise,
         * cuStreamAttachMemAsync) is that memory's. */
        block_t *on = find_block(r->ptr, r->file);
        if (on) mem = on->mem;
    }
    device_t *d = section(t, mem, dev);
    d->calls[r->call]++;
    if (!r->ok) {
        d->failures[r->result]++;
        return;
    }
    if (r->kind == TRACE_ALLOC) {
        push(&d->alloc_ns, r->dur_ns);
        if (r->route == TRACE_ROUTE_POOL) {
            d->pooled_allocs++, d->pooled_bytes += r->size;
            push(r->from_store ? &d->store_ns : &d->pool_ns, r->dur_ns);
        } else {
            d->native_allocs++, d->native_bytes += r->size;
        }
        if (r->size) {
            d->hist[bucket(r->size)]++;
            d->hist_ns[bucket(r->size)] += r->dur_ns;
            if (mem == TRACE_MEM_DEVICE) hist_all[bucket(r->size)]++;
        }
        block_t *old = find_block(r->ptr, r->file);
        if (old) release(old, r->t - t->records[0].t); /* its free was not logged */
        b = trace_xrealloc(NULL, sizeof *b);
        memset(b, 0, sizeof *b);
        b->key.ptr = r->ptr;
        b->key.file = r->file;
        b->size = r->size;
        b->dev = dev;
        b->mem = mem;
        HASH_ADD(hh, blocks, key, sizeof b->key, b);
        d->in_use += r->size;
        if (d->in_use > d->peak_in_use) d->peak_in_use = d->in_use;
    } else if (r->kind == TRACE_FREE) {
        push(&d->free_ns, r->dur_ns);
        if (r->route == TRACE_ROUTE_POOL) d->pooled_frees++;
        else d->native_frees++;
        if (b && b->size) d->hist_ns[bucket(b->size)] += r->dur_ns;
        if (b) release(b, r->t - t->records[0].t);
        else if (r->ptr) d->unmatched_frees++;
    }
    if ((r->kind == TRACE_ALLOC || r->kind == TRACE_FREE) && mem == TRACE_MEM_DEVICE && r->route == TRACE_ROUTE_POOL &&
        r->has_reserved) {
        d->reserved -= d->reserved_by_file[r->file];
        d->reserved_by_file[r->file] = r->reserved;
        d->reserved += r->reserved;
        if (d->reserved > d->peak_reserved) d->peak_reserved = d->reserved;
    }
    add_point(d, r->t - t->records[0].t);
}

/* ---- the summary ------------------------------------------------------- */

static const char *human(double bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (bytes >= 1024 && u < 5) bytes /= 1024, u++;
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
    return buf;
}

/* Short byte label for axes: 0, 512, 1K, 1.5M, 2G. */
static const char *short_bytes(double bytes, char *buf, size_t len)
{
    static const char *const units[] = {"", "K", "M", "G", "T", "P"};
    int u = 0;
    while (bytes >= 1024 && u < 5) bytes /= 1024, u++;
    snprintf(buf, len, "%.3g%s", bytes, units[u]);
    return buf;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of a sorted vector. */
static uint64_t percentile(const u64_vec_t *vec, double p)
{
    size_t rank = (size_t)ceil(p / 100.0 * (double)vec->n);
    if (rank < 1) rank = 1;
    return vec->v[rank - 1];
}

static void print_durations(const char *what, u64_vec_t *vec)
{
    if (!vec->n) {
        printf("  %s: n=0\n", what);
        return;
    }
    qsort(vec->v, vec->n, sizeof *vec->v, cmp_u64);
    printf("  %s: n=%zu p50=%llu p90=%llu p99=%llu max=%llu\n", what, vec->n,
           (unsigned long long)percentile(vec, 50), (unsigned long long)percentile(vec, 90),
           (unsigned long long)percentile(vec, 99), (unsigned long long)vec->v[vec->n - 1]);
}

/* The bounds of size bucket b, [2^b, 2^(b+1)), as short labels. */
static void bucket_bounds(int b, char lo[16], char hi[16])
{
    short_bytes(ldexp(1, b), lo, 16);
    short_bytes(ldexp(1, b + 1), hi, 16);
}

static void print_histogram(const uint64_t *hist)
{
    uint64_t most = 0;
    for (int b = 0; b < BUCKETS; b++)
        if (hist[b] > most) most = hist[b];
    printf("  size histogram:%s\n", most ? "" : " none");
    for (int b = 0; b < BUCKETS; b++) {
        if (!hist[b]) continue;
        char lo[16], hi[16];
        bucket_bounds(b, lo, hi);
        int bar = (int)((hist[b] * 40 + most - 1) / most);
        printf("    [%s, %s) %llu ", lo, hi, (unsigned long long)hist[b]);
        for (int i = 0; i < bar; i++) putchar('#');
        putchar('\n');
    }
}

/* Where the time in allocations and frees went, by the size bucket of the
 * block: a program slower under cupool than natively or under its
 * framework's allocator shows here which sizes cost it (those the pools
 * serve with a call each, say, against those a store serves). */
static void print_time_by_size(const device_t *d)
{
    uint64_t alloc = 0, free_ = 0, any = 0;
    for (size_t i = 0; i < d->alloc_ns.n; i++) alloc += d->alloc_ns.v[i];
    for (size_t i = 0; i < d->free_ns.n; i++) free_ += d->free_ns.v[i];
    for (int b = 0; b < BUCKETS; b++) any |= d->hist_ns[b];
    printf("  time in calls: %.3f ms (allocations %.3f ms, frees %.3f ms)\n", (double)(alloc + free_) / 1e6,
           (double)alloc / 1e6, (double)free_ / 1e6);
    if (!any) return;
    printf("  time by size (allocations and the frees of their blocks):\n");
    for (int b = 0; b < BUCKETS; b++) {
        if (!d->hist_ns[b]) continue;
        char lo[16], hi[16];
        bucket_bounds(b, lo, hi);
        printf("    [%s, %s) %.3f ms\n", lo, hi, (double)d->hist_ns[b] / 1e6);
    }
}

/* The names of the memory kinds' sections and panels. */
static const char *const memory_names[TRACE_MEM_KINDS] = {"device", "pinned host memory", "managed memory"};

/* One section: a device's (mem TRACE_MEM_DEVICE, s its slot) or a kind of
 * memory's.  For pinned host and managed memory "kept=" counts the
 * allocations served by a kept block and the frees that kept their block
 * (route "pool" in the log). */
static void print_section(const trace_t *t, int mem, int s)
{
    device_t *d = mem == TRACE_MEM_DEVICE ? &devices[s] : &memories[mem];
    const char *pooled = mem == TRACE_MEM_DEVICE ? "pooled" : "kept";
    char b1[32], b2[32];
    if (mem != TRACE_MEM_DEVICE) printf("%s:\n", memory_names[mem]);
    else if (s == NO_DEVICE) printf("no device:\n");
    else printf("device %d:\n", s);
    printf("  calls:");
    for (size_t i = 0; i < t->name_count; i++)
        if (d->calls[i]) printf(" %s=%llu", t->names[i], (unsigned long long)d->calls[i]);
    printf("\n");
    printf("  allocations: %llu %s=%llu native=%llu\n", (unsigned long long)(d->pooled_allocs + d->native_allocs),
           pooled, (unsigned long long)d->pooled_allocs, (unsigned long long)d->native_allocs);
    printf("  bytes allocated: %llu %s=%llu native=%llu (%s)\n",
           (unsigned long long)(d->pooled_bytes + d->native_bytes), pooled, (unsigned long long)d->pooled_bytes,
           (unsigned long long)d->native_bytes, human((double)(d->pooled_bytes + d->native_bytes), b1, sizeof b1));
    printf("  frees: %llu %s=%llu native=%llu unmatched=%llu\n",
           (unsigned long long)(d->pooled_frees + d->native_frees), pooled, (unsigned long long)d->pooled_frees,
           (unsigned long long)d->native_frees, (unsigned long long)d->unmatched_frees);
    printf("  in use at end: %llu (%s)\n", (unsigned long long)d->in_use, human((double)d->in_use, b2, sizeof b2));
    printf("  peak in use: %llu (%s)\n", (unsigned long long)d->peak_in_use, human((double)d->peak_in_use, b1, sizeof b1));
    if (mem == TRACE_MEM_DEVICE)
        printf("  peak reserved: %llu (%s)\n", (unsigned long long)d->peak_reserved,
               human((double)d->peak_reserved, b2, sizeof b2));
    printf("  failures:");
    int any = 0;
    for (size_t i = 0; i < t->name_count; i++)
        if (d->failures[i]) printf(" %s=%llu", t->names[i][0] ? t->names[i] : "?", (unsigned long long)d->failures[i]), any = 1;
    printf("%s\n", any ? "" : " none");
    print_durations("alloc duration ns", &d->alloc_ns);
    /* A log that marks the allocations its stores served ("store"): what
     * a block from a store cost against one the pool made. */
    if (d->store_ns.n) {
        print_durations("store alloc duration ns", &d->store_ns);
        print_durations("pool alloc duration ns", &d->pool_ns);
    }
    print_durations("free duration ns", &d->free_ns);
    print_histogram(d->hist);
    print_time_by_size(d);
}

/* ---- the picture ------------------------------------------------------- */

#define SVG_W 960
#define LEFT 80
#define RIGHT 30
#define PLOT_W (SVG_W - LEFT - RIGHT)
#define PANEL_H 260
#define PLOT_H 190
#define PANEL_TOP 40 /* plot area offset inside a panel */

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\t') fputc(*s, f);
        }
    }
}

/* A 1-2-5 step giving about `ticks` intervals over span. */
static double nice_step(double span, int ticks)
{
    double raw = span / ticks, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
}

/* A power-of-two byte step giving at most about `ticks` intervals. */
static double byte_step(double span, int ticks)
{
    double step = 1;
    while (step * 2 <= span / ticks) step *= 2;
    return step;
}

/* Appends one step-line point, dropping repeats. */
typedef struct polyline {
    FILE *f;
    double last_x, last_y;
    int started;
} polyline_t;

static void poly_point(polyline_t *p, double x, double y)
{
    if (p->started && fabs(x - p->last_x) < 0.05 && fabs(y - p->last_y) < 0.05) return;
    fprintf(p->f, "%s%.1f,%.1f", p->started ? " " : "", x, y);
    p->started = 1;
    p->last_x = x;
    p->last_y = y;
}

/* A step line of one series (0 = in use, 1 = reserved).  Several changes in
 * one pixel column are drawn as that column's enter, min, max and exit
 * values, so long logs stay small without hiding a peak. */
static void draw_series(FILE *f, const device_t *d, int which, double span_ns, double ymax, double top,
                        const char *cls)
{
    fprintf(f, "<polyline class=\"%s\" points=\"", cls);
    polyline_t p = {f, 0, 0, 0};
    double ybase = top + PLOT_H;
#define YOF(v) (ybase - (double)(v) / ymax * PLOT_H)
#define XOF(t) (LEFT + (double)(t) / span_ns * PLOT_W)
    uint64_t value = 0;
    poly_point(&p, LEFT, YOF(0));
    size_t i = 0;
    while (i < d->npoints) {
        long col = lround(XOF(d->points[i].t));
        uint64_t enter = value, lo = value, hi = value;
        size_t j = i;
        for (; j < d->npoints && lround(XOF(d->points[j].t)) == col; j++) {
            value = which ? d->points[j].reserved : d->points[j].in_use;
            if (value < lo) lo = value;
            if (value > hi) hi = value;
        }
        double x = XOF(d->points[i].t);
        poly_point(&p, x, YOF(enter));
        if (j - i > 1) {
            poly_point(&p, x, YOF(lo));
            poly_point(&p, x, YOF(hi));
        }
        poly_point(&p, x, YOF(value));
        i = j;
    }
    poly_point(&p, LEFT + PLOT_W, YOF(value));
#undef YOF
#undef XOF
    fprintf(f, "\"/>\n");
}

/* The CSS class of each kind's group and in-use line; device memory's is
 * "device" and "in-use", with "reserved" beside it. */
static const char *const memory_classes[TRACE_MEM_KINDS] = {"device", "host", "managed"};

/* One panel: a device's bytes in use and reserved, or (mem not
 * TRACE_MEM_DEVICE) the bytes of one kind of memory in use on all devices. */
static void draw_panel(FILE *f, const device_t *d, int mem, const char *label, double span_ns, double top)
{
    double peak = (double)(d->peak_in_use > d->peak_reserved ? d->peak_in_use : d->peak_reserved);
    double ymax = peak > 0 ? peak * 1.05 : 1024;
    double y0 = top + PANEL_TOP, span_s = span_ns / 1e9;
    fprintf(f, "<g class=\"%s\">\n", memory_classes[mem]);
    if (mem == TRACE_MEM_DEVICE)
        fprintf(f, "<text class=\"title\" x=\"%d\" y=\"%.0f\">%s: bytes in use (pooled + native) and reserved by the pools</text>\n", LEFT, top + 22,
                label);
    else
        fprintf(f, "<text class=\"title\" x=\"%d\" y=\"%.0f\">%s: bytes in use (served by kept blocks + by the driver), all devices</text>\n",
                LEFT, top + 22, label);
    fprintf(f, "<rect class=\"frame\" x=\"%d\" y=\"%.0f\" width=\"%d\" height=\"%d\"/>\n", LEFT, y0, PLOT_W, PLOT_H);
    double ystep = byte_step(ymax, 5);
    for (double v = 0; v <= ymax; v += ystep) {
        double y = y0 + PLOT_H - v / ymax * PLOT_H;
        char buf[16];
        fprintf(f, "<line class=\"grid\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>", LEFT, y, LEFT + PLOT_W, y);
        fprintf(f, "<text class=\"ylabel\" x=\"%d\" y=\"%.1f\">%s</text>\n", LEFT - 6, y + 4,
                short_bytes(v, buf, sizeof buf));
    }
    double xstep = nice_step(span_s, 8);
    for (double v = 0; v <= span_s * 1.0001; v += xstep) {
        double x = LEFT + v / span_s * PLOT_W;
        fprintf(f, "<line class=\"tick\" x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\"/>", x, y0 + PLOT_H, x,
                y0 + PLOT_H + 5);
        fprintf(f, "<text class=\"xlabel\" x=\"%.1f\" y=\"%.0f\">%g</text>\n", x, y0 + PLOT_H + 18, v);
    }
    fprintf(f, "<text class=\"axis\" x=\"%d\" y=\"%.0f\">time (s)</text>\n", LEFT + PLOT_W / 2, y0 + PLOT_H + 36);
    if (mem != TRACE_MEM_DEVICE) {
        char cls[32];
        snprintf(cls, sizeof cls, "%s-in-use", memory_classes[mem]);
        draw_series(f, d, 0, span_ns, ymax, y0, cls);
        fprintf(f, "<g class=\"legend\"><line class=\"%s\" x1=\"%d\" y1=\"%.0f\" x2=\"%d\" y2=\"%.0f\"/>"
                   "<text x=\"%d\" y=\"%.0f\">in use</text></g>\n</g>\n",
                cls, LEFT + PLOT_W - 120, top + 18, LEFT + PLOT_W - 96, top + 18, LEFT + PLOT_W - 90, top + 22);
        return;
    }
    draw_series(f, d, 1, span_ns, ymax, y0, "reserved");
    draw_series(f, d, 0, span_ns, ymax, y0, "in-use");
    fprintf(f, "<g class=\"legend\"><line class=\"in-use\" x1=\"%d\" y1=\"%.0f\" x2=\"%d\" y2=\"%.0f\"/>"
               "<text x=\"%d\" y=\"%.0f\">in use</text>",
            LEFT + PLOT_W - 220, top + 18, LEFT + PLOT_W - 196, top + 18, LEFT + PLOT_W - 190, top + 22);
    fprintf(f, "<line class=\"reserved\" x1=\"%d\" y1=\"%.0f\" x2=\"%d\" y2=\"%.0f\"/>"
               "<text x=\"%d\" y=\"%.0f\">reserved</text></g>\n</g>\n",
            LEFT + PLOT_W - 120, top + 18, LEFT + PLOT_W - 96, top + 18, LEFT + PLOT_W - 90, top + 22);
}

static void draw_histogram(FILE *f, double top, int device_only)
{
    int first = -1, last = -1;
    uint64_t most = 0;
    for (int b = 0; b < BUCKETS; b++)
        if (hist_all[b]) {
            if (first < 0) first = b;
            last = b;
            if (hist_all[b] > most) most = hist_all[b];
        }
    double y0 = top + PANEL_TOP;
    fprintf(f, "<g class=\"histogram\">\n<text class=\"title\" x=\"%d\" y=\"%.0f\">%sallocation sizes (powers of two, "
               "all devices)</text>\n",
            LEFT, top + 22, device_only ? "" : "device memory: ");
    fprintf(f, "<rect class=\"frame\" x=\"%d\" y=\"%.0f\" width=\"%d\" height=\"%d\"/>\n", LEFT, y0, PLOT_W, PLOT_H);
    if (first >= 0) {
        int n = last - first + 1;
        double slot_w = (double)PLOT_W / n, bar_w = slot_w * 0.8;
        for (int b = first; b <= last; b++) {
            double h = (double)hist_all[b] / (double)most * (PLOT_H - 16);
            double x = LEFT + (b - first) * slot_w + (slot_w - bar_w) / 2;
            char lo[16];
            short_bytes(ldexp(1, b), lo, sizeof lo);
            fprintf(f, "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"><title>[%s, 2x): %llu"
                       "</title></rect>",
                    x, y0 + PLOT_H - h, bar_w, h, lo, (unsigned long long)hist_all[b]);
            if (hist_all[b])
                fprintf(f, "<text class=\"count\" x=\"%.1f\" y=\"%.1f\">%llu</text>", x + bar_w / 2,
                        y0 + PLOT_H - h - 3, (unsigned long long)hist_all[b]);
            if (n <= 24 || (b - first) % ((n + 23) / 24) == 0)
                fprintf(f, "<text class=\"xlabel\" x=\"%.1f\" y=\"%.0f\">%s</text>", x + bar_w / 2, y0 + PLOT_H + 18,
                        lo);
            fputc('\n', f);
        }
    }
    fprintf(f, "<text class=\"axis\" x=\"%d\" y=\"%.0f\">allocation size (bytes, lower bound)</text>\n</g>\n",
            LEFT + PLOT_W / 2, y0 + PLOT_H + 36);
}


/* A device whose bytes never left zero (say, only frees of memory the log
 * never saw allocated) would draw an empty panel. */
static int worth_a_panel(const device_t *d)
{
    for (size_t i = 0; i < d->npoints; i++)
        if (d->points[i].in_use || d->points[i].reserved) return 1;
    return 0;
}

static int write_picture(const char *path, char **logs, int nlogs, double span_ns)
{
    int html = strlen(path) > 5 && (strcmp(path + strlen(path) - 5, ".html") == 0 ||
                                     strcmp(path + strlen(path) - 4, ".htm") == 0);
    FILE *f = strcmp(path, "-") == 0 ? stdout : fopen(path, "w");
    if (!f) {
        fprintf(stderr, PROG ": cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    int panels = 1, kind_panels = 0;
    for (int s = 0; s <= MAX_DEVICES; s++) panels += worth_a_panel(&devices[s]);
    for (int m = TRACE_MEM_HOST; m < TRACE_MEM_KINDS; m++) kind_panels += worth_a_panel(&memories[m]);
    panels += kind_panels;
    int height = panels * PANEL_H + 60;
    if (html) fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"/><title>cupool report</title></head><body>\n");
    else fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", SVG_W, height, SVG_W, height);
    fprintf(f, "<style>\n"
               ".title{font-size:14px;font-weight:bold}\n"
               ".frame{fill:none;stroke:#888}\n.grid{stroke:#ddd}\n.tick{stroke:#888}\n"
               ".ylabel{text-anchor:end}\n.xlabel,.axis,.count{text-anchor:middle}\n.count{font-size:10px}\n"
               "polyline{fill:none;stroke-width:1.5}\n"
               ".in-use{stroke:#1f77b4;stroke-width:1.5}\n.reserved{stroke:#ff7f0e;stroke-width:1.5}\n"
               ".bar{fill:#2ca02c}\n");
    if (kind_panels) fprintf(f, ".host-in-use{stroke:#9467bd;stroke-width:1.5}\n.managed-in-use{stroke:#8c564b;stroke-width:1.5}\n");
    fprintf(f, "</style>\n");
    fprintf(f, "<title>cupool report:");
    for (int i = 0; i < nlogs; i++) fputc(' ', f), xml_text(f, logs[i]);
    fprintf(f, "</title>\n<text class=\"title\" x=\"%d\" y=\"24\">cupool report:", LEFT);
    for (int i = 0; i < nlogs && i < 4; i++) fputc(' ', f), xml_text(f, logs[i]);
    fprintf(f, "%s</text>\n", nlogs > 4 ? " ..." : "");
    double top = 40;
    for (int s = 0; s <= MAX_DEVICES; s++) {
        if (!worth_a_panel(&devices[s])) continue;
        char label[32];
        if (s == NO_DEVICE) snprintf(label, sizeof label, "no device");
        else snprintf(label, sizeof label, "device %d", s);
        draw_panel(f, &devices[s], TRACE_MEM_DEVICE, label, span_ns, top);
        top += PANEL_H;
    }
    for (int m = TRACE_MEM_HOST; m < TRACE_MEM_KINDS; m++) {
        if (!worth_a_panel(&memories[m])) continue;
        draw_panel(f, &memories[m], m, memory_names[m], span_ns, top);
        top += PANEL_H;
    }
    draw_histogram(f, top, !kind_panels);
    fprintf(f, "</svg>\n");
    if (html) fprintf(f, "</body></html>\n");
    int bad = ferror(f);
    if (f != stdout) bad |= fclose(f) != 0;
    if (bad) fprintf(stderr, PROG ": error writing %s\n", path);
    return bad ? -1 : 0;
}

/* ---- main -------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "Usage: " PROG " [-o FILE] [-q] LOG...\n"
               "Summarizes cupool call logs (CUPOOL_LOG=path) per device and draws bytes in use and\n"
               "reserved over time, and the allocation sizes, as SVG (or HTML when FILE ends in .html).\n"
               "Pinned host and managed memory get a section and a panel of their own.\n"
               "  -o, --output FILE   picture to write (default cupool-report.svg; - = standard output)\n"
               "  -q, --quiet         no summary, only the picture\n"
               "  -h, --help          this help\n"
               "  -V, --version       print the version\n"
               "The first %d malformed lines of a log are named on standard error, then how many more.\n",
            TRACE_SHOWN_REJECTS);
}

/* The command, its argument list in logs (room for argc): main frees it
 * whichever way this returns. */
static int report(int argc, char **argv, char **logs)
{
    static const struct option longs[] = {
        {"output", required_argument, NULL, 'o'}, {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},         {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    const char *out = "cupool-report.svg";
    int quiet = 0, nlogs = 0;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, ":o:qhV", longs, NULL)) != -1;) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'q': quiet = 1; break;
        case 'h': return usage(stdout), 0;
        case 'V': return printf(PROG " %s\n", PACKAGE_VERSION), 0;
        default: return cli_refused(PROG, c, argv, longs), usage(stderr), 2;
        }
    }
    while (optind < argc) logs[nlogs++] = argv[optind++];
    if (!nlogs) return usage(stderr), 2;

    trace_t t = {0};
    int unreadable = 0;
    for (int i = 0; i < nlogs; i++) unreadable |= trace_read(&t, logs[i], PROG) != 0;
    if (!t.count) {
        /* A log that could not be read has said why already. */
        if (!unreadable) fprintf(stderr, PROG ": no usable lines in the log%s\n", nlogs > 1 ? "s" : "");
        trace_free(&t);
        return 1;
    }
    trace_sort(&t);
    uint64_t end = 0;
    for (size_t i = 0; i < t.count; i++) {
        account(&t, &t.records[i]);
        if (t.records[i].t + t.records[i].dur_ns > end) end = t.records[i].t + t.records[i].dur_ns;
    }
    double span_ns = (double)(end - t.records[0].t);
    if (span_ns <= 0) span_ns = 1;
    if (!quiet) {
        printf(PROG ": %d log%s, %zu lines read, %zu rejected, %.6f s\n", nlogs, nlogs > 1 ? "s" : "", t.count,
               t.rejected, span_ns / 1e9);
        for (int s = 0; s <= MAX_DEVICES; s++)
            if (devices[s].seen) print_section(&t, TRACE_MEM_DEVICE, s);
        for (int m = TRACE_MEM_HOST; m < TRACE_MEM_KINDS; m++)
            if (memories[m].seen) print_section(&t, m, 0);
    }
    int bad = write_picture(out, logs, nlogs, span_ns) != 0;
    if (!quiet && !bad && strcmp(out, "-") != 0) printf("picture: %s\n", out);
    trace_free(&t);
    return bad || unreadable ? 1 : 0;
}

int main(int argc, char **argv)
{
    char **logs = trace_xrealloc(NULL, (size_t)argc * sizeof *logs);
    int rc = report(argc, argv, logs);
    free(logs);
    return rc;
}
