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
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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

/* ---- item 4: descriptors of exporters and importers ---------------------------- */

static void set_nofile(rlim_t n)
{
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) != 0) CHECK_FAIL("getrlimit: %s", strerror(errno));
    lim.rlim_cur = n;
    if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < n) lim.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0) CHECK_FAIL("setrlimit: %s", strerror(errno));
}


/* This program again with args, talking through its stdin and stdout. */
typedef struct {
    pid_t pid;
    FILE *to, *from;
} peer_proc_t;

static void spawn_self(peer_proc_t *p, const char *a1, const char *a2)
{
    int in[2], out[2];
    /* Close-on-exec: another process started later must not hold this
     * one's stdin open. */
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC)) CHECK_FAIL("pipe: %s", strerror(errno));
    fflush(NULL);
    p->pid = fork();
    if (p->pid < 0) CHECK_FAIL("fork: %s", strerror(errno));
    if (p->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        const char *argv[] = {tl_self_path(), a1, a2, NULL};
        execv(tl_self_path(), (char *const *)argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    p->to = fdopen(in[1], "w");
    p->from = fdopen(out[0], "r");
    setvbuf(p->to, NULL, _IOLBF, 0);
}

static char *peer_line(peer_proc_t *p, char *line, size_t cap)
{
    if (!fgets(line, (int)cap, p->from)) CHECK_FAIL("process %d said nothing", (int)p->pid);
    line[strcspn(line, "\n")] = 0;
    return line;
}

static int peer_end(peer_proc_t *p)
{
    fclose(p->to);
    char line[256];
    while (fgets(line, sizeof line, p->from)) printf("  %d: %s", (int)p->pid, line);
    fclose(p->from);
    int status = 0;
    waitpid(p->pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

enum { MANY = 1030 };

/* `--importer-many FILE`: opens every handle of FILE, says how many it
 * opened and its descriptors, waits for a line, closes them all. */
static int importer_many(const char *file)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    tl_init(0);
    int fds0 = count_fds();
    FILE *f = fopen(file, "r");
    if (!f) CHECK_FAIL("cannot read %s", file);
    static CUdeviceptr ptrs[MANY];
    char hex[200];
    int n = 0, opened = 0;
    long long t0 = now_ms();
    while (n < MANY && fgets(hex, sizeof hex, f)) {
        CUipcMemHandle h;
        tl_handle_from_hex(hex, &h);
        CUresult r = cuIpcOpenMemHandle(&ptrs[n], h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        if (r == CUDA_SUCCESS) opened++;
        else if (n - opened < 3) fprintf(stderr, "open %d: %s\n", n, check_result_name(r));
        if (r != CUDA_SUCCESS) ptrs[n] = 0;
        n++;
    }
    fclose(f);
    printf("opened %d of %d in %lld ms; descriptors %d then %d\n", opened, n, now_ms() - t0, fds0, count_fds());
    char line[64];
    if (!fgets(line, sizeof line, stdin)) return 3;
    for (int i = 0; i < n; i++)
        if (ptrs[i]) CHECK_CU(cuIpcCloseMemHandle(ptrs[i]));
    printf("closed; descriptors %d\n", count_fds());
    return 0;
}

/* One importer opens MANY blocks of this process (more than either may
 * hold descriptors): each open succeeds, at once, and neither process's
 * descriptors grow with the number of blocks open. */
static int many_opens(void)
{
    set_nofile(1024);
    tl_init(0);
    char file[512];
    path_in(file, sizeof file, "handles");
    FILE *f = fopen(file, "w");
    static CUdeviceptr ptrs[MANY];
    for (int i = 0; i < MANY; i++) {
        CHECK_CU(cuMemAlloc(&ptrs[i], 4096));
        CUipcMemHandle h;
        CHECK_CU(cuIpcGetMemHandle(&h, ptrs[i]));
        char hex[129];
        tl_handle_to_hex(&h, hex);
        fprintf(f, "%s\n", hex);
    }
    fclose(f);
    int before = count_fds();
    peer_proc_t im;
    spawn_self(&im, "--importer-many", file);
    char line[256];
    int opened = 0, n = 0, fds0 = 0, fds1 = 0, fds2 = 0;
    long long ms = 0;
    peer_line(&im, line, sizeof line);
    printf("  importer: %s\n", line);
    if (sscanf(line, "opened %d of %d in %lld ms; descriptors %d then %d", &opened, &n, &ms, &fds0, &fds1) != 5)
        CHECK_FAIL("the importer said \"%s\"", line);
    int during = count_fds();
    fprintf(im.to, "go\n");
    peer_line(&im, line, sizeof line);
    printf("  importer: %s\n", line);
    if (sscanf(line, "closed; descriptors %d", &fds2) != 1) CHECK_FAIL("the importer said \"%s\"", line);
    if (peer_end(&im) != 0) CHECK_FAIL("the importer failed");
    printf("  exporter's descriptors: %d, with the blocks open %d\n", before, during);
    CHECK_EQ(opened, MANY);
    if (during - before > 4) CHECK_FAIL("the exporter holds %d descriptors more while one process has blocks open", during - before);
    if (fds1 - fds0 > 4) CHECK_FAIL("the importer holds %d descriptors more with the blocks open", fds1 - fds0);
    if (fds2 > fds0) CHECK_FAIL("the importer holds %d descriptors more after closing everything", fds2 - fds0);
    for (int i = 0; i < MANY; i++) CHECK_CU(cuMemFree(ptrs[i]));
    return 0;
}

/* The path of this process's IPC socket. */
static void own_socket(char *out, size_t cap)
{
    const char *dir = getenv("CUPOOL_IPC_DIR");
    char prefix[64];
    snprintf(prefix, sizeof prefix, "cupool-ipc.%u.%u.", (unsigned)geteuid(), (unsigned)getpid());
    DIR *d = opendir(dir);
    out[0] = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 &&
            (size_t)snprintf(out, cap, "%s/%s", dir, e->d_name) >= cap)
            CHECK_FAIL("the socket's path is too long");
    if (d) closedir(d);
    if (!out[0]) CHECK_FAIL("no socket of this process in %s", dir);
}

static double cpu_seconds(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

/* 100 connections that never ask anything, to an exporter that may hold
 * 64 descriptors: its server thread does not spin, its own open() calls
 * still succeed, and every such connection is closed before long. */
static int idle_clients(void)
{
    set_nofile(64);
    tl_init(0);
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, BLOCK));
    CUipcMemHandle h;
    CHECK_CU(cuIpcGetMemHandle(&h, p));
    char path[256];
    own_socket(path, sizeof path);
    int report[2];
    if (pipe(report)) CHECK_FAIL("pipe");
    pid_t child = fork();
    if (child == 0) {
        set_nofile(512);
        enum { N = 100 };
        struct pollfd fds[N];
        int n = 0;
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        if (strlen(path) >= sizeof a.sun_path) _exit(1);
        memcpy(a.sun_path, path, strlen(path) + 1);
        for (int i = 0; i < N; i++) {
            int s = socket(AF_UNIX, SOCK_STREAM, 0);
            struct timeval limit = {.tv_sec = 1};
            setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
            if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
                close(s);
                continue;
            }
            fds[n++] = (struct pollfd){.fd = s, .events = POLLIN};
        }
        /* Each is closed by the exporter (end of file) within 20 s. */
        int closed = 0;
        long long end = now_ms() + 20000;
        while (closed < n && now_ms() < end) {
            if (poll(fds, (nfds_t)n, 200) <= 0) continue;
            for (int i = 0; i < n; i++) {
                if (fds[i].fd < 0 || !fds[i].revents) continue;
                char c;
                if (read(fds[i].fd, &c, 1) <= 0) {
                    close(fds[i].fd);
                    fds[i].fd = -1;
                    closed++;
                }
            }
        }
        dprintf(report[1], "%d %d\n", n, closed);
        _exit(0);
    }
    close(report[1]);
    usleep(500000);
    double c0 = cpu_seconds();
    usleep(2000000);
    double spent = cpu_seconds() - c0;
    printf("  CPU time over 2 s beside idle connections: %.3f s\n", spent);
    int opened = 0;
    int mine[8];
    for (int i = 0; i < 8; i++)
        if ((mine[i] = open("/dev/null", O_RDONLY)) >= 0) opened++;
    for (int i = 0; i < 8; i++)
        if (mine[i] >= 0) close(mine[i]);
    char text[64] = "";
    ssize_t got = read(report[0], text, sizeof text - 1);
    text[got > 0 ? got : 0] = 0;
    int status;
    waitpid(child, &status, 0);
    int connected = 0, closed = 0;
    sscanf(text, "%d %d", &connected, &closed);
    printf("  %d idle connections made, %d closed by the exporter\n", connected, closed);
    if (spent > 0.5) CHECK_FAIL("the exporter spent %.2f s of CPU in 2 s beside idle connections", spent);
    CHECK_EQ(opened, 8);
    CHECK_TRUE(connected > 0);
    CHECK_EQ(closed, connected);
    CHECK_CU(cuMemFree(p));
    return 0;
}

