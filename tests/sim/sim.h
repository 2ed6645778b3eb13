/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared declarations of the simulated CUDA driver (tests/sim/libcuda.so.1).
 * The simulator stands in for the real libcuda on machines without a GPU so that
 * cupool's test suite can run: "device" memory is host memory, every operation
 * executes synchronously when it is enqueued, and the driver's observable rules
 * (error codes, pools, capture, graphs, cuGetProcAddress) are modelled closely
 * enough for cupool to be exercised.  Since nothing here is ever late, a race
 * checker (sim_race.c) keeps the order CUDA promises and stops a program at
 * an access that order leaves unordered.  This header defines the concrete structs
 * behind the opaque CUDA handles, the global state, the lock, the handle
 * registry that lets every entry point reject bogus handles without
 * dereferencing them, and the helpers the source files share.
 *
 * Memory is shared between real processes as the driver shares it
 * (sim_ipc.c, sim_pool.c): cuMemAlloc memory lives in files under /dev/shm
 * named by uid, pid and allocation number, so legacy IPC handles
 * (cuIpcGetMemHandle/cuIpcOpenMemHandle/cuIpcCloseMemHandle) open in another
 * process; pools created with handleTypes CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
 * keep their chunks in one memfd, whose descriptor cuMemPoolExportToShareableHandle
 * hands out (to be passed over a Unix socket), and whose blocks
 * cuMemPoolExportPointer/cuMemPoolImportPointer map in the importing process.
 *
 * Host-visible memory is modelled as the driver presents it under unified
 * addressing (sim_host.c, sim_pool.c): pinned host memory (cuMemAllocHost,
 * cuMemHostAlloc, cuMemFreeHost; its device pointer is its host pointer),
 * managed memory (cuMemAllocManaged, freed by cuMemFree, with cuMemAdvise,
 * cuMemPrefetchAsync, cuStreamAttachMemAsync and cuMemRangeGetAttribute(s)
 * keeping the advice and prefetch location per allocation), and pools of
 * either (cuMemPoolCreate with location type HOST, or allocType MANAGED),
 * whose pointer attributes and error codes are those measured on CUDA 13.
 * Nothing migrates: all of it is ordinary host memory.  The race checker
 * sees host loads and stores only when a test reports them through
 * simcuda_host_access().  SIMCUDA_HOST_MEM and SIMCUDA_MANAGED_MEM (bytes,
 * K/M/G suffixes; unlimited when unset) cap the pinned host and the managed
 * memory of cuMemAllocHost/cuMemHostAlloc and cuMemAllocManaged live at once:
 * past the cap those calls answer CUDA_ERROR_OUT_OF_MEMORY.  Tests count the
 * driver's own allocations of either kind with simcuda_host_allocations(managed)
 * (made so far) and simcuda_host_bytes(managed) (bytes live now), which tell a
 * block served again by cupool from one the driver made.
 */
#ifndef CUPOOL_SIM_H
#define CUPOOL_SIM_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

/* Makes cuda.h declare the legacy and per-thread-stream entry points too, so
 * every symbol we export is checked against the header's prototype. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define SIM_API __attribute__((visibility("default")))
#define SIM_MAX_DEVICES 8
#define SIM_MAX_KERNEL_PARAMS 64
#define SIM_POOL_GRANULE ((size_t)2 << 20) /* pools reserve in 2 MiB steps */
#define SIM_ALLOC_ALIGN ((size_t)256)
#define SIM_DRIVER_VERSION 13000

/* ---- growable pointer array ------------------------------------------- */

typedef struct {
    void **items;
    size_t len, cap;
} sim_vec;

bool sim_vec_push(sim_vec *v, void *item);
bool sim_vec_remove(sim_vec *v, const void *item); /* keeps order */
ptrdiff_t sim_vec_find(const sim_vec *v, const void *item);
void sim_vec_free(sim_vec *v);

