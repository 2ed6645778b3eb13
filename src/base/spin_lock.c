/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The spin lock's contended case (spin_lock.h): out of line, so that the
 * uncontended path of every caller stays a few instructions that save no
 * registers.
 */
#include "spin_lock.h"

void cupool_spin_wait(cupool_spinlock_t *lock)
{
    do {
        for (unsigned tries = 0; atomic_load_explicit(lock, memory_order_relaxed); tries++)
            cupool_wait_turn(tries, 100);
    } while (!cupool_spin_acquire(lock));
}
