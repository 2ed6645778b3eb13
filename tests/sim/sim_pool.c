/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Memory pools, stream-ordered allocation, pointer attributes and legacy IPC of
 * the simulated CUDA driver.  A pool reserves host "chunks" in 2 MiB steps
 * (counted against the device budget, as the real driver's physical
 * reservations are) and suballocates blocks from them first-fit.  Freed blocks
 * stay reserved: chunks are returned only by cuMemPoolTrimTo or, at a
 * synchronize point, down to the pool's release threshold.  A pool never trims
 * itself to satisfy an allocation; it answers CUDA_ERROR_OUT_OF_MEMORY and the
 * caller must trim and retry, which is what the real driver makes callers do.
 *
 * A pool created with handleTypes CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR is
 * exportable: its chunks are ranges of one memfd ("simcuda-pool"), mapped
 * MAP_SHARED, after a header page naming the pool (a uid unique across
 * processes) and its device.  File ranges are never reused, so a range another
 * process imported stays that block's; a trimmed chunk none of whose blocks
 * was ever exported gives its pages back (a punched hole).
 * cuMemPoolExportToShareableHandle hands out a duplicate of the memfd,
 * cuMemPoolImportFromShareableHandle turns a received one into an imported
 * pool (it cannot allocate, and no device may touch its memory until
 * cuMemPoolSetAccess grants it), cuMemPoolExportPointer describes a block by
 * the pool's uid and the block's file range, and cuMemPoolImportPointer maps
 * that range.  Importing one block again returns the same pointer and counts a
 * reference; cuMemFree/cuMemFreeAsync drop one, and the last unmaps it.  A
 * destroyed imported pool lingers until its imports are freed.
 *
 * Pools of pinned host memory (location type HOST) and of managed memory
 * (allocType MANAGED) suballocate the same way, but their chunks cost no
 * device budget.  A host pool belongs to no device (its blocks report device
 * ordinal 0), and no device may touch its memory until cuMemPoolSetAccess
 * grants it; neither kind can be exported.  Their blocks' pointer attributes
 * are those measured on CUDA 13, RANGE_START_ADDR 0 for a host pool's block
 * included.  cuMemGetDefaultMemPool/cuMemGetMemPool/cuMemSetMemPool (CUDA 13)
 * name the default and current pool of a device, of the host, and of a
 * device's managed memory.
 */
#include "sim.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    size_t offset, size;
} sim_range;

struct sim_chunk {
    sim_chunk *next;
    unsigned char *host;
    size_t size;
    size_t file_offset; /* exportable pools: where it lies in the pool's memfd */
    bool exported;      /* a block of it was exported: another process may map its range */
    sim_range *used; /* sorted by offset */
    size_t nused, used_cap;
    unsigned unobserved; /* SIMCUDA_TRIM_OBSERVED: frees of its blocks the host has not seen complete */
};

static size_t round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

/* ---- pool objects ---------------------------------------------------------- */

static bool pool_is_host(CUmemoryPool pool)
{
    return pool->props.location.type == CU_MEM_LOCATION_TYPE_HOST;
}

static bool pool_is_managed(CUmemoryPool pool)
{
    return pool->props.allocType == CU_MEM_ALLOCATION_TYPE_MANAGED;
}

/* Only device memory pools reserve from a device's budget. */
static bool pool_charges_device(CUmemoryPool pool)
{
    return !pool_is_host(pool) && !pool_is_managed(pool);
}

static CUmemoryPool pool_new(int device, const CUmemPoolProps *props, bool is_default)
{
    CUmemoryPool pool = calloc(1, sizeof *pool);
    if (!pool || !sim_vec_push(&sim.pools, pool)) {
        free(pool);
        return NULL;
    }
    pool->device = device;
    pool->is_default = is_default;
    pool->props = *props;
    for (int i = 0; i < 3; i++) pool->reuse[i] = 1;
    if (!pool_is_host(pool)) pool->access[device] = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    pool->fd = -1;
    sim_handle_add(pool, SIM_KIND_POOL);
    return pool;
}

static CUmemoryPool default_pool(int device)
{
    sim_device *d = &sim.dev[device];
    if (!d->default_pool) {
        CUmemPoolProps props = { .allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = { CU_MEM_LOCATION_TYPE_DEVICE, device } };
        d->default_pool = pool_new(device, &props, true);
    }
    return d->default_pool;
}

static CUmemoryPool current_pool(int device)
{
    return sim.dev[device].current_pool ? sim.dev[device].current_pool : default_pool(device);
}

static CUmemoryPool default_host_pool(void)
{
    if (!sim.default_host_pool) {
        CUmemPoolProps props = { .allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = { CU_MEM_LOCATION_TYPE_HOST, 0 } };
        sim.default_host_pool = pool_new(0, &props, true);
    }
    return sim.default_host_pool;
}

