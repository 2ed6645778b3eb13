/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cupool's invariants, checked at run time in the test and sanitizer builds
 * and compiled out of the release build (as mimalloc's mi_assert_internal
 * under MI_DEBUG).  configure --enable-assertions turns them on (.ci/run
 * and scripts/sanitize.sh pass it); the default build evaluates nothing of
 * them and costs nothing.  A failed assertion is a bug in cupool, not in
 * the program: it prints file:line and the condition to stderr and aborts.
 *
 *   CUPOOL_ASSERT(cond)            a state the comments name ("rs not empty")
 *   CUPOOL_ASSERT_HELD(mutex)      "... held": the calling thread holds it
 *   CUPOOL_ASSERT_NOT_HELD(mutex)  "... not held": it does not
 *   CUPOOL_ASSERT_SPIN_HELD(lock)  the same for a spin lock (spin_lock.h)
 *
 * A lock's owner: a spin lock holds its owner's thread id instead of 1 in
 * an assertion build (spin_lock.h); a pthread mutex holds it already, in
 * glibc's __owner field (elsewhere the mutex checks are not made).
 */
#ifndef CUPOOL_BASE_ASSERT_H
#define CUPOOL_BASE_ASSERT_H

#include "macros.h"

#include <pthread.h>

#ifndef CUPOOL_ASSERTIONS
#define CUPOOL_ASSERTIONS 0
#endif

#if CUPOOL_ASSERTIONS

/* Prints "cupool: assertion failed: FILE:LINE: COND" and aborts. */
__attribute__((noreturn, cold)) void cupool_assert_failed(const char *file, int line, const char *cond);
/* The calling thread's id (gettid), cached per thread (anew in a forked
 * child): what a lock held by this thread records as its owner. */
extern CUPOOL_THREAD_LOCAL int cupool_assert_tid_cache;
int cupool_assert_tid_slow(void);
static inline int cupool_assert_tid(void)
{
    return CUPOOL_LIKELY(cupool_assert_tid_cache) ? cupool_assert_tid_cache : cupool_assert_tid_slow();
}

#define CUPOOL_ASSERT(cond) (CUPOOL_LIKELY(cond) ? (void)0 : cupool_assert_failed(__FILE__, __LINE__, #cond))

#ifdef __GLIBC__
#define CUPOOL_ASSERT_HELD(m) CUPOOL_ASSERT((m)->__data.__owner == cupool_assert_tid())
#define CUPOOL_ASSERT_NOT_HELD(m) CUPOOL_ASSERT((m)->__data.__owner != cupool_assert_tid())
#else
#define CUPOOL_ASSERT_HELD(m) ((void)(m))
#define CUPOOL_ASSERT_NOT_HELD(m) ((void)(m))
#endif

#else /* !CUPOOL_ASSERTIONS: type-checked, never evaluated */

#define CUPOOL_ASSERT(cond) ((void)sizeof((cond) ? 1 : 0))
#define CUPOOL_ASSERT_HELD(m) ((void)sizeof(m))
#define CUPOOL_ASSERT_NOT_HELD(m) ((void)sizeof(m))

#endif

#endif
