/*
 * One device, several processes (src/engine/share.c).  A holder process
 * (A) allocates and frees most of the device under cupool, keeps a small
 * block with a pattern in it, and waits; a needer (B) then asks for more
 * than the device has free.  On the simulator the device is one budget
 * shared by both (SIMCUDA_SHARED_DEVICE, SIMCUDA_MEM=256M), whose pools
 * trim only frees the host has seen complete (SIMCUDA_TRIM_OBSERVED); on a GPU
 * (CUPOOL_TEST_DRIVER=real) it is the card, and the sizes follow
 * cuMemGetInfo.  Each case runs a fresh A and B in a socket folder
 * (CUPOOL_SHARE_DIR) and a device file of its own:
 *
 *   reclaim     B's allocation succeeds: A handed its idle memory back;
 *               A's block is intact and A allocates again afterwards;
 *   asker-off   B with CUPOOL_SHARE=0 fails (the control: without
 *               reclaim the allocation cannot succeed);
 *   holder-off  A with CUPOOL_SHARE=0 is never asked: B fails;
 *   slow-holder A's driver takes 700 ms to release its memory
 *               (SIMCUDA_TRIM_MS), longer than the 200 ms bound for taking
 *               the request: B waits for A, which took it, and succeeds;
 *   stopped     A stopped (SIGSTOP) cannot answer: B fails within the
 *               bound, and A, continued, is unharmed;
 *   dead        A killed: its socket is left behind; B is not held by it,
 *               removes it, and succeeds (A's memory died with it);
 *   strangers   sockets in the folder that are not askable (mode 0644, a
 *               plain file, and as root one owned by another user) are
 *               never connected to, while a 0600 socket of the user is;
 *   open-folder a folder others may enter is not used: B fails and says so;
 *   other-device a process on another device answers that it holds
 *               nothing there (simulator only);
 *   idle-keep   A with CUPOOL_IDLE_KEEP=0 hands its idle memory back by
 *               itself: B, with CUPOOL_SHARE=0, succeeds after a moment;
 *   info        B's cuMemGetInfo with CUPOOL_SHARE_INFO=1 counts A's idle
 *               memory as free, without it does not, nor with it when A
 *               does not answer (CUPOOL_SHARE=0); A's memory stays A's.
 *
 * Every wait is bounded: a child that does not say "ready" in time, or
 * does not end, fails the case.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MiB (1ull << 20)
#define KEEP_BYTES (16 * MiB)
#define PATTERN 0x5eed1234u
/* The longest B's failing allocation may take: cupool's own trim and
 * retries, and the wait for answers (200 ms). */
#define FAIL_BOUND_MS 1500

static int real_driver(void)
{
    const char *d = getenv("CUPOOL_TEST_DRIVER");
    return d && strcmp(d, "real") == 0;
}

static uint64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

/* ---- the holder (A) ------------------------------------------------------ */

static int holder_main(void)
{
    tl_init(0);
    size_t free_bytes, total;
    CHECK_CU(cuMemGetInfo(&free_bytes, &total));
    CUdeviceptr keep, big;
    CHECK_CU(cuMemAlloc(&keep, KEEP_BYTES));
    tl_fill(keep, KEEP_BYTES, PATTERN);
    /* Most of what is free, in whole 2 MiB steps. */
    size_t big_bytes = (free_bytes - KEEP_BYTES) / 4 * 3 / (2 * MiB) * (2 * MiB);
    CHECK_CU(cuMemAlloc(&big, big_bytes));
    tl_fill(big, big_bytes, PATTERN ^ 1u);
    CHECK_CU(cuMemFree(big));
    CHECK_CU(cuCtxSynchronize());
    /* What B asks for: more than is free while A holds its idle block,
     * less than is free once A has handed it back. */
    printf("ready %llu %llu\n", (unsigned long long)((free_bytes - KEEP_BYTES - big_bytes / 4) / (2 * MiB) * (2 * MiB)),
           (unsigned long long)big_bytes);
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin)) CHECK_FAIL("holder: no word from the test");
    if (tl_spot_check(keep, KEEP_BYTES, PATTERN) != 0) CHECK_FAIL("holder: its block changed while it waited");
    /* The program goes on as before: it allocates and frees again. */
    CUdeviceptr again;
    CHECK_CU(cuMemAlloc(&again, 8 * MiB));
    tl_fill(again, 8 * MiB, PATTERN ^ 2u);
    if (tl_spot_check(again, 8 * MiB, PATTERN ^ 2u) != 0) CHECK_FAIL("holder: a new block reads back wrong");
    CHECK_CU(cuMemFree(again));
    CHECK_CU(cuMemFree(keep));
    printf("holder ok\n");
    return 0;
}

