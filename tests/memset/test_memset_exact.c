/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fill kernels are byte-exact: for element sizes 1, 2 and 4, 1-D and
 * pitched 2-D fills, odd offsets, widths and pitches, from one element up
 * (a few MiB on the simulator, up to 1 GiB on a GPU with
 * CUPOOL_TEST_DRIVER=real), a rewritten memset node (CUPOOL_MEMSET=kernel)
 * writes exactly what a host reference and the driver's own cuMemsetD2D*
 * write, and not one byte around it: the region and its guards start as
 * noise, and every byte of both is compared.  CUPOOL_TEST_MEMSET_MAX (bytes)
 * caps the largest fill on a GPU, e.g. under compute-sanitizer.
 */
#define _GNU_SOURCE
#include "memset_test.h"

#define GUARD 4096
#define ARRAY(a) (sizeof(a) / sizeof((a)[0]))

typedef struct fill_case {
    size_t offset; /* bytes from the allocation, a multiple of es */
    unsigned es;
    size_t width, height, pitch; /* pitch 0: rows of exactly width elements */
    unsigned value;
} fill_case_t;

static CUcontext ctx;
static CUstream stream;
static CUdeviceptr buf;
static size_t buf_size;
static unsigned char *noise, *expect, *got;
static int cases_run;

static size_t case_extent(const fill_case_t *c)
{
    size_t row = c->width * c->es;
    return c->height ? (c->height - 1) * c->pitch + row : 0;
}

/* Region checked: guards on both sides of the fill. */
static void region(const fill_case_t *c, size_t *start, size_t *len)
{
    size_t lo = c->offset >= GUARD ? c->offset - GUARD : 0;
    size_t hi = c->offset + case_extent(c) + GUARD;
    if (hi > buf_size) hi = buf_size;
    *start = lo;
    *len = hi - lo;
}

static void native_fill(const fill_case_t *c)
{
    CUdeviceptr d = buf + c->offset;
    size_t pitch = c->height > 1 ? c->pitch : c->width * c->es;
    switch (c->es) {
    case 1: CHECK_CU(cuMemsetD2D8(d, pitch, (unsigned char)c->value, c->width, c->height)); break;
    case 2: CHECK_CU(cuMemsetD2D16(d, pitch, (unsigned short)c->value, c->width, c->height)); break;
    default: CHECK_CU(cuMemsetD2D32(d, pitch, c->value, c->width, c->height)); break;
    }
}

static void compare(const fill_case_t *c, size_t start, size_t len, const char *what)
{
    CHECK_CU(cuMemcpyDtoH(got, buf + start, len));
    long long at = memset_test_diff(got, expect, len);
    if (at >= 0) {
        long long rel = (long long)(start + (size_t)at) - (long long)c->offset;
        CHECK_FAIL("%s: es %u width %zu height %zu pitch %zu offset %zu value 0x%x: byte %lld from the start "
                   "is 0x%02x, expected 0x%02x",
                   what, c->es, c->width, c->height, c->pitch, c->offset, c->value, rel, got[at], expect[at]);
    }
}

static void run_case(fill_case_t c)
{
    if (c.height > 1 && c.pitch < c.width * c.es) c.pitch = c.width * c.es;
    if (c.height <= 1) c.pitch = c.pitch ? c.pitch : c.width * c.es;
    size_t start, len;
    region(&c, &start, &len);
    CHECK_TRUE(c.offset + case_extent(&c) <= buf_size);
    memset_test_noise(noise, len, (uint64_t)cases_run + 1);
    memcpy(expect, noise, len);
    CUDA_MEMSET_NODE_PARAMS p = {buf + c.offset, c.pitch, c.value, c.es, c.width, c.height};
    memset_test_reference(expect + (c.offset - start), &p);

    /* The rewritten node. */
    CHECK_CU(cuMemcpyHtoD(buf + start, noise, len));
    CUgraph g;
    CUgraphNode n;
    CHECK_CU(cuGraphCreate(&g, 0));
    long long before = memset_test_rewritten();
    CHECK_CU(cuGraphAddMemsetNode(&n, g, NULL, 0, &p, ctx));
    CHECK_EQ(memset_test_rewritten() - before, 1);
    memset_test_launch(g, stream);
    CHECK_CU(cuGraphDestroy(g));
    compare(&c, start, len, "rewritten memset node");

    /* The driver's own memset, same start, same answer (skipped for the
     * largest fills, where the host reference has already said it all). */
    if (len <= (64u << 20)) {
        CHECK_CU(cuMemcpyHtoD(buf + start, noise, len));
        native_fill(&c);
        compare(&c, start, len, "cuMemsetD2D");
    }
    cases_run++;
}