static CUmemoryPool default_managed_pool(int device)
{
    sim_device *d = &sim.dev[device];
    if (!d->default_managed_pool) {
        CUmemPoolProps props = { .allocType = CU_MEM_ALLOCATION_TYPE_MANAGED,
                                 .location = { CU_MEM_LOCATION_TYPE_DEVICE, device } };
        d->default_managed_pool = pool_new(device, &props, true);
    }
    return d->default_managed_pool;
}

static CUresult pool_check(CUmemoryPool pool)
{
    return (sim_handle_is(pool, SIM_KIND_POOL) && !pool->destroyed) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static void chunk_release(CUmemoryPool pool, sim_chunk **link)
{
    sim_chunk *c = *link;
    *link = c->next;
    pool->reserved -= c->size;
    if (pool_charges_device(pool)) {
        sim.dev[pool->device].pool_reserved -= c->size;
        sim_shared_charge(pool->device, -(long long)c->size);
    }
    if (pool->fd >= 0) {
        munmap(c->host, c->size);
        if (!c->exported)
            fallocate(pool->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)c->file_offset, (off_t)c->size);
    } else {
        free(c->host);
    }
    free(c->used);
    free(c);
}

/* ---- frees the host has seen complete (SIMCUDA_TRIM_OBSERVED) -----------------
 * The driver's pool trims only memory whose free the host has seen
 * complete: a cuMemFreeAsync counts as outstanding until a synchronization
 * of its stream, of its context, or of an event recorded after it on its
 * stream (or a query of either that finds it done).  The simulator runs
 * every free at once; with SIMCUDA_TRIM_OBSERVED=1 it keeps such frees'
 * chunks from a trim until the host has seen them, as a GPU does. */
typedef struct {
    CUmemoryPool pool;
    sim_chunk *chunk;
    CUcontext ctx;
    CUstream stream;
    unsigned long long order; /* sim.pool_frees at the free */
} unobserved_free;
static unobserved_free *unobserved;
static size_t nunobserved, unobserved_cap;

static void unobserved_add(CUmemoryPool pool, sim_chunk *c, CUstream s)
{
    if (nunobserved == unobserved_cap) {
        size_t cap = unobserved_cap ? 2 * unobserved_cap : 64;
        unobserved_free *grown = realloc(unobserved, cap * sizeof *grown);
        if (!grown) return; /* then the trim may take it: as without the option */
        unobserved = grown;
        unobserved_cap = cap;
    }
    unobserved[nunobserved++] = (unobserved_free){pool, c, s->ctx, s, ++sim.pool_frees};
    c->unobserved++;
}

/* The host has seen complete the frees of ctx made on `stream` (NULL: on
 * any of its streams) up to the free numbered `upto`. */
void sim_pool_frees_observed(CUcontext ctx, CUstream stream, unsigned long long upto)
{
    for (size_t i = 0; i < nunobserved;) {
        unobserved_free *f = &unobserved[i];
        if (f->ctx == ctx && (!stream || f->stream == stream) && f->order <= upto) {
            f->chunk->unobserved--;
            *f = unobserved[--nunobserved];
        } else {
            i++;
        }
    }
}

/* A pool or a stream that goes away takes its unseen frees with it. */
static void unobserved_forget(CUmemoryPool pool, CUstream stream)
{
    for (size_t i = 0; i < nunobserved;) {
        unobserved_free *f = &unobserved[i];
        if ((pool && f->pool == pool) || (stream && f->stream == stream)) {
            f->chunk->unobserved--;
            *f = unobserved[--nunobserved];
        } else {
            i++;
        }
    }
}

void sim_pool_stream_gone(CUstream s)
{
    unobserved_forget(NULL, s);
}

void sim_pool_trim(CUmemoryPool pool, size_t keep)
{
    sim_chunk **link = &pool->chunks;
    while (*link && pool->reserved > keep) {
        if ((*link)->nused == 0 && !(*link)->unobserved)
            chunk_release(pool, link);
        else
            link = &(*link)->next;
    }
}

/* A destroyed pool lingers until its last block is freed. */
static void pool_reap_if_done(CUmemoryPool pool)
{
    if (!pool->destroyed) return;
    unobserved_forget(pool, NULL);
    sim_pool_trim(pool, 0);
    if (pool->chunks || pool->imports) return;
    if (pool->fd >= 0) close(pool->fd);
    sim_vec_remove(&sim.pools, pool);
    sim_handle_remove(pool);
    free(pool);
}

void sim_pools_trim_to_threshold(int device)
{
    for (size_t i = 0; i < sim.pools.len; i++) {
        CUmemoryPool pool = sim.pools.items[i];
        if (pool->device == device && pool->reserved > pool->release_threshold)
            sim_pool_trim(pool, pool->release_threshold);
    }
}