/* ---- handle registry ---------------------------------------------------- */

typedef enum {
    SIM_KIND_NONE = 0,
    SIM_KIND_CTX,
    SIM_KIND_STREAM,
    SIM_KIND_EVENT,
    SIM_KIND_POOL,
    SIM_KIND_MODULE,
    SIM_KIND_FUNCTION,
    SIM_KIND_GRAPH,
    SIM_KIND_NODE,
    SIM_KIND_EXEC,
} sim_kind;

void sim_handle_add(const void *handle, sim_kind kind);
void sim_handle_remove(const void *handle);
bool sim_handle_is(const void *handle, sim_kind kind);

/* ---- objects behind the opaque handles ------------------------------------ */

/* A vector clock of the race checker (sim_race.c): entry i is the last
 * operation of stream slot i known to be done first. */
typedef struct {
    unsigned long long *v;
    size_t len;
} sim_clock;

struct CUctx_st {
    int device;
    bool primary;
    bool alive;
    unsigned flags;
    unsigned long long id;
    bool peer_enabled[SIM_MAX_DEVICES];
    sim_vec streams; /* every stream of the context, the implicit ones included */
    sim_vec events;
    sim_vec modules;
    struct CUstream_st *legacy_stream; /* what CU_STREAM_LEGACY / NULL name */
    unsigned long long synchronizations; /* cuCtxSynchronize calls that succeeded (simcuda_ctx_synchronizations) */
    unsigned long long legacy_records;   /* events recorded on its legacy stream (simcuda_legacy_event_records) */
    /* race checker: the work of its destroyed streams, which a context-wide
     * synchronization or event still covers, and of those that were
     * blocking, which the legacy stream still waits for */
    sim_clock retired, retired_blocking;
};

typedef enum { SIM_STREAM_CREATED, SIM_STREAM_LEGACY, SIM_STREAM_PER_THREAD } sim_stream_kind;

struct CUstream_st {
    CUcontext ctx;
    sim_stream_kind kind;
    unsigned flags;
    int priority;
    pthread_t owner; /* per-thread default streams only */
    unsigned long long id;
    /* stream capture */
    CUstreamCaptureStatus capture_status;
    CUstreamCaptureMode capture_mode;
    pthread_t capture_thread;
    unsigned long long capture_id;
    CUgraph capture_graph;
    bool capture_owns_graph;  /* false for cuStreamBeginCaptureToGraph */
    sim_vec capture_deps;     /* the next captured node depends on these */
    size_t race_slot;         /* 1 + its slot in the race checker's clocks, 0 before its first operation */
    sim_clock clock;          /* what its next operation runs after */
};

struct CUevent_st {
    CUcontext ctx;
    unsigned flags;
    bool recorded;
    unsigned pending_queries; /* cuEventQuery answers NOT_READY this many times */
    double time_ms;
    CUstream stream;
    sim_clock clock; /* the work its last record covers */
    unsigned long long frees_before; /* SIMCUDA_TRIM_OBSERVED: the stream-ordered frees its last record follows */
};

typedef struct sim_chunk sim_chunk;

/* Names an exportable pool across processes: its maker, its number there, and
 * a random nonce against reused pids. */
typedef struct {
    uint64_t pid, serial, nonce;
} sim_pool_uid;

struct CUmemPoolHandle_st {
    int device;
    bool is_default;
    bool destroyed; /* cuMemPoolDestroy called; freed when its last block is */
    CUmemPoolProps props;
    cuuint64_t release_threshold;
    int reuse[3];
    size_t reserved, reserved_high, used, used_high;
    sim_chunk *chunks;
    CUmemAccess_flags access[SIM_MAX_DEVICES];
    /* exportable pools (handleTypes POSIX_FILE_DESCRIPTOR) and pools imported from one */
    int fd;           /* the memfd holding its chunks (imported: our duplicate of it); -1 otherwise */
    size_t file_size; /* where the next chunk goes: file ranges are never reused */
    sim_pool_uid uid;
    bool imported;    /* cuMemPoolImportFromShareableHandle made it: it maps imports, never allocates */
    size_t imports;   /* its live imported blocks; a destroyed imported pool lingers until they are freed */
};

