/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The registry's own header, for its three files alone (tests/test_layers.sh
 * checks): the devices and their pools (devices.c), the contexts and their
 * free modes (contexts.c), and a context's end with the engine's start-up
 * and fork handlers (lifecycle.c).  The rest of the engine sees what they
 * offer in state.h, the shims in engine.h.
 */
#ifndef CUPOOL_ENGINE_REGISTRY_H
#define CUPOOL_ENGINE_REGISTRY_H

#include "free/free.h"

/* Guards the list of contexts and the devices' set-up (devices.c).  Taken
 * after the kept store's lock and before a context's lock, never the other
 * way round. */
extern pthread_mutex_t cupool_registry_lock;
/* Every context cupool knows, chained by their `next` (contexts.c,
 * cupool_registry_lock). */
extern cupool_context_t *cupool_contexts;

/* ---- devices.c ---------------------------------------------------------------- */

/* The device of this ordinal, its pools set up at its first use by
 * CUPOOL_POLICY; NULL for an ordinal out of range.  cupool_registry_lock
 * held. */
cupool_device_t *cupool_device_get(int ordinal);
/* The pool every allocation on the device goes to whatever its size (one
 * pool, no size bounds, no CUPOOL_LIMIT to count against); NULL when
 * cupool_pick_pool must decide each time. */
CUmemoryPool cupool_device_any_size_pool(const cupool_device_t *dev);
/* Peer access granted (enable) to device `self`, or taken from it, on the
 * pools of device `other` (both ordinals in range), mirrored onto those
 * pools.  Granted, the memory of both devices now escapes a context: both
 * are marked shared, and it returns 1, their contexts then to move to
 * `sync`.  cupool_registry_lock held. */
int cupool_device_peer_access(int self, int other, int enable);
/* For cupool_devices_report: per device ordinal, whether pools serve it
 * and, with `query`, what its pools reserve (asked of the driver only for
 * a device with a live context); returns 1 + the highest ordinal set up, 0
 * for none.  cupool_registry_lock held. */
int cupool_devices_pools_report(int query, int pooled[], uint64_t reserved[]);

/* ---- contexts.c --------------------------------------------------------------- */

/* The state cupool keeps for ctx, or NULL; cupool_registry_lock held. */
cupool_context_t *cupool_context_find_locked(CUcontext ctx);

#endif
