/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proves every CUPOOL_* option is read the way DESIGN.md promises: each good
 * value is taken silently and reported as the effective value by
 * CUPOOL_VERBOSE=1; each bad value prints exactly one "cupool: warning:
 * ignoring CUPOOL_X=..." line and keeps the default; the size grammar takes
 * K/M/G/T, KiB/KB, decimals and "unlimited" and rejects negatives, overflow,
 * fractional bytes, hex, exponents, blanks and junk.  Where an option has an
 * effect a program can observe, the effect is checked too: policy off pools
 * nothing, MIN/MAX_SIZE bound what is pooled (exactly at the boundary),
 * LIMIT sends the excess to cuMemAlloc, split uses two pools, default uses
 * the device's default pool, RELEASE_THRESHOLD lands on the pool, STATS
 * prints per-entry-point counts.
 * The table of options here is cross-checked against what VERBOSE prints, so
 * an option added to cupool without a row here fails the test.
 * Every setting runs in its own child process: options are read once.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* ---- the child: allocate the sizes given, report what happened ----------- */

static int child(int argc, char **argv)
{
    tl_init(0);
    CUdevice dev;
    CHECK_CU(cuCtxGetDevice(&dev));
    CUmemoryPool dflt = NULL;
    if (cuDeviceGetDefaultMemPool(&dflt, dev) == CUDA_SUCCESS) printf("default %p\n", (void *)dflt);
    CUdeviceptr ptrs[64];
    int n = 0;
    for (int i = 2; i < argc && n < 64; i++, n++) {
        size_t size = strtoull(argv[i], NULL, 0);
        CHECK_CU(cuMemAlloc(&ptrs[n], size));
        tl_fill(ptrs[n], size, 0x01020304u + (uint32_t)n);
        CHECK_EQ(tl_spot_check(ptrs[n], size, 0x01020304u + (uint32_t)n), 0);
        CUmemoryPool pool = tl_pool_of(ptrs[n]);
        if (pool) {
            cuuint64_t threshold = 0;
            CHECK_CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
            printf("alloc %zu P %p threshold %" PRIu64 "\n", size, (void *)pool, (uint64_t)threshold);
        } else {
            printf("alloc %zu N\n", size);
        }
    }
    for (int i = 0; i < n; i++) CHECK_CU(cuMemFree(ptrs[i]));
    if (check_cupool_loaded()) {
        cupool_stats_t s = tl_stats(0);
        printf("stats pooled %llu native %llu frees %llu\n", (unsigned long long)s.pooled_allocs,
               (unsigned long long)s.native_allocs, (unsigned long long)s.pooled_frees);
    }
    return 0;
}

/* ---- the parent ------------------------------------------------------------ */

typedef struct option_case {
    const char *name;
    const char *fallback; /* as VERBOSE prints the default */
    const char *good[16];
    const char *bad[24];
} option_case_t;