/* ---- the needer (B) ------------------------------------------------------ */

/* Asks for the bytes A named. */
static int needer_main(const char *want_text)
{
    tl_init(0);
    size_t want = (size_t)strtoull(want_text, NULL, 10);
    CUdeviceptr p = 0;
    uint64_t start = now_ms();
    CUresult r = cuMemAlloc(&p, want);
    uint64_t took = now_ms() - start;
    printf("alloc %d %llu\n", (int)r, (unsigned long long)took);
    if (r == CUDA_SUCCESS) {
        tl_fill(p, want, PATTERN ^ 3u);
        if (tl_spot_check(p, want, PATTERN ^ 3u) != 0) CHECK_FAIL("needer: its block reads back wrong");
        CHECK_CU(cuMemFree(p));
    }
    return 0;
}

/* What cuMemGetInfo says is free. */
static int info_main(void)
{
    tl_init(0);
    size_t free_bytes, total;
    CHECK_CU(cuMemGetInfo(&free_bytes, &total));
    printf("info %llu\n", (unsigned long long)free_bytes);
    return 0;
}

/* ---- the parent -------------------------------------------------------- */

typedef struct {
    pid_t pid;
    int to, from; /* its stdin, its stdout */
    char want[32]; /* what B asks for, as A says */
    unsigned long long idle; /* what A holds idle, as it says */
} holder_t;

static char top[128]; /* the test's own folder */

