/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers shared by the core test programs (testlib.h).  Everything here
 * fails the test with a message rather than returning errors: a helper that
 * cannot do its job means the test cannot say anything.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

CUcontext tl_init(int ordinal)
{
    CUdevice dev;
    CUcontext ctx;
    CHECK_CU(cuInit(0));
    CHECK_CU(cuDeviceGet(&dev, ordinal));
    CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK_CU(cuCtxSetCurrent(ctx));
    return ctx;
}

int tl_device_count(void)
{
    int n = 0;
    CHECK_CU(cuDeviceGetCount(&n));
    return n;
}

cupool_stats_t tl_stats(int device)
{
    int (*get)(int, cupool_stats_t *) = (int (*)(int, cupool_stats_t *))dlsym(RTLD_DEFAULT, "cupool_get_stats");
    if (!get) CHECK_FAIL("cupool_get_stats not found: is libcupool.so preloaded?");
    cupool_stats_t s;
    memset(&s, 0, sizeof s);
    CHECK_EQ(get(device, &s), 0);
    return s;
}

const char *tl_self_path(void)
{
    static char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0 || (size_t)n >= sizeof path - 1) return "/proc/self/exe";
    path[n] = '\0';
    return path;
}

void tl_reexec_with(char **argv, const char *name, const char *value)
{
    if (getenv(name)) return;
    setenv(name, value, 1);
    execv(tl_self_path(), argv);
    CHECK_FAIL("execv(%s): %s", tl_self_path(), strerror(errno));
}

int tl_cuda_tool_attached(void)
{
    const char *nsight = getenv("CUDA_INJECTION64_PATH"), *sanitizer = getenv("NV_SANITIZER_INJECTION_PORT_BASE");
    return (nsight && *nsight) || (sanitizer && *sanitizer);
}

int tl_native(void)
{
    const char *n = getenv("CUPOOL_TEST_NATIVE");
    return n && strcmp(n, "1") == 0;
}

/* LD_PRELOAD without libcupool.so (whatever else was preloaded stays). */
static void drop_cupool_preload(void)
{
    const char *pre = getenv("LD_PRELOAD");
    if (!pre) return;
    char *copy = strdup(pre), *out = calloc(1, strlen(pre) + 1), *save = NULL;
    if (!copy || !out) CHECK_FAIL("out of memory");
    for (char *tok = strtok_r(copy, ": ", &save); tok; tok = strtok_r(NULL, ": ", &save)) {
        if (strstr(tok, "libcupool")) continue;
        if (*out) strcat(out, ":");
        strcat(out, tok);
    }
    if (*out) setenv("LD_PRELOAD", out, 1);
    else unsetenv("LD_PRELOAD");
    free(copy);
    free(out);
}

static void append(char **buf, size_t *len, const char *data, size_t n)
{
    char *grown = realloc(*buf, *len + n + 1);
    if (!grown) CHECK_FAIL("out of memory");
    memcpy(grown + *len, data, n);
    *len += n;
    grown[*len] = '\0';
    *buf = grown;
}

void tl_apply_env(const char *const *env)
{
    for (const char *const *e = env; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq) {
            unsetenv(*e);
            continue;
        }
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(eq - *e), *e);
        setenv(name, eq + 1, 1);
    }
}

void tl_handle_to_hex(const CUipcMemHandle *h, char out[129])
{
    const unsigned char *b = (const unsigned char *)h->reserved;
    for (int i = 0; i < 64; i++) sprintf(out + 2 * i, "%02x", b[i]);
}

void tl_handle_from_hex(const char *hex, CUipcMemHandle *h)
{
    unsigned char *b = (unsigned char *)h->reserved;
    memset(h, 0, sizeof *h);
    for (int i = 0; i < 64 && hex[2 * i] && hex[2 * i + 1]; i++) sscanf(hex + 2 * i, "%2hhx", &b[i]);
}