static const option_case_t options[] = {
    {"CUPOOL_POLICY", "dedicated", {"dedicated", "default", "split", "off", "SPLIT"}, {"bogus", "dedicate", "offf", "1"}},
    {"CUPOOL_FREE", "auto", {"auto", "ordered", "deferred", "sync"}, {"fast", "async", "0"}},
    {"CUPOOL_RELEASE_THRESHOLD", "unlimited",
     {"0", "512", "64K", "64k", "1M", "2G", "1T", "1.5G", "4KiB", "4KB", "4kib", "100B", "unlimited", "UNLIMITED"},
     {"99999999999T", "18446744073709551616", "-1", "-5K", "12Q", "K", "1.5.5", "1.3", "0.5", "nan", "inf", "5K ",
      "1e400", "4KiBB", "unlimitedd", "5 K", " 5K", "0x10M", "1e3", "+5K", ".", "5..K"}},
    {"CUPOOL_MIN_SIZE", "1", {"1", "256", "4K"}, {"-1", "one", "1.25"}},
    {"CUPOOL_MAX_SIZE", "unlimited", {"4K", "unlimited", "1T"}, {"4X", "-4K", "99999999999T"}},
    {"CUPOOL_SPLIT_SIZE", "1M", {"64K", "2M"}, {"big", "-1M"}},
    {"CUPOOL_LIMIT", "unlimited", {"1G", "unlimited", "2M"}, {"1.5", "lots", "-2G"}},
    {"CUPOOL_DEFERRED_ORDER", "host", {"gpu", "host", "HOST"}, {"device", "cpu", "1"}},
    {"CUPOOL_DEFERRED_READY", "1G", {"0", "256M", "1G", "unlimited", "25%", "12.5%", "0.01%", "10000%"},
     {"-1", "many", "0.5", "0%", "%", "-5%", "12.345%", "10001%", "5M%", "25 %", "25%%", "1e2%", "0x10%"}},
    {"CUPOOL_DEFERRED_WAIT", "1G", {"0", "64M", "unlimited", "50%", "100%"},
     {"-1G", "half", "0%", "50%25", "%50", "nan%", "9223372036854775808"}},
    {"CUPOOL_ORDERED_READY", "64M", {"0", "256M", "1G", "unlimited"}, {"-1", "lots", "0.5"}},
    {"CUPOOL_DEFERRED_FENCE", "auto", {"auto", "context", "streams", "STREAMS"}, {"stream", "ctx", "1"}},
    {"CUPOOL_DRIVER_QUEUE", "auto", {"auto", "on", "off", "OFF"}, {"yes", "1", "none"}},
    {"CUPOOL_MEMSET", "auto", {"auto", "kernel", "native"}, {"fast", "kernels"}},
    {"CUPOOL_LOG", "\"\"", {NULL}, {NULL}}, /* any text is a path: checked below */
    {"CUPOOL_LOG_LEVEL", "call", {"error", "warn", "call"}, {"debug", "all", "2"}},
    {"CUPOOL_STATS", "0", {"0", "1", "yes", "no", "true", "false", "on", "off"}, {"2", "maybe", "yess"}},
    {"CUPOOL_VERBOSE", "0", {"0", "1"}, {"2", "loud"}},
    {"CUPOOL_LIVE", "1", {"0", "1", "off", "on"}, {"2", "live"}},
    {"CUPOOL_LIVE_DIR", "/dev/shm", {NULL}, {NULL}}, /* any text is a directory: tests/test_live.sh */
    {"CUPOOL_IPC", "1", {"0", "1", "off", "on"}, {"2", "ipc"}},
    {"CUPOOL_IPC_DIR", "/dev/shm", {NULL}, {NULL}}, /* any text is a directory: tests/test_ipc.c */
    {"CUPOOL_HOST", "1", {"0", "1", "off", "on"}, {"2", "pinned"}},
    {"CUPOOL_HOST_KEEP", "1G", {"0", "256M", "unlimited"}, {"-1", "lots", "25%"}},
    {"CUPOOL_MANAGED", "1", {"0", "1", "off", "on"}, {"2", "managed"}},
    {"CUPOOL_MANAGED_KEEP", "1G", {"0", "64M", "unlimited"}, {"-1G", "some", "50%"}},
    {"CUPOOL_SHARE", "1", {"0", "1", "off", "on"}, {"2", "share"}},
    {"CUPOOL_SHARE_DIR", "/dev/shm", {NULL}, {NULL}}, /* any text is a directory: tests/test_share.c */
    {"CUPOOL_SHARE_INFO", "0", {"0", "1", "off", "on"}, {"2", "info"}},
    {"CUPOOL_IDLE_KEEP", "unlimited", {"0", "1G", "unlimited", "25%"}, {"-1", "idle", "25 %"}},
};
#define NOPTIONS (sizeof options / sizeof options[0])

static int failures;

#define EXPECT(cond, ...)                                                                                    \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                             \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fprintf(stderr, "\n");                                                                           \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

/* Runs the child with one extra setting (plus more env) and the sizes. */
static void run(tl_child_t *c, const char *const *env, const char *const *sizes)
{
    const char *args[32] = {"--child"};
    int n = 1;
    for (const char *const *s = sizes; s && *s; s++) args[n++] = *s;
    args[n] = NULL;
    tl_run_self(args, env, 0, 60, c);
    if (c->status != 0) {
        tl_child_dump("child", c);
        CHECK_FAIL("child exited with %d", c->status);
    }
}

