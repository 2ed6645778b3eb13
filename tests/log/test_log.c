/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The call log (CUPOOL_LOG) holds exactly the calls a program made.  The test
 * runs itself again in child processes, each with its own CUPOOL_* settings
 * (cupool reads them once, at the program's cuInit), and then reads the
 * logs they left:
 *   calls    allocations of known sizes, pooled and native (CUPOOL_MAX_SIZE),
 *            their frees and one bad free: every line is JSON, one start line
 *            with the child's pid, then exactly these calls with their sizes,
 *            routes, pointers and results;
 *   store    an allocation a ready store served carries "store": true, and
 *            no other line carries "store" (in `sync`, which keeps nothing,
 *            none);
 *   fork     %p names a separate file for a child started with fork + exec;
 *   symlink  a symbolic link at the log path is refused with a warning and
 *            the program runs on;
 *   level    CUPOOL_LOG_LEVEL=error logs the failed calls only;
 *   exit     a thread calls exit() while another one is allocating: every
 *            call that returned before is in the log, in whole lines;
 *   live     a thread logs three calls and goes quiet: its lines reach the
 *            file while the program still runs (the child reads its own log);
 *   late     an exit handler that runs after cupool's (registered before the
 *            program's cuInit) still gets its calls into the log;
 *   ending   each thread's last calls come from a thread-exit destructor
 *            of the program's, which runs after cupool's own: each
 *            thread's lines are all there, in the order of its calls;
 *   cancel   a thread is cancelled while the log is backed up (a pipe no
 *            one reads yet): the program's other calls and its exit still
 *            get through (cancelled inside write(), the thread used to take
 *            cupool's write lock with it and hang the process);
 *   volume   8 threads log far more than one buffer each, so whole buffers
 *            go through cupool's writer thread: every call is there once, in
 *            its thread's order; then a child made by fork() alone (no exec)
 *            logs to its own file, with none of the parent's lines.
 * Each child's standard output goes to DIR/MODE.out, where it reports what
 * the parent cannot see (a result name, a pid, a count).
 */
#include "../testlib.h"
#include "../../src/tools/jsonl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ENTRIES 200000

static const size_t pooled_sizes[] = {1, 256, 1000, 4096, 65536, 1 << 20};
static const size_t native_sizes[] = {3 << 20, 5 << 20};
#define NPOOLED (sizeof pooled_sizes / sizeof *pooled_sizes)
#define NNATIVE (sizeof native_sizes / sizeof *native_sizes)
#define MAX_SIZE_OPTION "2M"
#define BAD_POINTER ((CUdeviceptr)0x1234)

static CUcontext volume_ctx;
#define PATH_BYTES 4200

/* ---- the children ------------------------------------------------------- */

static int child_calls(void)
{
    tl_init(0);
    CUdeviceptr p[NPOOLED + NNATIVE];
    for (size_t i = 0; i < NPOOLED; i++) CHECK_CU(cuMemAlloc(&p[i], pooled_sizes[i]));
    for (size_t i = 0; i < NNATIVE; i++) CHECK_CU(cuMemAlloc(&p[NPOOLED + i], native_sizes[i]));
    for (size_t i = NPOOLED + NNATIVE; i-- > 0;) CHECK_CU(cuMemFree(p[i]));
    CUresult r = cuMemFree(BAD_POINTER);
    CHECK_NE(r, CUDA_SUCCESS);
    printf("badfree %s\n", check_result_name(r));
    return 0;
}

/* An allocation, its free, the same size again (from the store, in a mode
 * that keeps freed blocks), its free, and another size (from the pool). */
static int child_store(void)
{
    tl_init(0);
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, 4096));
    CHECK_CU(cuMemFree(p));
    CHECK_CU(cuMemAlloc(&p, 4096));
    CHECK_CU(cuMemFree(p));
    CHECK_CU(cuMemAlloc(&p, 8192));
    CHECK_CU(cuMemFree(p));
    return 0;
}

static int child_fork(char *self)
{
    tl_init(0);
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, 4096));
    fflush(stdout);
    pid_t pid = fork();
    CHECK_TRUE(pid >= 0);
    if (pid == 0) {
        char *args[] = {self, (char *)"forked", NULL};
        execv(tl_self_path(), args);
        _exit(127);
    }
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK_TRUE(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    printf("child %d\n", (int)pid);
    CHECK_CU(cuMemFree(p));
    return 0;
}