void tl_run_self(const char *const *args, const char *const *env, int native, int timeout_s, tl_child_t *child)
{
    int out[2], err[2];
    if (pipe(out) || pipe(err)) CHECK_FAIL("pipe: %s", strerror(errno));
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) CHECK_FAIL("fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(err[1], 2);
        close(out[0]);
        close(out[1]);
        close(err[0]);
        close(err[1]);
        tl_apply_env(env);
        if (native) {
            drop_cupool_preload();
            setenv("CUPOOL_TEST_NATIVE", "1", 1);
        } else {
            unsetenv("CUPOOL_TEST_NATIVE");
        }
        const char *argv[64];
        int n = 0;
        argv[n++] = "test-child";
        for (const char *const *a = args; a && *a && n < 63; a++) argv[n++] = *a;
        argv[n] = NULL;
        execv(tl_self_path(), (char *const *)argv);
        fprintf(stderr, "execv: %s\n", strerror(errno));
        _exit(127);
    }
    close(out[1]);
    close(err[1]);
    child->out = calloc(1, 1);
    child->err = calloc(1, 1);
    size_t out_len = 0, err_len = 0;
    struct pollfd fds[2] = {{.fd = out[0], .events = POLLIN}, {.fd = err[0], .events = POLLIN}};
    int open_fds = 2, timed_out = 0;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (open_fds > 0) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long left_ms = (long)timeout_s * 1000 - ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000);
        if (left_ms <= 0) {
            timed_out = 1;
            kill(pid, SIGKILL);
            break;
        }
        int r = poll(fds, 2, (int)left_ms);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) CHECK_FAIL("poll: %s", strerror(errno));
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char buf[4096];
            ssize_t n = read(fds[i].fd, buf, sizeof buf);
            if (n > 0) {
                if (i == 0) append(&child->out, &out_len, buf, (size_t)n);
                else append(&child->err, &err_len, buf, (size_t)n);
            } else if (n == 0 || errno != EINTR) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
            }
        }
    }
    for (int i = 0; i < 2; i++)
        if (fds[i].fd >= 0) close(fds[i].fd);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (timed_out) child->status = 124;
    else if (WIFEXITED(status)) child->status = WEXITSTATUS(status);
    else child->status = 128 + WTERMSIG(status);
}

void tl_child_free(tl_child_t *child)
{
    free(child->out);
    free(child->err);
    child->out = child->err = NULL;
}

void tl_child_dump(const char *what, const tl_child_t *child)
{
    fprintf(stderr, "---- %s: status %d\n---- stdout:\n%s---- stderr:\n%s----\n", what, child->status,
            child->out ? child->out : "", child->err ? child->err : "");
}

/* Whether `word` is one of the words of `list` (separated by spaces or commas). */
static int tl_word_in(const char *word, const char *list)
{
    size_t len = strlen(word);
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, " ,");
        if (n == len && strncmp(p, word, len) == 0) return 1;
        p += n;
        p += strspn(p, " ,");
    }
    return 0;
}

int tl_run_modes(const char *const *modes, int nmodes, const char *const *env, int timeout_s,
                 int (*check)(const char *mode, const tl_child_t *child))
{
    int failed = 0, ran = 0;
    const char *only = getenv("CUPOOL_TEST_MODES");
    for (int i = 0; i < nmodes; i++) {
        if (only && *only && !tl_word_in(modes[i], only)) {
            printf("mode %-8s skipped (CUPOOL_TEST_MODES=%s)\n", modes[i], only);
            continue;
        }
        ran++;
        int native = strcmp(modes[i], "native") == 0;
        /* "deferred-streams": deferred with CUPOOL_DEFERRED_FENCE=streams;
         * "deferred-host": with CUPOOL_DEFERRED_ORDER=host. */
        const char *dash = strchr(modes[i], '-');
        int order = dash && (strcmp(dash + 1, "host") == 0 || strcmp(dash + 1, "gpu") == 0);
        char setting[64], fence[64], deferred_order[64];
        snprintf(setting, sizeof setting, "CUPOOL_FREE=%.*s", dash ? (int)(dash - modes[i]) : 32,
                 native ? "auto" : modes[i]);
        snprintf(fence, sizeof fence, "CUPOOL_DEFERRED_FENCE=%s", dash && !order ? dash + 1 : "auto");
        snprintf(deferred_order, sizeof deferred_order, "CUPOOL_DEFERRED_ORDER=%s", order ? dash + 1 : "gpu");
        const char *all[32] = {setting, fence, deferred_order};
        int n = 3;
        for (const char *const *e = env; e && *e && n < 31; e++) all[n++] = *e;
        all[n] = NULL;
        const char *args[] = {"--child", NULL};
        tl_child_t c;
        tl_run_self(args, all, native, timeout_s, &c);
        printf("%s", c.out);
        int ok = c.status == 0 && (!check || check(modes[i], &c));
        if (!ok) {
            tl_child_dump(setting, &c);
            failed++;
        }
        printf("mode %-8s %s\n", modes[i], ok ? "passed" : "FAILED");
        tl_child_free(&c);
    }
    if (!ran) {
        printf("no mode of this test is in CUPOOL_TEST_MODES=%s\n", only);
        exit(CHECK_SKIP);
    }
    return failed;
}