/* The effective value VERBOSE printed for name, and where it came from. */
static int verbose_value(const char *err, const char *name, char *value, size_t len, char *origin, size_t olen)
{
    char prefix[128];
    snprintf(prefix, sizeof prefix, "cupool: %s ", name);
    for (const char *line = err; line && *line;) {
        if (strncmp(line, prefix, strlen(prefix)) == 0) {
            const char *eq = strstr(line, "= ");
            if (!eq) return -1;
            eq += 2;
            const char *sp = strchr(eq, ' ');
            const char *open = strchr(eq, '(');
            const char *close = open ? strchr(open, ')') : NULL;
            if (!sp || !open || !close) return -1;
            snprintf(value, len, "%.*s", (int)(sp - eq), eq);
            snprintf(origin, olen, "%.*s", (int)(close - open - 1), open + 1);
            return 0;
        }
        const char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : NULL;
    }
    return -1;
}

static void check_value(const char *name, const char *value, int good, const char *fallback)
{
    char setting[256];
    snprintf(setting, sizeof setting, "%s=%s", name, value);
    int is_verbose = strcmp(name, "CUPOOL_VERBOSE") == 0;
    const char *env[] = {setting, is_verbose ? NULL : "CUPOOL_VERBOSE=1", NULL};
    const char *sizes[] = {"4096", NULL};
    tl_child_t c;
    run(&c, env, sizes);
    char warn_prefix[128];
    snprintf(warn_prefix, sizeof warn_prefix, "cupool: warning: ignoring %s=", name);
    int ours = tl_count_prefix(c.err, warn_prefix), all = tl_count_prefix(c.err, "cupool: warning:");
    if (good) {
        EXPECT(all == 0, "%s: %d warnings for a good value", setting, all);
    } else {
        EXPECT(ours == 1 && all == 1, "%s: %d ignoring-warnings (%d warnings in all), expected exactly 1", setting, ours,
               all);
        /* The line names the value it ignored. */
        char quoted[300];
        snprintf(quoted, sizeof quoted, "%s=\"%s\"", name, value);
        EXPECT(tl_count_substr(c.err, quoted) == 1, "%s: the warning does not quote the value", setting);
    }
    /* The program still works: the allocation happened and was pooled. */
    EXPECT(strstr(c.out, "alloc 4096 ") != NULL, "%s: the child did not allocate", setting);
    int policy_off = good && strcmp(name, "CUPOOL_POLICY") == 0 && strcasecmp(value, "off") == 0;
    if (!policy_off)
        EXPECT(strstr(c.out, "alloc 4096 P") != NULL, "%s: 4 KiB allocation not pooled:\n%s", setting, c.out);
    /* VERBOSE shows the effective value. */
    int verbose_on = !is_verbose || (good && (strcmp(value, "1") == 0));
    if (verbose_on) {
        char eff[256], origin[64];
        if (verbose_value(c.err, name, eff, sizeof eff, origin, sizeof origin) != 0) {
            EXPECT(0, "%s: VERBOSE printed no line for %s", setting, name);
        } else if (good) {
            EXPECT(strcmp(eff, value) == 0 && strcmp(origin, "environment") == 0,
                   "%s: VERBOSE says %s (%s), expected %s (environment)", setting, eff, origin, value);
        } else {
            EXPECT(strcmp(eff, fallback) == 0 && strcmp(origin, "default") == 0,
                   "%s: VERBOSE says %s (%s), expected the default %s (default)", setting, eff, origin, fallback);
        }
    } else {
        EXPECT(tl_count_prefix(c.err, "cupool: CUPOOL_") == 0, "%s: effective values printed without VERBOSE", setting);
    }
    if (failures) tl_child_dump(setting, &c);
    tl_child_free(&c);
}

/* Allocation sizes -> "P"/"N" per size must match `expect` (one char each). */
static void check_effect(const char *const *env, const char *const *sizes, const char *expect, const char *what)
{
    tl_child_t c;
    run(&c, env, sizes);
    char got[64] = "";
    size_t k = 0;
    for (const char *line = c.out; line && *line && k < sizeof got - 1;) {
        size_t size;
        char route;
        if (sscanf(line, "alloc %zu %c", &size, &route) == 2) got[k++] = route;
        const char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : NULL;
    }
    got[k] = '\0';
    EXPECT(strcmp(got, expect) == 0, "%s: routes %s, expected %s", what, got, expect);
    EXPECT(tl_count_prefix(c.err, "cupool: warning:") == 0, "%s: unexpected warnings", what);
    if (failures) tl_child_dump(what, &c);
    tl_child_free(&c);
}