static int child_forked(void)
{
    tl_init(0);
    CUdeviceptr a, b;
    CHECK_CU(cuMemAlloc(&a, 111));
    CHECK_CU(cuMemAlloc(&b, 222));
    CHECK_CU(cuMemFree(a));
    CHECK_CU(cuMemFree(b));
    return 0;
}

static int child_level(void)
{
    tl_init(0);
    CUdeviceptr p[3], q;
    for (int i = 0; i < 3; i++) CHECK_CU(cuMemAlloc(&p[i], 1000 * (size_t)(i + 1)));
    for (int i = 0; i < 3; i++) CHECK_CU(cuMemFree(p[i]));
    CHECK_NE(cuMemFree(BAD_POINTER), CUDA_SUCCESS);
    CHECK_NE(cuMemAlloc(&q, 0), CUDA_SUCCESS);
    return 0;
}


/* ---- live: lines readable while the program runs ------------------------- */

#define LIVE_SIZE 5151

static int child_live(void)
{
    tl_init(0);
    for (int i = 0; i < 3; i++) {
        CUdeviceptr p;
        CHECK_CU(cuMemAlloc(&p, LIVE_SIZE));
        CHECK_CU(cuMemFree(p));
    }
    /* No call from here on: only cupool's writer can bring the lines out. */
    /* Its own log: CUPOOL_LOG with %p (at its end) replaced. */
    const char *pattern = getenv("CUPOOL_LOG");
    CHECK_TRUE(pattern && strstr(pattern, "%p.jsonl"));
    char path[PATH_BYTES];
    snprintf(path, sizeof path, "%.*s%d.jsonl", (int)(strstr(pattern, "%p.jsonl") - pattern), pattern, (int)getpid());
    int seen = 0;
    for (int tries = 0; tries < 50 && seen < 3; tries++) {
        usleep(100 * 1000);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        char line[2048];
        seen = 0;
        while (fgets(line, sizeof line, f))
            seen += strstr(line, "\"call\":\"cuMemAlloc_v2\"") && strstr(line, "\"size\":5151,");
        fclose(f);
    }
    printf("seen %d\n", seen);
    return 0;
}

/* ---- late: calls after cupool's own exit handler ------------------------- */

#define LATE_SIZE 4242

/* Registered before cuInit, so it runs after cupool's handler (exit handlers
 * run in reverse order).  A real driver may be shutting down by then: the
 * call's result does not matter, its line does. */
static void late_calls(void)
{
    CUdeviceptr p;
    if (cuMemAlloc(&p, LATE_SIZE) == CUDA_SUCCESS) cuMemFree(p);
}

static int child_late(void)
{
    CHECK_EQ(atexit(late_calls), 0);
    tl_init(0);
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, 1000));
    CHECK_CU(cuMemFree(p));
    return 0;
}

/* ---- volume: buffers handed to the writer thread ------------------------ */

#define VOLUME_THREADS 8
#define VOLUME_PAIRS 4000
#define VOLUME_CHILD_CALLS 3000
/* Thread k's i-th allocation has size volume_size(k, i): the log says which
 * call it was. */
static size_t volume_size(int k, int i)
{
    return (size_t)(k + 1) * 100000 + (size_t)i;
}

/* Thread k's first n allocation + free pairs, on volume_ctx. */
static void numbered_pairs(int k, int n)
{
    CHECK_CU(cuCtxSetCurrent(volume_ctx));
    for (int i = 0; i < n; i++) {
        CUdeviceptr p;
        CHECK_CU(cuMemAlloc(&p, volume_size(k, i)));
        CHECK_CU(cuMemFree(p));
    }
}

static void *volume_thread(void *arg)
{
    numbered_pairs((int)(intptr_t)arg, VOLUME_PAIRS);
    return NULL;
}

static int child_volume(void)
{
    volume_ctx = tl_init(0);
    pthread_t t[VOLUME_THREADS];
    for (int k = 0; k < VOLUME_THREADS; k++)
        CHECK_EQ(pthread_create(&t[k], NULL, volume_thread, (void *)(intptr_t)k), 0);
    for (int k = 0; k < VOLUME_THREADS; k++) CHECK_EQ(pthread_join(t[k], NULL), 0);
    fflush(stdout);
    pid_t pid = fork();
    CHECK_TRUE(pid >= 0);
    if (pid == 0) {
        /* A real driver refuses a forked child (natively too): its calls
         * fail, and each is logged all the same.  The alarm ends a child
         * the driver would hang. */
        alarm(20);
        for (int i = 0; i < VOLUME_CHILD_CALLS; i++) {
            CUdeviceptr p;
            if (cuMemAlloc(&p, 777) == CUDA_SUCCESS) cuMemFree(p);
        }
        exit(0);
    }
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    printf("child %d\n", (int)pid);
    return 0;
}