typedef CUresult (*sim_emulator)(void *const *params);

struct CUfunc_st {
    CUmodule module;
    char *name;
    unsigned nparams;
    size_t param_size[SIM_MAX_KERNEL_PARAMS];
    size_t param_offset[SIM_MAX_KERNEL_PARAMS];
    size_t param_bytes;
    unsigned max_threads; /* from .maxntid, else 1024 */
    sim_emulator emulate; /* NULL: launching it is CUDA_ERROR_NOT_SUPPORTED */
};

struct CUmod_st {
    CUcontext ctx;
    sim_vec functions;
};

/* ---- graph node parameters (shared by graphs, exec graphs and capture) --- */

typedef struct {
    CUfunction func;
    unsigned grid[3], block[3], shared_mem;
    CUcontext ctx;
    void **param_ptrs;         /* what GetParams hands back as kernelParams */
    unsigned char *param_blob; /* owned copy of the argument values */
} sim_kernel_params;

typedef struct {
    CUdeviceptr dst;
    size_t pitch;
    unsigned value, element_size;
    size_t width, height;
    CUcontext ctx;
} sim_memset_params;

typedef struct {
    uintptr_t dst, src;
    size_t bytes;
    bool dst_device, src_device; /* which side must lie inside an allocation */
} sim_memcpy_params;

typedef struct {
    CUgraphNodeType type; /* KERNEL, MEMSET, MEMCPY or EMPTY */
    union {
        sim_kernel_params kernel;
        sim_memset_params memset;
        sim_memcpy_params memcpy;
    } u;
} sim_node_params;

/* ---- allocations ------------------------------------------------------------ */

#define SIM_STREAM_NAME 64 /* room for a stream's name in the race checker's messages */

typedef enum {
    SIM_ALLOC_PLAIN,  /* cuMemAlloc */
    SIM_ALLOC_POOL,   /* a block of one of our pools */
    SIM_ALLOC_IPC,    /* another process's cuMemAlloc memory, opened with cuIpcOpenMemHandle */
    SIM_ALLOC_IMPORT, /* another process's pool block, mapped by cuMemPoolImportPointer */
    SIM_ALLOC_HOST,   /* pinned host memory: cuMemAllocHost, cuMemHostAlloc */
    SIM_ALLOC_MANAGED, /* cuMemAllocManaged */
} sim_alloc_kind;

typedef struct {
    uintptr_t base;
    size_t size;
    CUcontext ctx;
    int device;
    sim_alloc_kind kind;
    CUmemoryPool pool;
    void *host_block; /* plain, IPC, import: the mapping (map_size bytes); pool: its chunk */
    unsigned long long id;
    int caller;       /* thread id of the pool call that made it (simcuda_alloc_caller) */
    /* race checker: the operation that made a pool block, and accesses not yet seen complete */
    size_t born_slot; /* 1 + slot, 0 for cuMemAlloc memory (usable at once everywhere) */
    unsigned long long born_tick;
    char born_stream[SIM_STREAM_NAME]; /* "non-blocking stream 12 (context 3)" */
    struct sim_race_history *history;
    /* memory shared with other processes (sim_ipc.c, sim_pool.c) */
    pid_t file_pid;             /* plain: who made its /dev/shm file (0: anonymous memory); IPC: the exporter */
    unsigned long long file_id; /* plain and IPC: the file's number; import: the block's offset in the pool's memfd */
    size_t map_size;
    unsigned refs; /* IPC and import: opens not yet closed, imports not yet freed */
    /* pinned host and managed memory (sim_host.c); advice and prefetches are
     * kept for the whole allocation, whatever part of it a call named */
    unsigned flags;                      /* cuMemHostAlloc or cuMemAllocManaged flags */
    CUmemLocation preferred, prefetched; /* type CU_MEM_LOCATION_TYPE_INVALID: none yet */
    bool read_mostly;
    unsigned accessed_by; /* bit d: CU_MEM_ADVISE_SET_ACCESSED_BY for device d; bit SIM_MAX_DEVICES: the CPU */
} sim_alloc;

