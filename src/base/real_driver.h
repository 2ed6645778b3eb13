/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The real driver (real_driver.c): the typed real_<name> pointers and the
 * symbol enum generated from symbols.h, the loading of libcuda (asked
 * inline, on the hot line: hot.h), cupool's own threads, and the names and
 * clock every layer uses.  Beside it in base/: the spin lock (spin_lock.h),
 * the hot lines (hot.h), the base's side of the capture gate
 * (capture_gate.h) and the calls that push a context or relax the capture
 * mode around cupool's own driver calls (context_push.h).
 */
#ifndef CUPOOL_BASE_REAL_DRIVER_H
#define CUPOOL_BASE_REAL_DRIVER_H

#include "hot.h"
#include "symbols.h"

#include <time.h>

/* Starts one of cupool's own threads (the log writer, the live page's
 * publisher): detached, named, with every signal blocked so that the
 * program's signals stay with the program's threads; 0 when it runs. */
int cupool_thread_start(void *(*main_fn)(void *), const char *name);
/* Whether every thread of the program has ended (its main thread called
 * pthread_exit, the others returned) and only cupool's are left: the
 * calling thread of cupool's must then end, or the process never would. */
int cupool_threads_alone(void);
/* CLOCK_MONOTONIC now plus ns: the deadline of a timed wait of cupool's
 * threads (their condition variables wait on that clock). */
struct timespec cupool_deadline_after_ns(long long ns);

enum { CUPOOL_ANY, CUPOOL_LEGACY, CUPOOL_PTDS };

/* One number per CUPOOL_HANDLED row, what the call log and the statistics
 * name a call by (the generated work rows have none: their shims neither
 * log nor count). */
enum cupool_symbol {
#define CUPOOL_ENUM_ROW(name, base, version, flavour) CUPOOL_SYM_##name,
    CUPOOL_HANDLED(CUPOOL_ENUM_ROW)
#undef CUPOOL_ENUM_ROW
    CUPOOL_SYM_COUNT
};

#define CUPOOL_REAL_DECL(name, ...) extern __typeof__(name) *real_##name;
CUPOOL_HANDLED(CUPOOL_REAL_DECL)
CUPOOL_WORK_ENTRIES(CUPOOL_REAL_DECL)
CUPOOL_USED(CUPOOL_REAL_DECL)
#undef CUPOOL_REAL_DECL

/* Loads libcuda.so.1 and every real_* pointer once; false if the driver is
 * missing.  cupool_driver_ready is its inline fast path: every shim asks. */
int cupool_driver_load(void);
/* True when the driver loaded is the test suite's simulated one: its times
 * are not GPU times, and what cupool prints of them says so. */
int cupool_driver_simulated(void);
static inline int cupool_driver_ready(void)
{
    return CUPOOL_LIKELY(atomic_load_explicit(&cupool_hot.driver_loaded, memory_order_acquire)) || cupool_driver_load();
}
/* From now on pass everything through (a forked child: the parent's
 * contexts are not its own). */
void cupool_stop(void);
const char *cupool_symbol_name(int sym);
const char *cupool_result_name(CUresult result);
/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t cupool_now_ns(void);
/* What a shim returns when the driver or its real function is missing. */
CUresult cupool_missing(const char *name);
/* The C library's dlsym, never cupool's override (NULL if not found). */
typedef void *cupool_dlsym_fn_t(void *, const char *);
cupool_dlsym_fn_t *cupool_real_dlsym(void);

#endif
