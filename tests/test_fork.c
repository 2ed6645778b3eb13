/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proves fork() after cupool started leaves the child able to call into
 * cupool without deadlock or crash: threads allocate and free (one of them on
 * a non-blocking stream, so the context frees the deferred way) and pause at
 * a barrier; the process forks; the child, under alarm(10), allocates, frees
 * a block inherited from the parent, frees its own block and looks cupool up
 * with dlsym.  What the driver answers a forked child is its business (the
 * simulator serves it; a GPU driver refuses): only a clean exit is asserted.
 * The parent carries on allocating afterwards with its statistics intact.
 * Last, a child that ends with exit() (on a GPU the driver's exit-time
 * teardown crashes in a child of a process cupool served: cupool ends such
 * an exit itself) keeps its exit status, its buffered output and the
 * handlers it registered.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 4
#define FORKS 8

static CUcontext ctx;
static pthread_barrier_t pause_b, resume_b;
static CUdeviceptr inherited;

static void *worker(void *arg)
{
    int id = (int)(uintptr_t)arg;
    CHECK_CU(cuCtxSetCurrent(ctx));
    CUstream s = NULL;
    if (id == 0) CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int f = 0; f < FORKS; f++) {
        for (int i = 0; i < 50; i++) {
            CUdeviceptr p;
            CHECK_CU(cuMemAlloc(&p, (size_t)(1 + i) * 4096));
            CHECK_CU(cuMemsetD32Async(p, (unsigned)i, 1024, s));
            CHECK_CU(cuMemFree(p));
        }
        pthread_barrier_wait(&pause_b);
        pthread_barrier_wait(&resume_b);
    }
    if (s) CHECK_CU(cuStreamDestroy(s));
    return NULL;
}

static void in_child(void)
{
    alarm(10);
    CUdeviceptr p = 0;
    CUresult a = cuMemAlloc(&p, 1 << 20);
    CUresult f1 = cuMemFree(inherited);
    CUresult f2 = a == CUDA_SUCCESS ? cuMemFree(p) : CUDA_SUCCESS;
    cupool_stats_t s;
    int (*get)(int, cupool_stats_t *) = (int (*)(int, cupool_stats_t *))dlsym(RTLD_DEFAULT, "cupool_get_stats");
    int g = get ? get(0, &s) : -1;
    CUstream st;
    CUresult sc = cuStreamCreate(&st, CU_STREAM_NON_BLOCKING);
    printf("child: alloc %s, free inherited %s, free own %s, stats %d, stream %s\n", check_result_name(a),
           check_result_name(f1), check_result_name(f2), g, check_result_name(sc));
    fflush(stdout);
    _exit(g == 0 ? 0 : 3);
}

static void said_goodbye(void)
{
    printf(" and its handler ran");
}

/* A child that returns through exit(): its status, buffered output and
 * handlers as without cupool. */
static void child_exits(void)
{
    int out[2];
    CHECK_EQ(pipe(out), 0);
    fflush(stdout);
    pid_t pid = fork();
    CHECK_TRUE(pid >= 0);
    if (pid == 0) {
        alarm(10);
        dup2(out[1], 1);
        close(out[0]);
        atexit(said_goodbye);
        printf("the child exits");
        exit(5);
    }
    close(out[1]);
    char text[128] = {0};
    size_t got = 0;
    ssize_t n;
    while (got < sizeof text - 1 && (n = read(out[0], text + got, sizeof text - 1 - got)) > 0) got += (size_t)n;
    close(out[0]);
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status)) CHECK_FAIL("a child calling exit(5) died of signal %d", WTERMSIG(status));
    CHECK_TRUE(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 5);
    CHECK_TRUE(strcmp(text, "the child exits and its handler ran") == 0);
    printf("a child's exit(5): status 5, \"%s\"\n", text);
}

int main(void)
{
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    ctx = tl_init(0);
    pthread_barrier_init(&pause_b, NULL, THREADS + 1);
    pthread_barrier_init(&resume_b, NULL, THREADS + 1);
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&threads[i], NULL, worker, (void *)(uintptr_t)i);
    for (int f = 0; f < FORKS; f++) {
        pthread_barrier_wait(&pause_b);
        CHECK_CU(cuMemAlloc(&inherited, 1 << 16));
        fflush(stdout);
        pid_t pid = fork();
        CHECK_TRUE(pid >= 0);
        if (pid == 0) in_child();
        int status;
        CHECK_EQ(waitpid(pid, &status, 0), pid);
        if (WIFSIGNALED(status))
            CHECK_FAIL("fork %d: the child died of signal %d%s", f, WTERMSIG(status),
                       WTERMSIG(status) == SIGALRM ? " (it hung)" : "");
        CHECK_TRUE(WIFEXITED(status));
        CHECK_EQ(WEXITSTATUS(status), 0);
        /* The parent's block is still the parent's. */
        CHECK_CU(cuMemsetD32(inherited, 0x12345678, 1 << 14));
        CHECK_EQ(tl_spot_check(inherited, 1 << 16, 0x12345678), 0);
        CHECK_CU(cuMemFree(inherited));
        pthread_barrier_wait(&resume_b);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
    CHECK_CU(cuCtxSynchronize());
    cupool_stats_t s = tl_stats(0);
    CHECK_EQ(s.in_use, 0);
    CHECK_EQ(s.pooled_allocs, s.pooled_frees);
    CHECK_EQ(s.pooled_allocs, THREADS * FORKS * 50 + FORKS);
    printf("parent: %d forks, %llu pooled allocations, all freed\n", FORKS, (unsigned long long)s.pooled_allocs);
    child_exits();
    return 0;
}