/* ---- suballocation ------------------------------------------------------------ */

/* First gap of at least `need` bytes in a chunk; sets *slot to where its range goes. */
static bool chunk_find_gap(const sim_chunk *c, size_t need, size_t *offset, size_t *slot)
{
    size_t start = 0;
    for (size_t i = 0; i <= c->nused; i++) {
        size_t end = i < c->nused ? c->used[i].offset : c->size;
        if (end - start >= need) {
            *offset = start;
            *slot = i;
            return true;
        }
        if (i < c->nused) start = c->used[i].offset + round_up(c->used[i].size, SIM_ALLOC_ALIGN);
    }
    return false;
}

static bool chunk_insert(sim_chunk *c, size_t slot, size_t offset, size_t size)
{
    if (c->nused == c->used_cap) {
        size_t cap = c->used_cap ? c->used_cap * 2 : 8;
        sim_range *grown = realloc(c->used, cap * sizeof *grown);
        if (!grown) return false;
        c->used = grown;
        c->used_cap = cap;
    }
    memmove(&c->used[slot + 1], &c->used[slot], (c->nused - slot) * sizeof *c->used);
    c->used[slot] = (sim_range){ offset, size };
    c->nused++;
    return true;
}

static sim_chunk *chunk_reserve(CUmemoryPool pool, size_t need)
{
    size_t size = round_up(need, SIM_POOL_GRANULE);
    if (size < need || (pool_charges_device(pool) && size > sim_device_free_bytes(pool->device))) return NULL;
    if (pool->props.maxSize && pool->reserved + size > pool->props.maxSize) return NULL;
    sim_chunk *c = calloc(1, sizeof *c);
    void *host = NULL;
    if (!c) return NULL;
    if (pool->fd >= 0) {
        c->file_offset = pool->file_size;
        if (ftruncate(pool->fd, (off_t)(c->file_offset + size)) != 0 ||
            (host = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, pool->fd, (off_t)c->file_offset)) ==
                MAP_FAILED) {
            free(c);
            return NULL;
        }
        pool->file_size += size;
    } else if (posix_memalign(&host, 4096, size) != 0) {
        free(c);
        return NULL;
    }
    c->host = host;
    c->size = size;
    c->next = pool->chunks;
    pool->chunks = c;
    pool->reserved += size;
    if (pool_charges_device(pool)) {
        sim.dev[pool->device].pool_reserved += size;
        sim_shared_charge(pool->device, (long long)size);
    }
    if (pool->reserved > pool->reserved_high) pool->reserved_high = pool->reserved;
    return c;
}

CUresult sim_pool_alloc(CUmemoryPool pool, size_t size, CUcontext ctx, CUdeviceptr *out)
{
    size_t need = round_up(size, SIM_ALLOC_ALIGN), offset = 0, slot = 0;
    if (need < size) return CUDA_ERROR_OUT_OF_MEMORY;
    sim_chunk *c = pool->chunks;
    while (c && !chunk_find_gap(c, need, &offset, &slot)) c = c->next;
    if (!c) {
        c = chunk_reserve(pool, need);
        if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
        offset = slot = 0;
    }
    uintptr_t base = (uintptr_t)(c->host + offset);
    if (!chunk_insert(c, slot, offset, size)) return CUDA_ERROR_OUT_OF_MEMORY;
    if (!sim_alloc_register(base, size, ctx, pool->device, SIM_ALLOC_POOL, pool, c)) {
        memmove(&c->used[slot], &c->used[slot + 1], (--c->nused - slot) * sizeof *c->used);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pool->used += size;
    if (pool->used > pool->used_high) pool->used_high = pool->used;
    *out = (CUdeviceptr)base;
    return CUDA_SUCCESS;
}

void sim_pool_release_block(sim_alloc *a)
{
    CUmemoryPool pool = a->pool;
    sim_chunk *c = a->host_block;
    size_t offset = a->base - (uintptr_t)c->host;
    for (size_t i = 0; i < c->nused; i++) {
        if (c->used[i].offset != offset) continue;
        memmove(&c->used[i], &c->used[i + 1], (c->nused - i - 1) * sizeof *c->used);
        c->nused--;
        break;
    }
    pool->used -= a->size;
    sim_alloc_unregister(a);
    pool_reap_if_done(pool);
}

/* ---- exportable pools ---------------------------------------------------------------- */

#define POOL_FILE_NAME "simcuda-pool"

/* The first page of an exportable pool's memfd; chunks follow it. */
typedef struct {
    char magic[8];
    sim_pool_uid uid;
    int32_t device;
} sim_pool_header;

static const char pool_magic[8] = "SIMPOOL";

static size_t pool_header_size(void)
{
    return sim_page_round(sizeof(sim_pool_header));
}

static bool pool_make_exportable(CUmemoryPool pool)
{
    int fd = memfd_create(POOL_FILE_NAME, MFD_CLOEXEC);
    if (fd < 0) return false;
    sim_pool_header h = { .uid = { (uint64_t)getpid(), sim_next_id(), 0 }, .device = pool->device };
    if (getrandom(&h.uid.nonce, sizeof h.uid.nonce, GRND_NONBLOCK) != sizeof h.uid.nonce)
        h.uid.nonce = (uint64_t)(sim_now_ms() * 1e6);
    memcpy(h.magic, pool_magic, sizeof pool_magic);
    size_t header = pool_header_size();
    if (ftruncate(fd, (off_t)header) != 0 || pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) {
        close(fd);
        return false;
    }
    pool->fd = fd;
    pool->file_size = header;
    pool->uid = h.uid;
    return true;
}

/* Reads the header of a descriptor that must be an exportable pool's memfd. */
static bool pool_file_header(int fd, sim_pool_header *h)
{
    char link[64], target[128];
    if (fd < 0) return false;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n < 0) return false;
    target[n] = '\0';
    static const char want[] = "/memfd:" POOL_FILE_NAME " ";
    if (strncmp(target, want, sizeof want - 1) != 0) return false;
    return pread(fd, h, sizeof *h, 0) == (ssize_t)sizeof *h && memcmp(h->magic, pool_magic, sizeof pool_magic) == 0;
}

