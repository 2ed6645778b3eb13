/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUPOOL_* options (options.c): one X-macro table of every option,
 * its values, and the inline read of a parsed value; and cupool's one
 * voice, the "cupool: " messages (also options.c).
 */
#ifndef CUPOOL_BASE_OPTIONS_H
#define CUPOOL_BASE_OPTIONS_H

#include "macros.h"

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
    X(DEFERRED_ORDER, "CUPOOL_DEFERRED_ORDER", ENUM, "host", "host|gpu",                                       \
      "deferred: a freed block is held until its fence has completed, or goes back to its pool at once, its free ordered on the GPU behind every stream's work") \
    X(DEFERRED_READY, "CUPOOL_DEFERRED_READY", HELD, "1G", NULL,                                              \
      "deferred, order host: bytes of freed blocks, their users done, a context keeps for the next allocation of their size (N% = share of the bytes in use)") \
    X(DEFERRED_WAIT, "CUPOOL_DEFERRED_WAIT", HELD, "1G", NULL,                                                \
      "deferred: bytes of freed blocks a context lets wait for their fences before a free waits for the GPU (N% = share of the bytes in use)") \
    X(ORDERED_READY, "CUPOOL_ORDERED_READY", SIZE, "64M", NULL,                                                \
      "ordered: bytes of freed blocks a context keeps for the next allocation of their size") \
    X(DEFERRED_FENCE, "CUPOOL_DEFERRED_FENCE", ENUM, "auto", "auto|context|streams",                         \
      "deferred: what a fence records: one event for the whole context (cuCtxRecordEvent), one per stream, or the first unless a CUDA tool is attached") \
    X(DRIVER_QUEUE, "CUPOOL_DRIVER_QUEUE", ENUM, "auto", "auto|on|off",                                        \
      "ordered: the pool calls of threads allocating at once made in a row by one of them, each thread's by itself, or the first unless a CUDA tool is attached") \
    X(MEMSET, "CUPOOL_MEMSET", ENUM, "auto", "auto|kernel|native",                                            \
      "graph memset nodes on stream-ordered memory: rewrite where the driver rejects them, always, or never") \
    X(LOG, "CUPOOL_LOG", STRING, "", NULL, "JSON-lines call log path (%p = pid, - = stderr); empty or 0 = no log")  \
    X(LOG_LEVEL, "CUPOOL_LOG_LEVEL", ENUM, "call", "error|warn|call",                                         \
      "what the log holds: failed calls, failed calls and warnings, or every call")                          \
    X(STATS, "CUPOOL_STATS", BOOL, "0", NULL, "print a summary at exit")                                     \
    X(VERBOSE, "CUPOOL_VERBOSE", BOOL, "0", NULL, "print every effective option at start")                  \
    X(LIVE, "CUPOOL_LIVE", BOOL, "1", NULL,                                                                     \
      "publish live statistics for cupool top and cupool stat in CUPOOL_LIVE_DIR/cupool.UID.PID.START.RANDOM, updated 4 times a second") \
    X(LIVE_DIR, "CUPOOL_LIVE_DIR", STRING, "/dev/shm", NULL, "directory of the live statistics pages")              \
    X(IPC, "CUPOOL_IPC", BOOL, "1", NULL,                                                                        \
      "make pools exportable so that cuIpcGetMemHandle works on pooled memory between processes under cupool")   \
    X(IPC_DIR, "CUPOOL_IPC_DIR", STRING, "/dev/shm", NULL,                                                       \
      "directory of the socket through which other processes open this one's IPC handles")                  \
    X(HOST, "CUPOOL_HOST", BOOL, "1", NULL,                                                                      \
      "keep freed pinned host memory (cuMemAllocHost, cuMemHostAlloc) for the next allocation of its call, flags and size") \
    X(HOST_KEEP, "CUPOOL_HOST_KEEP", SIZE, "1G", NULL, "bytes of freed pinned host memory the process keeps for reuse") \
    X(MANAGED, "CUPOOL_MANAGED", BOOL, "1", NULL,                                                                \
      "keep freed managed memory (cuMemAllocManaged) for the next allocation of its flags and size")          \
    X(MANAGED_KEEP, "CUPOOL_MANAGED_KEEP", SIZE, "1G", NULL, "bytes of freed managed memory the process keeps for reuse") \
    X(SHARE, "CUPOOL_SHARE", BOOL, "1", NULL,                                                                   \
      "out of device memory, ask the other cupool processes of this user on the device to hand back what they hold idle, and answer their asking") \
    X(SHARE_DIR, "CUPOOL_SHARE_DIR", STRING, "/dev/shm", NULL,                                                 \
      "directory holding the private folder cupool-share.UID of the sockets through which processes ask each other") \
    X(SHARE_INFO, "CUPOOL_SHARE_INFO", BOOL, "0", NULL,                                                       \
      "cuMemGetInfo counts as free what the other cupool processes of this user on the device hold idle and would hand back") \
    X(IDLE_KEEP, "CUPOOL_IDLE_KEEP", HELD, "unlimited", NULL,                                                  \
      "idle device memory (pool cache, ready blocks) a process keeps past a moment; the rest goes back by itself (N% = share of the recent peak in use)")

