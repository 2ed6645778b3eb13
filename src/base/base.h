/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The base layer, the bottom of cupool: what every other part uses and
 * which itself uses nothing above it.  The real driver pointers generated
 * from symbols.h and the loading of libcuda (real_driver.h), the hot lines
 * every call reads (hot.h), the spin lock (spin_lock.h), the base's side of
 * the capture gate (capture_gate.h), a context pushed for a moment and the
 * relaxed capture mode (context_push.h), options and messages (options.h),
 * statistics counters (stats.h), and the call log with the call bracket
 * every shim uses (log.h), each a piece of this header beside the file
 * that defines it; macros.h holds what they all share.  The files
 * of base/ include only the pieces below them, the engine (engine/) and the
 * shims (shims/) this header.  Nothing here is exported from the library;
 * include/cupool.h is the public face.
 */
#ifndef CUPOOL_BASE_H
#define CUPOOL_BASE_H

#include "macros.h"
#include "assert.h"
#include "options.h"
#include "spin_lock.h"
#include "hot.h"
#include "real_driver.h"
#include "capture_gate.h"
#include "context_push.h"
#include "stats.h"
#include "log.h"

#endif
