/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The spin lock of cupool's tiny critical sections on the hot path (the
 * origin table's shards, a thread's log buffer, the statistics' peaks, the
 * driver queue), and the wait of one thread for another that is about to
 * finish; the contended case is out of line (spin_lock.c).
 */
#ifndef CUPOOL_BASE_SPIN_LOCK_H
#define CUPOOL_BASE_SPIN_LOCK_H

#include "assert.h"

#include <sched.h>

/* A lock for tiny critical sections on the hot path (the origin table's
 * shards, a thread's log buffer): uncontended it costs one atomic exchange,
 * where a pthread mutex costs a call and about fifty instructions each way;
 * contended, it spins briefly and then yields.  Zero is unlocked; a held
 * lock holds 1, or in an assertion build its owner's thread id, which
 * CUPOOL_ASSERT_SPIN_HELD checks. */
typedef atomic_int cupool_spinlock_t;
#if CUPOOL_ASSERTIONS
#define CUPOOL_ASSERT_SPIN_HELD(lock) \
    CUPOOL_ASSERT(atomic_load_explicit((lock), memory_order_relaxed) == cupool_assert_tid())
#else
#define CUPOOL_ASSERT_SPIN_HELD(lock) ((void)sizeof(lock))
#endif

/* Takes the lock if it is free; 1 when taken.  One atomic exchange, where
 * a held lock holds 1; a compare-exchange in an assertion build, so that a
 * thread that finds the lock held does not overwrite its owner. */
static inline int cupool_spin_acquire(cupool_spinlock_t *lock)
{
#if CUPOOL_ASSERTIONS
    int unlocked = 0;
    return atomic_compare_exchange_strong_explicit(lock, &unlocked, cupool_assert_tid(), memory_order_acquire,
                                                   memory_order_relaxed);
#else
    return !atomic_exchange_explicit(lock, 1, memory_order_acquire);
#endif
}

/* One more look at what another thread is about to finish (tries: the
 * looks so far): for the first `spins` a pause instruction, which keeps
 * the core's hyperthread sibling and the memory bus out of the way of the
 * thread being waited for; then the core yielded, for a wait that turned
 * out longer (that thread may itself wait for the one that spins). */
static inline void cupool_wait_turn(unsigned tries, unsigned spins)
{
    if (tries < spins) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
#endif
    } else {
        sched_yield();
    }
}

/* The contended case, out of line (spin_lock.c): the uncontended path of
 * every caller then stays a few instructions that save no registers. */
void cupool_spin_wait(cupool_spinlock_t *lock);

static inline void cupool_spin_lock(cupool_spinlock_t *lock)
{
    if (CUPOOL_UNLIKELY(!cupool_spin_acquire(lock))) cupool_spin_wait(lock);
}

static inline void cupool_spin_unlock(cupool_spinlock_t *lock)
{
    atomic_store_explicit(lock, 0, memory_order_release);
}

/* Takes the lock if it is free; 1 when taken. */
static inline int cupool_spin_trylock(cupool_spinlock_t *lock)
{
    return cupool_spin_acquire(lock);
}

#endif
