/*
 * A program under cupool beside hostile neighbours and with unusual habits
 * (issue 47): nothing cupool adds may hang it, leak to another user, or
 * lose something without saying so.  Each case runs in a child of its own
 * (options are read once per process), under a deadline that fails the case
 * instead of hanging the suite:
 *
 *   pthread-exit-*   the main thread calls pthread_exit while cupool's log
 *                    writer, IPC server or live thread runs: the process
 *                    still ends (it used to hang for ever);
 *   stuck-neighbour  a same-user socket in CUPOOL_IPC_DIR that never
 *                    accepts (a stopped exporter, its queue full): the
 *                    first export, and the exit, do not wait on it;
 *   log-fifo         a FIFO at the CUPOOL_LOG path: refused at once, with
 *                    the reason, instead of blocking the start;
 *   many-opens       one importer opens more blocks of one exporter than
 *                    either may hold descriptors: every open succeeds, and
 *                    neither process's descriptors grow with the opens;
 *   idle-clients     connections that never ask anything, beyond what the
 *                    exporter may hold: its server thread does not spin,
 *                    its own open() calls still work, and the idle ones are
 *                    closed;
 *   many-exporters   an importer that opened and closed blocks of many
 *                    exporters holds no descriptor for any of them after;
 *   bind-umask       another thread's files keep their mode while cupool
 *                    makes its IPC socket (no process-wide umask);
 *   log-full         a log on a full file system: said once, counted in
 *                    CUPOOL_STATS, and the log's last line says the log is
 *                    incomplete;
 *   log-zero         CUPOOL_LOG=0 writes no file;
 *   bad-options      every option's bad value warns, all of them at once
 *                    too;
 *   log-symlink      a symbolic link at the log path is named as such.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BLOCK ((size_t)64 << 10)

/* The test's own directory (NB_DIR, made by the parent). */
static const char *test_dir(void)
{
    const char *d = getenv("NB_DIR");
    if (!d) CHECK_FAIL("NB_DIR is not set");
    return d;
}

static void path_in(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", test_dir(), name);
}

static long long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    if (d) closedir(d);
    return n - 1; /* the directory's own */
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *text = malloc(cap);
    size_t n;
    while (text && (n = fread(text + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len < 2) text = realloc(text, cap *= 2);
    }
    fclose(f);
    if (text) text[len] = 0;
    return text;
}

/* ---- item 1: pthread_exit in main ------------------------------------------ */

static void *allocating_thread(void *arg)
{
    CHECK_CU(cuCtxSetCurrent((CUcontext)arg));
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, BLOCK));
    CHECK_CU(cuMemFree(p));
    return NULL;
}

static int main_exits(int export)
{
    CUcontext ctx = tl_init(0);
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, BLOCK));
    if (export) {
        CUipcMemHandle h;
        CHECK_CU(cuIpcGetMemHandle(&h, p));
    }
    pthread_t t;
    pthread_create(&t, NULL, allocating_thread, ctx);
    pthread_join(t, NULL);
    printf("main thread ends\n");
    fflush(stdout);
    pthread_exit(NULL);
}

static int pthread_exit_log(void)
{
    return main_exits(0);
}

static int pthread_exit_ipc(void)
{
    return main_exits(1);
}

/* ---- item 2: a neighbour that never accepts ---------------------------------- */

/* A listening socket named like an exporter's, whose queue is full: a
 * connect() to it that may block blocks for ever. */
static int stuck_socket(const char *dir, int *held, int nheld)
{
    char path[100];
    snprintf(path, sizeof path, "%.40s/cupool-ipc.%u.%u.00112233445566ff", dir, (unsigned)geteuid(), 1u);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    unlink(path);
    if (bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 0) != 0) CHECK_FAIL("bind %s: %s", path, strerror(errno));
    int n = 0;
    for (; n < nheld; n++) {
        held[n] = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (connect(held[n], (struct sockaddr *)&a, sizeof a) != 0) {
            close(held[n]);
            break;
        }
    }
    if (n == nheld) CHECK_FAIL("the stuck socket's queue never filled");
    return s;
}

static int stuck_neighbour(void)
{
    tl_init(0);
    int held[64];
    int s = stuck_socket(getenv("CUPOOL_IPC_DIR"), held, 64);
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, BLOCK));
    CUipcMemHandle h;
    long long t0 = now_ms();
    CHECK_CU(cuIpcGetMemHandle(&h, p));
    printf("  export took %lld ms beside a stuck neighbour\n", now_ms() - t0);
    CHECK_CU(cuMemFree(p));
    (void)s;
    return 0;
}

/* ---- item 3: a FIFO at the log path ------------------------------------------ */

static int log_fifo(void)
{
    tl_init(0);
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, BLOCK));
    CHECK_CU(cuMemFree(p));
    return 0;
}

/* ---- the cases ----------------------------------------------------------------- */

