/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Legacy IPC between processes on pooled memory.  Each case runs in a
 * process of its own under cupool (the exporter) and starts importers:
 * this same program exec'd with `--importer HANDLE SCRIPT`, under cupool or
 * not, talking to the exporter through its stdin and stdout.  A script is
 * a comma-separated list of steps:
 *
 *   open         cuIpcOpenMemHandle; prints "open RESULT"
 *   open-again   a second open; prints "open-again RESULT same|other"
 *   check:HEX    the block (1 MiB) holds the 32-bit pattern; prints "check ok|bad"
 *   write:HEX    fills the block with the pattern
 *   close        cuIpcCloseMemHandle; prints "close RESULT"
 *   say:WORD     prints WORD
 *   wait         reads a line from stdin
 *   pass-on:S    runs another importer (a third process) with script S
 *                and prints its lines after "third: "
 *   sockets      prints "sockets N": the Unix sockets this process inherited
 *   drop-user    becomes user 65534 (only as root)
 *
 * The cases: the data round trip both ways, in every free mode; an interior
 * pointer's handle; opening twice; a third process; a forged, a stale and a
 * process's own handle; the exporter freeing a block while another process
 * still has it open (it must not be handed out again until closed, and
 * goes back to its pool then); an importer killed, an exporter killed
 * (its stale socket removed by the next), one stopped, importers at once; handles of
 * memory cupool passed through,
 * opened by a process without cupool; a cupool handle opened without
 * cupool; CUPOOL_IPC=0; a process of another user; no socket reaches an
 * exec'd child; the socket is the user's alone and goes at exit.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLOCK ((size_t)1 << 20)

/* ---- handles as text ----------------------------------------------------- */


/* ---- the importer ---------------------------------------------------------- */

typedef struct {
    pid_t pid;
    int to, from; /* its stdin, its stdout */
    char buf[4096];
    size_t len;
} importer_t;