/* ---- pool API -------------------------------------------------------------------- */

SIM_API CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *out, const CUmemPoolProps *props)
{
    SIM_BEGIN;
    if (sim.no_pools) return CUDA_ERROR_NOT_SUPPORTED;
    if (!out || !props) return CUDA_ERROR_INVALID_VALUE;
    /* device memory: on a device, exportable or not; pinned host memory: on
     * the host, not exportable; managed memory: on a device or nowhere in
     * particular, not exportable */
    CUmemLocationType where = props->location.type;
    bool device_pool = props->allocType == CU_MEM_ALLOCATION_TYPE_PINNED && where == CU_MEM_LOCATION_TYPE_DEVICE;
    bool host_pool = props->allocType == CU_MEM_ALLOCATION_TYPE_PINNED && where == CU_MEM_LOCATION_TYPE_HOST;
    bool managed_pool = props->allocType == CU_MEM_ALLOCATION_TYPE_MANAGED &&
                        (where == CU_MEM_LOCATION_TYPE_DEVICE || where == CU_MEM_LOCATION_TYPE_NONE);
    if (!device_pool && !host_pool && !managed_pool) return CUDA_ERROR_INVALID_VALUE;
    if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE &&
        (!device_pool || props->handleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_INVALID_VALUE;
    if (where == CU_MEM_LOCATION_TYPE_DEVICE) SIM_CHECK(sim_device_check(props->location.id));
    CUmemoryPool pool = pool_new(where == CU_MEM_LOCATION_TYPE_DEVICE ? props->location.id : 0, props, false);
    if (!pool) return CUDA_ERROR_OUT_OF_MEMORY;
    if (props->handleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR && !pool_make_exportable(pool)) {
        pool->destroyed = true;
        pool_reap_if_done(pool);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = pool;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool)
{
    SIM_BEGIN;
    SIM_CHECK(pool_check(pool));
    if (pool->is_default) return CUDA_ERROR_INVALID_VALUE;
    if (sim.dev[pool->device].current_pool == pool) sim.dev[pool->device].current_pool = NULL;
    if (sim.dev[pool->device].current_managed_pool == pool) sim.dev[pool->device].current_managed_pool = NULL;
    if (sim.current_host_pool == pool) sim.current_host_pool = NULL;
    pool->destroyed = true;
    pool_reap_if_done(pool);
    return CUDA_SUCCESS;
}

/* SIMCUDA_TRIM_MS: a trim that releases memory takes that long, as a
 * GPU's driver takes time to unmap gigabytes (the memory is released at
 * the end). */
SIM_API CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    SIM_BEGIN;
    SIM_CHECK(pool_check(pool));
    if (sim.trim_ms && pool->reserved > keep) {
        struct timespec t = {sim.trim_ms / 1000, (long)(sim.trim_ms % 1000) * 1000000};
        while (nanosleep(&t, &t) != 0) {
        }
    }
    sim_pool_trim(pool, keep);
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    SIM_BEGIN;
    SIM_CHECK(pool_check(pool));
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = *(int *)value != 0;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: pool->release_threshold = *(cuuint64_t *)value; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        if (*(cuuint64_t *)value != 0) return CUDA_ERROR_INVALID_VALUE;
        pool->reserved_high = pool->reserved;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (*(cuuint64_t *)value != 0) return CUDA_ERROR_INVALID_VALUE;
        pool->used_high = pool->used;
        return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE; /* the CURRENT counters are read-only */
    }
}