/* ---- ending: calls from a thread's exit destructors --------------------- */

#define ENDING_THREADS 8
#define ENDING_CALLS 300
#define ENDING_LATE 3
static pthread_key_t ending_key;

/* Runs after cupool's thread-exit handler (its key is older: made at
 * cuInit), so the thread's buffer is gone by then. */
static void ending_destructor(void *arg)
{
    int k = (int)(intptr_t)arg - 1;
    /* A real driver may have let go of the thread's context, or refuse the
     * calls this late (natively too): their results do not matter, their
     * lines do, and a failed call is logged as well. */
    cuCtxSetCurrent(volume_ctx);
    for (int i = 0; i < ENDING_LATE; i++) {
        CUdeviceptr p = 0;
        if (cuMemAlloc(&p, volume_size(k, ENDING_CALLS + i)) != CUDA_SUCCESS) p = 0;
        cuMemFree(p);
    }
}

static void *ending_thread(void *arg)
{
    int k = (int)(intptr_t)arg;
    numbered_pairs(k, ENDING_CALLS);
    pthread_setspecific(ending_key, (void *)(intptr_t)(k + 1));
    return NULL;
}

static int child_ending(void)
{
    volume_ctx = tl_init(0);
    CHECK_EQ(pthread_key_create(&ending_key, ending_destructor), 0);
    pthread_t t[ENDING_THREADS];
    for (int k = 0; k < ENDING_THREADS; k++)
        CHECK_EQ(pthread_create(&t[k], NULL, ending_thread, (void *)(intptr_t)k), 0);
    for (int k = 0; k < ENDING_THREADS; k++) CHECK_EQ(pthread_join(t[k], NULL), 0);
    return 0;
}

/* ---- cancel: a thread cancelled while the log is backed up --------------- */

#define CANCEL_SIZE 3333
static atomic_ulong cancel_calls;

static void *cancelled_thread(void *arg)
{
    CHECK_CU(cuCtxSetCurrent(arg));
    for (;;) {
        CUdeviceptr p;
        CHECK_CU(cuMemAlloc(&p, CANCEL_SIZE));
        CHECK_CU(cuMemFree(p));
        atomic_fetch_add(&cancel_calls, 1);
        pthread_testcancel();
    }
    return NULL;
}

static void *drain_thread(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[65536];
    while (read(fd, buf, sizeof buf) > 0) {
    }
    return NULL;
}

/* CUPOOL_LOG=-, and standard error a pipe read by no one until the thread
 * is cancelled. */