enum cupool_option {
#define CUPOOL_OPTION_ENUM(id, ...) CUPOOL_OPT_##id,
    CUPOOL_OPTIONS(CUPOOL_OPTION_ENUM)
#undef CUPOOL_OPTION_ENUM
    CUPOOL_OPT_COUNT
};

/* Values of the ENUM options, in the order of their choices string. */
enum { CUPOOL_POLICY_DEDICATED, CUPOOL_POLICY_DEFAULT, CUPOOL_POLICY_SPLIT, CUPOOL_POLICY_OFF };
enum { CUPOOL_FREE_AUTO, CUPOOL_FREE_ORDERED, CUPOOL_FREE_DEFERRED, CUPOOL_FREE_SYNC };
enum { CUPOOL_DEFERRED_HOST, CUPOOL_DEFERRED_GPU };
enum { CUPOOL_FENCE_AUTO, CUPOOL_FENCE_CONTEXT, CUPOOL_FENCE_STREAMS };
enum { CUPOOL_QUEUE_AUTO, CUPOOL_QUEUE_ON, CUPOOL_QUEUE_OFF };
enum { CUPOOL_MEMSET_AUTO, CUPOOL_MEMSET_KERNEL, CUPOOL_MEMSET_NATIVE };
enum { CUPOOL_LOG_ERROR, CUPOOL_LOG_WARN, CUPOOL_LOG_CALL };

#define CUPOOL_SIZE_UNLIMITED UINT64_MAX
/* A HELD option given as a share of the bytes in use ("25%"): the flag
 * bit, and the share in hundredths of a percent below it.  What it comes
 * to at a moment is the engine's to say (cupool_deferred_cap). */
#define CUPOOL_SHARE_FLAG (1ull << 63)
#define CUPOOL_SHARE_MAX_BP 1000000ull /* 10000%: larger shares are surely a mistake */
static inline int cupool_is_share(uint64_t value)
{
    return value != CUPOOL_SIZE_UNLIMITED && (value & CUPOOL_SHARE_FLAG);
}

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
/* Parse a size or a share of the bytes in use ("25%", "12.5%": stored as
 * CUPOOL_SHARE_FLAG | hundredths of a percent); 0 on success. */
int cupool_parse_held(const char *text, uint64_t *out);
void cupool_options_print(void);
/* The launcher's check, before any parse (src/tools/options_check.c): a bad
 * value of variable `env` is refused, an error rather than the library's
 * warning that keeps the default; -1 when the table has no such variable.
 * cupool_options_refused() parses and says how many values it refused. */
int cupool_options_refuse(const char *env);
int cupool_options_refused(void);
/* Whether a CUDA tool (compute-sanitizer, Nsight) is attached to the
 * process, as the variables the tools set in it say. */
int cupool_cuda_tool_attached(void);

/* ---- messages (options.c) ------------------------------------------------ */

enum { CUPOOL_MSG_ERROR, CUPOOL_MSG_WARN, CUPOOL_MSG_INFO };
/* One line "cupool: ..." on stderr (and into the log); never exits. */
void cupool_message(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Same, never rate-limited: for messages that each come once by nature
 * (one per option), however many of them there are. */
void cupool_message_always(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Same, but printed once per call site. */
#define cupool_message_once(level, ...)                                                                     \
    do {                                                                                                    \
        static atomic_flag cupool_said_ = ATOMIC_FLAG_INIT;                                                 \
        if (!atomic_flag_test_and_set(&cupool_said_)) cupool_message(level, __VA_ARGS__);                   \
    } while (0)
/* Where each message also goes once the call log is open: log.c, which
 * sits above the messages (it uses them), registers its writer here. */
typedef void cupool_message_sink_fn(int level, const char *text);
void cupool_message_sink(cupool_message_sink_fn *fn);

#endif