typedef struct nb_case {
    const char *name;
    int (*run)(void);
    const char *env[6];
    int timeout_s;
    const char *says;  /* printed once on stderr, or NULL */
    int (*check)(const tl_child_t *c); /* more to check in the parent, or NULL; 0 = fine */
    void (*before)(void);              /* set-up in the parent, or NULL */
} nb_case_t;

static int log_complete(const tl_child_t *c)
{
    (void)c;
    char path[512];
    path_in(path, sizeof path, "pe.log");
    char *text = read_file(path);
    int ok = text && tl_count_substr(text, "\"call\":\"cuMemAlloc") >= 2 && tl_count_substr(text, "\"call\":\"cuMemFree") >= 1;
    if (!ok) fprintf(stderr, "the log of a pthread_exit program is not complete:\n%s\n", text ? text : "(none)");
    free(text);
    unlink(path);
    return ok ? 0 : 1;
}

static void make_fifo(void)
{
    char path[512];
    path_in(path, sizeof path, "fifo.log");
    unlink(path);
    if (mkfifo(path, 0600) != 0) CHECK_FAIL("mkfifo: %s", strerror(errno));
}

static const nb_case_t cases[] = {
    {"pthread-exit-log", pthread_exit_log, {"CUPOOL_LOG=@/pe.log", NULL}, 20, NULL, log_complete, NULL},
    {"pthread-exit-log-nolive", pthread_exit_log, {"CUPOOL_LOG=@/pe.log", "CUPOOL_LIVE=0", NULL}, 20, NULL,
     log_complete, NULL},
    {"pthread-exit-ipc", pthread_exit_ipc, {NULL}, 20, NULL, NULL, NULL},
    {"pthread-exit-ipc-nolive", pthread_exit_ipc, {"CUPOOL_LIVE=0", NULL}, 20, NULL, NULL, NULL},
    {"stuck-neighbour", stuck_neighbour, {NULL}, 20, NULL, NULL, NULL},
    {"log-fifo", log_fifo, {"CUPOOL_LOG=@/fifo.log", NULL}, 20, "fifo.log is a FIFO; only a regular file is a log", NULL, make_fifo},
};

static const nb_case_t *find_case(const char *name)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(cases[i].name, name) == 0) return &cases[i];
    return NULL;
}

/* "@/x" in an environment value: the test's directory, then /x. */
static void expand_env(const char *const *in, char store[][600], const char **out)
{
    int i = 0;
    for (; in[i]; i++) {
        const char *at = strstr(in[i], "@/");
        if (at) snprintf(store[i], 600, "%.*s%s%s", (int)(at - in[i]), in[i], test_dir(), at + 1);
        else snprintf(store[i], 600, "%s", in[i]);
        out[i] = store[i];
    }
    out[i] = NULL;
}

static int run_case(const nb_case_t *k)
{
    if (k->before) k->before();
    char store[6][600];
    const char *env[7];
    expand_env(k->env, store, env);
    const char *args[] = {"--case", k->name, NULL};
    tl_child_t c;
    long long t0 = now_ms();
    tl_run_self(args, env, 0, k->timeout_s, &c);
    printf("%s", c.out);
    int ok = c.status == 0;
    if (c.status == 124) fprintf(stderr, "%s: still running after %d s: killed\n", k->name, k->timeout_s);
    if (ok && k->says && tl_count_substr(c.err, k->says) != 1) {
        fprintf(stderr, "%s: expected \"%s\" once on stderr\n", k->name, k->says);
        ok = 0;
    }
    if (ok && k->check && k->check(&c) != 0) ok = 0;
    if (!ok) tl_child_dump(k->name, &c);
    printf("%s: %s (%lld ms)\n", k->name, ok ? "passed" : "FAILED", now_ms() - t0);
    tl_child_free(&c);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--case") == 0) {
        const nb_case_t *k = find_case(argv[2]);
        if (!k) CHECK_FAIL("no case %s", argv[2]);
        return k->run();
    }
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    if (check_real_driver()) {
        printf("simulated driver only: skipped\n");
        return CHECK_SKIP;
    }
    char dir[] = "/tmp/cupool-test-nb.XXXXXX";
    if (!mkdtemp(dir)) CHECK_FAIL("mkdtemp: %s", strerror(errno));
    setenv("NB_DIR", dir, 1);
    char sub[600];
    snprintf(sub, sizeof sub, "%s/ipc", dir);
    mkdir(sub, 0700);
    setenv("CUPOOL_IPC_DIR", sub, 1);
    snprintf(sub, sizeof sub, "%s/live", dir);
    mkdir(sub, 0700);
    setenv("CUPOOL_LIVE_DIR", sub, 1);
    unsetenv("CUPOOL_LOG");
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (argc < 2 || strcmp(argv[1], cases[i].name) == 0) failed += run_case(&cases[i]);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
    return failed ? 1 : 0;
}