/* ---- global state --------------------------------------------------------- */

typedef struct {
    size_t budget;
    size_t plain_bytes;   /* cuMemAlloc memory */
    size_t pool_reserved; /* pool chunks */
    struct CUctx_st *primary;
    unsigned primary_refs;
    unsigned primary_flags;
    CUmemoryPool default_pool, current_pool;
    CUmemoryPool default_managed_pool, current_managed_pool; /* cuMemGetDefaultMemPool/cuMemSetMemPool */
} sim_device;

typedef enum { SIM_RACES_FATAL, SIM_RACES_COUNT, SIM_RACES_OFF } sim_races_mode;

typedef struct {
    bool initialized;
    int device_count;
    sim_device dev[SIM_MAX_DEVICES];
    unsigned event_delay;
    bool memset_bug;
    bool no_pools;
    bool no_ctx_record_event; /* cuCtxRecordEvent fails (CUDA_ERROR_NOT_SUPPORTED) */
    unsigned pool_call_us;    /* pool allocations and frees hold the lock this long */
    unsigned enqueue_us;      /* a memset or stream wait waits this long before it takes the lock (SIMCUDA_ENQUEUE_US) */
    unsigned trim_ms;         /* SIMCUDA_TRIM_MS: a cuMemPoolTrimTo that releases memory takes this long */
    bool trim_observed;       /* SIMCUDA_TRIM_OBSERVED: a trim skips frees the host has not seen complete */
    unsigned long long pool_frees; /* stream-ordered frees of pool blocks so far (their order) */
    sim_races_mode races;     /* SIMCUDA_RACES */
    void (*pool_call_hook)(void); /* called after each, unlocked (simcuda_set_pool_call_hook) */
    unsigned long long next_id;
    sim_vec pools;
    CUmemoryPool default_host_pool, current_host_pool; /* location type HOST, allocType PINNED */
    /* cuMemAllocHost/cuMemHostAlloc ([0]) and cuMemAllocManaged ([1]) memory (sim_host.c) */
    size_t host_cap[2];                     /* SIMCUDA_HOST_MEM, SIMCUDA_MANAGED_MEM: most bytes live at once */
    size_t host_bytes[2];                   /* live now */
    unsigned long long host_allocations[2]; /* made so far (simcuda_host_allocations) */
    sim_vec captures; /* streams with a capture sequence in progress */
} sim_state;

extern sim_state sim;

/* A driver slow to take a call (SIMCUDA_ENQUEUE_US): a memset, or a stream
 * wait (a library joining one stream to another, between its event and
 * its wait), so that other threads act between what a library in front of
 * the driver did and the enqueue.  Called before the simulator's lock. */
static inline void sim_slow_enqueue(void)
{
    if (!sim.enqueue_us) return;
    struct timespec t = {sim.enqueue_us / 1000000, (long)(sim.enqueue_us % 1000000) * 1000};
    nanosleep(&t, NULL);
}

/* One recursive lock around all state; cleanup attribute releases it on return. */
int sim_lock_acquire(void);
void sim_lock_release(int *unused);
#define SIM_LOCKED int sim_guard_ __attribute__((cleanup(sim_lock_release), unused)) = sim_lock_acquire()
/* Opening of every entry point that needs cuInit. */
#define SIM_BEGIN \
    SIM_LOCKED;   \
    if (!sim.initialized) return CUDA_ERROR_NOT_INITIALIZED