int tl_count_prefix(const char *text, const char *prefix)
{
    int n = 0;
    size_t len = strlen(prefix);
    for (const char *line = text; line && *line;) {
        if (strncmp(line, prefix, len) == 0) n++;
        const char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : NULL;
    }
    return n;
}

int tl_count_substr(const char *text, const char *needle)
{
    int n = 0;
    for (const char *line = text; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        const char *hit = strstr(line, needle);
        if (hit && hit + strlen(needle) <= line + len) n++;
        line = nl ? nl + 1 : NULL;
    }
    return n;
}

int tl_parse_results(const char *out, CUresult *results, size_t nrows)
{
    int n = 0;
    for (size_t i = 0; i < nrows; i++) results[i] = (CUresult)-1;
    for (const char *line = out; line && *line;) {
        size_t i;
        int r;
        if (sscanf(line, "%zu %d", &i, &r) == 2 && i < nrows) {
            results[i] = (CUresult)r;
            n++;
        }
        const char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : NULL;
    }
    return n;
}

CUmemoryPool tl_pool_of(CUdeviceptr ptr)
{
    CUmemoryPool pool = NULL;
    CHECK_CU(cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, ptr));
    return pool;
}

uint64_t tl_pool_used(CUmemoryPool pool)
{
    cuuint64_t used = 0;
    CHECK_CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    return used;
}

/* libcuda.so.1's own cuMemGetInfo, past cupool: what the device itself has
 * free.  cupool overrides dlsym, so the C library's own is taken with dlvsym. */
static CUresult device_mem_get_info(size_t *free, size_t *total)
{
    typedef void *dlsym_fn_t(void *, const char *);
    static CUresult (*real)(size_t *, size_t *);
    if (!real) {
        void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
        void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
        dlsym_fn_t *libc_dlsym = libc ? (dlsym_fn_t *)dlvsym(libc, "dlsym", "GLIBC_2.34") : NULL;
        if (!libc_dlsym) libc_dlsym = (dlsym_fn_t *)dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5");
        CHECK_TRUE(driver && libc_dlsym);
        real = (CUresult(*)(size_t *, size_t *))libc_dlsym(driver, "cuMemGetInfo_v2");
        CHECK_TRUE(real != NULL);
    }
    return real(free, total);
}

void tl_mem_get_info_bracketed(size_t *seen, size_t *total, size_t *device_low, size_t *device_high)
{
    /* Other processes on the GPU (parallel sanitizer runs) move the
     * device's free memory both ways: a bracket holds only when the two
     * readings agree, which a few tries nearly always find. */
    size_t before = 0, after = 0;
    for (int tries = 0; tries < 100; tries++) {
        CHECK_CU(device_mem_get_info(&before, total));
        CHECK_CU(cuMemGetInfo(seen, total));
        CHECK_CU(device_mem_get_info(&after, total));
        if (before == after) break;
        usleep(1000);
    }
    *device_low = before < after ? before : after;
    *device_high = before < after ? after : before;
}

uint64_t tl_held(void)
{
    size_t free_bytes = 0, total = 0;
    CHECK_CU(cuMemGetInfo(&free_bytes, &total));
    return total - free_bytes;
}

