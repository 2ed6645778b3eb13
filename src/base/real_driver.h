/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The real driver (real_driver.c): the typed real_<name> pointers and the
 * symbol enum generated from symbols.h, the loading of libcuda, the spin
 * lock whose contended wait lives there, and the hot lines every call
 * reads: the process's (cupool_hot) and the calling thread's
 * (cupool_thread), with what is read from them inline (captures in
 * progress, the legacy-stream calls' count, whether cupool has started).
 */
#ifndef CUPOOL_BASE_REAL_DRIVER_H
#define CUPOOL_BASE_REAL_DRIVER_H

#include "macros.h"
#include "symbols.h"

#include <sched.h>

/* A lock for tiny critical sections on the hot path (the origin table's
 * shards, a thread's log buffer): uncontended it costs one atomic exchange,
 * where a pthread mutex costs a call and about fifty instructions each way;
 * contended, it spins briefly and then yields.  Zero is unlocked. */
typedef atomic_int cupool_spinlock_t;

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

/* The contended case, out of line (real_driver.c): the uncontended path of
 * every caller then stays a few instructions that save no registers. */
void cupool_spin_wait(cupool_spinlock_t *lock);

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

static inline void cupool_spin_lock(cupool_spinlock_t *lock)
{
    if (CUPOOL_UNLIKELY(atomic_exchange_explicit(lock, 1, memory_order_acquire))) cupool_spin_wait(lock);
}

static inline void cupool_spin_unlock(cupool_spinlock_t *lock)
{
    atomic_store_explicit(lock, 0, memory_order_release);
}

/* Takes the lock if it is free; 1 when taken. */
static inline int cupool_spin_trylock(cupool_spinlock_t *lock)
{
    return !atomic_exchange_explicit(lock, 1, memory_order_acquire);
}

enum { CUPOOL_ANY, CUPOOL_LEGACY, CUPOOL_PTDS };

enum cupool_symbol {
#define CUPOOL_ENUM_ROW(name, base, version, flavour) CUPOOL_SYM_##name,
    CUPOOL_HANDLED(CUPOOL_ENUM_ROW)
#undef CUPOOL_ENUM_ROW
    CUPOOL_SYM_COUNT
};

#define CUPOOL_REAL_DECL(name, ...) extern __typeof__(name) *real_##name;
CUPOOL_HANDLED(CUPOOL_REAL_DECL)
CUPOOL_USED(CUPOOL_REAL_DECL)
#undef CUPOOL_REAL_DECL

/* ---- the hot line ---------------------------------------------------------- */

/* The process-wide state every allocation and free reads, in one cache line.
 * Between two of cupool's calls the driver's own evict most of the L1 cache,
 * so each line cupool reads costs a miss; spread over the data segment these
 * were eight lines a pair (README, "What cupool itself costs").  Written at
 * start-up, and rarely after (captures, generation). */
typedef struct cupool_hot {
    atomic_int driver_loaded; /* cupool_driver_load() succeeded */
    atomic_int started;       /* the program's cuInit succeeded: pools may be used */
    int timing;               /* the log or statistics need timestamps */
    int count_used;           /* something reads the devices' `used` counts (engine) */
    atomic_int fast;          /* the fast paths (engine/alloc.c, engine/free/free_modes.c) may run: started, no log,
                                 statistics or limit, CUPOOL_FREE not deferred, and no context has moved
                                 to `deferred` */
    atomic_int captures;      /* stream captures in progress, any thread (engine/capture.c) */
    atomic_uint generation;   /* bumped when a context goes away (engine/registry.c) */
    int queue;                /* ordered pool calls go through the contexts' driver queues (engine/queue.c) */
    /* The driver calls of a pooled allocation and free: copies of their
     * real_* pointers, made when the driver is loaded. */
    __typeof__(cuCtxGetCurrent) *ctx_get_current;
    __typeof__(cuMemAllocFromPoolAsync) *alloc_from_pool;
    __typeof__(cuMemFreeAsync) *free_async;
    /* The largest block `ordered` keeps for reuse (engine/state.h,
     * cupool_ordered_keeps), set at start-up (engine/registry.c): here, every `ordered` free
     * asks, and the options' lines would be two more to miss. */
    uint64_t ordered_keep_max;
} __attribute__((aligned(64))) cupool_hot_t;
_Static_assert(sizeof(cupool_hot_t) == 64, "what every call reads of the process fills one cache line");
extern cupool_hot_t cupool_hot;

/* The same for the calling thread: what its allocations and frees read of
 * its own, in one line (defined in real_driver.c). */
typedef struct cupool_thread {
    struct cupool_context *context;       /* its current context's state, cached (engine/registry.c) ... */
    CUcontext context_handle;             /* ... for this context */
    unsigned context_generation;          /* ... as of this cupool_hot.generation */
    short in_front;                       /* it is making calls in front of a driver queue (engine/queue.c) */
    _Atomic short fast_device;            /* the device the fast paths' counts below are of (stats.c) */
    struct cupool_origin_entry *last_inserted, *last_retired; /* the origin table's hints (engine/origin.c) */
    /* What the fast paths (engine/alloc.c, engine/free/free_modes.c) served in the cached context, on
     * fast_device: counted here, in the line they read anyway, and moved
     * into the thread's statistics set when the cache is refilled.  Only
     * this thread writes them; cupool_get_stats reads them from others. */
    atomic_ullong fast_allocs, fast_frees;
    atomic_ullong fast_bytes;             /* allocated less freed, modulo 2^64 */
} __attribute__((aligned(64))) cupool_thread_t;
extern CUPOOL_THREAD_LOCAL cupool_thread_t cupool_thread;

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
/* True once the program's cuInit succeeded and cupool's pools may be used. */
static inline int cupool_active(void)
{
    return atomic_load_explicit(&cupool_hot.started, memory_order_acquire);
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
/* Makes ctx current for the caller if it is not; returns 1 when it pushed. */
int cupool_enter_context(CUcontext ctx);
void cupool_leave_context(int pushed);
/* Capture-safe bracket around cupool's own driver calls. */
CUstreamCaptureMode cupool_relaxed_begin(void);
void cupool_relaxed_end(CUstreamCaptureMode previous);

#endif
