/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What a failed assertion does, and the thread id that lock owners are
 * checked against (assert.h); empty in a build without assertions.
 */
#include "assert.h"

#if CUPOOL_ASSERTIONS

#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

CUPOOL_THREAD_LOCAL int cupool_assert_tid_cache;

void cupool_assert_failed(const char *file, int line, const char *cond)
{
    fprintf(stderr, "cupool: assertion failed: %s:%d: %s\n", file, line, cond);
    fflush(stderr);
    abort();
}

/* A forked child's one thread is not its parent's: its id is asked anew. */
static void forget_tid(void)
{
    cupool_assert_tid_cache = 0;
}

static pthread_once_t tid_once = PTHREAD_ONCE_INIT;

static void register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, forget_tid);
}

int cupool_assert_tid_slow(void)
{
    pthread_once(&tid_once, register_fork_handler);
    cupool_assert_tid_cache = (int)syscall(SYS_gettid);
    return cupool_assert_tid_cache;
}

#else

/* ISO C wants a translation unit to declare something. */
typedef int cupool_assert_unused_t;

#endif