/* `--exporter-one`: exports a block, prints its handle, waits for a line. */
static int exporter_one(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    tl_init(0);
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, BLOCK));
    CUipcMemHandle h;
    CHECK_CU(cuIpcGetMemHandle(&h, p));
    char hex[129];
    tl_handle_to_hex(&h, hex);
    printf("%s\n", hex);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 0;
    return 0;
}

/* Blocks of many exporters opened and closed: nothing of theirs is held
 * here after (connection, imported pool). */
static int many_exporters(void)
{
    tl_init(0);
    enum { N = 12 };
    peer_proc_t ex[N];
    for (int i = 0; i < N; i++) spawn_self(&ex[i], "--exporter-one", NULL);
    int before = count_fds();
    for (int i = 0; i < N; i++) {
        char hex[256];
        peer_line(&ex[i], hex, sizeof hex);
        CUipcMemHandle h;
        tl_handle_from_hex(hex, &h);
        CUdeviceptr p;
        CHECK_CU(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
        CHECK_CU(cuIpcCloseMemHandle(p));
    }
    int after = count_fds();
    for (int i = 0; i < N; i++) peer_end(&ex[i]);
    printf("  descriptors before %d, after opening and closing blocks of %d exporters %d\n", before, N, after);
    if (after > before) CHECK_FAIL("%d descriptors more after every block was closed", after - before);
    return 0;
}

/* ---- item 7: no process-wide umask ------------------------------------------------ */

/* The test program's own umask, exported (-rdynamic): cupool's calls to
 * umask() come here.  The umask belongs to the whole process, so any
 * change cupool makes, however brief, gives files another thread makes
 * meanwhile the wrong mode. */
static atomic_int umask_calls;

mode_t umask(mode_t mask)
{
    atomic_fetch_add(&umask_calls, 1);
    return (mode_t)syscall(SYS_umask, mask);
}

static int bind_umask(void)
{
    tl_init(0);
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, BLOCK));
    CUipcMemHandle h;
    CHECK_CU(cuIpcGetMemHandle(&h, p));
    char path[256];
    own_socket(path, sizeof path);
    struct stat st;
    CHECK_EQ(stat(path, &st), 0);
    CHECK_EQ(st.st_mode & 0777, 0600);
    printf("  umask() calls while the IPC socket was made: %d\n", atomic_load(&umask_calls));
    CHECK_EQ(atomic_load(&umask_calls), 0);
    /* Nothing of the making is left beside the socket. */
    DIR *d = opendir(getenv("CUPOOL_IPC_DIR"));
    int entries = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strncmp(e->d_name, ".cupool-ipc", 11) == 0) entries++;
    if (d) closedir(d);
    CHECK_EQ(entries, 0);
    CHECK_CU(cuMemFree(p));
    return 0;
}

