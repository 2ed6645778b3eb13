/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Core of the simulated CUDA driver: the global state and its lock, the handle
 * registry, environment switches, cuInit, error names, devices, and contexts
 * (primary and created ones, the per-thread current-context stack, peer
 * access).  Tearing a context down frees the memory, streams, events and
 * modules it owns, as the real driver does; the context object itself stays in
 * the registry as a dead handle so later use answers CUDA_ERROR_INVALID_CONTEXT
 * instead of touching freed memory.
 */
#include "sim.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

sim_state sim;

static pthread_mutex_t sim_mutex = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

int sim_lock_acquire(void)
{
    pthread_mutex_lock(&sim_mutex);
    return 0;
}

void sim_lock_release(int *unused)
{
    (void)unused;
    pthread_mutex_unlock(&sim_mutex);
}

unsigned long long sim_next_id(void)
{
    return ++sim.next_id;
}

double sim_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- sim_vec ----------------------------------------------------------------- */

bool sim_vec_push(sim_vec *v, void *item)
{
    if (v->len == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        void **items = realloc(v->items, cap * sizeof *items);
        if (!items) return false;
        v->items = items;
        v->cap = cap;
    }
    v->items[v->len++] = item;
    return true;
}

ptrdiff_t sim_vec_find(const sim_vec *v, const void *item)
{
    for (size_t i = 0; i < v->len; i++)
        if (v->items[i] == item) return (ptrdiff_t)i;
    return -1;
}

bool sim_vec_remove(sim_vec *v, const void *item)
{
    ptrdiff_t i = sim_vec_find(v, item);
    if (i < 0) return false;
    memmove(&v->items[i], &v->items[i + 1], (v->len - (size_t)i - 1) * sizeof *v->items);
    v->len--;
    return true;
}

void sim_vec_free(sim_vec *v)
{
    free(v->items);
    v->items = NULL;
    v->len = v->cap = 0;
}

/* ---- handle registry: open addressing, linear probing, backward-shift delete */

typedef struct {
    const void *handle;
    sim_kind kind;
} sim_slot;

static sim_slot *registry;
static size_t registry_cap, registry_len;

