/*
 * Proves legacy IPC on pooled memory fails the way the driver fails it
 * (cuIpcGetMemHandle on pool memory: CUDA_ERROR_INVALID_VALUE) with exactly
 * one "cupool: warning: cuIpcGetMemHandle fails on pooled memory" line however
 * often it is tried, and works on memory cupool passes through: with
 * CUPOOL_POLICY=off, and for sizes outside CUPOOL_MAX_SIZE.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <stdio.h>
#include <string.h>

static int child(void)
{
    tl_init(0);
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, 1 << 20));
    for (int i = 0; i < 3; i++) {
        CUipcMemHandle h;
        memset(&h, 0, sizeof h);
        printf("ipc %d\n", (int)cuIpcGetMemHandle(&h, p));
    }
    printf("pool %d\n", tl_pool_of(p) != NULL);
    CHECK_CU(cuMemFree(p));
    return 0;
}

static void run(const char *policy, const char *max_size, CUresult expect, int expect_pool, int expect_warnings)
{
    const char *env[] = {policy, max_size, NULL};
    const char *args[] = {"--child", NULL};
    tl_child_t c;
    tl_run_self(args, env, 0, 60, &c);
    char want[64];
    snprintf(want, sizeof want, "ipc %d", (int)expect);
    char pool[16];
    snprintf(pool, sizeof pool, "pool %d", expect_pool);
    int warnings = tl_count_prefix(c.err, "cupool: warning: cuIpcGetMemHandle fails on pooled memory");
    int all = tl_count_prefix(c.err, "cupool: warning:");
    if (c.status != 0 || tl_count_substr(c.out, want) != 3 || !strstr(c.out, pool) || warnings != expect_warnings ||
        all != expect_warnings) {
        tl_child_dump(policy, &c);
        CHECK_FAIL("%s %s: expected 3 x %s, %d warning line(s), got %d (%d warnings in all)", policy, max_size,
                   check_result_name(expect), expect_warnings, warnings, all);
    }
    printf("%s %s: %s, %d warning line(s)\n", policy, max_size, check_result_name(expect), warnings);
    tl_child_free(&c);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--child") == 0) return child();
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    run("CUPOOL_POLICY=dedicated", "CUPOOL_MAX_SIZE=unlimited", CUDA_ERROR_INVALID_VALUE, 1, 1);
    run("CUPOOL_POLICY=default", "CUPOOL_MAX_SIZE=unlimited", CUDA_ERROR_INVALID_VALUE, 1, 1);
    run("CUPOOL_POLICY=off", "CUPOOL_MAX_SIZE=unlimited", CUDA_SUCCESS, 0, 0);
    run("CUPOOL_POLICY=dedicated", "CUPOOL_MAX_SIZE=4K", CUDA_SUCCESS, 0, 0);
    return 0;
}