SIM_API CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    SIM_BEGIN;
    SIM_CHECK(pool_check(pool));
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)value = pool->release_threshold; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = pool->reserved; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = pool->reserved_high; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = pool->used; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = pool->used_high; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

static bool access_flags_valid(CUmemAccess_flags f)
{
    return f == CU_MEM_ACCESS_FLAGS_PROT_NONE || f == CU_MEM_ACCESS_FLAGS_PROT_READ ||
           f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

SIM_API CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    SIM_BEGIN;
    SIM_CHECK(pool_check(pool));
    if (!map && count) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) { /* validate all before changing any */
        const CUmemAccessDesc *d = &map[i];
        if (d->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !access_flags_valid(d->flags))
            return CUDA_ERROR_INVALID_VALUE;
        SIM_CHECK(sim_device_check(d->location.id));
        /* The owning device keeps full access; an importer grants every device
         * its own, and so does a host pool's maker. */
        if (!pool->imported && !pool_is_host(pool) && d->location.id == pool->device &&
            d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < count; i++) pool->access[map[i].location.id] = map[i].flags;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool pool, CUmemLocation *location)
{
    SIM_BEGIN;
    SIM_CHECK(pool_check(pool));
    if (!flags || !location) return CUDA_ERROR_INVALID_VALUE;
    if (location->type == CU_MEM_LOCATION_TYPE_HOST && pool_is_host(pool)) { /* the host always has it */
        *flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        return CUDA_SUCCESS;
    }
    if (location->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_device_check(location->id));
    *flags = pool->access[location->id];
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *out, CUdevice dev)
{
    SIM_BEGIN;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_device_check(dev));
    if (sim.no_pools) return CUDA_ERROR_NOT_SUPPORTED;
    *out = default_pool(dev);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

SIM_API CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool *out, CUdevice dev)
{
    SIM_BEGIN;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_device_check(dev));
    if (sim.no_pools) return CUDA_ERROR_NOT_SUPPORTED;
    *out = current_pool(dev);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

SIM_API CUresult CUDAAPI cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    SIM_BEGIN;
    SIM_CHECK(sim_device_check(dev));
    SIM_CHECK(pool_check(pool));
    if (pool->imported || !pool_charges_device(pool)) return CUDA_ERROR_INVALID_VALUE;
    if (pool->device != dev) return CUDA_ERROR_INVALID_DEVICE;
    sim.dev[dev].current_pool = pool;
    return CUDA_SUCCESS;
}

/* Where cuMemGetDefaultMemPool/cuMemGetMemPool/cuMemSetMemPool look: the
 * default pool of a location and allocation type, and its current pool. */