void tl_fill(CUdeviceptr ptr, size_t bytes, uint32_t pattern)
{
    size_t words = bytes / 4, tail = bytes % 4;
    if (words) CHECK_CU(cuMemsetD32(ptr, pattern, words));
    if (tail) CHECK_CU(cuMemsetD8(ptr + words * 4, (unsigned char)pattern, tail));
}

static int word_is(CUdeviceptr at, uint32_t pattern)
{
    uint32_t got = 0;
    CHECK_CU(cuMemcpyDtoH(&got, at, sizeof got));
    if (got == pattern) return 1;
    fprintf(stderr, "word at 0x%llx is 0x%08x, expected 0x%08x\n", (unsigned long long)at, got, pattern);
    return 0;
}

int tl_spot_check(CUdeviceptr ptr, size_t bytes, uint32_t pattern)
{
    size_t words = bytes / 4, tail = bytes % 4;
    int ok = 1;
    if (words) {
        ok &= word_is(ptr, pattern);
        ok &= word_is(ptr + words / 2 * 4, pattern);
        ok &= word_is(ptr + (words - 1) * 4, pattern);
    }
    if (tail) {
        unsigned char got[4] = {0};
        CHECK_CU(cuMemcpyDtoH(got, ptr + words * 4, tail));
        for (size_t i = 0; i < tail; i++)
            if (got[i] != (unsigned char)pattern) {
                fprintf(stderr, "tail byte %zu of 0x%llx is 0x%02x, expected 0x%02x\n", i, (unsigned long long)ptr,
                        got[i], (unsigned char)pattern);
                ok = 0;
            }
    }
    return ok ? 0 : -1;
}

uint64_t tl_rand(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* ---- cases, each in a child -------------------------------------------- */

const tl_case_t *tl_case_asked(const tl_case_t *cases, size_t ncases, int argc, char **argv)
{
    if (argc < 3 || strcmp(argv[1], "--case") != 0) return NULL;
    for (size_t i = 0; i < ncases; i++)
        if (strcmp(argv[2], cases[i].name) == 0) return &cases[i];
    CHECK_FAIL("no case %s", argv[2]);
}

/* 0 when the control failed as it must, 1 otherwise. */
static int control_fails(const char *name, const char *const *env, const char *what)
{
    const char *args[] = {"--case", name, NULL};
    tl_child_t c;
    tl_run_self(args, env, 0, 60, &c);
    int ok = c.status == 1;
    if (!ok) tl_child_dump(name, &c);
    printf("control: %s with %s fails%s\n", name, what, ok ? ", as it must" : " NOT (FAILED)");
    tl_child_free(&c);
    return !ok;
}

int tl_run_cases(const tl_case_t *cases, size_t ncases, const char *(*skip)(const tl_case_t *))
{
    int failed = 0;
    for (size_t i = 0; i < ncases; i++) {
        const tl_case_t *k = &cases[i];
        const char *why = k->sim_only && check_real_driver() ? "on the real driver" : skip ? skip(k) : NULL;
        if (why) {
            printf("%s: skipped (%s)\n", k->name, why);
            continue;
        }
        const char *args[] = {"--case", k->name, NULL};
        tl_child_t c;
        tl_run_self(args, k->env, 0, 60, &c);
        printf("%s", c.out);
        int ok = c.status == 0 && (!k->says || tl_count_substr(c.err, k->says) == 1);
        if (!ok) tl_child_dump(k->name, &c), failed++;
        printf("%s: %s\n", k->name, ok ? "passed" : "FAILED");
        tl_child_free(&c);
    }
    return failed;
}

int tl_sim_cases_main(const tl_case_t *cases, size_t ncases, int argc, char **argv, const tl_control_t *control)
{
    const tl_case_t *asked = tl_case_asked(cases, ncases, argc, argv);
    if (asked) return asked->run();
    if (check_real_driver()) return CHECK_SKIP;
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    int failed = tl_run_cases(cases, ncases, NULL);
    if (control) failed += control_fails(control->name, control->env, control->what);
    return failed ? 1 : 0;
}