static size_t slot_of(const void *h, size_t cap)
{
    uint64_t x = (uint64_t)(uintptr_t)h;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

static void registry_grow(void)
{
    size_t cap = registry_cap ? registry_cap * 2 : 1024;
    sim_slot *slots = calloc(cap, sizeof *slots);
    if (!slots) abort(); /* a test driver out of host memory cannot go on */
    for (size_t i = 0; i < registry_cap; i++) {
        if (!registry[i].handle) continue;
        size_t j = slot_of(registry[i].handle, cap);
        while (slots[j].handle) j = (j + 1) & (cap - 1);
        slots[j] = registry[i];
    }
    free(registry);
    registry = slots;
    registry_cap = cap;
}

void sim_handle_add(const void *handle, sim_kind kind)
{
    if ((registry_len + 1) * 2 > registry_cap) registry_grow();
    size_t j = slot_of(handle, registry_cap);
    while (registry[j].handle && registry[j].handle != handle) j = (j + 1) & (registry_cap - 1);
    if (!registry[j].handle) registry_len++;
    registry[j].handle = handle;
    registry[j].kind = kind;
}

static ptrdiff_t registry_index(const void *handle)
{
    if (!handle || !registry_cap) return -1;
    size_t j = slot_of(handle, registry_cap);
    while (registry[j].handle) {
        if (registry[j].handle == handle) return (ptrdiff_t)j;
        j = (j + 1) & (registry_cap - 1);
    }
    return -1;
}

bool sim_handle_is(const void *handle, sim_kind kind)
{
    ptrdiff_t i = registry_index(handle);
    return i >= 0 && registry[i].kind == kind;
}

void sim_handle_remove(const void *handle)
{
    ptrdiff_t found = registry_index(handle);
    if (found < 0) return;
    size_t hole = (size_t)found, mask = registry_cap - 1;
    registry[hole].handle = NULL;
    registry_len--;
    /* Shift later members of the probe run back so lookups never stop early. */
    for (size_t j = (hole + 1) & mask; registry[j].handle; j = (j + 1) & mask) {
        size_t home = slot_of(registry[j].handle, registry_cap);
        bool movable = (j > hole) ? (home <= hole || home > j) : (home <= hole && home > j);
        if (movable) {
            registry[hole] = registry[j];
            registry[j].handle = NULL;
            hole = j;
        }
    }
}

/* ---- environment ----------------------------------------------------------- */

static unsigned long long env_size(const char *name, unsigned long long fallback)
{
    const char *s = getenv(name);
    if (!s || !*s) return fallback;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    switch (toupper((unsigned char)*end)) {
    case 'K': v <<= 10; end++; break;
    case 'M': v <<= 20; end++; break;
    case 'G': v <<= 30; end++; break;
    default: break;
    }
    if (*end || end == s) {
        fprintf(stderr, "simcuda: ignoring %s=%s (not a number)\n", name, s);
        return fallback;
    }
    return v;
}

static void read_environment(void)
{
    unsigned long long n = env_size("SIMCUDA_DEVICES", 2);
    sim.device_count = (n >= 1 && n <= SIM_MAX_DEVICES) ? (int)n : 2;
    size_t budget = (size_t)env_size("SIMCUDA_MEM", 1ULL << 30);
    for (int d = 0; d < sim.device_count; d++) sim.dev[d].budget = budget;
    sim.event_delay = (unsigned)env_size("SIMCUDA_EVENT_DELAY", 0);
    sim.memset_bug = env_size("SIMCUDA_MEMSET_BUG", 0) != 0;
    sim.no_pools = env_size("SIMCUDA_NO_POOLS", 0) != 0;
    sim.no_ctx_record_event = env_size("SIMCUDA_NO_CTX_RECORD_EVENT", 0) != 0;
    sim.pool_call_us = (unsigned)env_size("SIMCUDA_POOL_CALL_US", 0);
    sim.enqueue_us = (unsigned)env_size("SIMCUDA_ENQUEUE_US", 0);
    sim.trim_ms = (unsigned)env_size("SIMCUDA_TRIM_MS", 0);
    sim.trim_observed = env_size("SIMCUDA_TRIM_OBSERVED", 0) != 0;
    sim.host_cap[0] = (size_t)env_size("SIMCUDA_HOST_MEM", SIZE_MAX);
    sim.host_cap[1] = (size_t)env_size("SIMCUDA_MANAGED_MEM", SIZE_MAX);
    sim_shared_open();
    const char *races = getenv("SIMCUDA_RACES");
    if (!races || !*races || strcmp(races, "fatal") == 0)
        sim.races = SIM_RACES_FATAL;
    else if (strcmp(races, "count") == 0)
        sim.races = SIM_RACES_COUNT;
    else if (strcmp(races, "off") == 0)
        sim.races = SIM_RACES_OFF;
    else
        fprintf(stderr, "simcuda: ignoring SIMCUDA_RACES=%s (fatal, count or off)\n", races);
}

SIM_API CUresult CUDAAPI cuInit(unsigned int flags)
{
    SIM_LOCKED;
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (!sim.initialized) {
        read_environment();
        sim.initialized = true;
    }
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuDriverGetVersion(int *version)
{
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = SIM_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

/* ---- error names ------------------------------------------------------------ */

#define SIM_ERRORS(X)                                                                              \
    X(CUDA_SUCCESS, "no error")                                                                    \
    X(CUDA_ERROR_INVALID_VALUE, "invalid argument")                                                \
    X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                                                   \
    X(CUDA_ERROR_NOT_INITIALIZED, "initialization error")                                          \
    X(CUDA_ERROR_DEINITIALIZED, "driver shutting down")                                            \
    X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")                                  \
    X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")                                         \
    X(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid")                                  \
    X(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")                                        \
    X(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current")                               \
    X(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device")    \
    X(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed")                                      \
    X(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid")                                 \
    X(CUDA_ERROR_FILE_NOT_FOUND, "file not found")                                                 \
    X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")                                        \
    X(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state")          \
    X(CUDA_ERROR_NOT_FOUND, "named symbol not found")                                              \
    X(CUDA_ERROR_NOT_READY, "device not ready")                                                    \
    X(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered")                      \
    X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch")               \
    X(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure")                                      \
    X(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled")                    \
    X(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled")                      \
    X(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "cannot set while device is active in this process")      \
    X(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed")                                     \
    X(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address")                                         \
    X(CUDA_ERROR_NOT_PERMITTED, "operation not permitted")                                         \
    X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")                                         \
    X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing")  \
    X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture") \
    X(CUDA_ERROR_STREAM_CAPTURE_MERGE, "operation would result in a merge of separate capture sequences") \
    X(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not ended in the same stream as it began")  \
    X(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "capturing stream has unjoined work")                     \
    X(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "dependency created on uncaptured work in another stream") \
    X(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "operation would make the legacy stream depend on a capturing blocking stream") \
    X(CUDA_ERROR_CAPTURED_EVENT, "operation not permitted on an event last recorded in a capturing stream") \
    X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "attempt to terminate a thread-local capture sequence from another thread") \
    X(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update") \
    X(CUDA_ERROR_UNKNOWN, "unknown error")