/* ---- item 8: a log on a full disk ------------------------------------------------ */

/* The log's file may not grow past 64 KiB (RLIMIT_FSIZE, as a full disk
 * would have it: writes beyond fail, with SIGXFSZ ignored). */
static int log_full(void)
{
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {64 << 10, 64 << 10};
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) CHECK_FAIL("setrlimit: %s", strerror(errno));
    tl_init(0);
    for (int i = 0; i < 20000; i++) {
        CUdeviceptr p;
        CHECK_CU(cuMemAlloc(&p, 4096));
        CHECK_CU(cuMemFree(p));
    }
    return 0;
}

/* Runs prog (in the build directory) on the log; its stderr. */
static char *tool_err(const char *prog, const char *log)
{
    const char *b = getenv("CUPOOL_BUILDDIR");
    char cmd[2048], err[600];
    path_in(err, sizeof err, "tool.err");
    snprintf(cmd, sizeof cmd, "LD_PRELOAD= '%s/%s' -q -o /dev/null '%s' >/dev/null 2>'%s'", b ? b : ".", prog, log, err);
    if (system(cmd) == -1) return NULL;
    return read_file(err);
}

static int log_full_check(const tl_child_t *c)
{
    int bad = 0;
    if (tl_count_substr(c->err, "cupool: warning: cannot write the log") != 1) {
        fprintf(stderr, "log-full: the failed write is not said once\n");
        bad = 1;
    }
    if (tl_count_substr(c->err, "lines could not be written") != 1) {
        fprintf(stderr, "log-full: CUPOOL_STATS does not count the lines lost\n");
        bad = 1;
    }
    char path[512];
    path_in(path, sizeof path, "full.log");
    char *report = tool_err("cupool-report", path);
    printf("  cupool-report: %s", report ? report : "(nothing)\n");
    if (!report || !strstr(report, "incomplete")) {
        fprintf(stderr, "log-full: cupool-report does not say the log is incomplete\n");
        bad = 1;
    }
    free(report);
    unlink(path);
    return bad;
}

