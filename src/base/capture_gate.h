/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The base's side of the capture gate: whether a stream capture is in
 * progress (cupool_hot.captures, counted by engine/capture.c) and the count
 * of cupool's calls on the legacy stream in flight, which a capture
 * beginning waits for (engine/capture.c holds the gate's lock and the list
 * of captures).
 */
#ifndef CUPOOL_BASE_CAPTURE_GATE_H
#define CUPOOL_BASE_CAPTURE_GATE_H

#include "hot.h"

/* Whether a stream capture is in progress in any thread: neither the legacy
 * stream nor a context-wide synchronization may be used then. */
static inline int cupool_capturing(void)
{
    return atomic_load_explicit(&cupool_hot.captures, memory_order_relaxed) > 0;
}

/* cupool's calls on the legacy stream (`ordered`'s pool calls, and the
 * events and frees of its store; `sync`'s free with the synchronization
 * before it), which a capture beginning on
 * another thread meanwhile would see as an implicit dependency: the driver
 * fails the call and invalidates the capture.  So such a call is counted
 * while it runs, and a capture begins only once no counted call runs (or
 * after LEGACY_CALLS_MAX_WAIT_NS); each side announces itself before it
 * looks at the other (engine/capture.c), so that either the call sees the capture
 * and keeps off the legacy stream, or the capture waits for the call. */
extern atomic_int cupool_legacy_calls; /* in a line of its own (real_driver.c) */
/* 1: the call may be made now (cupool_legacy_leave() after it); 0: a
 * capture is in progress or beginning, keep off the legacy stream. */
static inline int cupool_legacy_enter(void)
{
    atomic_fetch_add(&cupool_legacy_calls, 1);
    if (CUPOOL_LIKELY(atomic_load(&cupool_hot.captures) == 0)) return 1;
    atomic_fetch_sub(&cupool_legacy_calls, 1);
    return 0;
}
static inline void cupool_legacy_leave(void)
{
    atomic_fetch_sub_explicit(&cupool_legacy_calls, 1, memory_order_release);
}

#endif