SIM_API CUresult CUDAAPI cuGetErrorName(CUresult error, const char **out)
{
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
#define X(code, text) \
    case code: *out = #code; return CUDA_SUCCESS;
        SIM_ERRORS(X)
#undef X
    default: *out = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
}

SIM_API CUresult CUDAAPI cuGetErrorString(CUresult error, const char **out)
{
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
#define X(code, text) \
    case code: *out = text; return CUDA_SUCCESS;
        SIM_ERRORS(X)
#undef X
    default: *out = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
}

/* ---- devices ------------------------------------------------------------------ */

CUresult sim_device_check(CUdevice dev)
{
    return (dev >= 0 && dev < sim.device_count) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

SIM_API CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    SIM_BEGIN;
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = sim.device_count;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    SIM_BEGIN;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_device_check(ordinal));
    *device = ordinal;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
    SIM_BEGIN;
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_device_check(dev));
    snprintf(name, (size_t)len, "Simulated CUDA Device");
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    SIM_BEGIN;
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_device_check(dev));
    *bytes = sim.dev[dev].budget;
    return CUDA_SUCCESS;
}

static int device_attribute(CUdevice_attribute attr)
{
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return sim.no_pools ? 0 : 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1980000;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 6144;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 52428800;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 2;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 0;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 0x18;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return CU_COMPUTEMODE_DEFAULT;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
        return sim.no_pools ? 0 : CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    default: return 0;
    }
}

SIM_API CUresult CUDAAPI cuDeviceGetAttribute(int *value, CUdevice_attribute attr, CUdevice dev)
{
    SIM_BEGIN;
    if (!value || attr <= 0 || attr >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_device_check(dev));
    *value = device_attribute(attr);
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    SIM_BEGIN;
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_device_check(dev));
    /* Each process's simulated devices are its own, unless it shares them
     * (SIMCUDA_SHARED_DEVICE): the UUID says which, as a GPU's names the
     * card every process on it sees. */
    memset(uuid->bytes, 0, sizeof uuid->bytes);
    memcpy(uuid->bytes, "simcuda", 7);
    uint64_t instance = sim_shared_instance();
    memcpy(uuid->bytes + 7, &instance, sizeof instance);
    uuid->bytes[15] = (char)dev;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid_v2(uuid, dev);
}

SIM_API CUresult CUDAAPI cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
    SIM_BEGIN;
    if (!can) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_device_check(dev));
    SIM_CHECK(sim_device_check(peer));
    *can = dev != peer;
    return CUDA_SUCCESS;
}

/* ---- contexts -------------------------------------------------------------- */

/* The calling thread's context stack; the top is the current context. */
#define SIM_CTX_STACK_MAX 64
static __thread CUcontext ctx_stack[SIM_CTX_STACK_MAX];
static __thread int ctx_depth;