/* The pool handles (or NULL) of each allocation, and the default pool. */
static void pools_of(const char *const *env, const char *const *sizes, void **pools, int *n, void **dflt,
                     uint64_t *threshold, char **err_out)
{
    tl_child_t c;
    run(&c, env, sizes);
    *n = 0;
    *dflt = NULL;
    for (const char *line = c.out; line && *line;) {
        size_t size;
        void *p;
        uint64_t t;
        if (sscanf(line, "alloc %zu P %p threshold %" SCNu64, &size, &p, &t) == 3) {
            pools[(*n)++] = p;
            *threshold = t;
        } else if (sscanf(line, "alloc %zu N", &size) == 1) {
            pools[(*n)++] = NULL;
        } else if (sscanf(line, "default %p", &p) == 1) {
            *dflt = p;
        }
        const char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : NULL;
    }
    if (err_out) *err_out = strdup(c.err);
    tl_child_free(&c);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--child") == 0) return child(argc, argv);
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    /* Each case sets exactly the options it tests: none may be inherited
     * (scripts/gpu-tests.sh runs the whole suite under each CUPOOL_FREE). */
    for (size_t i = 0; i < NOPTIONS; i++) unsetenv(options[i].name);

    /* VERBOSE prints one line per option: exactly the options of the table. */
    {
        const char *env[] = {"CUPOOL_VERBOSE=1", NULL};
        const char *sizes[] = {"4096", NULL};
        tl_child_t c;
        run(&c, env, sizes);
        int printed = tl_count_prefix(c.err, "cupool: CUPOOL_");
        EXPECT(printed == (int)NOPTIONS, "VERBOSE printed %d options, the test knows %zu", printed, NOPTIONS);
        for (size_t i = 0; i < NOPTIONS; i++) {
            char value[256], origin[64];
            if (verbose_value(c.err, options[i].name, value, sizeof value, origin, sizeof origin) != 0) {
                EXPECT(0, "VERBOSE printed nothing for %s", options[i].name);
                continue;
            }
            if (strcmp(options[i].name, "CUPOOL_VERBOSE") == 0) continue;
            EXPECT(strcmp(value, options[i].fallback) == 0 && strcmp(origin, "default") == 0,
                   "%s: default printed as %s (%s), expected %s (default)", options[i].name, value, origin,
                   options[i].fallback);
        }
        if (failures) tl_child_dump("verbose", &c);
        tl_child_free(&c);
        /* Without VERBOSE: silence. */
        const char *quiet[] = {"CUPOOL_VERBOSE", NULL};
        run(&c, quiet, sizes);
        EXPECT(c.err[0] == '\0', "a plain run printed on stderr:\n%s", c.err);
        tl_child_free(&c);
    }

    /* Every good and bad value of every option. */
    for (size_t i = 0; i < NOPTIONS; i++) {
        for (const char *const *v = options[i].good; *v; v++) check_value(options[i].name, *v, 1, options[i].fallback);
        for (const char *const *v = options[i].bad; *v; v++) check_value(options[i].name, *v, 0, options[i].fallback);
    }
    /* Several bad values at once: one warning each, the program still pools. */
    {
        const char *env[] = {"CUPOOL_POLICY=x", "CUPOOL_FREE=x", "CUPOOL_MAX_SIZE=x", "CUPOOL_LIMIT=-1",
                             "CUPOOL_STATS=x", NULL};
        const char *sizes[] = {"4096", NULL};
        tl_child_t c;
        run(&c, env, sizes);
        EXPECT(tl_count_prefix(c.err, "cupool: warning: ignoring CUPOOL_") == 5, "5 bad options: warnings:\n%s", c.err);
        EXPECT(strstr(c.out, "alloc 4096 P") != NULL, "5 bad options: not pooled");
        tl_child_free(&c);
    }
    /* MIN_SIZE above MAX_SIZE is refused with a warning too. */
    {
        const char *env[] = {"CUPOOL_MIN_SIZE=1M", "CUPOOL_MAX_SIZE=4K", NULL};
        const char *sizes[] = {"4096", NULL};
        tl_child_t c;
        run(&c, env, sizes);
        EXPECT(tl_count_prefix(c.err, "cupool: warning:") == 1, "MIN > MAX: expected one warning:\n%s", c.err);
        EXPECT(strstr(c.out, "alloc 4096 P") != NULL, "MIN > MAX: the defaults should pool 4 KiB");
        tl_child_free(&c);
    }

    /* ---- effects ---- */
    {
        const char *none[] = {NULL};
        const char *s1[] = {"1048576", "4096", NULL};
        check_effect(none, s1, "PP", "defaults");
        const char *off[] = {"CUPOOL_POLICY=off", NULL};
        check_effect(off, s1, "NN", "CUPOOL_POLICY=off");
        tl_child_t c;
        run(&c, off, s1);
        EXPECT(strstr(c.out, "stats pooled 0 native 2") != NULL, "CUPOOL_POLICY=off: stats say\n%s", c.out);
        tl_child_free(&c);

        const char *max4k[] = {"CUPOOL_MAX_SIZE=4K", NULL};
        const char *s2[] = {"1048576", "4096", "4097", "1", NULL};
        check_effect(max4k, s2, "NPNP", "CUPOOL_MAX_SIZE=4K");
        run(&c, max4k, (const char *const[]){"1048576", NULL});
        EXPECT(strstr(c.out, "stats pooled 0 native 1") != NULL, "CUPOOL_MAX_SIZE=4K, 1 MiB: stats say\n%s", c.out);
        tl_child_free(&c);

        const char *max15[] = {"CUPOOL_MAX_SIZE=1.5K", NULL};
        check_effect(max15, (const char *const[]){"1536", "1537", NULL}, "PN", "CUPOOL_MAX_SIZE=1.5K");
        const char *maxkib[] = {"CUPOOL_MAX_SIZE=1KiB", NULL};
        check_effect(maxkib, (const char *const[]){"1024", "1025", NULL}, "PN", "CUPOOL_MAX_SIZE=1KiB");
        const char *maxg[] = {"CUPOOL_MAX_SIZE=0.001G", NULL}; /* 1073741.824 bytes: fractional, refused */
        tl_child_t g;
        run(&g, maxg, (const char *const[]){"2097152", NULL});
        EXPECT(tl_count_prefix(g.err, "cupool: warning: ignoring CUPOOL_MAX_SIZE=") == 1, "0.001G accepted");
        EXPECT(strstr(g.out, "alloc 2097152 P") != NULL, "0.001G refused but default not kept");
        tl_child_free(&g);

        const char *min1m[] = {"CUPOOL_MIN_SIZE=1M", NULL};
        check_effect(min1m, (const char *const[]){"1048575", "1048576", "4096", NULL}, "NPN", "CUPOOL_MIN_SIZE=1M");

        const char *limit[] = {"CUPOOL_LIMIT=2M", NULL};
        check_effect(limit, (const char *const[]){"1048576", "1048576", "1048576", "4096", NULL}, "PPNN",
                     "CUPOOL_LIMIT=2M");
    }
    {
        void *pools[8], *dflt;
        int n;
        uint64_t threshold = 0;
        const char *sizes[] = {"4096", "2097152", "8192", NULL};

        const char *dedicated[] = {NULL};
        pools_of(dedicated, sizes, pools, &n, &dflt, &threshold, NULL);
        CHECK_EQ(n, 3);
        EXPECT(pools[0] && pools[0] == pools[1] && pools[1] == pools[2], "dedicated: one pool expected");
        EXPECT(pools[0] != dflt, "dedicated: the pool is the device's default pool");
        EXPECT(threshold == UINT64_MAX, "default release threshold %" PRIu64 ", expected unlimited", threshold);

        const char *split[] = {"CUPOOL_POLICY=split", NULL};
        pools_of(split, sizes, pools, &n, &dflt, &threshold, NULL);
        CHECK_EQ(n, 3);
        EXPECT(pools[0] && pools[1] && pools[0] != pools[1] && pools[0] == pools[2],
               "split: small %p, large %p, small %p", pools[0], pools[1], pools[2]);

        const char *split64[] = {"CUPOOL_POLICY=split", "CUPOOL_SPLIT_SIZE=64K", NULL};
        const char *s64[] = {"65535", "65536", NULL};
        pools_of(split64, s64, pools, &n, &dflt, &threshold, NULL);
        CHECK_EQ(n, 2);
        EXPECT(pools[0] && pools[1] && pools[0] != pools[1], "split at 64K: 65535 and 65536 share a pool");

        const char *def[] = {"CUPOOL_POLICY=default", NULL};
        pools_of(def, sizes, pools, &n, &dflt, &threshold, NULL);
        EXPECT(dflt && pools[0] == dflt && pools[1] == dflt, "default: pool %p, device default %p", pools[0], dflt);

        const char *t64[] = {"CUPOOL_RELEASE_THRESHOLD=64K", NULL};
        pools_of(t64, sizes, pools, &n, &dflt, &threshold, NULL);
        EXPECT(threshold == 65536, "CUPOOL_RELEASE_THRESHOLD=64K: pool threshold %" PRIu64, threshold);
        const char *t15[] = {"CUPOOL_RELEASE_THRESHOLD=1.5G", NULL};
        pools_of(t15, sizes, pools, &n, &dflt, &threshold, NULL);
        EXPECT(threshold == 1610612736ull, "CUPOOL_RELEASE_THRESHOLD=1.5G: pool threshold %" PRIu64, threshold);
        const char *tt[] = {"CUPOOL_RELEASE_THRESHOLD=1T", NULL};
        pools_of(tt, sizes, pools, &n, &dflt, &threshold, NULL);
        EXPECT(threshold == 1ull << 40, "CUPOOL_RELEASE_THRESHOLD=1T: pool threshold %" PRIu64, threshold);
        const char *tl[] = {"CUPOOL_LIMIT=64M", NULL};
        pools_of(tl, sizes, pools, &n, &dflt, &threshold, NULL);
        EXPECT(threshold == 64ull << 20, "CUPOOL_LIMIT=64M: pool threshold %" PRIu64 ", expected the limit", threshold);
    }
    {
        /* STATS=1: a summary with per-entry-point call counts at exit. */
        const char *env[] = {"CUPOOL_STATS=1", NULL};
        const char *sizes[] = {"4096", "8192", "12288", NULL};
        tl_child_t c;
        run(&c, env, sizes);
        EXPECT(tl_count_prefix(c.err, "cupool: statistics") == 1, "CUPOOL_STATS=1: no summary");
        unsigned long long allocs = 0, frees = 0;
        for (const char *line = c.err; line && *line;) {
            char name[64];
            unsigned long long count;
            if (sscanf(line, "cupool: %63s %llu", name, &count) == 2) {
                if (strcmp(name, "cuMemAlloc_v2") == 0) allocs = count;
                if (strcmp(name, "cuMemFree_v2") == 0) frees = count;
            }
            const char *nl = strchr(line, '\n');
            line = nl ? nl + 1 : NULL;
        }
        EXPECT(allocs == 3 && frees == 3, "CUPOOL_STATS=1: cuMemAlloc_v2 %llu, cuMemFree_v2 %llu, expected 3 and 3",
               allocs, frees);
        if (failures) tl_child_dump("stats", &c);
        tl_child_free(&c);
        const char *off[] = {"CUPOOL_STATS=0", NULL};
        run(&c, off, sizes);
        EXPECT(tl_count_prefix(c.err, "cupool: statistics") == 0, "CUPOOL_STATS=0 printed a summary");
        tl_child_free(&c);
    }
    {
        /* LOG=path (with %p) writes a log there. */
        char dir[] = "/tmp/cupool-options-XXXXXX";
        CHECK_TRUE(mkdtemp(dir) != NULL);
        char setting[300], prefix[300];
        snprintf(setting, sizeof setting, "CUPOOL_LOG=%s/log.%%p", dir);
        const char *env[] = {setting, NULL};
        const char *sizes[] = {"4096", NULL};
        tl_child_t c;
        run(&c, env, sizes);
        EXPECT(tl_count_prefix(c.err, "cupool: warning:") == 0, "CUPOOL_LOG: warnings:\n%s", c.err);
        tl_child_free(&c);
        char cmd[700];
        snprintf(prefix, sizeof prefix, "%s/log.", dir);
        snprintf(cmd, sizeof cmd, "grep -l cuMemAlloc %s* >/dev/null 2>&1", prefix);
        EXPECT(system(cmd) == 0, "CUPOOL_LOG=%s/log.%%p: no log mentioning cuMemAlloc", dir);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    }
    if (failures) {
        fprintf(stderr, "test_options: %d failures\n", failures);
        return 1;
    }
    printf("test_options: all options behave\n");
    return 0;
}