#define SIM_CHECK(expr)                          \
    do {                                         \
        CUresult sim_rc_ = (expr);               \
        if (sim_rc_ != CUDA_SUCCESS) return sim_rc_; \
    } while (0)

unsigned long long sim_next_id(void);
double sim_now_ms(void);

/* ---- core (sim_core.c) ---------------------------------------------------- */
CUresult sim_device_check(CUdevice dev);
CUresult sim_ctx_check(CUcontext ctx);
CUresult sim_current_ctx(CUcontext *out);
void sim_ctx_sync_point(CUcontext ctx); /* completes events, trims pools */

/* ---- streams, events, capture (sim_stream.c) ------------------------------ */
/* Turns a CUstream argument into the stream object; ptds says whether NULL means
 * the per-thread default stream (the _ptsz/_ptds entry points). */
CUresult sim_stream_resolve(CUstream h, bool ptds, CUstream *out);
bool sim_stream_is_blocking(CUstream s);
void sim_stream_destroy_obj(CUstream s);
void sim_event_destroy_obj(CUevent e);
/* Called before work is enqueued on s: fails under the capture rules, or sets
 * *capture when the work must become a node of the capture graph. */
CUresult sim_capture_check_enqueue(CUstream s, bool *capture);
/* Called by calls the driver treats as potentially unsafe during capture. */
CUresult sim_capture_check_unsafe(void);
void sim_capture_invalidate(CUstream s);
/* Adds a node to s's capture graph after the previous one; owns *params. */
CUresult sim_capture_append(CUstream s, sim_node_params *params);
/* Runs an operation on a stream, or captures it when the stream captures. */
CUresult sim_stream_submit(CUstream h, bool ptds, sim_node_params *params);

/* ---- memory (sim_mem.c) ------------------------------------------------------ */
sim_alloc *sim_alloc_find(uintptr_t addr); /* allocation containing addr */
bool sim_range_is_device(uintptr_t addr, size_t bytes);
sim_alloc *sim_alloc_register(uintptr_t base, size_t size, CUcontext ctx, int device, sim_alloc_kind kind,
                              CUmemoryPool pool, void *host_block);
void sim_alloc_unregister(sim_alloc *a);
bool sim_alloc_is_host(const sim_alloc *a);    /* pinned host memory: cuMemHostAlloc or a host pool's block */
bool sim_alloc_is_managed(const sim_alloc *a); /* cuMemAllocManaged or a managed pool's block */
void sim_ctx_free_memory(CUcontext ctx);
size_t sim_device_free_bytes(int device);

/* ---- a device shared between processes (sim_shared.c) ------------------------ */
void sim_shared_open(void);                          /* SIMCUDA_SHARED_DEVICE, read at cuInit */
bool sim_shared_on(void);
void sim_shared_charge(int device, long long delta); /* this process's use of a device grew (or shrank) */
size_t sim_shared_used(int device);                  /* every live process's use of a device */
uint64_t sim_shared_instance(void);                  /* names the devices: the shared file's, else this process's */
CUresult sim_memset_validate(const sim_memset_params *p, bool graph_node);
CUresult sim_memset_run(const sim_memset_params *p);
CUresult sim_memcpy_run(const sim_memcpy_params *p);

/* ---- memory other processes map (sim_ipc.c) --------------------------------- */
size_t sim_page_round(size_t n); /* up to whole pages (0 on overflow) */
/* Maps and registers a cuMemAlloc allocation: a /dev/shm file when possible, else anonymous memory. */
sim_alloc *sim_plain_map(size_t size, CUcontext ctx);
void sim_plain_unmap(sim_alloc *a); /* unmaps, removes its file, unregisters */
void sim_ipc_release(sim_alloc *a); /* an opened IPC mapping, whatever its references */
void sim_shm_cleanup(void);         /* removes this process's files (at exit, and before _exit) */