CUresult sim_ctx_check(CUcontext ctx)
{
    return (sim_handle_is(ctx, SIM_KIND_CTX) && ctx->alive) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult sim_current_ctx(CUcontext *out)
{
    CUcontext ctx = ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
    SIM_CHECK(sim_ctx_check(ctx));
    *out = ctx;
    return CUDA_SUCCESS;
}

static void ctx_activate(CUcontext ctx, int device, unsigned flags)
{
    ctx->device = device;
    ctx->flags = flags;
    ctx->alive = true;
    ctx->id = sim_next_id();
    memset(ctx->peer_enabled, 0, sizeof ctx->peer_enabled);
    CUstream legacy = calloc(1, sizeof *legacy);
    if (!legacy) abort();
    legacy->ctx = ctx;
    legacy->kind = SIM_STREAM_LEGACY;
    legacy->id = sim_next_id();
    sim_vec_push(&ctx->streams, legacy);
    ctx->legacy_stream = legacy;
}

/* Frees everything the context owns; the object stays registered, dead. */
static void ctx_teardown(CUcontext ctx)
{
    sim_ctx_free_memory(ctx);
    while (ctx->streams.len) sim_stream_destroy_obj(ctx->streams.items[ctx->streams.len - 1]);
    while (ctx->events.len) sim_event_destroy_obj(ctx->events.items[ctx->events.len - 1]);
    while (ctx->modules.len) sim_module_destroy_obj(ctx->modules.items[ctx->modules.len - 1]);
    sim_vec_free(&ctx->streams);
    sim_vec_free(&ctx->events);
    sim_vec_free(&ctx->modules);
    sim_clock_free(&ctx->retired);
    sim_clock_free(&ctx->retired_blocking);
    ctx->legacy_stream = NULL;
    ctx->alive = false;
}

static CUresult ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev)
{
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_device_check(dev));
    if (ctx_depth == SIM_CTX_STACK_MAX) return CUDA_ERROR_OUT_OF_MEMORY;
    CUcontext ctx = calloc(1, sizeof *ctx);
    if (!ctx) return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_activate(ctx, dev, flags);
    sim_handle_add(ctx, SIM_KIND_CTX);
    ctx_stack[ctx_depth++] = ctx;
    *pctx = ctx;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    SIM_BEGIN;
    return ctx_create(pctx, flags, dev);
}

SIM_API CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return cuCtxCreate_v2(pctx, flags, dev);
}

SIM_API CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int nparams, unsigned int flags,
                                        CUdevice dev)
{
    (void)params; /* execution affinity is not modelled */
    (void)nparams;
    return cuCtxCreate_v2(pctx, flags, dev);
}

SIM_API CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
    (void)params;
    return cuCtxCreate_v2(pctx, flags, dev);
}

/* Drops every occurrence of ctx from this thread's stack (other threads keep a
 * dead handle, which answers CUDA_ERROR_INVALID_CONTEXT). */
static void ctx_stack_forget(CUcontext ctx)
{
    int kept = 0;
    for (int i = 0; i < ctx_depth; i++)
        if (ctx_stack[i] != ctx) ctx_stack[kept++] = ctx_stack[i];
    ctx_depth = kept;
}

SIM_API CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
    SIM_BEGIN;
    SIM_CHECK(sim_ctx_check(ctx));
    if (ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
    ctx_teardown(ctx);
    ctx_stack_forget(ctx);
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuCtxDestroy(CUcontext ctx)
{
    return cuCtxDestroy_v2(ctx);
}

SIM_API CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    SIM_BEGIN;
    if (ctx) SIM_CHECK(sim_ctx_check(ctx));
    if (!ctx) {
        if (ctx_depth) ctx_depth--;
    } else if (ctx_depth) {
        ctx_stack[ctx_depth - 1] = ctx;
    } else {
        ctx_stack[ctx_depth++] = ctx;
    }
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    SIM_BEGIN;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx)
{
    SIM_BEGIN;
    SIM_CHECK(sim_ctx_check(ctx));
    if (ctx_depth == SIM_CTX_STACK_MAX) return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx)
{
    return cuCtxPushCurrent_v2(ctx);
}

SIM_API CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx)
{
    SIM_BEGIN;
    if (!ctx_depth) return CUDA_ERROR_INVALID_CONTEXT;
    CUcontext ctx = ctx_stack[--ctx_depth];
    if (pctx) *pctx = ctx;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx)
{
    return cuCtxPopCurrent_v2(pctx);
}

SIM_API CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
    SIM_BEGIN;
    CUcontext ctx;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_current_ctx(&ctx));
    *device = ctx->device;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    SIM_BEGIN;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (!ctx) SIM_CHECK(sim_current_ctx(&ctx));
    SIM_CHECK(sim_ctx_check(ctx));
    *device = ctx->device;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuCtxGetFlags(unsigned int *flags)
{
    SIM_BEGIN;
    CUcontext ctx;
    if (!flags) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_current_ctx(&ctx));
    *flags = ctx->flags;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuCtxSetFlags(unsigned int flags)
{
    SIM_BEGIN;
    CUcontext ctx;
    SIM_CHECK(sim_current_ctx(&ctx));
    ctx->flags = flags;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long *id)
{
    SIM_BEGIN;
    if (!id) return CUDA_ERROR_INVALID_VALUE;
    if (!ctx) SIM_CHECK(sim_current_ctx(&ctx));
    SIM_CHECK(sim_ctx_check(ctx));
    *id = ctx->id;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    SIM_BEGIN;
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    if (!ctx) SIM_CHECK(sim_current_ctx(&ctx));
    SIM_CHECK(sim_ctx_check(ctx));
    *version = 3020;
    return CUDA_SUCCESS;
}