static CUresult pool_slot(const CUmemLocation *loc, CUmemAllocationType type, CUmemoryPool *def,
                          CUmemoryPool **current)
{
    if (!loc) return CUDA_ERROR_INVALID_VALUE;
    if (sim.no_pools) return CUDA_ERROR_NOT_SUPPORTED;
    if (loc->type == CU_MEM_LOCATION_TYPE_HOST && type == CU_MEM_ALLOCATION_TYPE_PINNED) {
        *def = default_host_pool();
        *current = &sim.current_host_pool;
    } else if (loc->type == CU_MEM_LOCATION_TYPE_DEVICE &&
               (type == CU_MEM_ALLOCATION_TYPE_PINNED || type == CU_MEM_ALLOCATION_TYPE_MANAGED)) {
        SIM_CHECK(sim_device_check(loc->id));
        bool managed = type == CU_MEM_ALLOCATION_TYPE_MANAGED;
        *def = managed ? default_managed_pool(loc->id) : default_pool(loc->id);
        *current = managed ? &sim.dev[loc->id].current_managed_pool : &sim.dev[loc->id].current_pool;
    } else {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return *def ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

SIM_API CUresult CUDAAPI cuMemGetDefaultMemPool(CUmemoryPool *out, CUmemLocation *loc, CUmemAllocationType type)
{
    SIM_BEGIN;
    CUmemoryPool def, *current;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(pool_slot(loc, type, &def, &current));
    *out = def;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuMemGetMemPool(CUmemoryPool *out, CUmemLocation *loc, CUmemAllocationType type)
{
    SIM_BEGIN;
    CUmemoryPool def, *current;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(pool_slot(loc, type, &def, &current));
    *out = *current ? *current : def;
    return CUDA_SUCCESS;
}

/* The pool must be of that location and allocation type (a managed pool
 * without a location serves any device). */
SIM_API CUresult CUDAAPI cuMemSetMemPool(CUmemLocation *loc, CUmemAllocationType type, CUmemoryPool pool)
{
    SIM_BEGIN;
    CUmemoryPool def, *current;
    SIM_CHECK(pool_check(pool));
    SIM_CHECK(pool_slot(loc, type, &def, &current));
    const CUmemPoolProps *p = &pool->props;
    bool fits = !pool->imported && p->allocType == type &&
                (p->location.type == CU_MEM_LOCATION_TYPE_NONE ||
                 (p->location.type == loc->type &&
                  (loc->type == CU_MEM_LOCATION_TYPE_HOST || p->location.id == loc->id)));
    if (!fits) return CUDA_ERROR_INVALID_VALUE;
    *current = pool;
    return CUDA_SUCCESS;
}

/* ---- stream-ordered allocation ------------------------------------------------------ */

/* Stream-ordered allocations are not modelled inside captures (the real driver
 * makes mem-alloc/mem-free nodes): they fail and invalidate the capture. */
static CUresult ordered_stream(CUstream h, bool ptds, CUstream *out)
{
    bool capture;
    SIM_CHECK(sim_stream_resolve(h, ptds, out));
    SIM_CHECK(sim_capture_check_enqueue(*out, &capture));
    if (capture) {
        sim_capture_invalidate(*out);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    return CUDA_SUCCESS;
}

/* ---- stream-ordered allocation ---------------------------------------------
 * SIMCUDA_POOL_CALL_US=N makes each allocation and free hold the simulator's
 * lock N microseconds, as a driver serving them under a lock of its own does
 * (threads calling at once then queue on it).  Each allocation remembers the
 * thread that made the call, and a test may hook a function to run after
 * each call, on the calling thread and outside the lock, as a CUDA tool's
 * callback runs inside the driver's call. */

/* Asleep, not spinning: on a machine with fewer cores than threads the
 * other threads must get to run and find the lock taken. */
static void pool_call_time(void)
{
    if (!sim.pool_call_us) return;
    struct timespec t = {sim.pool_call_us / 1000000, (long)(sim.pool_call_us % 1000000) * 1000};
    while (nanosleep(&t, &t) != 0) {
    }
}

static void pool_call_hook(void)
{
    void (*hook)(void) = __atomic_load_n(&sim.pool_call_hook, __ATOMIC_ACQUIRE);
    if (hook) hook();
}

static CUresult alloc_async_locked(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream h, bool ptds)
{
    SIM_BEGIN;
    CUstream s;
    if (sim.no_pools) return CUDA_ERROR_NOT_SUPPORTED;
    if (!dptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
    if (pool) SIM_CHECK(pool_check(pool));
    if (pool && pool->imported) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(ordered_stream(h, ptds, &s));
    if (!pool) pool = current_pool(s->ctx->device);
    if (!pool) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = sim_pool_alloc(pool, size, s->ctx, dptr);
    if (r == CUDA_SUCCESS) {
        sim_alloc *a = sim_alloc_find((uintptr_t)*dptr);
        a->caller = (int)gettid();
        sim_race_pool_alloc(a, s);
    }
    pool_call_time();
    return r;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream h, bool ptds)
{
    CUresult r = alloc_async_locked(dptr, size, pool, h, ptds);
    pool_call_hook();
    return r;
}

SIM_API int simcuda_alloc_caller(CUdeviceptr ptr)
{
    SIM_LOCKED;
    sim_alloc *a = sim_alloc_find((uintptr_t)ptr);
    return a && a->kind == SIM_ALLOC_POOL ? a->caller : 0;
}

SIM_API void simcuda_set_pool_call_hook(void (*hook)(void))
{
    __atomic_store_n(&sim.pool_call_hook, hook, __ATOMIC_RELEASE);
}

SIM_API CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) { return alloc_async(p, n, NULL, s, false); }
SIM_API CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s) { return alloc_async(p, n, NULL, s, true); }

SIM_API CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s)
{
    return pool ? alloc_async(p, n, pool, s, false) : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s)
{
    return pool ? alloc_async(p, n, pool, s, true) : CUDA_ERROR_INVALID_VALUE;
}

static CUresult free_async_locked(CUdeviceptr dptr, CUstream h, bool ptds)
{
    SIM_BEGIN;
    CUstream s;
    SIM_CHECK(ordered_stream(h, ptds, &s));
    if (dptr == 0) return CUDA_SUCCESS;
    sim_alloc *a = sim_alloc_find((uintptr_t)dptr);
    if (!a || a->base != (uintptr_t)dptr) return CUDA_ERROR_INVALID_VALUE;
    if (a->kind == SIM_ALLOC_IMPORT) {
        if (a->refs == 1) sim_race_pool_free(a, s);
        sim_pool_import_drop(a, false);
        return CUDA_SUCCESS;
    }
    if (a->kind != SIM_ALLOC_POOL) return CUDA_ERROR_INVALID_VALUE;
    sim_race_pool_free(a, s);
    if (sim.trim_observed && !a->pool->destroyed) unobserved_add(a->pool, a->host_block, s);
    sim_pool_release_block(a);
    pool_call_time();
    return CUDA_SUCCESS;
}

static CUresult free_async(CUdeviceptr dptr, CUstream h, bool ptds)
{
    CUresult r = free_async_locked(dptr, h, ptds);
    pool_call_hook();
    return r;
}

SIM_API CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr p, CUstream s) { return free_async(p, s, false); }
SIM_API CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { return free_async(p, s, true); }

/* ---- pointer attributes -------------------------------------------------------------- */

/* The driver places pinned host and managed allocations smaller than 2 MiB
 * side by side in shared 2 MiB mappings (measured: MAPPING_SIZE 2 MiB, the
 * base at or below the block): here, the 2 MiB-aligned region holding the
 * allocation's start.  Other memory: the allocation itself. */
#define SHARED_MAPPING ((uintptr_t)2 << 20)
static CUdeviceptr shared_mapping(const sim_alloc *a, size_t *size)
{
    bool shared = (a->kind == SIM_ALLOC_HOST || a->kind == SIM_ALLOC_MANAGED) && a->size < SHARED_MAPPING;
    if (size) *size = shared ? SHARED_MAPPING : a->size;
    return shared ? (CUdeviceptr)(a->base & ~(SHARED_MAPPING - 1)) : (CUdeviceptr)a->base;
}

/* Writes one attribute of the allocation a contains (NULL: unknown pointer,
 * answered with the null values cuPointerGetAttributes documents).  Pinned
 * host and managed memory have a host pointer, their own address; pinned
 * host memory is of memory type HOST.  A host pool's block reports range
 * start 0, as the driver does (measured). */
static CUresult write_attribute(void *data, CUpointer_attribute attr, const sim_alloc *a, CUdeviceptr ptr)
{
    bool host = a && sim_alloc_is_host(a), managed = a && sim_alloc_is_managed(a);
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = a ? a->ctx : NULL; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = !a ? 0 : host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = a ? ptr : 0; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (a && !host && !managed) return CUDA_ERROR_INVALID_VALUE; /* device memory has no host mapping */
        *(void **)data = a ? (void *)(uintptr_t)ptr : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: *(unsigned long long *)data = a ? a->id : 0; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = a ? a->device : -2; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(bool *)data = managed; break;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *(bool *)data = false; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *(bool *)data = a != NULL; break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: *(bool *)data = a && a->kind == SIM_ALLOC_PLAIN; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = a && !(host && a->kind == SIM_ALLOC_POOL) ? (CUdeviceptr)a->base : 0;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: *(CUdeviceptr *)data = a ? shared_mapping(a, NULL) : 0; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = a ? a->size : 0; break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: {
        size_t size = 0;
        if (a) shared_mapping(a, &size);
        *(size_t *)data = size;
        break;
    }
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: *(unsigned long long *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        *(unsigned *)data = a ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE;
        break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *(CUmemoryPool *)data = a ? a->pool : NULL; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
    SIM_BEGIN;
    if (!data) return CUDA_ERROR_INVALID_VALUE;
    const sim_alloc *a = sim_alloc_find((uintptr_t)ptr);
    if (!a) return CUDA_ERROR_INVALID_VALUE;
    return write_attribute(data, attr, a, ptr);
}

SIM_API CUresult CUDAAPI cuPointerGetAttributes(unsigned int count, CUpointer_attribute *attrs, void **data,
                                                CUdeviceptr ptr)
{
    SIM_BEGIN;
    if (!attrs || !data || count == 0) return CUDA_ERROR_INVALID_VALUE;
    const sim_alloc *a = sim_alloc_find((uintptr_t)ptr);
    for (unsigned i = 0; i < count; i++) {
        if (!data[i]) return CUDA_ERROR_INVALID_VALUE;
        SIM_CHECK(write_attribute(data[i], attrs[i], a, ptr));
    }
    return CUDA_SUCCESS;
}

/* ---- sharing pools between processes -------------------------------------------------- */

/* What cuMemPoolExportPointer writes: the block's range in its pool's memfd. */
typedef struct {
    char magic[8];
    sim_pool_uid uid;
    uint64_t offset, size;
} sim_ptr_export;

static const char ptr_magic[8] = "SIMPTR";

static sim_vec imports; /* blocks imported into this process */

SIM_API CUresult CUDAAPI cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool,
                                                          CUmemAllocationHandleType type, unsigned long long flags)
{
    SIM_BEGIN;
    if (!handle_out) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(pool_check(pool));
    if (pool->fd < 0 || pool->imported || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    int fd = fcntl(pool->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    *(int *)handle_out = fd;
    return CUDA_SUCCESS;
}

/* The descriptor stays the caller's: the imported pool keeps a duplicate. */
SIM_API CUresult CUDAAPI cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle,
                                                            CUmemAllocationHandleType type, unsigned long long flags)
{
    SIM_BEGIN;
    sim_pool_header h;
    if (sim.no_pools) return CUDA_ERROR_NOT_SUPPORTED;
    if (!pool_out || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    uintptr_t raw = (uintptr_t)handle;
    if (raw > INT32_MAX || !pool_file_header((int)raw, &h)) return CUDA_ERROR_INVALID_VALUE;
    int fd = fcntl((int)raw, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    int device = h.device >= 0 && h.device < sim.device_count ? h.device : 0;
    CUmemPoolProps props = { .allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                             .handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                             .location = { CU_MEM_LOCATION_TYPE_DEVICE, device } };
    CUmemoryPool pool = pool_new(device, &props, false);
    if (!pool) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pool->imported = true;
    pool->fd = fd;
    pool->uid = h.uid;
    for (int d = 0; d < SIM_MAX_DEVICES; d++) pool->access[d] = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    *pool_out = pool;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuMemPoolExportPointer(CUmemPoolPtrExportData *out, CUdeviceptr ptr)
{
    SIM_BEGIN;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    const sim_alloc *a = sim_alloc_find((uintptr_t)ptr);
    if (!a || a->base != (uintptr_t)ptr || a->kind != SIM_ALLOC_POOL || a->pool->fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    sim_chunk *c = a->host_block;
    c->exported = true;
    sim_ptr_export e = { .uid = a->pool->uid,
                         .offset = c->file_offset + (a->base - (uintptr_t)c->host),
                         .size = a->size };
    memcpy(e.magic, ptr_magic, sizeof ptr_magic);
    memset(out, 0, sizeof *out);
    memcpy(out->reserved, &e, sizeof e);
    return CUDA_SUCCESS;
}

static sim_alloc *import_find(const sim_ptr_export *e)
{
    for (size_t i = 0; i < imports.len; i++) {
        sim_alloc *a = imports.items[i];
        if (a->file_id == e->offset && memcmp(&a->pool->uid, &e->uid, sizeof e->uid) == 0) return a;
    }
    return NULL;
}

SIM_API CUresult CUDAAPI cuMemPoolImportPointer(CUdeviceptr *out, CUmemoryPool pool, CUmemPoolPtrExportData *data)
{
    SIM_BEGIN;
    CUcontext ctx;
    sim_ptr_export e;
    if (!out || !data) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(pool_check(pool));
    if (!pool->imported) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_current_ctx(&ctx));
    memcpy(&e, data->reserved, sizeof e);
    if (memcmp(e.magic, ptr_magic, sizeof ptr_magic) != 0 || memcmp(&e.uid, &pool->uid, sizeof e.uid) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    sim_alloc *a = import_find(&e);
    if (a) {
        a->refs++;
        *out = (CUdeviceptr)a->base;
        return CUDA_SUCCESS;
    }
    struct stat st;
    if (fstat(pool->fd, &st) != 0 || e.size == 0 || e.offset < pool_header_size() ||
        e.offset > (uint64_t)st.st_size || e.size > (uint64_t)st.st_size - e.offset)
        return CUDA_ERROR_INVALID_VALUE;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t start = (size_t)e.offset / page * page, skip = (size_t)e.offset - start;
    size_t len = sim_page_round(skip + (size_t)e.size);
    void *host = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, pool->fd, (off_t)start);
    if (host == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    a = sim_alloc_register((uintptr_t)host + skip, (size_t)e.size, ctx, pool->device, SIM_ALLOC_IMPORT, pool, host);
    if (a && !sim_vec_push(&imports, a)) {
        sim_alloc_unregister(a);
        a = NULL;
    }
    if (!a) {
        munmap(host, len);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->file_id = e.offset;
    a->map_size = len;
    a->refs = 1;
    pool->imports++;
    *out = (CUdeviceptr)a->base;
    return CUDA_SUCCESS;
}

void sim_pool_import_drop(sim_alloc *a, bool all)
{
    if (!all && --a->refs > 0) return;
    CUmemoryPool pool = a->pool;
    sim_vec_remove(&imports, a);
    munmap(a->host_block, a->map_size);
    sim_alloc_unregister(a);
    pool->imports--;
    pool_reap_if_done(pool);
}
