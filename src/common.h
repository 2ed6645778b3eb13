/*
 * Declarations shared by cupool's source files: the real driver pointers
 * generated from symbols.h, the call bracket every shim uses, options,
 * messages, statistics and the log.  Nothing here is exported from the
 * library; include/cupool.h is the public face.
 */
#ifndef CUPOOL_COMMON_H
#define CUPOOL_COMMON_H

#ifdef HAVE_CONFIG_H
#include "config.h" /* _GNU_SOURCE for dladdr, dlvsym */
#endif

#include "cuda_api.h"
#include "symbols.h"
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define CUPOOL_EXPORT __attribute__((visibility("default")))
#define CUPOOL_LIKELY(x) __builtin_expect(!!(x), 1)
#define CUPOOL_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* The functions of the fast paths (memory.c): placed together (.text.hot),
 * so that the few instruction lines an allocation and a free run stay
 * apart from the rest, which the driver's own code evicts between calls. */
#define CUPOOL_HOT_PATH __attribute__((hot))
/* Fields kept under a lock but also read without it, as a hint the reader
 * confirms under the lock (an empty store, no deferred block waiting):
 * written and read whole as relaxed atomics.  On x86-64 and aarch64 these are
 * the plain moves they replace; they keep the unlocked read defined C, and
 * ThreadSanitizer quiet about it.  A write under the lock that no unlocked
 * reader can see mid-way (a list's interior) stays plain. */
#define CUPOOL_HINT_READ(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)
#define CUPOOL_HINT_WRITE(field, value) __atomic_store_n(&(field), (value), __ATOMIC_RELAXED)
/* For a sanitizer build (-fsanitize=address or thread, tests only: see
 * scripts/sanitize.sh): the dlsym override runs when the sanitizer's
 * runtime, starting, looks up the functions it intercepts, before its shadow
 * memory exists; instrumented code there would crash.  No effect on a
 * normal build. */
#define CUPOOL_NOT_SANITIZED __attribute__((no_sanitize_address, no_sanitize_thread))
/* cupool's thread-locals: initial-exec, a plain %fs-relative access instead
 * of a __tls_get_addr call on every intercepted call.  Fine for a library
 * that is preloaded; one dlopen()ed later takes its few bytes from the
 * static TLS surplus glibc keeps for that. */
#define CUPOOL_THREAD_LOCAL __thread __attribute__((tls_model("initial-exec")))

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

/* The contended case, out of line (driver.c): the uncontended path of
 * every caller then stays a few instructions that save no registers. */
void cupool_spin_wait(cupool_spinlock_t *lock);

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
#define CUPOOL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ---- driver.c: the real driver ------------------------------------------ */

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
    int count_used;           /* something reads the devices' `used` counts (context.h) */
    atomic_int fast;          /* memory.c's fast paths may run: started, no log, statistics or limit,
                                 CUPOOL_FREE not deferred, and no context has moved to `deferred` */
    atomic_int captures;      /* stream captures in progress, any thread (stream.c) */
    atomic_uint generation;   /* bumped when a context goes away (context.c) */
    int queue;                /* ordered pool calls go through the contexts' driver queues (queue.c) */
    /* The driver calls of a pooled allocation and free: copies of their
     * real_* pointers, made when the driver is loaded. */
    __typeof__(cuCtxGetCurrent) *ctx_get_current;
    __typeof__(cuMemAllocFromPoolAsync) *alloc_from_pool;
    __typeof__(cuMemFreeAsync) *free_async;
    /* The largest block `ordered` keeps for reuse (context.h,
     * cupool_ordered_keeps), set by start(): here, every `ordered` free
     * asks, and the options' lines would be two more to miss. */
    uint64_t ordered_keep_max;
} __attribute__((aligned(64))) cupool_hot_t;
_Static_assert(sizeof(cupool_hot_t) == 64, "what every call reads of the process fills one cache line");
extern cupool_hot_t cupool_hot;

/* The same for the calling thread: what its allocations and frees read of
 * its own, in one line (defined in driver.c). */