/* A synchronize point: all queued work is done (it always is here), so pending
 * events complete and pools give memory above their release threshold back. */
void sim_ctx_sync_point(CUcontext ctx)
{
    for (size_t i = 0; i < ctx->events.len; i++) ((CUevent)ctx->events.items[i])->pending_queries = 0;
    sim_pools_trim_to_threshold(ctx->device);
}

SIM_API CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx)
{
    SIM_BEGIN;
    if (!ctx) SIM_CHECK(sim_current_ctx(&ctx));
    SIM_CHECK(sim_ctx_check(ctx));
    SIM_CHECK(sim_capture_check_unsafe());
    sim_ctx_sync_point(ctx);
    sim_race_host_waits_ctx(ctx);
    ctx->synchronizations++;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuCtxSynchronize(void)
{
    return cuCtxSynchronize_v2(NULL);
}

/* The mark of this driver: cupool's statistics and the demo say that the
 * times they print are the simulator's, not a GPU's. */
SIM_API const int simcuda_simulated_driver = 1;

/* For tests: how many times the calling thread's current context was
 * synchronized with cuCtxSynchronize; -1 without one. */
SIM_API long long simcuda_ctx_synchronizations(void)
{
    SIM_LOCKED;
    CUcontext ctx = NULL;
    if (sim_current_ctx(&ctx) != CUDA_SUCCESS || !ctx) return -1;
    return (long long)ctx->synchronizations;
}

/* For tests: how many events were recorded on the legacy stream of the
 * calling thread's current context; -1 without one. */
SIM_API long long simcuda_legacy_event_records(void)
{
    SIM_LOCKED;
    CUcontext ctx = NULL;
    if (sim_current_ctx(&ctx) != CUDA_SUCCESS || !ctx) return -1;
    return (long long)ctx->legacy_records;
}

static CUresult peer_check(CUcontext peer, CUcontext *self)
{
    SIM_CHECK(sim_current_ctx(self));
    SIM_CHECK(sim_ctx_check(peer));
    return peer->device == (*self)->device ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    SIM_BEGIN;
    CUcontext self;
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(peer_check(peer, &self));
    if (self->peer_enabled[peer->device]) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    self->peer_enabled[peer->device] = true;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peer)
{
    SIM_BEGIN;
    CUcontext self;
    SIM_CHECK(peer_check(peer, &self));
    if (!self->peer_enabled[peer->device]) return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    self->peer_enabled[peer->device] = false;
    return CUDA_SUCCESS;
}

/* ---- primary contexts --------------------------------------------------------- */

SIM_API CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    SIM_BEGIN;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_device_check(dev));
    sim_device *d = &sim.dev[dev];
    if (!d->primary) {
        d->primary = calloc(1, sizeof *d->primary);
        if (!d->primary) return CUDA_ERROR_OUT_OF_MEMORY;
        d->primary->primary = true;
        sim_handle_add(d->primary, SIM_KIND_CTX);
    }
    if (d->primary_refs++ == 0) ctx_activate(d->primary, dev, d->primary_flags);
    *pctx = d->primary;
    return CUDA_SUCCESS;
}

static void primary_deactivate(sim_device *d)
{
    if (d->primary && d->primary->alive) ctx_teardown(d->primary);
    d->primary_refs = 0;
}

SIM_API CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    SIM_BEGIN;
    SIM_CHECK(sim_device_check(dev));
    sim_device *d = &sim.dev[dev];
    if (d->primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--d->primary_refs == 0) primary_deactivate(d);
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return cuDevicePrimaryCtxRelease_v2(dev);
}

SIM_API CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    SIM_BEGIN;
    SIM_CHECK(sim_device_check(dev));
    primary_deactivate(&sim.dev[dev]);
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev)
{
    return cuDevicePrimaryCtxReset_v2(dev);
}

SIM_API CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    SIM_BEGIN;
    if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_device_check(dev));
    *flags = sim.dev[dev].primary_flags;
    *active = sim.dev[dev].primary_refs > 0;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    SIM_BEGIN;
    SIM_CHECK(sim_device_check(dev));
    sim.dev[dev].primary_flags = flags;
    if (sim.dev[dev].primary && sim.dev[dev].primary->alive) sim.dev[dev].primary->flags = flags;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}