static int child_cancel(void)
{
    alarm(30); /* a hang ends the child, and fails the test */
    int fds[2];
    CHECK_EQ(pipe(fds), 0);
    CHECK_EQ(dup2(fds[1], STDERR_FILENO), STDERR_FILENO);
    CUcontext ctx = tl_init(0);
    pthread_t t, d;
    CHECK_EQ(pthread_create(&t, NULL, cancelled_thread, ctx), 0);
    /* Until the pipe, and then cupool's writer queue, fill and the thread
     * stops. */
    unsigned long before;
    do {
        before = atomic_load(&cancel_calls);
        usleep(200 * 1000);
    } while (atomic_load(&cancel_calls) != before);
    CHECK_EQ(pthread_cancel(t), 0);
    CHECK_EQ(pthread_create(&d, NULL, drain_thread, (void *)(intptr_t)fds[0]), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    for (int i = 0; i < 1000; i++) {
        CUdeviceptr p;
        CHECK_CU(cuMemAlloc(&p, CANCEL_SIZE));
        CHECK_CU(cuMemFree(p));
    }
    printf("calls %lu\n", atomic_load(&cancel_calls));
    return 0;
}

static atomic_ulong allocations_done;
static atomic_int exiting;

static void *allocating_thread(void *arg)
{
    CHECK_CU(cuCtxSetCurrent(arg));
    for (;;) {
        CUdeviceptr p;
        /* Once the other thread calls exit(), a real driver tears itself down
         * under this loop (CUDA_ERROR_DEINITIALIZED): natively too, so stop
         * quietly and let the exit finish. */
        if (cuMemAlloc(&p, 4096 + atomic_load(&allocations_done) % 4096) != CUDA_SUCCESS) break;
        atomic_fetch_add(&allocations_done, 1);
        if (cuMemFree(p) != CUDA_SUCCESS) break;
    }
    if (!atomic_load(&exiting)) CHECK_FAIL("allocation failed before the program began to exit");
    for (;;) pause();
    return NULL;
}

static void *exiting_thread(void *arg)
{
    (void)arg;
    while (atomic_load(&allocations_done) < 3000) sched_yield();
    /* Every allocation counted here has returned, so cupool has logged it. */
    printf("count %lu\n", atomic_load(&allocations_done));
    fflush(stdout);
    atomic_store(&exiting, 1);
    exit(0);
}

static int child_exit(void)
{
    CUcontext ctx = tl_init(0);
    pthread_t a, b;
    CHECK_EQ(pthread_create(&a, NULL, allocating_thread, ctx), 0);
    CHECK_EQ(pthread_create(&b, NULL, exiting_thread, NULL), 0);
    pthread_join(a, NULL); /* never returns: the exiting thread ends the process */
    return 1;
}

static char dir[4096];

/* ---- reading a log ------------------------------------------------------ */

typedef struct entry {
    char call[64], result[64], route[16];
    uint64_t t, size, ptr;
    int64_t pid, tid, dev;
    int store; /* "store": 0 absent, 1 true, -1 anything else */
} entry_t;

static int python_available = -1;

static void check_with_python(const char *path)
{
    if (python_available < 0) python_available = system("python3 -c 'import json' >/dev/null 2>&1") == 0;
    if (!python_available) return;
    char cmd[4200];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys\nfor n, l in enumerate(open(sys.argv[1]), 1):\n"
             "    o = json.loads(l)\n    assert isinstance(o, dict), n\n' '%s'",
             path);
    if (system(cmd) != 0) CHECK_FAIL("python3 json.loads rejects a line of %s", path);
}

/* Reads every line of the log at path; fails the test on a malformed one. */
static int read_log(const char *path, entry_t *out, int max)
{
    FILE *f = fopen(path, "r");
    if (!f) CHECK_FAIL("cannot open %s: %s", path, strerror(errno));
    char *text = NULL;
    size_t cap = 0;
    ssize_t len;
    int n = 0, lineno = 0;
    while ((len = getline(&text, &cap, f)) >= 0) {
        lineno++;
        if (len == 0 || text[len - 1] != '\n') CHECK_FAIL("%s:%d: line without its newline: %s", path, lineno, text);
        jsonl_line_t line;
        const char *why;
        if (jsonl_parse(text, (size_t)len - 1, &line, &why) != 0) CHECK_FAIL("%s:%d: %s: %s", path, lineno, why, text);
        if (n >= max) CHECK_FAIL("%s: more than %d lines", path, max);
        entry_t *e = &out[n++];
        memset(e, 0, sizeof *e);
        e->dev = e->tid = e->pid = -1;
        if (jsonl_get_u64(&line, "t", &e->t) != 0) CHECK_FAIL("%s:%d: no \"t\": %s", path, lineno, text);
        if (jsonl_get_str(&line, "call", e->call, sizeof e->call) != 0)
            CHECK_FAIL("%s:%d: no \"call\": %s", path, lineno, text);
        jsonl_get_str(&line, "result", e->result, sizeof e->result);
        jsonl_get_str(&line, "route", e->route, sizeof e->route);
        jsonl_get_u64(&line, "size", &e->size);
        jsonl_get_i64(&line, "pid", &e->pid);
        jsonl_get_i64(&line, "tid", &e->tid);
        jsonl_get_i64(&line, "dev", &e->dev);
        const jsonl_field_t *store = jsonl_get(&line, "store");
        e->store = !store ? 0 : store->type == JSONL_TRUE ? 1 : -1;
        if (jsonl_get(&line, "ptr") && jsonl_get_ptr(&line, "ptr", &e->ptr) != 0)
            CHECK_FAIL("%s:%d: bad \"ptr\": %s", path, lineno, text);
        if (strncmp(e->call, "cupool.", 7) != 0) {
            /* Every call line carries the documented fields. */
            static const char *const fields[] = {"tid", "ptr", "size", "dev", "stream", "route", "mode", "result",
                                                 "dur_ns", "reserved"};
            for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
                if (!jsonl_get(&line, fields[i])) CHECK_FAIL("%s:%d: no \"%s\": %s", path, lineno, fields[i], text);
        }
    }
    free(text);
    fclose(f);
    check_with_python(path);
    return n;
}