/* Runs this program with `role` and its arguments (NULL-terminated). */
static void spawn_self(importer_t *im, const char *const *args, int native)
{
    int in[2], out[2];
    if (pipe(in) || pipe(out)) CHECK_FAIL("pipe: %s", strerror(errno));
    fflush(NULL);
    im->pid = fork();
    if (im->pid < 0) CHECK_FAIL("fork: %s", strerror(errno));
    if (im->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        if (native) {
            unsetenv("LD_PRELOAD");
            setenv("CUPOOL_TEST_NATIVE", "1", 1);
        }
        const char *argv[8] = {tl_self_path()};
        for (int i = 0; args[i] && i < 6; i++) argv[i + 1] = args[i];
        execv(tl_self_path(), (char *const *)argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    im->to = in[1];
    im->from = out[0];
    im->len = 0;
}

static void importer_start(importer_t *im, const char *hex, const char *script, int native)
{
    const char *args[] = {"--importer", hex, script, NULL};
    spawn_self(im, args, native);
}

/* The importer's next line (without its newline), waiting up to 30 s. */
static const char *importer_line(importer_t *im, char *line, size_t cap)
{
    for (;;) {
        char *nl = memchr(im->buf, '\n', im->len);
        if (nl) {
            size_t n = (size_t)(nl - im->buf);
            if (n >= cap) n = cap - 1;
            memcpy(line, im->buf, n);
            line[n] = 0;
            im->len -= (size_t)(nl - im->buf) + 1;
            memmove(im->buf, nl + 1, im->len);
            return line;
        }
        struct pollfd p = {.fd = im->from, .events = POLLIN};
        if (poll(&p, 1, 30000) <= 0) return NULL;
        ssize_t r = read(im->from, im->buf + im->len, sizeof im->buf - im->len - 1);
        if (r <= 0) return NULL;
        im->len += (size_t)r;
    }
}

static void importer_expect(importer_t *im, const char *want)
{
    char line[512];
    const char *got = importer_line(im, line, sizeof line);
    if (!got || strcmp(got, want) != 0) CHECK_FAIL("importer said \"%s\", expected \"%s\"", got ? got : "(nothing)", want);
    printf("  importer: %s\n", got);
}

static void importer_go(importer_t *im)
{
    if (write(im->to, "go\n", 3) != 3) CHECK_FAIL("cannot write to the importer");
}

static int importer_end(importer_t *im)
{
    close(im->to);
    char line[512];
    while (importer_line(im, line, sizeof line)) printf("  importer: %s\n", line);
    close(im->from);
    int status = 0;
    waitpid(im->pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Runs an importer to its end; its lines must be `want` (newline-separated). */
static void importer_run(const CUipcMemHandle *h, const char *script, int native, const char *want)
{
    char hex[129];
    tl_handle_to_hex(h, hex);
    importer_t im;
    importer_start(&im, hex, script, native);
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", want);
    for (char *save = NULL, *w = strtok_r(copy, "\n", &save); w; w = strtok_r(NULL, "\n", &save))
        importer_expect(&im, w);
    int status = importer_end(&im);
    if (status != 0) CHECK_FAIL("importer (%s) exited %d", script, status);
}

static int count_sockets(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    struct dirent *e;
    char path[300], link[300];
    while (d && (e = readdir(d))) {
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, link, sizeof link - 1);
        if (len > 0 && (link[len] = 0, strncmp(link, "socket:", 7) == 0)) n++;
    }
    if (d) closedir(d);
    return n;
}

static int importer_main(const char *hex, const char *script)
{
    CUipcMemHandle h;
    tl_handle_from_hex(hex, &h);
    setvbuf(stdout, NULL, _IOLBF, 0);
    char *steps = strdup(script);
    CUdeviceptr p = 0;
    int ready = 0;
    for (char *save = NULL, *s = strtok_r(steps, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
        if (!ready && strcmp(s, "sockets") != 0 && strcmp(s, "drop-user") != 0) {
            tl_init(0);
            ready = 1;
        }
        if (strcmp(s, "open") == 0) {
            printf("open %s\n", check_result_name(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)));
        } else if (strcmp(s, "open-again") == 0) {
            CUdeviceptr q = 0;
            CUresult r = cuIpcOpenMemHandle(&q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
            printf("open-again %s %s\n", check_result_name(r), q == p ? "same" : "other");
        } else if (strncmp(s, "check:", 6) == 0) {
            printf("check %s\n", tl_spot_check(p, BLOCK, (uint32_t)strtoul(s + 6, NULL, 16)) == 0 ? "ok" : "bad");
        } else if (strncmp(s, "write:", 6) == 0) {
            tl_fill(p, BLOCK, (uint32_t)strtoul(s + 6, NULL, 16));
        } else if (strcmp(s, "close") == 0) {
            printf("close %s\n", check_result_name(cuIpcCloseMemHandle(p)));
        } else if (strncmp(s, "say:", 4) == 0) {
            printf("%s\n", s + 4);
        } else if (strcmp(s, "wait") == 0) {
            char line[64];
            if (!fgets(line, sizeof line, stdin)) return 3;
        } else if (strncmp(s, "pass-on:", 8) == 0) {
            importer_t third;
            char *sub = strdup(s + 8);
            for (char *c = sub; *c; c++)
                if (*c == ';') *c = ',';
            importer_start(&third, hex, sub, 0);
            char line[512];
            while (importer_line(&third, line, sizeof line)) printf("third: %s\n", line);
            close(third.to);
            close(third.from);
            int status = 0;
            waitpid(third.pid, &status, 0);
            printf("third exited %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
            free(sub);
        } else if (strcmp(s, "sockets") == 0) {
            printf("sockets %d\n", count_sockets());
        } else if (strcmp(s, "drop-user") == 0) {
            if (setgid(65534) != 0 || setuid(65534) != 0) return 4;
            printf("user %u\n", (unsigned)geteuid());
        } else {
            fprintf(stderr, "unknown step %s\n", s);
            return 2;
        }
    }
    free(steps);
    return 0;
}

/* ---- the exporter's cases ------------------------------------------------------ */

static CUdeviceptr exported_block(uint32_t pattern, CUipcMemHandle *h);

/* `--exporter`: exports a block of 0x77777777, prints its handle, and
 * waits for a line on stdin (or to be killed). */
static int exporter_main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    tl_init(0);
    CUipcMemHandle h;
    exported_block(0x77777777, &h);
    char hex[129];
    tl_handle_to_hex(&h, hex);
    printf("%s\n", hex);
    char line[64];
    if (!fgets(line, sizeof line, stdin)) return 0;
    return 0;
}

static int sockets_in(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[1024];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.' && lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) n++;
    }
    if (d) closedir(d);
    return n;
}

static CUdeviceptr exported_block(uint32_t pattern, CUipcMemHandle *h)
{
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, BLOCK));
    tl_fill(p, BLOCK, pattern);
    CHECK_CU(cuCtxSynchronize());
    CHECK_CU(cuIpcGetMemHandle(h, p));
    return p;
}

/* Data both ways, an interior pointer's handle, opening twice, closing
 * once too often, and a third process that opens the handle passed on. */
static int round_trip(void)
{
    tl_init(0);
    CUipcMemHandle h, inner;
    CUdeviceptr p = exported_block(0x11111111, &h);
    if (!tl_pool_of(p)) CHECK_FAIL("the block is not pooled");
    CHECK_CU(cuIpcGetMemHandle(&inner, p + 4096));
    if (memcmp(&h, &inner, sizeof h) != 0) CHECK_FAIL("an interior pointer's handle is not its block's");
    importer_run(&h,
                 "open,check:11111111,write:22222222,open-again,close,check:22222222,close,close,"
                 "pass-on:open;check:22222222;write:33333333;close",
                 0,
                 "open CUDA_SUCCESS\ncheck ok\nopen-again CUDA_SUCCESS same\nclose CUDA_SUCCESS\ncheck ok\n"
                 "close CUDA_SUCCESS\nclose CUDA_ERROR_INVALID_VALUE\nthird: open CUDA_SUCCESS\nthird: check ok\n"
                 "third: close CUDA_SUCCESS\nthird exited 0");
    if (tl_spot_check(p, BLOCK, 0x33333333) != 0) CHECK_FAIL("the exporter does not read the third process's write");
    CHECK_CU(cuMemFree(p));
    return 0;
}

/* Handles that name nothing: a forged tag, a freed block, and the
 * exporter's own handle. */
static int bad_handles(void)
{
    tl_init(0);
    CUipcMemHandle h, forged;
    CUdeviceptr p = exported_block(0x11111111, &h);
    forged = h;
    forged.reserved[30] ^= 0x5a;
    importer_run(&forged, "open", 0, "open CUDA_ERROR_INVALID_VALUE");
    CUdeviceptr own;
    CHECK_CU_EQ(cuIpcOpenMemHandle(&own, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_CU(cuMemFree(p));
    importer_run(&h, "open", 0, "open CUDA_ERROR_INVALID_VALUE");
    /* A process without cupool does not know cupool's handles. */
    CUipcMemHandle live;
    CUdeviceptr q = exported_block(0x22222222, &live);
    char hex[129];
    tl_handle_to_hex(&live, hex);
    importer_t im;
    importer_start(&im, hex, "open", 1);
    char line[256];
    const char *got = importer_line(&im, line, sizeof line);
    if (!got || strcmp(got, "open CUDA_SUCCESS") == 0) CHECK_FAIL("a process without cupool opened cupool's handle");
    printf("  importer without cupool: %s\n", got);
    importer_end(&im);
    CHECK_CU(cuMemFree(q));
    return 0;
}

/* Exports a block of `pattern` and starts an importer running `script`
 * on it, which must first say "open CUDA_SUCCESS" and then `then`. */
static CUdeviceptr exported_to(uint32_t pattern, const char *script, const char *then, importer_t *im)
{
    CUipcMemHandle h;
    CUdeviceptr p = exported_block(pattern, &h);
    char hex[129];
    tl_handle_to_hex(&h, hex);
    importer_start(im, hex, script, 0);
    importer_expect(im, "open CUDA_SUCCESS");
    importer_expect(im, then);
    return p;
}

/* Waits up to 2 s for cupool's IPC thread to hand a block back: the pool
 * uses at most `most` bytes. */
static void handed_back(CUmemoryPool pool, uint64_t most, const char *when)
{
    uint64_t used = 0;
    for (int i = 0; i < 200 && (used = tl_pool_used(pool)) > most; i++) usleep(10000);
    if (used > most)
        CHECK_FAIL("the block was not handed back %s: the pool uses %llu bytes, expected %llu at most", when,
                   (unsigned long long)used, (unsigned long long)most);
    printf("  handed back %s\n", when);
}

/* The exporter frees a block another process still has open: the free
 * succeeds, the block is handed to no allocation while it is open, and it
 * goes back to its pool once the importer closes it. */
static int free_while_open(void)
{
    tl_init(0);
    importer_t im;
    CUdeviceptr p = exported_to(0x11111111, "open,check:11111111,say:opened,wait,write:44444444,say:written,wait,close",
                                "check ok", &im);
    CUmemoryPool pool = tl_pool_of(p);
    importer_expect(&im, "opened");
    CHECK_CU(cuMemFree(p));
    CUdeviceptr others[8];
    for (int i = 0; i < 8; i++) {
        CHECK_CU(cuMemAlloc(&others[i], BLOCK));
        if (others[i] == p) CHECK_FAIL("the block another process has open was handed out again");
        tl_fill(others[i], BLOCK, 0x55555555);
    }
    CHECK_CU(cuCtxSynchronize());
    importer_go(&im);
    importer_expect(&im, "written");
    for (int i = 0; i < 8; i++)
        if (tl_spot_check(others[i], BLOCK, 0x55555555) != 0) CHECK_FAIL("the importer's write reached another block");
    for (int i = 0; i < 8; i++) CHECK_CU(cuMemFree(others[i]));
    CHECK_CU(cuCtxSynchronize());
    /* The pool still counts the block: cupool holds it for the importer. */
    uint64_t used_open = tl_pool_used(pool);
    if (used_open < BLOCK) CHECK_FAIL("the pool uses %llu bytes: the block went back while open", (unsigned long long)used_open);
    importer_go(&im);
    importer_expect(&im, "close CUDA_SUCCESS");
    if (importer_end(&im) != 0) CHECK_FAIL("the importer failed");
    handed_back(pool, used_open - BLOCK, "after the close");
    return 0;
}

/* The importer ends without closing: its end closes what it had open. */
static int importer_dies(void)
{
    tl_init(0);
    importer_t im;
    CUdeviceptr p = exported_to(0x11111111, "open,say:opened,wait", "opened", &im);
    CUmemoryPool pool = tl_pool_of(p);
    uint64_t used_before = tl_pool_used(pool);
    CHECK_CU(cuMemFree(p));
    kill(im.pid, SIGKILL);
    importer_end(&im);
    handed_back(pool, used_before - BLOCK, "after the importer was killed");
    return 0;
}

/* Memory cupool does not pool gets the driver's handle, which a process
 * without cupool opens. */
static int passed_through(void)
{
    tl_init(0);
    CUipcMemHandle h;
    CUdeviceptr p = exported_block(0x66666666, &h);
    if (tl_pool_of(p)) CHECK_FAIL("the block is pooled");
    importer_run(&h, "open,check:66666666,close", 1, "open CUDA_SUCCESS\ncheck ok\nclose CUDA_SUCCESS");
    importer_run(&h, "open,check:66666666,close", 0, "open CUDA_SUCCESS\ncheck ok\nclose CUDA_SUCCESS");
    CHECK_CU(cuMemFree(p));
    return 0;
}

/* Pools that cannot be exported: the driver's answer, said once. */
static int not_exportable(void)
{
    tl_init(0);
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, BLOCK));
    if (!tl_pool_of(p)) CHECK_FAIL("the block is not pooled");
    for (int i = 0; i < 3; i++) {
        CUipcMemHandle h;
        CHECK_CU_EQ(cuIpcGetMemHandle(&h, p), CUDA_ERROR_INVALID_VALUE);
    }
    CHECK_CU(cuMemFree(p));
    return 0;
}

/* A process of another user cannot open the handle. */
static int other_user(void)
{
    tl_init(0);
    CUipcMemHandle h;
    CUdeviceptr p = exported_block(0x11111111, &h);
    importer_run(&h, "drop-user,open", 0, "user 65534\nopen CUDA_ERROR_INVALID_VALUE");
    CHECK_CU(cuMemFree(p));
    return 0;
}

/* No socket of cupool's reaches an exec'd child, and the socket is the
 * user's alone. */
static int sockets(void)
{
    tl_init(0);
    CUipcMemHandle h;
    CUdeviceptr p = exported_block(0x11111111, &h);
    importer_run(&h, "sockets", 0, "sockets 0");
    const char *dir = getenv("CUPOOL_IPC_DIR");
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[1024];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (lstat(path, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
        n++;
        if ((st.st_mode & 0777) != 0600 || st.st_uid != geteuid())
            CHECK_FAIL("%s has mode %o, owner %u", path, (unsigned)(st.st_mode & 0777), (unsigned)st.st_uid);
        printf("  %s: a socket, mode 600\n", e->d_name);
    }
    if (d) closedir(d);
    if (n != 1) CHECK_FAIL("%d sockets in %s, expected 1", n, dir);
    CHECK_CU(cuMemFree(p));
    return 0;
}

/* Starts this program as an exporter of its own (`--exporter`) and reads
 * the handle it prints, as hex. */
static void exporter_start(importer_t *ex, char *hex, size_t cap)
{
    const char *args[] = {"--exporter", NULL};
    spawn_self(ex, args, 0);
    if (!importer_line(ex, hex, cap) || strlen(hex) != 128) CHECK_FAIL("the exporter printed no handle");
}

/* The exporter is killed while another process has its block open: that
 * process closes it and goes on; the handle then fails; the dead
 * exporter's socket is removed by the next process that makes one. */
static int exporter_dies(void)
{
    const char *dir = getenv("CUPOOL_IPC_DIR");
    importer_t ex;
    char hex[256];
    exporter_start(&ex, hex, sizeof hex);
    importer_t im;
    importer_start(&im, hex, "open,check:77777777,say:opened,wait,close", 0);
    importer_expect(&im, "open CUDA_SUCCESS");
    importer_expect(&im, "check ok");
    importer_expect(&im, "opened");
    kill(ex.pid, SIGKILL);
    importer_end(&ex);
    importer_go(&im);
    importer_expect(&im, "close CUDA_SUCCESS");
    if (importer_end(&im) != 0) CHECK_FAIL("the importer failed after the exporter died");
    CUipcMemHandle h;
    tl_handle_from_hex(hex, &h);
    importer_run(&h, "open", 0, "open CUDA_ERROR_INVALID_VALUE");
    int stale = sockets_in(dir);
    if (stale != 1) CHECK_FAIL("%d sockets after the exporter was killed, expected its stale one", stale);
    tl_init(0);
    CUipcMemHandle mine;
    CUdeviceptr p = exported_block(0x11111111, &mine);
    if (sockets_in(dir) != 1) CHECK_FAIL("the killed exporter's socket was not removed");
    printf("  the killed exporter's socket was removed\n");
    CHECK_CU(cuMemFree(p));
    return 0;
}

/* An exporter that cannot answer (stopped): the open fails, after cupool's
 * wait for an answer (10 s), instead of hanging. */
static int exporter_stopped(void)
{
    importer_t ex;
    char hex[256];
    exporter_start(&ex, hex, sizeof hex);
    kill(ex.pid, SIGSTOP);
    importer_t im;
    importer_start(&im, hex, "open", 0);
    char line[256];
    const char *got = importer_line(&im, line, sizeof line);
    int status = importer_end(&im);
    /* The exporter goes on and ends before anything is judged, so that a
     * failure leaves no stopped process behind. */
    kill(ex.pid, SIGCONT);
    importer_go(&ex);
    int exporter = importer_end(&ex);
    if (!got || strcmp(got, "open CUDA_ERROR_INVALID_VALUE") != 0 || status != 0)
        CHECK_FAIL("the open of a stopped exporter's handle said \"%s\" and exited %d", got ? got : "(nothing)", status);
    printf("  importer: %s\n", got);
    if (exporter != 0) CHECK_FAIL("the exporter failed");
    return 0;
}

/* Importers open and close the same block at once while the exporter
 * allocates and frees: every open sees the data, and once they are gone
 * the block's free hands it back at once. */
static int many_importers(void)
{
    tl_init(0);
    CUipcMemHandle h;
    CUdeviceptr p = exported_block(0x11111111, &h);
    char hex[129];
    tl_handle_to_hex(&h, hex);
    enum { N = 6 };
    importer_t im[N];
    for (int i = 0; i < N; i++)
        importer_start(&im[i], hex, "open,check:11111111,close,open,open-again,close,close,open,check:11111111,close", 0);
    for (int k = 0; k < 200; k++) {
        CUdeviceptr q;
        CHECK_CU(cuMemAlloc(&q, BLOCK / 4 + (size_t)k * 256));
        CHECK_CU(cuMemFree(q));
    }
    for (int i = 0; i < N; i++) {
        importer_expect(&im[i], "open CUDA_SUCCESS");
        importer_expect(&im[i], "check ok");
        importer_expect(&im[i], "close CUDA_SUCCESS");
        importer_expect(&im[i], "open CUDA_SUCCESS");
        importer_expect(&im[i], "open-again CUDA_SUCCESS same");
        importer_expect(&im[i], "close CUDA_SUCCESS");
        importer_expect(&im[i], "close CUDA_SUCCESS");
        importer_expect(&im[i], "open CUDA_SUCCESS");
        importer_expect(&im[i], "check ok");
        importer_expect(&im[i], "close CUDA_SUCCESS");
        if (importer_end(&im[i]) != 0) CHECK_FAIL("importer %d failed", i);
    }
    CHECK_CU(cuMemFree(p));
    /* Nobody has it open: it is an ordinary block again, and its handle is gone. */
    importer_run(&h, "open", 0, "open CUDA_ERROR_INVALID_VALUE");
    return 0;
}

/* No socket can be made (CUPOOL_IPC_DIR does not exist): the handle
 * fails, said once however often it is asked for, and the program goes on. */
static int no_socket(void)
{
    tl_init(0);
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, BLOCK));
    for (int i = 0; i < 3; i++) {
        CUipcMemHandle h;
        CHECK_CU_EQ(cuIpcGetMemHandle(&h, p), CUDA_ERROR_OPERATING_SYSTEM);
    }
    CHECK_CU(cuMemFree(p));
    CHECK_CU(cuMemAlloc(&p, BLOCK));
    CHECK_CU(cuMemFree(p));
    return 0;
}

