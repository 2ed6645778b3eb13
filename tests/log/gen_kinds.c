/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Makes calls of all three kinds of memory for the report and replay tests,
 * which run it under cupool with a log (CUPOOL_LOG) and read the log back:
 * pinned host memory of cuMemAllocHost and of cuMemHostAlloc (with flags),
 * managed memory of both attach flags, one managed block given advice (so
 * freed by the driver, not kept), device memory between them, a pinned
 * block freed by another thread, a cuMemFreeHost of no block, and one
 * block of each kind left allocated at exit.  Each loop frees its block
 * before allocating the same size again, so under cupool every allocation
 * but the first of a loop is served by the block the previous free kept.
 * Prints what it did, "KEY=VALUE" a line, for the tests to compare:
 * host_allocs, host_frees, managed_allocs, managed_frees, device_allocs,
 * device_frees (successful calls), and the peak and final bytes in use of
 * pinned host and managed memory.
 */
#include "../check.h"

#include <pthread.h>
#include <stdint.h>

#define LOOPS 6
#define HOST_SIZE 4096
#define HOST_ALLOC_SIZE 65536
#define MANAGED_SIZE 8192
#define ADVISED_SIZE (1u << 20)
#define DEVICE_SIZE (256u << 10)

static CUcontext contexts[2];
static int host_allocs, host_frees, managed_allocs, managed_frees, device_allocs, device_frees;
static uint64_t host_in_use, host_peak, managed_in_use, managed_peak;

static void host_add(int64_t bytes)
{
    host_in_use += (uint64_t)bytes;
    if (host_in_use > host_peak) host_peak = host_in_use;
    if (bytes > 0) host_allocs++;
    else host_frees++;
}

static void managed_add(int64_t bytes)
{
    managed_in_use += (uint64_t)bytes;
    if (managed_in_use > managed_peak) managed_peak = managed_in_use;
    if (bytes > 0) managed_allocs++;
    else managed_frees++;
}

/* Frees a pinned block in a thread of its own (with no context current). */
static void *free_elsewhere(void *p)
{
    CHECK_CU(cuMemFreeHost(p));
    return NULL;
}

int main(void)
{
    int count = 0;
    CHECK_CU(cuInit(0));
    CHECK_CU(cuDeviceGetCount(&count));
    if (count < 2) return CHECK_SKIP;
    for (int d = 0; d < 2; d++) {
        CUdevice dev;
        CHECK_CU(cuDeviceGet(&dev, d));
        CHECK_CU(cuDevicePrimaryCtxRetain(&contexts[d], dev));
    }
    CHECK_CU(cuCtxSetCurrent(contexts[0]));
    for (int i = 0; i < LOOPS; i++) {
        void *h, *ha;
        CUdeviceptr m, d;
        CHECK_CU(cuMemAllocHost(&h, HOST_SIZE));
        host_add(HOST_SIZE);
        CHECK_CU(cuMemHostAlloc(&ha, HOST_ALLOC_SIZE, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
        host_add(HOST_ALLOC_SIZE);
        CHECK_CU(cuMemAllocManaged(&m, MANAGED_SIZE, i % 2 ? CU_MEM_ATTACH_HOST : CU_MEM_ATTACH_GLOBAL));
        managed_add(MANAGED_SIZE);
        CHECK_CU(cuMemAlloc(&d, DEVICE_SIZE));
        device_allocs++;
        CHECK_CU(cuMemsetD8(d, 1, DEVICE_SIZE));
        CHECK_CU(cuMemFree(d));
        device_frees++;
        CHECK_CU(cuMemFree(m));
        managed_add(-MANAGED_SIZE);
        CHECK_CU(cuMemFreeHost(ha));
        host_add(-HOST_ALLOC_SIZE);
        CHECK_CU(cuMemFreeHost(h));
        host_add(-HOST_SIZE);
    }

    /* Advice: this block goes back to the driver at its free. */
    CUdeviceptr advised;
    CHECK_CU(cuMemAllocManaged(&advised, ADVISED_SIZE, CU_MEM_ATTACH_GLOBAL));
    managed_add(ADVISED_SIZE);
    CUmemLocation device0 = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
    CHECK_CU(cuMemAdvise(advised, ADVISED_SIZE, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, device0));
    CHECK_CU(cuMemFree(advised));
    managed_add(-(int64_t)ADVISED_SIZE);

    /* On the other device: a pinned block another thread frees. */
    CHECK_CU(cuCtxSetCurrent(contexts[1]));
    void *other;
    CHECK_CU(cuMemAllocHost(&other, HOST_SIZE));
    host_add(HOST_SIZE);
    pthread_t thread;
    CHECK_EQ(pthread_create(&thread, NULL, free_elsewhere, other), 0);
    CHECK_EQ(pthread_join(thread, NULL), 0);
    host_add(-HOST_SIZE);

    /* The driver's own answer to a free of no block. */
    CHECK_TRUE(cuMemFreeHost((void *)(uintptr_t)0x1000) != CUDA_SUCCESS);

    /* Left allocated at exit, one of each kind. */
    void *left_host;
    CUdeviceptr left_managed, left_device;
    CHECK_CU(cuMemAllocHost(&left_host, HOST_SIZE));
    host_add(HOST_SIZE);
    CHECK_CU(cuMemAllocManaged(&left_managed, MANAGED_SIZE, CU_MEM_ATTACH_GLOBAL));
    managed_add(MANAGED_SIZE);
    CHECK_CU(cuMemAlloc(&left_device, DEVICE_SIZE));
    device_allocs++;

    printf("host_allocs=%d\nhost_frees=%d\nmanaged_allocs=%d\nmanaged_frees=%d\ndevice_allocs=%d\ndevice_frees=%d\n",
           host_allocs, host_frees, managed_allocs, managed_frees, device_allocs, device_frees);
    printf("host_peak=%llu\nhost_end=%llu\nmanaged_peak=%llu\nmanaged_end=%llu\n", (unsigned long long)host_peak,
           (unsigned long long)host_in_use, (unsigned long long)managed_peak, (unsigned long long)managed_in_use);
    return 0;
}