static int count_calls(const entry_t *e, int n, const char *call)
{
    int c = 0;
    for (int i = 0; i < n; i++) c += strcmp(e[i].call, call) == 0;
    return c;
}

/* The first line is the start line of process pid. */
static void check_start(const entry_t *e, int n, pid_t pid)
{
    CHECK_TRUE(n >= 1);
    CHECK_STR_EQ(e[0].call, "cupool.start");
    CHECK_EQ(e[0].pid, pid);
    CHECK_EQ(count_calls(e, n, "cupool.start"), 1);
    for (int i = 1; i < n; i++) CHECK_TRUE(e[i].t >= e[0].t);
}

/* Each thread's lines are in the order of its calls. */
static void check_thread_order(const entry_t *e, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i + 1; j < n && j < i + 64; j++)
            if (e[j].tid == e[i].tid && e[i].tid >= 0) {
                CHECK_TRUE(e[j].t >= e[i].t);
                break;
            }
}

/* ---- the parent --------------------------------------------------------- */

static char *self;
static entry_t *entries;

static char *path_in(const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", dir, name);
    return buf;
}

/* Runs this program in `mode` with the environment settings `env`
 * (NAME=VALUE, NULL-terminated); returns the child's pid, its exit status
 * in *status.  Standard output goes to DIR/MODE.out, standard error to
 * DIR/MODE.err. */
static pid_t spawn(const char *mode, const char *const *env, int *status)
{
    char out[4200], err[4200];
    path_in(mode, out, sizeof out);
    strcat(out, ".out");
    path_in(mode, err, sizeof err);
    strcat(err, ".err");
    fflush(NULL);
    pid_t pid = fork();
    CHECK_TRUE(pid >= 0);
    if (pid == 0) {
        for (int i = 0; env[i]; i++) putenv((char *)env[i]);
        if (!freopen(out, "w", stdout) || !freopen(err, "w", stderr)) _exit(126);
        char *args[] = {self, (char *)mode, NULL};
        execv(tl_self_path(), args);
        _exit(127);
    }
    CHECK_EQ(waitpid(pid, status, 0), pid);
    return pid;
}

static void expect_success(const char *mode, int status)
{
    char err[4200], cmd[4300];
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
    path_in(mode, err, sizeof err);
    strcat(err, ".err");
    snprintf(cmd, sizeof cmd, "cat '%s' >&2", err);
    if (system(cmd) != 0) {
    }
    CHECK_FAIL("child %s failed (status %#x)", mode, status);
}

/* A word after `key ` in DIR/MODE.out. */
static void read_output(const char *mode, const char *key, char *value, size_t len)
{
    char path[4200], line[256];
    path_in(mode, path, sizeof path);
    strcat(path, ".out");
    FILE *f = fopen(path, "r");
    if (!f) CHECK_FAIL("cannot open %s", path);
    value[0] = '\0';
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, klen) == 0 && line[klen] == ' ') {
            snprintf(value, len, "%s", line + klen + 1);
            value[strcspn(value, "\n")] = '\0';
        }
    fclose(f);
    if (!value[0]) CHECK_FAIL("%s holds no \"%s\" line", path, key);
}

static void log_path(const char *mode, pid_t pid, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s.%d.jsonl", dir, mode, (int)pid);
}

/* Runs child MODE with CUPOOL_LOG=DIR/MODE.%p.jsonl and the option extra
 * (NULL for none), which must succeed; reads its log into entries, checks
 * the start line and returns the line count.  logfile (PATH_BYTES) gets the
 * log's path. */
static int run_logged(const char *mode, const char *extra, char *logfile)
{
    char pattern[PATH_BYTES];
    snprintf(pattern, sizeof pattern, "CUPOOL_LOG=%s/%s.%%p.jsonl", dir, mode);
    const char *env[] = {pattern, extra, NULL};
    int status;
    pid_t pid = spawn(mode, env, &status);
    expect_success(mode, status);
    log_path(mode, pid, logfile, PATH_BYTES);
    int n = read_log(logfile, entries, MAX_ENTRIES);
    check_start(entries, n, pid);
    /* The end line, which the exit flush writes after every line before it
     * (calls of later exit handlers come after it): there, and left out of
     * what the cases count. */
    int end = n - 1;
    while (end > 0 && strcmp(entries[end].call, "cupool.end") != 0) end--;
    if (end <= 0) CHECK_FAIL("%s: no end line", logfile);
    memmove(&entries[end], &entries[end + 1], (size_t)(n - end - 1) * sizeof entries[0]);
    return n - 1;
}