/* A log written in full ends with a line saying so. */
static int log_clean_check(const tl_child_t *c)
{
    (void)c;
    char path[512];
    path_in(path, sizeof path, "clean.log");
    char *text = read_file(path);
    const char *last = NULL;
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p))
        if (*p) last = p;
    int ok = last && strncmp(strstr(last, "\"call\":") ? strstr(last, "\"call\":") : "", "\"call\":\"cupool.end\"", 19) == 0 &&
             strstr(last, "\"complete\":true");
    if (!ok) fprintf(stderr, "log-clean: the last line is not a complete end line: %s\n", last ? last : "(none)");
    char *report = tool_err("cupool-report", path);
    if (report && strstr(report, "incomplete")) {
        fprintf(stderr, "log-clean: cupool-report calls a whole log incomplete: %s\n", report);
        ok = 0;
    }
    free(report);
    free(text);
    unlink(path);
    return ok ? 0 : 1;
}

static int log_clean(void)
{
    tl_init(0);
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, 4096));
    CHECK_CU(cuMemFree(p));
    return 0;
}

/* ---- item 12: small things ------------------------------------------------------- */

/* Runs with CUPOOL_LOG=0 in the test's directory: no file named 0. */
static int log_zero(void)
{
    if (chdir(test_dir()) != 0) CHECK_FAIL("chdir: %s", strerror(errno));
    tl_init(0);
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, 4096));
    CHECK_CU(cuMemFree(p));
    return 0;
}

static int log_zero_check(const tl_child_t *c)
{
    (void)c;
    char path[512];
    path_in(path, sizeof path, "0");
    if (access(path, F_OK) == 0) {
        fprintf(stderr, "log-zero: CUPOOL_LOG=0 wrote a file named 0\n");
        unlink(path);
        return 1;
    }
    return 0;
}

/* Every option that can be bad, bad at once: each warns. */
static const char *const bad_settings[] = {
    "CUPOOL_POLICY=bogus", "CUPOOL_FREE=bogus", "CUPOOL_RELEASE_THRESHOLD=bogus", "CUPOOL_MIN_SIZE=bogus",
    "CUPOOL_MAX_SIZE=bogus", "CUPOOL_SPLIT_SIZE=bogus", "CUPOOL_LIMIT=bogus", "CUPOOL_DEFERRED_READY=bogus",
    "CUPOOL_DEFERRED_WAIT=bogus", "CUPOOL_ORDERED_READY=bogus", "CUPOOL_DEFERRED_FENCE=bogus",
    "CUPOOL_DRIVER_QUEUE=bogus", "CUPOOL_MEMSET=bogus", "CUPOOL_LOG_LEVEL=bogus", "CUPOOL_STATS=bogus",
    "CUPOOL_VERBOSE=bogus", "CUPOOL_LIVE=bogus", "CUPOOL_IPC=bogus", "CUPOOL_HOST=bogus", "CUPOOL_HOST_KEEP=bogus",
    "CUPOOL_MANAGED=bogus", "CUPOOL_MANAGED_KEEP=bogus", NULL};