int main(int argc, char **argv)
{
    (void)argc;
    memset_test_reexec(argv, "CUPOOL_MEMSET", "kernel");
    ctx = tl_init(0);
    if (!check_cupool_loaded()) {
        fprintf(stderr, "cupool is not loaded: nothing to test\n");
        return CHECK_SKIP;
    }
    int real = check_real_driver();
    size_t big = real ? (size_t)1 << 30 : (size_t)4 << 20;
    const char *cap = getenv("CUPOOL_TEST_MEMSET_MAX");
    if (cap && strtoull(cap, NULL, 0) >= (1u << 20)) big = (size_t)strtoull(cap, NULL, 0);
    buf_size = big + (2u << 20);
    CHECK_CU(cuStreamCreate(&stream, 0));
    CHECK_CU(cuMemAlloc(&buf, buf_size));
    noise = malloc(buf_size);
    expect = malloc(buf_size);
    got = malloc(buf_size);
    CHECK_TRUE(noise && expect && got);

    static const unsigned values[] = {0xA5, 0x1234BEEF, 0xFFFFFFFF, 0x80};
    static const size_t widths_bytes[] = {1, 2, 3, 4, 5, 7, 8, 12, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 100,
                                          255, 256, 257, 1000, 4095, 4096, 4097, 65535, 65536, 65537, 1000003};
    static const size_t offsets_bytes[] = {0, 1, 2, 3, 4, 6, 8, 12, 15, 16, 20, 4096, 4100, 4108};
    const unsigned sizes[] = {1, 2, 4};

    /* 1-D: every width with a few offsets, for each element size. */
    for (size_t s = 0; s < 3; s++) {
        unsigned es = sizes[s];
        for (size_t w = 0; w < ARRAY(widths_bytes); w++) {
            size_t width = widths_bytes[w] / es ? widths_bytes[w] / es : 1;
            for (size_t o = 0; o < ARRAY(offsets_bytes); o += (w % 3) + 1) {
                size_t offset = GUARD + offsets_bytes[o] / es * es;
                run_case((fill_case_t){offset, es, width, 1, 0, values[(w + o) % 4]});
            }
        }
    }
    /* 2-D: narrow and wide rows, pitches that keep or break 16-byte alignment. */
    static const size_t pwidths[] = {1, 3, 8, 13, 64, 100, 1027, 20000};
    static const size_t pextra[] = {0, 1, 2, 4, 12, 16, 100, 4096};
    static const size_t heights[] = {2, 3, 7, 33, 130};
    for (size_t s = 0; s < 3; s++) {
        unsigned es = sizes[s];
        for (size_t w = 0; w < ARRAY(pwidths); w++)
            for (size_t e = 0; e < ARRAY(pextra); e++) {
                size_t height = heights[(w + e) % ARRAY(heights)];
                size_t pitch = pwidths[w] * es + pextra[e] / es * es;
                size_t offset = GUARD + ((w * 5 + e * 3) % 32) / es * es;
                if (offset + (height - 1) * pitch + pwidths[w] * es + GUARD > buf_size) continue;
                run_case((fill_case_t){offset, es, pwidths[w], height, pitch, values[(w + e + s) % 4]});
            }
    }
    /* Large fills: a few MiB here, up to 1 GiB on a GPU. */
    run_case((fill_case_t){GUARD + 1, 1, big - 2 * GUARD - 3, 1, 0, 0x3C});
    run_case((fill_case_t){GUARD + 2, 2, (big - 2 * GUARD) / 2 - 5, 1, 0, 0xA55A});
    run_case((fill_case_t){GUARD, 4, (big - 2 * GUARD) / 4 - 1, 1, 0, 0x01020304});
    if (real && big >= (size_t)1 << 30) {
        run_case((fill_case_t){GUARD + 8, 4, (64u << 20) / 4 + 3, 1, 0, 0xDEADBEEF});
        run_case((fill_case_t){GUARD + 3, 1, (1u << 20) + 3, 300, (1u << 20) + 64 + 7, 0x77});
        run_case((fill_case_t){GUARD + 2, 2, 4099, 60000, 8200, 0xBEEF});
    } else {
        run_case((fill_case_t){GUARD + 3, 1, 70001, 40, 70001 + 13, 0x77});
        run_case((fill_case_t){GUARD + 2, 2, 3, 100000, 10, 0xBEEF});
    }
    fprintf(stderr, "%d fills byte-exact\n", cases_run);

    CHECK_CU(cuMemFree(buf));
    CHECK_CU(cuStreamDestroy(stream));
    free(noise);
    free(expect);
    free(got);
    return 0;
}