static void test_calls(void)
{
    char logfile[PATH_BYTES], badfree[128];
    int n = run_logged("calls", "CUPOOL_MAX_SIZE=" MAX_SIZE_OPTION, logfile);
    read_output("calls", "badfree", badfree, sizeof badfree);
    check_thread_order(entries, n);

    /* Exactly the calls made, and nothing cupool made itself. */
    CHECK_EQ(count_calls(entries, n, "cuMemAlloc_v2"), NPOOLED + NNATIVE);
    CHECK_EQ(count_calls(entries, n, "cuMemFree_v2"), NPOOLED + NNATIVE + 1);
    CHECK_EQ(count_calls(entries, n, "cupool.message"), 0);
    for (int i = 1; i < n; i++) {
        const char *c = entries[i].call;
        if (strcmp(c, "cuMemAlloc_v2") && strcmp(c, "cuMemFree_v2") && strcmp(c, "cuDevicePrimaryCtxRetain"))
            CHECK_FAIL("%s: unexpected call %s in the log", logfile, c);
    }
    CHECK_TRUE(count_calls(entries, n, "cuDevicePrimaryCtxRetain") <= 1);

    /* Allocations in order, with their sizes and routes. */
    uint64_t ptrs[NPOOLED + NNATIVE];
    size_t a = 0;
    for (int i = 0; i < n; i++) {
        const entry_t *e = &entries[i];
        if (strcmp(e->call, "cuMemAlloc_v2") != 0) continue;
        size_t want = a < NPOOLED ? pooled_sizes[a] : native_sizes[a - NPOOLED];
        CHECK_EQ(e->size, want);
        CHECK_STR_EQ(e->route, a < NPOOLED ? "pool" : "native");
        CHECK_STR_EQ(e->result, "CUDA_SUCCESS");
        CHECK_EQ(e->dev, 0);
        CHECK_NE(e->ptr, 0);
        CHECK_EQ(e->store, 0); /* every size is new */
        ptrs[a++] = e->ptr;
    }
    /* Frees in reverse order; pooled ones carry the block size. */
    size_t f = NPOOLED + NNATIVE;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const entry_t *e = &entries[i];
        if (strcmp(e->call, "cuMemFree_v2") != 0) continue;
        if (f == 0) {
            CHECK_EQ(e->ptr, BAD_POINTER);
            CHECK_STR_EQ(e->result, badfree);
            CHECK_TRUE(strcmp(e->result, "CUDA_SUCCESS") != 0);
            bad++;
            continue;
        }
        f--;
        CHECK_EQ(e->ptr, ptrs[f]);
        CHECK_STR_EQ(e->result, "CUDA_SUCCESS");
        if (f < NPOOLED) {
            CHECK_STR_EQ(e->route, "pool");
            CHECK_EQ(e->size, pooled_sizes[f]);
        } else {
            CHECK_STR_EQ(e->route, "native");
            CHECK_EQ(e->size, 0);
        }
    }
    CHECK_EQ(f, 0);
    CHECK_EQ(bad, 1);
}

/* The allocations of child_store: in `ordered` the second carries "store":
 * true and nothing else carries "store"; in `sync`, which keeps nothing,
 * nothing does (each setting overrides the free mode test_free_modes
 * forces). */
static void test_store(void)
{
    char logfile[PATH_BYTES];
    static const char *const settings[] = {"CUPOOL_FREE=ordered", "CUPOOL_FREE=sync"};
    for (int off = 0; off < 2; off++) {
        int n = run_logged("store", settings[off], logfile);
        int allocs = 0;
        for (int i = 0; i < n; i++) {
            const entry_t *e = &entries[i];
            int alloc = strcmp(e->call, "cuMemAlloc_v2") == 0;
            CHECK_EQ(e->store, alloc && allocs == 1 && !off ? 1 : 0);
            allocs += alloc;
        }
        CHECK_EQ(allocs, 3);
    }
}

