/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The devices cupool serves and their pools (cupool_device_t, state.h): a
 * device's pools, set up at its first context as CUPOOL_POLICY says
 * (exportable with CUPOOL_IPC, ipc.c); the pool an allocation of a size
 * goes to; what the pools reserve, asked of the driver; and peer access,
 * mirrored onto the pools (memory then escapes a context: contexts.c moves
 * the devices' contexts to `sync`).  The registry's lowest file, which
 * calls nothing of the contexts above it: the registry's lock is defined
 * here, with the devices' set-up it guards; the list of contexts is
 * contexts.c's (registry.h).
 */
#include "registry.h"

#include <string.h>

pthread_mutex_t cupool_registry_lock = PTHREAD_MUTEX_INITIALIZER;

static cupool_device_t devices[CUPOOL_MAX_DEVICES];
static int devices_ready[CUPOOL_MAX_DEVICES];

/* ---- a device's pools ------------------------------------------------------- */

static int pool_entry_points(void)
{
    return real_cuMemPoolCreate && real_cuMemAllocFromPoolAsync && real_cuMemFreeAsync && real_cuMemPoolTrimTo &&
           real_cuMemPoolGetAttribute && real_cuMemPoolSetAttribute && real_cuDeviceGetDefaultMemPool &&
           real_cuEventCreate && real_cuEventRecord && real_cuEventQuery && real_cuStreamSynchronize && real_cuStreamQuery &&
           real_cuStreamWaitEvent;
}

static void set_threshold(CUmemoryPool pool)
{
    uint64_t threshold = cupool_option(CUPOOL_OPT_RELEASE_THRESHOLD);
    uint64_t limit = cupool_option(CUPOOL_OPT_LIMIT);
    /* CUPOOL_LIMIT caps what a pool keeps across synchronizations too. */
    if (limit < threshold) threshold = limit;
    cuuint64_t value = threshold;
    real_cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &value);
}

/* With CUPOOL_IPC a pool is made exportable (a POSIX file descriptor
 * shares it, ipc.c); where the driver or the system cannot, it is made as
 * before and its memory cannot be shared. */
static CUresult create_pool(cupool_device_t *dev, CUmemoryPool *pool)
{
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev->ordinal;
    int first = dev->npools == 0;
    if (first) dev->exportable = cupool_option(CUPOOL_OPT_IPC) != 0 && real_cuMemPoolExportToShareableHandle &&
                                 real_cuMemPoolExportPointer;
    props.handleTypes = dev->exportable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
    CUresult r = real_cuMemPoolCreate(pool, &props);
    if (r != CUDA_SUCCESS && dev->exportable && first) {
        cupool_message(CUPOOL_MSG_INFO, "device %d: pools cannot be exportable (%s); IPC handles of pooled memory fail",
                       dev->ordinal, cupool_result_name(r));
        dev->exportable = 0;
        props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
        r = real_cuMemPoolCreate(pool, &props);
    }
    return r;
}

cupool_device_t *cupool_device_get(int ordinal)
{
    CUPOOL_ASSERT_HELD(&cupool_registry_lock);
    if (ordinal < 0 || ordinal >= CUPOOL_MAX_DEVICES) return NULL;
    cupool_device_t *dev = &devices[ordinal];
    if (devices_ready[ordinal]) return dev;
    devices_ready[ordinal] = 1;
    dev->ordinal = ordinal;
    int policy = (int)cupool_option(CUPOOL_OPT_POLICY);
    if (policy == CUPOOL_POLICY_OFF) return dev;
    int supported = 0;
    if (!pool_entry_points()) {
        cupool_message_once(CUPOOL_MSG_WARN, "this driver lacks the memory-pool entry points; passing allocations through");
        return dev;
    }
    if (real_cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, ordinal) != CUDA_SUCCESS ||
        !supported) {
        cupool_message(CUPOOL_MSG_WARN, "device %d does not support memory pools; passing its allocations through",
                       ordinal);
        return dev;
    }
    CUresult r = CUDA_SUCCESS;
    if (policy == CUPOOL_POLICY_DEFAULT) {
        r = real_cuDeviceGetDefaultMemPool(&dev->pools[0], ordinal);
        dev->npools = r == CUDA_SUCCESS;
    } else {
        int want = policy == CUPOOL_POLICY_SPLIT ? 2 : 1;
        for (; dev->npools < want && r == CUDA_SUCCESS; dev->npools++) {
            r = create_pool(dev, &dev->pools[dev->npools]);
            if (r != CUDA_SUCCESS) break;
        }
    }
    if (r != CUDA_SUCCESS) {
        cupool_message(CUPOOL_MSG_WARN, "cannot set up a memory pool on device %d (%s); passing its allocations through",
                       ordinal, cupool_result_name(r));
        /* Pools this policy created itself (never the device's default). */
        for (int i = 0; policy != CUPOOL_POLICY_DEFAULT && i < dev->npools; i++) real_cuMemPoolDestroy(dev->pools[i]);
        dev->npools = 0;
        return dev;
    }
    for (int i = 0; i < dev->npools; i++) set_threshold(dev->pools[i]);
    dev->pooled = 1;
    cupool_message(CUPOOL_MSG_INFO, "device %d: %d pool(s), policy %s", ordinal, dev->npools,
                   cupool_option_string(CUPOOL_OPT_POLICY));
    return dev;
}