/* Starts A and waits (10 s at most) for its "ready BIG"; 0 on success. */
static int holder_start(holder_t *h, const char *const *env)
{
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC)) CHECK_FAIL("pipe: %s", strerror(errno));
    fflush(NULL);
    h->pid = fork();
    if (h->pid < 0) CHECK_FAIL("fork: %s", strerror(errno));
    if (h->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        tl_apply_env(env);
        execl(tl_self_path(), "test-holder", "--holder", (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    h->to = in[1];
    h->from = out[0];
    char line[128];
    size_t n = 0;
    uint64_t deadline = now_ms() + 10000;
    while (n < sizeof line - 1 && !memchr(line, '\n', n)) {
        struct pollfd p = {.fd = h->from, .events = POLLIN};
        uint64_t now = now_ms();
        if (now >= deadline || poll(&p, 1, (int)(deadline - now)) != 1) break;
        ssize_t got = read(h->from, line + n, sizeof line - 1 - n);
        if (got <= 0) break;
        n += (size_t)got;
    }
    line[n] = '\0';
    if (sscanf(line, "ready %31s %llu", h->want, &h->idle) != 2) {
        fprintf(stderr, "the holder did not say it was ready (it said \"%s\")\n", line);
        return -1;
    }
    return 0;
}

/* Tells A to check its block and end; its exit status (124: it did not end
 * within 10 s, and was killed). */
static int holder_finish(holder_t *h, char *said, size_t cap)
{
    ssize_t w = write(h->to, "go\n", 3);
    (void)w;
    close(h->to);
    uint64_t deadline = now_ms() + 10000;
    int status = 0, timed_out = 0;
    while (waitpid(h->pid, &status, WNOHANG) == 0) {
        if (now_ms() >= deadline) {
            kill(h->pid, SIGKILL);
            waitpid(h->pid, &status, 0);
            timed_out = 1;
            break;
        }
        usleep(10000);
    }
    ssize_t got = read(h->from, said, cap - 1);
    said[got > 0 ? got : 0] = '\0';
    close(h->from);
    if (timed_out) return 124;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Runs B; its allocation's result and time in ms, or -1 when it did not
 * report one. */
static int needer_run(const holder_t *h, const char *const *env, int *result, unsigned long long *ms,
                      tl_child_t *child)
{
    const char *args[] = {"--needer", h->want, NULL};
    tl_run_self(args, env, 0, 20, child);
    const char *line = strstr(child->out, "alloc ");
    if (child->status != 0 || !line || sscanf(line, "alloc %d %llu", result, ms) != 2) {
        tl_child_dump("needer", child);
        return -1;
    }
    return 0;
}

/* A case's folder: share/ for the sockets (made by cupool unless the case
 * makes it), device for the simulator's shared device. */
static void case_paths(const char *name, char *share, char *device, size_t cap)
{
    snprintf(share, cap, "%s/%s", top, name);
    if (mkdir(share, 0700) != 0) CHECK_FAIL("mkdir %s: %s", share, strerror(errno));
    snprintf(device, cap, "%s/%s/device", top, name);
}

static void env_set_case(const char *share, const char *device)
{
    setenv("CUPOOL_SHARE_DIR", share, 1);
    setenv("SIMCUDA_SHARED_DEVICE", device, 1);
    setenv("SIMCUDA_MEM", "256M", 1);
    setenv("SIMCUDA_DEVICES", "1", 1);
    /* A trim sees only the frees the host has seen complete, as on a GPU:
     * what a holder hands back on the legacy stream must be seen first. */
    setenv("SIMCUDA_TRIM_OBSERVED", "1", 1);
}

/* The folder's path (cupool names it after the user). */
static void folder_of(const char *share, char *out, size_t cap)
{
    snprintf(out, cap, "%s/cupool-share.%u", share, (unsigned)geteuid());
}

/* One case: A with env_a, then (after `before`, which may stop or kill A)
 * B with env_b; B's allocation must succeed or fail as `succeed` says. */
typedef enum { A_ASKED, A_STOPPED, A_KILLED, A_IDLE } holder_fate_t;

static int run_case(const char *name, const char *const *env_a, const char *const *env_b, holder_fate_t fate,
                    int succeed, const char *b_says)
{
    char share[256], device[256], folder[320];
    case_paths(name, share, device, sizeof share);
    env_set_case(share, device);
    folder_of(share, folder, sizeof folder);
    holder_t h;
    int failed = 0;
    if (holder_start(&h, env_a) != 0) {
        kill(h.pid, SIGKILL);
        waitpid(h.pid, NULL, 0);
        fprintf(stderr, "%s: FAILED (holder)\n", name);
        return 1;
    }
    if (fate == A_STOPPED) {
        /* Stopped before B asks, not only signalled: on a loaded machine
         * the stop can come after B's first look. */
        int st;
        kill(h.pid, SIGSTOP);
        if (waitpid(h.pid, &st, WUNTRACED) != h.pid || !WIFSTOPPED(st)) {
            fprintf(stderr, "%s: the holder did not stop\n", name);
            failed = 1;
        }
    }
    if (fate == A_KILLED) {
        kill(h.pid, SIGKILL);
        waitpid(h.pid, NULL, 0);
    }
    if (fate == A_IDLE) usleep(1500 * 1000); /* two looks of 250 ms, and time to spare */
    int result = -1;
    unsigned long long ms = 0;
    tl_child_t b;
    if (needer_run(&h, env_b, &result, &ms, &b) != 0) {
        failed = 1;
    } else {
        fprintf(stderr, "%s: B's allocation %s after %llu ms\n", name, result == 0 ? "succeeded" : "failed", ms);
        if (succeed && result != CUDA_SUCCESS) {
            fprintf(stderr, "%s: B's allocation should have succeeded (result %d)\n", name, result);
            failed = 1;
        }
        if (!succeed && result != CUDA_ERROR_OUT_OF_MEMORY) {
            fprintf(stderr, "%s: B's allocation should have failed with out of memory (result %d)\n", name, result);
            failed = 1;
        }
        if (!succeed && ms > FAIL_BOUND_MS) {
            fprintf(stderr, "%s: B's failing allocation took %llu ms, more than %d\n", name, ms, FAIL_BOUND_MS);
            failed = 1;
        }
        if (b_says && !strstr(b.err, b_says)) {
            fprintf(stderr, "%s: B did not say \"%s\"\n", name, b_says);
            failed = 1;
        }
        if (failed) tl_child_dump("needer", &b);
    }
    tl_child_free(&b);
    if (fate == A_STOPPED) kill(h.pid, SIGCONT);
    if (fate == A_KILLED) {
        close(h.to);
        close(h.from);
        /* Its socket, left behind, was found dead and removed. */
        DIR *d = opendir(folder);
        char prefix[32];
        snprintf(prefix, sizeof prefix, "%d.", (int)h.pid);
        for (struct dirent *e; d && (e = readdir(d));)
            if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
                fprintf(stderr, "%s: the dead holder's socket %s is still there\n", name, e->d_name);
                failed = 1;
            }
        if (d) closedir(d);
    } else {
        char said[256];
        int status = holder_finish(&h, said, sizeof said);
        if (status != 0 || !strstr(said, "holder ok")) {
            fprintf(stderr, "%s: the holder ended with status %d, saying \"%s\"\n", name, status, said);
            failed = 1;
        }
    }
    fprintf(stderr, "%s: %s\n", name, failed ? "FAILED" : "passed");
    return failed;
}

/* A listening socket in the folder named as cupool names them, with this
 * mode (and owner, where uid is not -1). */
static int fake_socket(const char *folder, const char *hex, mode_t mode, uid_t uid, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%d.%s", folder, (int)getpid(), hex);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 8) != 0 || chmod(path, mode) != 0)
        CHECK_FAIL("fake socket %s: %s", path, strerror(errno));
    if (uid != (uid_t)-1 && chown(path, uid, (gid_t)-1) != 0) CHECK_FAIL("chown %s: %s", path, strerror(errno));
    return s;
}

/* Whether someone asked through the fake socket: a connection that sent
 * a request (a process starting up also connects, to find sockets left by
 * dead processes, but sends nothing). */
static int asked_through(int s)
{
    int asked = 0;
    for (int fd; (fd = accept4(s, NULL, NULL, SOCK_CLOEXEC)) >= 0;) {
        char magic[8];
        asked |= recv(fd, magic, sizeof magic, MSG_DONTWAIT) == (ssize_t)sizeof magic && memcmp(magic, "cupoolS", 7) == 0;
        close(fd);
    }
    return asked;
}

/* Sockets that are not askable are never connected to; an askable one is
 * (so the test can tell).  A holder answers as usual. */
static int strangers(void)
{
    char share[256], device[256], folder[320];
    case_paths("strangers", share, device, sizeof share);
    env_set_case(share, device);
    folder_of(share, folder, sizeof folder);
    if (mkdir(folder, 0700) != 0) CHECK_FAIL("mkdir %s: %s", folder, strerror(errno));
    char good_path[400], open_path[400], theirs_path[400], file_path[400];
    int good = fake_socket(folder, "0000000000000001", 0600, (uid_t)-1, good_path, sizeof good_path);
    int open_one = fake_socket(folder, "0000000000000002", 0644, (uid_t)-1, open_path, sizeof open_path);
    int theirs = -1;
    if (geteuid() == 0) theirs = fake_socket(folder, "0000000000000003", 0600, 65534, theirs_path, sizeof theirs_path);
    snprintf(file_path, sizeof file_path, "%s/%d.0000000000000004", folder, (int)getpid());
    int f = open(file_path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    if (f < 0) CHECK_FAIL("open %s: %s", file_path, strerror(errno));
    close(f);

    int failed = run_case("strangers-holder", (const char *const[]){NULL}, (const char *const[]){NULL}, A_ASKED, 1, NULL);
    /* The holder's case made a folder of its own: ask once more here, where
     * only the fakes are, through a needer with nothing to gain. */
    env_set_case(share, device);
    holder_t none = {.want = "0"};
    int result;
    unsigned long long ms;
    tl_child_t b;
    /* A needer that asks for more than any device holds (1 TiB): it asks
     * everyone. */
    snprintf(none.want, sizeof none.want, "%llu", 1024ull * 1024 * MiB);
    if (needer_run(&none, (const char *const[]){NULL}, &result, &ms, &b) != 0) failed = 1;
    tl_child_free(&b);
    if (!asked_through(good)) {
        fprintf(stderr, "strangers: the user's own 0600 socket was not asked\n");
        failed = 1;
    }
    if (asked_through(open_one)) {
        fprintf(stderr, "strangers: a socket of mode 0644 was asked\n");
        failed = 1;
    }
    if (theirs >= 0 && asked_through(theirs)) {
        fprintf(stderr, "strangers: a socket of another user was asked\n");
        failed = 1;
    }
    if (theirs < 0) fprintf(stderr, "strangers: not root: the socket of another user is not tried\n");
    if (access(open_path, F_OK) != 0 || access(file_path, F_OK) != 0) {
        fprintf(stderr, "strangers: a file that is not cupool's was removed\n");
        failed = 1;
    }
    close(good);
    close(open_one);
    if (theirs >= 0) close(theirs);
    unlink(good_path);
    unlink(open_path);
    unlink(file_path);
    if (theirs >= 0) unlink(theirs_path);
    fprintf(stderr, "strangers: %s\n", failed ? "FAILED" : "passed");
    return failed;
}

/* A folder others may enter is used by neither side. */
static int open_folder(void)
{
    char share[256], device[256], folder[320];
    case_paths("open-folder", share, device, sizeof share);
    folder_of(share, folder, sizeof folder);
    if (mkdir(folder, 0700) != 0 || chmod(folder, 0755) != 0) CHECK_FAIL("mkdir %s: %s", folder, strerror(errno));
    /* run_case would make its own folder: the case's share is reused. */
    char name[64] = "open-folder";
    holder_t h;
    env_set_case(share, device);
    int failed = 0;
    if (holder_start(&h, (const char *const[]){NULL}) != 0) {
        kill(h.pid, SIGKILL);
        waitpid(h.pid, NULL, 0);
        fprintf(stderr, "%s: FAILED (holder)\n", name);
        return 1;
    }
    int result = -1;
    unsigned long long ms = 0;
    tl_child_t b;
    if (needer_run(&h, (const char *const[]){NULL}, &result, &ms, &b) != 0) {
        failed = 1;
    } else {
        fprintf(stderr, "%s: B's allocation %s after %llu ms\n", name, result == 0 ? "succeeded" : "failed", ms);
        if (result != CUDA_ERROR_OUT_OF_MEMORY || !strstr(b.err, "is not a folder of this user closed to others")) {
            tl_child_dump("needer", &b);
            failed = 1;
        }
    }
    tl_child_free(&b);
    char said[256];
    int status = holder_finish(&h, said, sizeof said);
    if (status != 0) failed = 1;
    fprintf(stderr, "%s: %s\n", name, failed ? "FAILED" : "passed");
    return failed;
}

/* A process on another device is asked, and answers that it holds
 * nothing there (simulator only: one GPU has one device). */
static int other_device(void)
{
    if (real_driver()) {
        fprintf(stderr, "other-device: skipped on the real driver\n");
        return 0;
    }
    char share[256], device[256], other[300];
    case_paths("other-device", share, device, sizeof share);
    env_set_case(share, device);
    snprintf(other, sizeof other, "SIMCUDA_SHARED_DEVICE=%s.other", device);
    holder_t h;
    int failed = 0;
    if (holder_start(&h, (const char *const[]){other, NULL}) != 0) {
        kill(h.pid, SIGKILL);
        waitpid(h.pid, NULL, 0);
        fprintf(stderr, "other-device: FAILED (holder)\n");
        return 1;
    }
    /* More than any device holds (1 TiB): B asks everyone. */
    snprintf(h.want, sizeof h.want, "%llu", 1024ull * 1024 * MiB);
    int result = -1;
    unsigned long long ms = 0;
    tl_child_t b;
    if (needer_run(&h, (const char *const[]){"CUPOOL_VERBOSE=1", NULL}, &result, &ms, &b) != 0) {
        failed = 1;
    } else if (result != CUDA_ERROR_OUT_OF_MEMORY || !strstr(b.err, "asked 1 other processes (0 not asked), 0 answered")) {
        tl_child_dump("needer", &b);
        failed = 1;
    }
    tl_child_free(&b);
    char said[256];
    if (holder_finish(&h, said, sizeof said) != 0) failed = 1;
    fprintf(stderr, "other-device: %s\n", failed ? "FAILED" : "passed");
    return failed;
}

/* What a process that runs beside A with env says is free; 0 if it failed. */
static unsigned long long free_beside(const char *const *env)
{
    const char *args[] = {"--info", NULL};
    tl_child_t child;
    tl_run_self(args, env, 0, 20, &child);
    const char *line = strstr(child.out, "info ");
    unsigned long long free_bytes = 0;
    if (child.status != 0 || !line || sscanf(line, "info %llu", &free_bytes) != 1) tl_child_dump("info", &child);
    tl_child_free(&child);
    return free_bytes;
}

/* CUPOOL_SHARE_INFO: B's free memory counts A's idle memory only when B
 * asks for it and A answers. */
static int info(void)
{
    int failed = 0;
    for (int a_answers = 1; a_answers >= 0; a_answers--) {
        const char *name = a_answers ? "info" : "info-holder-off";
        char share[256], device[256];
        case_paths(name, share, device, sizeof share);
        env_set_case(share, device);
        holder_t h;
        const char *const env_a[] = {a_answers ? "CUPOOL_SHARE=1" : "CUPOOL_SHARE=0", NULL};
        if (holder_start(&h, env_a) != 0) {
            kill(h.pid, SIGKILL);
            waitpid(h.pid, NULL, 0);
            fprintf(stderr, "%s: FAILED (holder)\n", name);
            failed++;
            continue;
        }
        unsigned long long plain = free_beside((const char *const[]){NULL});
        unsigned long long counted = free_beside((const char *const[]){"CUPOOL_SHARE_INFO=1", NULL});
        fprintf(stderr, "%s: free %llu MiB, with CUPOOL_SHARE_INFO %llu MiB; A holds %llu MiB idle\n", name,
                plain / MiB, counted / MiB, h.idle / MiB);
        int ok = plain && counted;
        /* The simulated device is one budget: exact.  A GPU's free memory
         * moves with everything else on it: within 64 MiB. */
        unsigned long long slack = real_driver() ? 64 * MiB : 0;
        if (a_answers) ok = ok && counted + slack >= plain + h.idle && counted <= plain + h.idle + slack;
        else ok = ok && counted <= plain + slack && counted + slack >= plain;
        char said[256];
        int status = holder_finish(&h, said, sizeof said);
        if (status != 0 || !strstr(said, "holder ok")) ok = 0;
        fprintf(stderr, "%s: %s\n", name, ok ? "passed" : "FAILED");
        failed += !ok;
    }
    return failed;
}

static void remove_tree(const char *path)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", path);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--holder") == 0) return holder_main();
    if (argc == 3 && strcmp(argv[1], "--needer") == 0) return needer_main(argv[2]);
    if (argc == 2 && strcmp(argv[1], "--info") == 0) return info_main();
    signal(SIGPIPE, SIG_IGN);
    snprintf(top, sizeof top, "/tmp/cupool-test-share.XXXXXX");
    if (!mkdtemp(top)) CHECK_FAIL("mkdtemp: %s", strerror(errno));
    unsetenv("CUPOOL_SHARE");
    unsetenv("CUPOOL_IDLE_KEEP");
    unsetenv("CUPOOL_SHARE_INFO");
    const char *const none[] = {NULL};
    const char *const off[] = {"CUPOOL_SHARE=0", NULL};
    const char *const verbose[] = {"CUPOOL_VERBOSE=1", NULL};
    const char *const idle[] = {"CUPOOL_IDLE_KEEP=0", NULL};
    int failed = 0;
    failed += run_case("reclaim", verbose, verbose, A_ASKED, 1, "processes (0 not asked), 1 answered");
    failed += run_case("asker-off", none, off, A_ASKED, 0, NULL);
    failed += run_case("holder-off", off, none, A_ASKED, 0, NULL);
    const char *const slow[] = {"SIMCUDA_TRIM_MS=700", NULL};
    failed += run_case("slow-holder", slow, verbose, A_ASKED, 1, "processes (0 not asked), 1 answered");
    failed += run_case("stopped", none, none, A_STOPPED, 0, NULL);
    failed += run_case("dead", none, none, A_KILLED, 1, NULL);
    failed += strangers();
    failed += open_folder();
    failed += other_device();
    failed += run_case("idle-keep", idle, off, A_IDLE, 1, NULL);
    failed += info();
    if (real_driver()) fprintf(stderr, "ran on the real driver\n");
    remove_tree(top);
    return failed ? 1 : 0;
}