static void test_fork(void)
{
    char pattern[4200], logfile[4200], child[64];
    snprintf(pattern, sizeof pattern, "CUPOOL_LOG=%s/fork.%%p.jsonl", dir);
    const char *env[] = {pattern, NULL};
    int status;
    pid_t pid = spawn("fork", env, &status);
    expect_success("fork", status);
    read_output("fork", "child", child, sizeof child);
    pid_t child_pid = (pid_t)atoi(child);
    CHECK_TRUE(child_pid > 0 && child_pid != pid);

    log_path("fork", pid, logfile, sizeof logfile);
    int n = read_log(logfile, entries, MAX_ENTRIES);
    check_start(entries, n, pid);
    CHECK_EQ(count_calls(entries, n, "cuMemAlloc_v2"), 1);
    CHECK_EQ(count_calls(entries, n, "cuMemFree_v2"), 1);

    log_path("fork", child_pid, logfile, sizeof logfile);
    n = read_log(logfile, entries, MAX_ENTRIES);
    check_start(entries, n, child_pid);
    CHECK_EQ(count_calls(entries, n, "cuMemAlloc_v2"), 2);
    CHECK_EQ(count_calls(entries, n, "cuMemFree_v2"), 2);
    for (int i = 0; i < n; i++)
        if (strcmp(entries[i].call, "cuMemAlloc_v2") == 0) CHECK_TRUE(entries[i].size == 111 || entries[i].size == 222);
}