CUmemoryPool cupool_device_any_size_pool(const cupool_device_t *dev)
{
    if (!dev->pooled || dev->npools != 1) return NULL;
    if (cupool_option(CUPOOL_OPT_MIN_SIZE) > 1 || cupool_option(CUPOOL_OPT_MAX_SIZE) != CUPOOL_SIZE_UNLIMITED ||
        cupool_option(CUPOOL_OPT_LIMIT) != CUPOOL_SIZE_UNLIMITED)
        return NULL;
    return dev->pools[CUPOOL_POOL_MAIN];
}

CUmemoryPool cupool_pick_pool(cupool_context_t *c, size_t size)
{
    const cupool_device_t *dev = c->device;
    if (!dev->pooled) return NULL;
    if (size < cupool_option_started(CUPOOL_OPT_MIN_SIZE) || size > cupool_option_started(CUPOOL_OPT_MAX_SIZE))
        return NULL;
    uint64_t limit = cupool_option_started(CUPOOL_OPT_LIMIT);
    if (limit != CUPOOL_SIZE_UNLIMITED && atomic_load_explicit(&dev->used, memory_order_relaxed) + size > limit)
        return NULL;
    if (dev->npools == 2 && size >= cupool_option_started(CUPOOL_OPT_SPLIT_SIZE)) return dev->pools[CUPOOL_POOL_LARGE];
    return dev->pools[CUPOOL_POOL_MAIN];
}

static uint64_t pool_attribute(CUmemoryPool pool, CUmemPool_attribute attr)
{
    cuuint64_t value = 0;
    real_cuMemPoolGetAttribute(pool, attr, &value);
    return value;
}

uint64_t cupool_device_reserved(cupool_device_t *dev)
{
    uint64_t total = 0;
    for (int i = 0; i < dev->npools; i++) total += pool_attribute(dev->pools[i], CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
    return total;
}

uint64_t cupool_device_reserved_recent(cupool_device_t *dev, uint64_t now_ns)
{
    uint64_t reserved = atomic_load_explicit(&dev->reserved, memory_order_relaxed);
    uint64_t at = atomic_load_explicit(&dev->reserved_at_ns, memory_order_relaxed);
    if (reserved >= atomic_load_explicit(&dev->used, memory_order_relaxed) && now_ns - at < 1000000) return reserved;
    reserved = cupool_device_reserved(dev);
    atomic_store_explicit(&dev->reserved, reserved, memory_order_relaxed);
    atomic_store_explicit(&dev->reserved_at_ns, now_ns, memory_order_relaxed);
    return reserved;
}

uint64_t cupool_device_reserved_unused(cupool_device_t *dev)
{
    uint64_t total = 0;
    for (int i = 0; i < dev->npools; i++) {
        uint64_t reserved = pool_attribute(dev->pools[i], CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
        uint64_t used = pool_attribute(dev->pools[i], CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
        if (reserved > used) total += reserved - used;
    }
    return total;
}

/* For the live statistics page (cupool_devices_report, contexts.c): per
 * device ordinal, whether pools serve it and, with `query`, what its pools
 * reserve, the driver asked only for a device with a live context.
 * cupool_registry_lock held.  Returns 1 + the highest ordinal set up, 0 for
 * none. */
int cupool_devices_pools_report(int query, int pooled[], uint64_t reserved[])
{
    CUPOOL_ASSERT_HELD(&cupool_registry_lock);
    int n = 0;
    for (int d = 0; d < CUPOOL_MAX_DEVICES; d++) {
        pooled[d] = devices_ready[d] && devices[d].pooled;
        reserved[d] = 0;
        if (devices_ready[d]) n = d + 1;
    }
    if (query) {
        CUstreamCaptureMode previous = cupool_relaxed_begin();
        for (int d = 0; d < n; d++)
            if (pooled[d] && devices[d].contexts > 0) reserved[d] = cupool_device_reserved(&devices[d]);
        cupool_relaxed_end(previous);
    }
    return n;
}

static void grant_access(cupool_device_t *dev, int to, CUmemAccess_flags flags)
{
    if (!real_cuMemPoolSetAccess) return;
    CUmemAccessDesc desc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = to}, .flags = flags};
    for (int i = 0; i < dev->npools; i++) {
        CUresult r = real_cuMemPoolSetAccess(dev->pools[i], &desc, 1);
        if (r != CUDA_SUCCESS)
            cupool_message(CUPOOL_MSG_WARN, "cannot mirror peer access of device %d to device %d's pool: %s", to,
                           dev->ordinal, cupool_result_name(r));
    }
}

int cupool_pools_in_use(void)
{
    for (int d = 0; d < CUPOOL_MAX_DEVICES; d++)
        if (devices_ready[d] && devices[d].pooled) return 1;
    return 0;
}

/* ---- peer access ------------------------------------------------------------ */

int cupool_device_peer_access(int self, int other, int enable)
{
    CUPOOL_ASSERT_HELD(&cupool_registry_lock);
    cupool_device_t *dev = cupool_device_get(other);
    if (!dev) return 0;
    if (enable) dev->peers |= 1ull << self;
    else dev->peers &= ~(1ull << self);
    if (dev->pooled) grant_access(dev, self, enable ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE);
    if (!enable) return 0;
    dev->shared = devices[self].shared = 1;
    return 1;
}