typedef struct cupool_thread {
    struct cupool_context *context;       /* its current context's state, cached (context.c) ... */
    CUcontext context_handle;             /* ... for this context */
    unsigned context_generation;          /* ... as of this cupool_hot.generation */
    short in_front;                       /* it is making calls in front of a driver queue (queue.c) */
    _Atomic short fast_device;            /* the device the fast paths' counts below are of (stats.c) */
    struct cupool_origin_entry *last_inserted, *last_retired; /* the origin table's hints (origin.c) */
    /* What the fast paths (memory.c) served in the cached context, on
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
 * looks at the other (stream.c), so that either the call sees the capture
 * and keeps off the legacy stream, or the capture waits for the call. */
extern atomic_int cupool_legacy_calls;
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

/* uthash's hash for keys of one 64-bit word (device pointers, sizes): one
 * multiply mixes them well enough, where uthash's default (Jenkins) costs
 * several times more per lookup.  A file defines HASH_FUNCTION as this
 * before it includes uthash.h. */
#define CUPOOL_WORD_HASH(keyptr, keylen, hashv)                                                    \
    do {                                                                                          \
        uint64_t key_;                                                                            \
        memcpy(&key_, (keyptr), sizeof key_);                                                     \
        (void)(keylen);                                                                           \
        (hashv) = (unsigned)((key_ * 0x9E3779B97F4A7C15ull) >> 32);                               \
    } while (0)

/* Loads libcuda.so.1 and every real_* pointer once; false if the driver is
 * missing.  cupool_driver_ready is its inline fast path: every shim asks. */
int cupool_driver_load(void);
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

/* ---- options.c ----------------------------------------------------------- */

#define CUPOOL_OPTIONS(X)                                                                                   \
    X(POLICY, "CUPOOL_POLICY", ENUM, "dedicated", "dedicated|default|split|off",                             \
      "pool serving allocations: a dedicated pool per device, the device's default pool, small/large pools, or none") \
    X(FREE, "CUPOOL_FREE", ENUM, "auto", "auto|ordered|deferred|sync",                                        \
      "how a free is ordered against work still using the block")                                            \
    X(RELEASE_THRESHOLD, "CUPOOL_RELEASE_THRESHOLD", SIZE, "unlimited", NULL,                                \
      "bytes a pool keeps reserved across synchronizations (unlimited = keep everything)")                   \
    X(MIN_SIZE, "CUPOOL_MIN_SIZE", SIZE, "1", NULL, "smallest allocation served from a pool")                 \
    X(MAX_SIZE, "CUPOOL_MAX_SIZE", SIZE, "unlimited", NULL, "largest allocation served from a pool")          \
    X(SPLIT_SIZE, "CUPOOL_SPLIT_SIZE", SIZE, "1M", NULL, "policy split: sizes below this use the small pool")  \
    X(LIMIT, "CUPOOL_LIMIT", SIZE, "unlimited", NULL, "bytes per device the pools may hold; beyond it allocations go native") \
    X(DEFERRED_READY, "CUPOOL_DEFERRED_READY", SIZE, "1G", NULL,                                              \
      "deferred: bytes of freed blocks, their users done, a context keeps for the next allocation of their size") \
    X(ORDERED_READY, "CUPOOL_ORDERED_READY", SIZE, "64M", NULL,                                                \
      "ordered: bytes of freed blocks a context keeps for the next allocation of their size") \
    X(DEFERRED_FENCE, "CUPOOL_DEFERRED_FENCE", ENUM, "auto", "auto|context|streams",                         \
      "deferred: what a fence records: one event for the whole context (cuCtxRecordEvent), one per stream, or the first unless a CUDA tool is attached") \
    X(DRIVER_QUEUE, "CUPOOL_DRIVER_QUEUE", ENUM, "auto", "auto|on|off",                                        \
      "ordered: the pool calls of threads allocating at once made in a row by one of them, each thread's by itself, or the first unless a CUDA tool is attached") \
    X(MEMSET, "CUPOOL_MEMSET", ENUM, "auto", "auto|kernel|native",                                            \
      "graph memset nodes on stream-ordered memory: rewrite where the driver rejects them, always, or never") \
    X(LOG, "CUPOOL_LOG", STRING, "", NULL, "JSON-lines call log path (%p = pid, - = stderr); empty = no log")  \
    X(LOG_LEVEL, "CUPOOL_LOG_LEVEL", ENUM, "call", "error|warn|call",                                         \
      "what the log holds: failed calls, failed calls and warnings, or every call")                          \
    X(STATS, "CUPOOL_STATS", BOOL, "0", NULL, "print a summary at exit")                                     \
    X(VERBOSE, "CUPOOL_VERBOSE", BOOL, "0", NULL, "print every effective option at start")                  \
    X(LIVE, "CUPOOL_LIVE", BOOL, "1", NULL,                                                                     \
      "publish live statistics for cupool top and cupool stat in CUPOOL_LIVE_DIR/cupool.UID.PID, updated 4 times a second") \
    X(LIVE_DIR, "CUPOOL_LIVE_DIR", STRING, "/dev/shm", NULL, "directory of the live statistics pages")

enum cupool_option {
#define CUPOOL_OPTION_ENUM(id, ...) CUPOOL_OPT_##id,
    CUPOOL_OPTIONS(CUPOOL_OPTION_ENUM)
#undef CUPOOL_OPTION_ENUM
    CUPOOL_OPT_COUNT
};

/* Values of the ENUM options, in the order of their choices string. */
enum { CUPOOL_POLICY_DEDICATED, CUPOOL_POLICY_DEFAULT, CUPOOL_POLICY_SPLIT, CUPOOL_POLICY_OFF };
enum { CUPOOL_FREE_AUTO, CUPOOL_FREE_ORDERED, CUPOOL_FREE_DEFERRED, CUPOOL_FREE_SYNC };
enum { CUPOOL_FENCE_AUTO, CUPOOL_FENCE_CONTEXT, CUPOOL_FENCE_STREAMS };
enum { CUPOOL_QUEUE_AUTO, CUPOOL_QUEUE_ON, CUPOOL_QUEUE_OFF };
enum { CUPOOL_MEMSET_AUTO, CUPOOL_MEMSET_KERNEL, CUPOOL_MEMSET_NATIVE };
enum { CUPOOL_LOG_ERROR, CUPOOL_LOG_WARN, CUPOOL_LOG_CALL };

#define CUPOOL_SIZE_UNLIMITED UINT64_MAX

/* The value of an option (parsed and validated on first use). */
/* Inline: pick_pool asks for three options on every allocation. */
extern uint64_t cupool_option_values[];
extern atomic_int cupool_options_parsed;
void cupool_options_parse(void);
static inline uint64_t cupool_option(enum cupool_option id)
{
    if (CUPOOL_UNLIKELY(!atomic_load_explicit(&cupool_options_parsed, memory_order_acquire))) cupool_options_parse();
    return cupool_option_values[id];
}
/* The same, where cupool_active() has said yes: start() parsed every option
 * before it published cupool_hot.started, so the hot paths skip the check. */
static inline uint64_t cupool_option_started(enum cupool_option id)
{
    return cupool_option_values[id];
}
const char *cupool_option_string(enum cupool_option id);
/* Parse a size ("512", "64K", "1.5G", "unlimited"); 0 on success. */
int cupool_parse_size(const char *text, uint64_t *out);
void cupool_options_print(void);
/* Whether a CUDA tool (compute-sanitizer, Nsight) is attached to the
 * process, as the variables the tools set in it say. */
int cupool_cuda_tool_attached(void);

/* ---- message.c ----------------------------------------------------------- */

enum { CUPOOL_MSG_ERROR, CUPOOL_MSG_WARN, CUPOOL_MSG_INFO };
/* One line "cupool: ..." on stderr (and into the log); never exits. */
void cupool_message(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Same, but printed once per call site. */
#define cupool_message_once(level, ...)                                                                     \
    do {                                                                                                    \
        static atomic_flag cupool_said_ = ATOMIC_FLAG_INIT;                                                 \
        if (!atomic_flag_test_and_set(&cupool_said_)) cupool_message(level, __VA_ARGS__);                   \
    } while (0)

/* ---- the call bracket every shim uses ------------------------------------ */

enum cupool_route { CUPOOL_ROUTE_NONE, CUPOOL_ROUTE_POOL, CUPOOL_ROUTE_NATIVE, CUPOOL_ROUTE_REWRITTEN };

typedef struct cupool_call {
    int sym;             /* enum cupool_symbol */
    uint64_t start_ns;   /* 0 when neither log nor stats timing is on */
    CUdeviceptr ptr;
    size_t size;
    int device;          /* -1 unknown */
    CUstream stream;
    int route;           /* enum cupool_route */
    int mode;            /* CUPOOL_FREE_* in effect, -1 none */
    uint64_t reserved;   /* pool bytes reserved after the call, when known */
} cupool_call_t;

uint64_t cupool_now_ns(void);

static inline void cupool_call_begin(cupool_call_t *c, int sym)
{
    c->sym = sym;
    c->start_ns = cupool_hot.timing ? cupool_now_ns() : 0;
    c->ptr = 0;
    c->size = 0;
    c->device = -1;
    c->stream = NULL;
    c->route = CUPOOL_ROUTE_NONE;
    c->mode = -1;
    c->reserved = 0;
}
/* Counts the call, logs it, returns result unchanged.  Inline: without
 * log or statistics timing (start_ns 0) a call only counts itself. */
CUresult cupool_call_end_timed(cupool_call_t *c, CUresult result);
void cupool_stats_count(int sym);
static inline CUresult cupool_call_end(cupool_call_t *c, CUresult result)
{
    if (CUPOOL_UNLIKELY(c->start_ns)) return cupool_call_end_timed(c, result);
    cupool_stats_count(c->sym);
    return result;
}

/* Opens a shim: makes sure the real function exists. */
#define CUPOOL_SHIM_BEGIN(call, name)                                                                       \
    cupool_call_t call;                                                                                     \
    cupool_call_begin(&call, CUPOOL_SYM_##name);                                                            \
    if (CUPOOL_UNLIKELY(!cupool_driver_ready() || !real_##name))                                             \
        return cupool_call_end(&call, cupool_missing(#name));
CUresult cupool_missing(const char *name);

/* ---- stats.c ------------------------------------------------------------- */

#define CUPOOL_MAX_DEVICES 64

/* Per device, what is counted rarely or only while CUPOOL_STATS/CUPOOL_LOG
 * is on (the per-call counts live per thread inside stats.c). */
typedef struct cupool_device_stats {
    atomic_ullong in_use, peak_in_use, peak_reserved; /* only while timing */
    atomic_ullong trims, oom_retries, rewritten_memsets;
    atomic_ullong ready_reuses; /* allocations served by a block of their size freed earlier (deferred.c) */
    atomic_ullong ordered_fences; /* events recorded on the legacy stream so that such a block can serve (deferred.c) */
    atomic_ullong misses_given_back, given_back_bytes; /* large allocations the store handed blocks back for (deferred.c) */
    atomic_ullong oversize_kept; /* `ordered` frees the store kept though larger than itself (deferred.c) */
    atomic_ullong deferred_waits; /* frees that waited for the GPU, more than DEFERRED_MAX_BYTES waiting (deferred.c) */
    atomic_ullong queued_calls; /* pool calls made for a waiting thread, only while timing (queue.c) */
} cupool_device_stats_t;

extern cupool_device_stats_t cupool_device_stats[CUPOOL_MAX_DEVICES + 1];
/* Counts a call of entry point sym; served_ns: time of a call cupool served. */
void cupool_stats_call(int sym, uint64_t served_ns);
cupool_device_stats_t *cupool_stats_for(int device);
void cupool_stats_alloc(int device, int route, size_t size);
/* A pooled cuMemAlloc or cuMemFree served by a fast path (memory.c; never
 * while CUPOOL_STATS or CUPOOL_LOG is on), in the thread's cached context.
 * The fast paths run only where the thread's context cache holds, which
 * cupool_stats_thread() allowed: their counts are then read with the
 * thread's own (a plain load and store: only this thread writes them). */
static inline void cupool_count_add(atomic_ullong *counter, unsigned long long n)
{
    atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + n, memory_order_relaxed);
}
static inline void cupool_stats_fast_alloc(size_t size)
{
    cupool_count_add(&cupool_thread.fast_allocs, 1);
    cupool_count_add(&cupool_thread.fast_bytes, size);
}
static inline void cupool_stats_fast_free(size_t size)
{
    cupool_count_add(&cupool_thread.fast_frees, 1);
    cupool_count_add(&cupool_thread.fast_bytes, -(unsigned long long)size);
}
/* The thread is about to cache a context of `device` (-1: none cupool
 * pools in): gives the thread its statistics set if it has none, and moves
 * the fast paths' counts of another device there.
 * Returns 0 for a thread that is exiting (its set is gone): it must not
 * cache, so that its late calls take the general paths, which count in the
 * set of exited threads. */
int cupool_stats_thread(int device);
void cupool_stats_free(int device, int route, size_t size);
void cupool_stats_reserved(int device, uint64_t reserved);
void cupool_stats_print(void);

/* ---- log.c --------------------------------------------------------------- */

void cupool_log_open(void);
void cupool_log_call(const cupool_call_t *c, CUresult result, uint64_t end_ns);
void cupool_log_message(int level, const char *text);
void cupool_log_flush(void);
extern int cupool_log_level; /* -1 when no log */

/* ---- live.c: the live statistics page (live.h) --------------------------- */

/* Creates the page and starts the thread that updates it (start(), unless
 * CUPOOL_LIVE=0); stops the thread and removes the page (at exit, before
 * anything else is torn down).  Neither is on a call's path. */
void cupool_live_start(void);
void cupool_live_stop(void);
/* What the page says of each device that cupool's counters do not hold
 * (context.c): free modes in force, contexts, pools, reserved bytes. */
int cupool_devices_report(int query, unsigned modes[], unsigned ncontexts[], int pooled[], uint64_t reserved[]);

#endif