/* ---- pools (sim_pool.c) ---------------------------------------------------- */
CUresult sim_pool_alloc(CUmemoryPool pool, size_t size, CUcontext ctx, CUdeviceptr *out);
void sim_pool_release_block(sim_alloc *a); /* returns a pool block, unregisters it */
/* SIMCUDA_TRIM_OBSERVED: the host has seen complete ctx's stream-ordered
 * frees on `stream` (NULL: any of its streams) up to number `upto`. */
void sim_pool_frees_observed(CUcontext ctx, CUstream stream, unsigned long long upto);
void sim_pool_stream_gone(CUstream s);
void sim_pool_import_drop(sim_alloc *a, bool all); /* drops one reference of an import (all: every one) */
void sim_pool_trim(CUmemoryPool pool, size_t keep);
void sim_pools_trim_to_threshold(int device);

/* ---- pinned host and managed memory (sim_host.c) ------------------------------- */
void sim_host_free(sim_alloc *a); /* frees a pinned or managed allocation, unregisters it */

/* ---- kernels (sim_kernel.c) ----------------------------------------------- */
CUresult sim_kernel_params_init(sim_kernel_params *out, CUfunction f, CUcontext ctx, const unsigned grid[3],
                                const unsigned block[3], unsigned shared_mem, void **kernel_params, void **extra);
CUresult sim_kernel_params_copy(sim_kernel_params *dst, const sim_kernel_params *src);
void sim_kernel_params_free(sim_kernel_params *p);
CUresult sim_kernel_run(const sim_kernel_params *p);
void sim_module_destroy_obj(CUmodule m);
CUfunction sim_function_from_kernel(CUkernel k);

/* ---- stream-ordering race checker (sim_race.c) ------------------------------ */
/* An operation of stream s (what: "memset", "kernel", ...) runs between
 * begin and end; sim_race_access records what it touches. */
void sim_race_op_begin(CUstream s, const char *what);
void sim_race_op_end(void);
void sim_race_access(uintptr_t addr, size_t bytes, bool write);
void sim_race_pool_alloc(sim_alloc *a, CUstream s);
void sim_race_pool_free(sim_alloc *a, CUstream s);
void sim_race_event_record(CUevent e, CUstream s);
void sim_race_ctx_record(CUevent e, CUcontext ctx);
void sim_race_stream_waits(CUstream s, CUevent e);
void sim_race_host_waits_stream(CUstream s);
void sim_race_host_waits_event(CUevent e);
void sim_race_host_waits_ctx(CUcontext ctx);
void sim_race_host_waits_all(void);
void sim_race_stream_forget(CUstream s);
void sim_race_alloc_forget(sim_alloc *a);
void sim_clock_free(sim_clock *c);

/* ---- graphs (sim_graph.c, sim_graph_exec.c) ------------------------------- */
CUresult sim_node_params_copy(sim_node_params *dst, const sim_node_params *src);
void sim_node_params_free(sim_node_params *p);
CUresult sim_node_params_run(const sim_node_params *p);
const char *sim_node_params_name(const sim_node_params *p); /* for messages: "memset", a kernel's name, ... */
CUresult sim_graph_new(CUgraph *out);
void sim_graph_destroy_obj(CUgraph g);
/* Adds a node taking ownership of *params (on failure they are freed). */
CUresult sim_graph_add(CUgraph g, const CUgraphNode *deps, size_t ndeps, sim_node_params *params,
                       CUgraphNode *out);

/* Graph internals shared with sim_graph_exec.c. */
struct CUgraph_st {
    sim_vec nodes; /* in creation order */
    unsigned long long id;
};

struct CUgraphNode_st {
    CUgraph graph;
    sim_node_params params;
    sim_vec deps;       /* nodes this one waits for */
    sim_vec dependents; /* nodes waiting for this one */
    CUgraphNode cloned_from;
};

#endif /* CUPOOL_SIM_H */