static const char *skip(const tl_case_t *c)
{
    if (strcmp(c->name, "other-user") == 0 && geteuid() != 0) return "needs root to become another user";
    return NULL;
}

static const tl_case_t cases[] = {
    {"round-trip", round_trip, {NULL}, 0, NULL},
    {"round-trip-ordered", round_trip, {"CUPOOL_FREE=ordered", NULL}, 0, NULL},
    {"round-trip-deferred", round_trip, {"CUPOOL_FREE=deferred", NULL}, 0, NULL},
    {"round-trip-sync", round_trip, {"CUPOOL_FREE=sync", NULL}, 0, NULL},
    {"round-trip-split", round_trip, {"CUPOOL_POLICY=split", NULL}, 0, NULL},
    {"bad-handles", bad_handles, {NULL}, 0, NULL},
    {"free-while-open", free_while_open, {NULL}, 0, NULL},
    {"free-while-open-deferred", free_while_open, {"CUPOOL_FREE=deferred", NULL}, 0, NULL},
    {"importer-dies", importer_dies, {NULL}, 0, NULL},
    {"exporter-dies", exporter_dies, {NULL}, 0, NULL},
    {"many-importers", many_importers, {NULL}, 0, NULL},
    {"exporter-stopped", exporter_stopped, {NULL}, 0, NULL},
    {"policy-off", passed_through, {"CUPOOL_POLICY=off", NULL}, 0, NULL},
    {"over-max-size", passed_through, {"CUPOOL_MAX_SIZE=4K", NULL}, 0, NULL},
    {"ipc-off", not_exportable, {"CUPOOL_IPC=0", NULL}, 0,
     "cupool: warning: cuIpcGetMemHandle fails on pooled memory that cannot be exported"},
    {"policy-default", not_exportable, {"CUPOOL_POLICY=default", NULL}, 0,
     "cupool: warning: cuIpcGetMemHandle fails on pooled memory that cannot be exported"},
    {"other-user", other_user, {NULL}, 0, NULL},
    {"no-socket-dir", no_socket, {"CUPOOL_IPC_DIR=/nonexistent/cupool", NULL}, 0,
     "cupool: warning: cannot make the IPC socket /nonexistent/cupool/cupool-ipc."},
    {"sockets", sockets, {NULL}, 0, NULL},
};

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--importer") == 0) return importer_main(argv[2], argv[3]);
    if (argc == 2 && strcmp(argv[1], "--exporter") == 0) return exporter_main();
    const tl_case_t *asked = tl_case_asked(cases, sizeof cases / sizeof cases[0], argc, argv);
    if (asked) return asked->run();
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    /* A directory of the test's own for the sockets: it must be empty once
     * every exporter has ended. */
    char dir[] = "/tmp/cupool-test-ipc.XXXXXX";
    if (!mkdtemp(dir)) CHECK_FAIL("mkdtemp: %s", strerror(errno));
    chmod(dir, 0777); /* the other-user case's importer looks here too */
    setenv("CUPOOL_IPC_DIR", dir, 1);
    int failed = tl_run_cases(cases, sizeof cases / sizeof cases[0], skip);
    DIR *d = opendir(dir);
    struct dirent *e;
    int left = 0;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') {
            fprintf(stderr, "left behind: %s/%s\n", dir, e->d_name);
            left++;
        }
    if (d) closedir(d);
    rmdir(dir);
    if (left) CHECK_FAIL("%d file(s) left in the socket directory after every exporter ended", left);
    return failed ? 1 : 0;
}