static void test_symlink(void)
{
    char target[4200], link_path[4200], setting[4300], err[4200];
    path_in("target.jsonl", target, sizeof target);
    path_in("link.jsonl", link_path, sizeof link_path);
    int fd = open(target, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK_TRUE(fd >= 0);
    close(fd);
    CHECK_EQ(symlink(target, link_path), 0);
    snprintf(setting, sizeof setting, "CUPOOL_LOG=%s", link_path);
    const char *env[] = {setting, NULL};
    int status;
    spawn("forked", env, &status); /* any child that allocates will do */
    expect_success("forked", status);

    struct stat st;
    CHECK_EQ(stat(target, &st), 0);
    CHECK_EQ(st.st_size, 0);
    path_in("forked.err", err, sizeof err);
    FILE *f = fopen(err, "r");
    CHECK_TRUE(f != NULL);
    char text[8192];
    size_t len = fread(text, 1, sizeof text - 1, f);
    text[len] = '\0';
    fclose(f);
    char want[4400];
    snprintf(want, sizeof want, "cupool: warning: not logging: %s is a symbolic link", link_path);
    if (!strstr(text, want)) CHECK_FAIL("expected \"%s\" on stderr, got \"%s\"", want, text);
}

static void test_level(void)
{
    char logfile[PATH_BYTES];
    int n = run_logged("level", "CUPOOL_LOG_LEVEL=error", logfile);
    CHECK_EQ(n, 3);
    CHECK_STR_EQ(entries[1].call, "cuMemFree_v2");
    CHECK_EQ(entries[1].ptr, BAD_POINTER);
    CHECK_STR_EQ(entries[2].call, "cuMemAlloc_v2");
    CHECK_EQ(entries[2].size, 0);
    for (int i = 1; i < n; i++) CHECK_TRUE(strcmp(entries[i].result, "CUDA_SUCCESS") != 0);
}

static void test_exit(void)
{
    char logfile[PATH_BYTES], count[64];
    int n = run_logged("exit", NULL, logfile);
    read_output("exit", "count", count, sizeof count);
    long done = atol(count);
    CHECK_TRUE(done >= 3000);
    int logged = count_calls(entries, n, "cuMemAlloc_v2");
    if (logged < done) CHECK_FAIL("%s: %d allocations logged, %ld made before exit()", logfile, logged, done);
}

static void test_live(void)
{
    char logfile[PATH_BYTES], seen[64];
    int n = run_logged("live", NULL, logfile);
    read_output("live", "seen", seen, sizeof seen);
    if (atoi(seen) != 3)
        CHECK_FAIL("%s: the program saw %s of its 3 allocations in its log while it ran", logfile, seen);
    int logged = 0;
    for (int i = 0; i < n; i++) logged += strcmp(entries[i].call, "cuMemAlloc_v2") == 0 && entries[i].size == LIVE_SIZE;
    CHECK_EQ(logged, 3);
}

static void test_late(void)
{
    char logfile[PATH_BYTES];
    int n = run_logged("late", NULL, logfile);
    int late = 0;
    for (int i = 0; i < n; i++) late += strcmp(entries[i].call, "cuMemAlloc_v2") == 0 && entries[i].size == LATE_SIZE;
    CHECK_EQ(late, 1);
}

/* The log of `threads` threads, thread k's i-th allocation of
 * volume_size(k, i) bytes, holds each once, in the order made, and
 * `per_thread` of each. */
static void check_sizes_in_order(const char *logfile, int n, int threads, int per_thread)
{
    CHECK_EQ(count_calls(entries, n, "cuMemAlloc_v2"), threads * per_thread);
    CHECK_EQ(count_calls(entries, n, "cuMemFree_v2"), threads * per_thread);
    int next[VOLUME_THREADS] = {0};
    CHECK_TRUE(threads <= VOLUME_THREADS);
    for (int i = 0; i < n; i++) {
        const entry_t *e = &entries[i];
        if (strcmp(e->call, "cuMemAlloc_v2") != 0) continue;
        int k = (int)(e->size / 100000) - 1;
        CHECK_TRUE(k >= 0 && k < threads);
        if (e->size != volume_size(k, next[k]))
            CHECK_FAIL("%s: thread %d: allocation of %llu bytes where call %d (%zu bytes) was due", logfile, k,
                       (unsigned long long)e->size, next[k], volume_size(k, next[k]));
        next[k]++;
    }
}

static void test_ending(void)
{
    char logfile[PATH_BYTES];
    int n = run_logged("ending", NULL, logfile);
    check_sizes_in_order(logfile, n, ENDING_THREADS, ENDING_CALLS + ENDING_LATE);
}

static void test_cancel(void)
{
    const char *env[] = {"CUPOOL_LOG=-", NULL};
    int status;
    spawn("cancel", env, &status);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
        CHECK_FAIL("a program whose thread was cancelled while cupool wrote its log hung");
    expect_success("cancel", status);
    char calls[64];
    read_output("cancel", "calls", calls, sizeof calls);
    CHECK_TRUE(atol(calls) > 0);
}

static void test_volume(void)
{
    char logfile[PATH_BYTES], child[64];
    int n = run_logged("volume", NULL, logfile);
    check_sizes_in_order(logfile, n, VOLUME_THREADS, VOLUME_PAIRS);
    /* The forked child: its own file, its calls only. */
    read_output("volume", "child", child, sizeof child);
    log_path("volume", (pid_t)atoi(child), logfile, sizeof logfile);
    n = read_log(logfile, entries, MAX_ENTRIES);
    CHECK_EQ(count_calls(entries, n, "cupool.start"), 1);
    CHECK_EQ(count_calls(entries, n, "cuMemAlloc_v2"), VOLUME_CHILD_CALLS);
    for (int i = 0; i < n; i++)
        if (strcmp(entries[i].call, "cuMemAlloc_v2") == 0) CHECK_EQ(entries[i].size, 777);
}

static void remove_dir(void)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char path[4400];
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            unlink(path);
        }
    closedir(d);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    self = argv[0];
    if (argc > 1) {
        if (strcmp(argv[1], "calls") == 0) return child_calls();
        if (strcmp(argv[1], "store") == 0) return child_store();
        if (strcmp(argv[1], "fork") == 0) return child_fork(argv[0]);
        if (strcmp(argv[1], "forked") == 0) return child_forked();
        if (strcmp(argv[1], "level") == 0) return child_level();
        if (strcmp(argv[1], "exit") == 0) return child_exit();
        if (strcmp(argv[1], "volume") == 0) return child_volume();
        if (strcmp(argv[1], "late") == 0) return child_late();
        if (strcmp(argv[1], "live") == 0) return child_live();
        if (strcmp(argv[1], "ending") == 0) return child_ending();
        if (strcmp(argv[1], "cancel") == 0) return child_cancel();
        CHECK_FAIL("unknown mode %s", argv[1]);
    }
    if (!check_cupool_loaded()) {
        fprintf(stderr, "libcupool.so is not preloaded; run through tests/run-test.sh\n");
        return CHECK_SKIP;
    }
    if (getenv("CUPOOL_LOG")) unsetenv("CUPOOL_LOG");
    unsetenv("CUPOOL_LOG_LEVEL");
    unsetenv("CUPOOL_MAX_SIZE");
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/cupool-test-log.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    CHECK_TRUE(mkdtemp(dir) != NULL);
    entries = calloc(MAX_ENTRIES, sizeof *entries);
    CHECK_TRUE(entries != NULL);

    test_calls();
    test_store();
    test_fork();
    test_symlink();
    test_level();
    test_exit();
    test_live();
    test_late();
    test_ending();
    test_cancel();
    test_volume();

    if (!getenv("CUPOOL_TEST_KEEP")) remove_dir();
    else fprintf(stderr, "logs kept in %s\n", dir);
    free(entries);
    return 0;
}