static int bad_options(void)
{
    for (const char *const *b = bad_settings; *b; b++) putenv((char *)*b);
    /* Each setting is read in a process of its own: this one exec's itself
     * with them all (options are read once, at the first CUDA call). */
    char *argv[] = {(char *)tl_self_path(), (char *)"--case", (char *)"bad-options-run", NULL};
    execv(tl_self_path(), argv);
    return 127;
}

static int bad_options_run(void)
{
    tl_init(0);
    return 0;
}

static int bad_options_check(const tl_child_t *c)
{
    int bad = 0;
    for (const char *const *b = bad_settings; *b; b++) {
        char want[128];
        snprintf(want, sizeof want, "cupool: warning: ignoring %.*s=", (int)(strchr(*b, '=') - *b), *b);
        if (tl_count_substr(c->err, want) != 1) {
            fprintf(stderr, "bad-options: %s warned %d times\n", *b, tl_count_substr(c->err, want));
            bad = 1;
        }
    }
    return bad;
}

/* A symbolic link of another user at the log path in a sticky directory
 * (the kernel answers EACCES, not ELOOP): named as a link. */
static void make_link(void)
{
    char sticky[512], link[600];
    path_in(sticky, sizeof sticky, "sticky");
    mkdir(sticky, 01777);
    chmod(sticky, 01777);
    snprintf(link, sizeof link, "%s/log", sticky);
    unlink(link);
    if (symlink("/nonexistent/cupool-log-target", link) != 0) CHECK_FAIL("symlink: %s", strerror(errno));
    if (geteuid() == 0 && lchown(link, 65534, 65534) != 0) CHECK_FAIL("lchown: %s", strerror(errno));
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
    {"many-opens", many_opens, {NULL}, 90, NULL, NULL, NULL},
    {"idle-clients", idle_clients, {NULL}, 40, NULL, NULL, NULL},
    {"many-exporters", many_exporters, {NULL}, 40, NULL, NULL, NULL},
    {"bind-umask", bind_umask, {NULL}, 20, NULL, NULL, NULL},
    {"log-full", log_full, {"CUPOOL_LOG=@/full.log", "CUPOOL_STATS=1", NULL}, 60, NULL, log_full_check, NULL},
    {"log-clean", log_clean, {"CUPOOL_LOG=@/clean.log", NULL}, 20, NULL, log_clean_check, NULL},
    {"log-zero", log_zero, {"CUPOOL_LOG=0", NULL}, 20, NULL, log_zero_check, NULL},
    {"bad-options", bad_options, {NULL}, 20, NULL, bad_options_check, NULL},
    {"bad-options-run", bad_options_run, {NULL}, 0, NULL, NULL, NULL},
    {"log-symlink", log_clean, {"CUPOOL_LOG=@/sticky/log", NULL}, 20,
     "sticky/log is a symbolic link, which cupool does not follow", NULL, make_link},
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

/* Why a case cannot run in this build, or NULL. */
static const char *skip(const nb_case_t *k)
{
#ifdef __SANITIZE_THREAD__
    /* ThreadSanitizer's runtime makes a thread of its own at the first
     * pthread_create, and the C library counts it: a program built with it
     * whose main thread calls pthread_exit never ends, without cupool too. */
    if (strncmp(k->name, "pthread-exit", 12) == 0) return "ThreadSanitizer's thread keeps such a program alive natively too";
#endif
    (void)k;
    return NULL;
}

static int run_case(const nb_case_t *k)
{
    const char *why = skip(k);
    if (why) {
        printf("%s: skipped (%s)\n", k->name, why);
        return 0;
    }
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
    if (argc == 3 && strcmp(argv[1], "--importer-many") == 0) return importer_many(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "--exporter-one") == 0) return exporter_one();
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
    /* Cases with no deadline are run by another case. */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (cases[i].timeout_s && (argc < 2 || strcmp(argv[1], cases[i].name) == 0)) failed += run_case(&cases[i]);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
    return failed ? 1 : 0;
}
