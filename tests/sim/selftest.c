/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Stand-alone smoke test of the simulated CUDA driver (not part of the test
 * suite; build it by hand against a hand-built libcuda.so.1):
 *
 *   gcc -std=c11 -I/usr/local/cuda/include tests/sim/selftest.c \
 *       -L/tmp/simbuild -l:libcuda.so.1 -lpthread -o /tmp/simbuild/selftest
 *   LD_LIBRARY_PATH=/tmp/simbuild /tmp/simbuild/selftest
 *   SIMCUDA_MEMSET_BUG=1 LD_LIBRARY_PATH=/tmp/simbuild /tmp/simbuild/selftest
 *
 * It walks through initialisation, contexts, memory, pools, events, capture,
 * modules, graphs, pinned host and managed memory and their pools (with
 * their caps, SIMCUDA_HOST_MEM and SIMCUDA_MANAGED_MEM), host
 * accesses the race checker must order (racy ones in child processes, which
 * it must stop with status 3) and cuGetProcAddress, checking the result codes and the
 * memory contents the simulator is meant to produce.  Memory sharing between
 * processes is checked with a second process (this program run again with
 * --ipc-child) that imports an exportable pool received over a Unix socket
 * and opens legacy IPC handles.
 */
#define _GNU_SOURCE
#include <cuda.h>

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;

#define EXPECT(call, want)                                                                        \
    do {                                                                                          \
        CUresult got_ = (call);                                                                   \
        if (got_ != (want)) {                                                                     \
            const char *name_ = "?";                                                              \
            cuGetErrorName(got_, &name_);                                                         \
            fprintf(stderr, "%s:%d: %s -> %s (%d), wanted %s\n", __FILE__, __LINE__, #call, name_, \
                    (int)got_, #want);                                                            \
            failures++;                                                                           \
        }                                                                                         \
    } while (0)
#define OK(call) EXPECT(call, CUDA_SUCCESS)
#define TRUE(cond)                                                             \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                        \
        }                                                                      \
    } while (0)

static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                          ".visible .entry cupool_fill_u32(\n"
                          "  .param .u64 cupool_fill_u32_param_0, .param .u64 p1,\n"
                          "  .param .u64 p2, .param .u64 p3, .param .u32 p4\n)\n.maxntid 256, 1, 1\n{ ret; }\n"
                          ".visible .entry sim_busy()\n{ ret; }\n"
                          ".visible .entry unknown_kernel(.param .align 8 .b8 blob[24])\n{ ret; }\n";

static cuuint64_t pool_attr(CUmemoryPool pool, CUmemPool_attribute attr)
{
    cuuint64_t v = 0;
    OK(cuMemPoolGetAttribute(pool, attr, &v));
    return v;
}

static void test_init_and_devices(void)
{
    int n = 0, v = 0;
    char name[64];
    size_t total;
    EXPECT(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT(cuInit(1), CUDA_ERROR_INVALID_VALUE);
    OK(cuInit(0));
    OK(cuDriverGetVersion(&v));
    TRUE(v == 13000);
    OK(cuDeviceGetCount(&n));
    TRUE(n == 2);
    OK(cuDeviceGetName(name, sizeof name, 1));
    TRUE(strcmp(name, "Simulated CUDA Device") == 0);
    OK(cuDeviceTotalMem(&total, 0));
    TRUE(total == 64u << 20);
    OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0));
    TRUE(v == 1);
    OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
    TRUE(v == 9);
    EXPECT(cuDeviceGetName(name, sizeof name, 2), CUDA_ERROR_INVALID_DEVICE);
    OK(cuDeviceCanAccessPeer(&v, 0, 1));
    TRUE(v == 1);
}

static void test_plain_memory(void)
{
    CUdeviceptr p, q;
    size_t free0, free1, total, pitch;
    unsigned char host[4096];
    OK(cuMemGetInfo(&free0, &total));
    EXPECT(cuMemAlloc(&p, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAlloc(NULL, 16), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAlloc(&p, (size_t)1 << 40), CUDA_ERROR_OUT_OF_MEMORY);
    OK(cuMemAlloc(&p, 4096));
    TRUE(p % 256 == 0);
    OK(cuMemGetInfo(&free1, &total));
    TRUE(free0 - free1 == 4096);
    OK(cuMemsetD8(p, 0xab, 4096));
    OK(cuMemcpyDtoH(host, p, 4096));
    TRUE(host[0] == 0xab && host[4095] == 0xab);
    OK(cuMemsetD32(p + 8, 0x11223344, 2));
    OK(cuMemcpyDtoH(host, p, 16));
    TRUE(*(uint32_t *)(host + 8) == 0x11223344 && host[16 - 1] == 0x11 && host[7] == 0xab);
    EXPECT(cuMemsetD8(p + 4000, 0, 97), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemsetD32(p + 2, 0, 1), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemsetD8(p + 4000, 0, 0));
    OK(cuMemsetD2D16(p, 64, 0x0102, 8, 4));
    OK(cuMemcpyDtoH(host, p, 256));
    TRUE(host[0] == 0x02 && host[1] == 0x01 && host[16] == 0xab && host[64] == 0x02);
    for (int i = 0; i < 4096; i++) host[i] = (unsigned char)i;
    OK(cuMemcpyHtoD(p, host, 4096));
    OK(cuMemAlloc(&q, 4096));
    OK(cuMemcpyDtoD(q, p, 4096));
    memset(host, 0, sizeof host);
    OK(cuMemcpy((CUdeviceptr)(uintptr_t)host, q, 4096));
    TRUE(host[100] == 100 && host[4095] == 255);
    CUdeviceptr base;
    size_t size;
    OK(cuMemGetAddressRange(&base, &size, q + 10));
    TRUE(base == q && size == 4096);
    EXPECT(cuMemFree(p + 1), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree(p));
    EXPECT(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree(0));
    OK(cuMemFree(q));
    EXPECT(cuMemAllocPitch(&p, &pitch, 100, 4, 3), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAllocPitch(&p, &pitch, 100, 4, 4));
    TRUE(pitch == 512);
    CUipcMemHandle h;
    OK(cuIpcGetMemHandle(&h, p));
    OK(cuMemFree(p));
    OK(cuMemGetInfo(&free1, &total));
    TRUE(free1 == free0);
}

static void test_pools(void)
{
    CUmemoryPool pool, dflt, got;
    CUstream s;
    CUdeviceptr a, b, big;
    size_t free0, free1, total;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuDeviceGetDefaultMemPool(&dflt, 0));
    OK(cuMemGetInfo(&free0, &total));
    EXPECT(cuMemAllocAsync(&a, 0, s), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAllocAsync(&a, 1000, s));
    OK(cuMemAllocAsync(&b, 1000, s));
    TRUE(pool_attr(dflt, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 2u << 20);
    TRUE(pool_attr(dflt, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 2000);
    OK(cuMemGetInfo(&free1, &total));
    TRUE(free0 - free1 == 2u << 20);
    OK(cuPointerGetAttribute(&got, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, a + 5));
    TRUE(got == dflt);
    CUipcMemHandle h;
    EXPECT(cuIpcGetMemHandle(&h, a), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemsetD8Async(a, 7, 1000, s));
    OK(cuMemFreeAsync(a, s));
    EXPECT(cuMemFreeAsync(a, s), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree(b)); /* measured: cuMemFree accepts pool memory */
    TRUE(pool_attr(dflt, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
    TRUE(pool_attr(dflt, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 2u << 20);
    OK(cuStreamSynchronize(s)); /* threshold 0: trims */
    TRUE(pool_attr(dflt, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);
    TRUE(pool_attr(dflt, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) == 2u << 20);

    CUmemPoolProps props = { .allocType = CU_MEM_ALLOCATION_TYPE_PINNED, .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
    OK(cuMemPoolCreate(&pool, &props));
    cuuint64_t keep = UINT64_MAX;
    OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
    OK(cuMemAllocFromPoolAsync(&big, 40u << 20, pool, s));
    OK(cuMemFreeAsync(big, s));
    OK(cuStreamSynchronize(s));
    TRUE(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 40u << 20);
    /* The budget (64 MiB) is now mostly reserved by `pool`: the default pool
     * cannot grow until the caller trims. */
    EXPECT(cuMemAllocAsync(&a, 30u << 20, s), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT(cuMemAlloc(&a, 30u << 20), CUDA_ERROR_OUT_OF_MEMORY);
    OK(cuMemPoolTrimTo(pool, 0));
    OK(cuMemAllocAsync(&a, 30u << 20, s));
    OK(cuMemFreeAsync(a, s));
    cuuint64_t zero = 0;
    EXPECT(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &zero), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero));
    TRUE(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) == 0);
    CUmemAccessDesc desc = { { CU_MEM_LOCATION_TYPE_DEVICE, 1 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CUmemAccess_flags flags;
    CUmemLocation loc = { CU_MEM_LOCATION_TYPE_DEVICE, 1 };
    OK(cuMemPoolGetAccess(&flags, pool, &loc));
    TRUE(flags == CU_MEM_ACCESS_FLAGS_PROT_NONE);
    OK(cuMemPoolSetAccess(pool, &desc, 1));
    OK(cuMemPoolGetAccess(&flags, pool, &loc));
    TRUE(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    OK(cuMemPoolDestroy(pool));
    EXPECT(cuMemPoolDestroy(dflt), CUDA_ERROR_INVALID_VALUE);
    OK(cuStreamDestroy(s));
}

/* ---- memory shared between processes ------------------------------------------------- */

/* What the parent hands the child along with the pool's descriptor. */
typedef struct {
    CUmemPoolPtrExportData first, second; /* two blocks of the exportable pool */
    CUipcMemHandle interior, stale;       /* of a pointer inside a cuMemAlloc allocation; of a freed one */
    size_t first_size, second_size, plain_size;
} ipc_offer;

static bool send_with_fd(int sock, const void *data, size_t len, int fd)
{
    union {
        struct cmsghdr h;
        char room[CMSG_SPACE(sizeof(int))];
    } control;
    struct iovec iov = { (void *)data, len };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
    if (fd >= 0) {
        memset(&control, 0, sizeof control);
        msg.msg_control = control.room;
        msg.msg_controllen = sizeof control.room;
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    return sendmsg(sock, &msg, 0) == (ssize_t)len;
}

/* Returns the descriptor that came with the message (-1: none). */
static int recv_with_fd(int sock, void *data, size_t len)
{
    union {
        struct cmsghdr h;
        char room[CMSG_SPACE(sizeof(int))];
    } control;
    struct iovec iov = { data, len };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.room,
                          .msg_controllen = sizeof control.room };
    int fd = -1;
    if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != (ssize_t)len) return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

static bool all_bytes(CUdeviceptr p, size_t n, unsigned char want)
{
    unsigned char buf[8192];
    if (n > sizeof buf || cuMemcpyDtoH(buf, p, n) != CUDA_SUCCESS) return false;
    for (size_t i = 0; i < n; i++)
        if (buf[i] != want) return false;
    return true;
}

static CUmemAccess_flags pool_access(CUmemoryPool pool, int device)
{
    CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_MAX;
    CUmemLocation loc = { CU_MEM_LOCATION_TYPE_DEVICE, device };
    OK(cuMemPoolGetAccess(&flags, pool, &loc));
    return flags;
}

static void set_pool_access(CUmemoryPool pool, int device, CUmemAccess_flags flags)
{
    CUmemAccessDesc desc = { { CU_MEM_LOCATION_TYPE_DEVICE, device }, flags };
    OK(cuMemPoolSetAccess(pool, &desc, 1));
}

/* The second process: imports what the parent offers, checks it reads what
 * the parent wrote, writes what the parent then checks. */
static int ipc_child(int sock)
{
    CUcontext primary;
    CUmemoryPool imported, dflt;
    CUdeviceptr p, again, first, q, q2, x;
    CUstream s;
    ipc_offer offer;
    OK(cuInit(0));
    OK(cuDevicePrimaryCtxRetain(&primary, 0));
    OK(cuCtxSetCurrent(primary));
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    int fd = recv_with_fd(sock, &offer, sizeof offer);
    TRUE(fd >= 0);
    void *handle = (void *)(uintptr_t)fd;
    const CUmemAllocationHandleType posix = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;

    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    EXPECT(cuMemPoolImportFromShareableHandle(&imported, (void *)(uintptr_t)devnull, posix, 0),
           CUDA_ERROR_INVALID_VALUE);
    close(devnull);
    EXPECT(cuMemPoolImportFromShareableHandle(NULL, handle, posix, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolImportFromShareableHandle(&imported, handle, CU_MEM_HANDLE_TYPE_WIN32, 0),
           CUDA_ERROR_INVALID_VALUE);
    OK(cuMemPoolImportFromShareableHandle(&imported, handle, posix, 0));
    close(fd); /* the driver keeps its own duplicate */
    EXPECT(cuMemAllocFromPoolAsync(&x, 16, imported, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuDeviceSetMemPool(0, imported), CUDA_ERROR_INVALID_VALUE);
    TRUE(pool_attr(imported, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
    TRUE(pool_access(imported, 0) == CU_MEM_ACCESS_FLAGS_PROT_NONE);
    TRUE(pool_access(imported, 1) == CU_MEM_ACCESS_FLAGS_PROT_NONE);
    CUmemPoolPtrExportData forged = offer.second;
    forged.reserved[0] ^= 1;
    EXPECT(cuMemPoolImportPointer(&x, imported, &forged), CUDA_ERROR_INVALID_VALUE);
    forged = offer.second;
    forged.reserved[8] ^= 1; /* another pool's */
    EXPECT(cuMemPoolImportPointer(&x, imported, &forged), CUDA_ERROR_INVALID_VALUE);
    OK(cuDeviceGetDefaultMemPool(&dflt, 0));
    EXPECT(cuMemPoolImportPointer(&x, dflt, &offer.second), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolImportPointer(NULL, imported, &offer.second), CUDA_ERROR_INVALID_VALUE);

    OK(cuMemPoolImportPointer(&p, imported, &offer.second));
    unsigned char byte;
    EXPECT(cuMemcpyDtoH(&byte, p, 1), CUDA_ERROR_INVALID_VALUE); /* no access granted yet */
    set_pool_access(imported, 0, CU_MEM_ACCESS_FLAGS_PROT_READ);
    TRUE(all_bytes(p, offer.second_size, 0x5a));
    EXPECT(cuMemsetD8(p, 0, 1), CUDA_ERROR_INVALID_VALUE);
    set_pool_access(imported, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    TRUE(pool_access(imported, 0) == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    OK(cuMemPoolImportPointer(&again, imported, &offer.second));
    TRUE(again == p);
    OK(cuMemPoolImportPointer(&first, imported, &offer.first));
    TRUE(first != p && all_bytes(first, offer.first_size, 0x11));

    CUmemoryPool owner = NULL;
    CUdeviceptr start = 0;
    size_t range = 0;
    int ordinal = -1, legacy = 1;
    OK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p + 10));
    OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 10));
    OK(cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 10));
    OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
    OK(cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p));
    TRUE(owner == imported && start == p && range == offer.second_size && ordinal == 0 && (legacy & 0xff) == 0);
    CUipcMemHandle h;
    EXPECT(cuIpcGetMemHandle(&h, p), CUDA_ERROR_INVALID_VALUE);

    OK(cuMemsetD8(p, 0xc3, offer.second_size));
    OK(cuMemFreeAsync(p, s)); /* one of its two imports */
    OK(cuStreamSynchronize(s));
    TRUE(all_bytes(p, 1, 0xc3));
    OK(cuMemFree(p));
    EXPECT(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemGetAddressRange(&start, &range, p), CUDA_ERROR_NOT_FOUND);
    OK(cuMemPoolDestroy(imported)); /* lingers while `first` is imported */
    TRUE(all_bytes(first, 1, 0x11));
    OK(cuMemFreeAsync(first, s));
    OK(cuStreamSynchronize(s));

    /* legacy IPC */
    EXPECT(cuIpcOpenMemHandle(&x, offer.interior, 4), CUDA_ERROR_INVALID_VALUE);
    OK(cuIpcOpenMemHandle(&q, offer.interior, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    OK(cuIpcOpenMemHandle(&q2, offer.interior, 0));
    TRUE(q == q2);
    OK(cuMemGetAddressRange(&start, &range, q + 5));
    TRUE(start == q && range == offer.plain_size);
    unsigned type = 0;
    OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, q));
    TRUE(type == CU_MEMORYTYPE_DEVICE);
    TRUE(all_bytes(q, offer.plain_size, 0x33));
    OK(cuMemsetD8(q, 0x77, offer.plain_size));
    EXPECT(cuMemFree(q), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuIpcCloseMemHandle(q + 1), CUDA_ERROR_INVALID_VALUE);
    OK(cuIpcCloseMemHandle(q));
    TRUE(all_bytes(q, 1, 0x77)); /* still open once */
    OK(cuIpcCloseMemHandle(q));
    EXPECT(cuIpcCloseMemHandle(q), CUDA_ERROR_INVALID_VALUE);
    h = offer.interior;
    h.reserved[0] ^= 1;
    EXPECT(cuIpcOpenMemHandle(&x, h, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuIpcOpenMemHandle(&x, offer.stale, 0), CUDA_ERROR_INVALID_VALUE);

    CUdeviceptr kept;
    OK(cuMemAlloc(&kept, 4096)); /* left for the exit handler to remove */
    OK(cuStreamDestroy(s));
    int result = failures;
    TRUE(send(sock, &result, sizeof result, 0) == (ssize_t)sizeof result);
    return failures != 0;
}

/* Files the simulator keeps in /dev/shm for a process's cuMemAlloc memory. */
static int shm_files_of(pid_t pid)
{
    char prefix[64];
    int n = 0, len = snprintf(prefix, sizeof prefix, "simcuda.%u.%d.", (unsigned)getuid(), (int)pid);
    DIR *dir = opendir("/dev/shm");
    if (!dir) return 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL;) n += strncmp(e->d_name, prefix, (size_t)len) == 0;
    closedir(dir);
    return n;
}

static void test_ipc(void)
{
    const CUmemAllocationHandleType posix = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemoryPool pool, dflt;
    CUstream s;
    CUdeviceptr b1, b2, d, m, gone, x;
    CUmemPoolPtrExportData data;
    CUipcMemHandle h;
    ipc_offer offer = { .first_size = 1000, .second_size = 5000, .plain_size = 8192 };
    int fd = -1;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuDeviceGetDefaultMemPool(&dflt, 0));
    CUmemPoolProps props = { .allocType = CU_MEM_ALLOCATION_TYPE_PINNED, .handleTypes = posix,
                             .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
    OK(cuMemPoolCreate(&pool, &props));
    OK(cuMemAllocFromPoolAsync(&b1, offer.first_size, pool, s));
    OK(cuMemAllocFromPoolAsync(&b2, offer.second_size, pool, s));
    OK(cuMemAllocAsync(&d, 256, s));
    OK(cuMemsetD8Async(b1, 0x11, offer.first_size, s));
    OK(cuMemsetD8Async(b2, 0x5a, offer.second_size, s));
    OK(cuStreamSynchronize(s));
    OK(cuMemAlloc(&m, offer.plain_size));
    OK(cuMemsetD8(m, 0x33, offer.plain_size));

    EXPECT(cuMemPoolExportToShareableHandle(NULL, pool, posix, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_WIN32, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolExportToShareableHandle(&fd, pool, posix, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolExportToShareableHandle(&fd, dflt, posix, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolExportToShareableHandle(&fd, (CUmemoryPool)&fd, posix, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolExportPointer(NULL, b2), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolExportPointer(&data, b2 + 256), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolExportPointer(&data, d), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolExportPointer(&data, m), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuIpcGetMemHandle(&h, b1), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemPoolExportPointer(&offer.first, b1));
    OK(cuMemPoolExportPointer(&offer.second, b2));
    EXPECT(cuMemPoolImportPointer(&x, pool, &offer.first), CUDA_ERROR_INVALID_VALUE); /* not an imported pool */
    EXPECT(cuMemPoolImportFromShareableHandle(&dflt, (void *)(uintptr_t)2, posix, 0), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemPoolExportToShareableHandle(&fd, pool, posix, 0));
    TRUE(fd > 2);

    EXPECT(cuIpcGetMemHandle(NULL, m), CUDA_ERROR_INVALID_VALUE);
    OK(cuIpcGetMemHandle(&offer.interior, m + 100));
    OK(cuIpcGetMemHandle(&h, m));
    TRUE(memcmp(&h, &offer.interior, sizeof h) == 0);
    EXPECT(cuIpcOpenMemHandle(&x, h, 0), CUDA_ERROR_INVALID_CONTEXT); /* its own process's */
    EXPECT(cuIpcCloseMemHandle(m), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAlloc(&gone, 4096));
    OK(cuIpcGetMemHandle(&offer.stale, gone));
    OK(cuMemFree(gone));

    int sv[2];
    TRUE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        char arg[16];
        snprintf(arg, sizeof arg, "%d", sv[1]);
        fcntl(sv[1], F_SETFD, 0);
        execl("/proc/self/exe", "selftest", "--ipc-child", arg, (char *)NULL);
        _exit(127);
    }
    TRUE(pid > 0);
    close(sv[1]);
    TRUE(send_with_fd(sv[0], &offer, sizeof offer, fd));
    close(fd);
    int child_failures = -1, status = 0;
    TRUE(recv(sv[0], &child_failures, sizeof child_failures, 0) == (ssize_t)sizeof child_failures);
    TRUE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    TRUE(child_failures == 0);
    close(sv[0]);
    TRUE(all_bytes(b2, offer.second_size, 0xc3)); /* the child's writes */
    TRUE(all_bytes(b1, offer.first_size, 0x11));
    TRUE(all_bytes(m, offer.plain_size, 0x77));
    TRUE(shm_files_of(pid) == 0);
    TRUE(shm_files_of(getpid()) == 1);

    OK(cuMemFreeAsync(b1, s));
    OK(cuMemFreeAsync(b2, s));
    OK(cuMemFreeAsync(d, s));
    OK(cuStreamSynchronize(s));
    TRUE(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);
    OK(cuMemPoolDestroy(pool));
    OK(cuMemFree(m));
    TRUE(shm_files_of(getpid()) == 0);
    OK(cuStreamDestroy(s));
}

static void test_events(void)
{
    CUevent e;
    CUstream s;
    OK(cuStreamCreate(&s, 0));
    OK(cuEventCreate(&e, 0));
    OK(cuEventRecord(e, s));
    EXPECT(cuEventQuery(e), CUDA_ERROR_NOT_READY); /* SIMCUDA_EVENT_DELAY=2 */
    EXPECT(cuEventQuery(e), CUDA_ERROR_NOT_READY);
    OK(cuEventQuery(e));
    OK(cuEventRecord(e, CU_STREAM_LEGACY));
    EXPECT(cuEventQuery(e), CUDA_ERROR_NOT_READY);
    OK(cuCtxSynchronize());
    OK(cuEventQuery(e));
    /* The context's work as a whole (CUDA 12.5); a capture in progress in
     * the context makes it fail and is invalidated. */
    CUcontext ctx;
    CUgraph g;
    CUstreamCaptureStatus st;
    OK(cuCtxGetCurrent(&ctx));
    OK(cuCtxRecordEvent(ctx, e));
    EXPECT(cuEventQuery(e), CUDA_ERROR_NOT_READY);
    OK(cuCtxSynchronize());
    OK(cuEventQuery(e));
    EXPECT(cuCtxRecordEvent(NULL, e), CUDA_ERROR_INVALID_CONTEXT);
    OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    EXPECT(cuCtxRecordEvent(ctx, e), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    OK(cuStreamIsCapturing(s, &st));
    TRUE(st == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    OK(cuEventDestroy(e));
    EXPECT(cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE);
    OK(cuStreamDestroy(s));
    EXPECT(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
}

static void test_capture(void)
{
    CUstream s, blocking;
    CUdeviceptr p;
    CUgraph g;
    CUgraphExec x;
    CUstreamCaptureStatus st;
    unsigned char host[64];
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&blocking, 0));
    OK(cuMemAlloc(&p, 64));
    OK(cuMemsetD8(p, 0, 64));

    /* Global mode: cuMemAlloc is unsafe and invalidates the capture. */
    OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    OK(cuStreamIsCapturing(s, &st));
    TRUE(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    OK(cuStreamIsCapturing(CU_STREAM_LEGACY, &st)); /* s is non-blocking */
    EXPECT(cuMemAlloc(&p, 64), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    TRUE(g == NULL);

    /* Relaxed thread: allocation allowed, memsets captured and replayed. */
    OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    OK(cuThreadExchangeStreamCaptureMode(&mode));
    CUdeviceptr tmp;
    OK(cuMemAlloc(&tmp, 64));
    OK(cuMemFree(tmp));
    OK(cuThreadExchangeStreamCaptureMode(&mode));
    TRUE(mode == CU_STREAM_CAPTURE_MODE_RELAXED);
    OK(cuMemsetD8Async(p, 5, 32, s));
    OK(cuMemsetD8Async(p + 32, 6, 32, s));
    OK(cuStreamEndCapture(s, &g));
    OK(cuMemcpyDtoH(host, p, 64));
    TRUE(host[0] == 0 && host[63] == 0); /* captured, not run */
    size_t n = 0;
    OK(cuGraphGetNodes(g, NULL, &n));
    TRUE(n == 2);
    OK(cuGraphGetEdges(g, NULL, NULL, NULL, &n));
    TRUE(n == 1);
    OK(cuGraphInstantiate(&x, g, 0));
    OK(cuGraphLaunch(x, s));
    OK(cuStreamSynchronize(s));
    OK(cuMemcpyDtoH(host, p, 64));
    TRUE(host[0] == 5 && host[63] == 6);
    OK(cuGraphExecDestroy(x));
    OK(cuGraphDestroy(g));

    /* A blocking stream capturing makes legacy-stream work an implicit join. */
    OK(cuStreamBeginCapture(blocking, CU_STREAM_CAPTURE_MODE_RELAXED));
    EXPECT(cuStreamIsCapturing(CU_STREAM_LEGACY, &st), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    OK(cuStreamIsCapturing(blocking, &st));
    TRUE(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    EXPECT(cuMemsetD8Async(p, 1, 1, CU_STREAM_LEGACY), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    OK(cuStreamIsCapturing(blocking, &st));
    TRUE(st == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    EXPECT(cuStreamEndCapture(blocking, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    EXPECT(cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);

    /* Capturing into an existing graph after existing nodes. */
    CUgraph mine, ended;
    CUgraphNode roots[2];
    OK(cuGraphCreate(&mine, 0));
    OK(cuGraphAddEmptyNode(&roots[0], mine, NULL, 0));
    OK(cuGraphAddEmptyNode(&roots[1], mine, NULL, 0));
    OK(cuStreamBeginCaptureToGraph(s, mine, roots, NULL, 2, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    const CUgraphNode *deps;
    size_t ndeps;
    cuuint64_t id;
    OK(cuStreamGetCaptureInfo(s, &st, &id, &ended, &deps, NULL, &ndeps));
    TRUE(ended == mine && ndeps == 2 && deps[1] == roots[1]);
    OK(cuMemsetD8Async(p, 9, 64, s));
    OK(cuStreamEndCapture(s, &ended));
    TRUE(ended == mine);
    OK(cuGraphGetEdges(mine, NULL, NULL, NULL, &n));
    TRUE(n == 2);
    OK(cuGraphDestroy(mine));
    OK(cuMemFree(p));
    OK(cuStreamDestroy(s));
    OK(cuStreamDestroy(blocking));
}

/* Another thread's view of a global-mode capture: unsafe calls fail in its
 * default (global) mode and succeed once it switches to thread-local mode. */
static void *other_thread(void *arg)
{
    CUdeviceptr p;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    OK(cuCtxSetCurrent((CUcontext)arg));
    EXPECT(cuMemAlloc(&p, 64), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    OK(cuThreadExchangeStreamCaptureMode(&mode));
    OK(cuMemAlloc(&p, 64));
    OK(cuMemFree(p));
    return NULL;
}

static void test_capture_threads(CUcontext ctx)
{
    CUstream s;
    CUgraph g;
    pthread_t t;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    TRUE(pthread_create(&t, NULL, other_thread, ctx) == 0);
    pthread_join(t, NULL);
    EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED); /* the first try invalidated it */
    OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CUdeviceptr p;
    OK(cuThreadExchangeStreamCaptureMode(&(CUstreamCaptureMode){ CU_STREAM_CAPTURE_MODE_GLOBAL }));
    EXPECT(cuMemAlloc(&p, 64), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); /* own capture, any non-relaxed mode */
    EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    OK(cuStreamDestroy(s));
}

static void test_kernels(CUfunction *fill_out)
{
    CUmodule mod;
    CUfunction fill, busy, unknown;
    CUdeviceptr p;
    uint32_t host[64];
    OK(cuModuleLoadData(&mod, ptx));
    OK(cuModuleGetFunction(&fill, mod, "cupool_fill_u32"));
    OK(cuModuleGetFunction(&busy, mod, "sim_busy"));
    OK(cuModuleGetFunction(&unknown, mod, "unknown_kernel"));
    EXPECT(cuModuleGetFunction(&busy, mod, "nope"), CUDA_ERROR_NOT_FOUND);
    OK(cuMemAlloc(&p, sizeof host));
    OK(cuMemsetD32(p, 0, 64));
    unsigned long long dst = p, pitch = 64, width = 4, height = 4;
    unsigned value = 0xdeadbeef;
    void *args[] = { &dst, &pitch, &width, &height, &value };
    OK(cuLaunchKernel(fill, 1, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
    OK(cuMemcpyDtoH(host, p, sizeof host));
    TRUE(host[0] == 0xdeadbeef && host[3] == 0xdeadbeef && host[4] == 0 && host[16] == 0xdeadbeef && host[63] == 0);
    OK(cuLaunchKernel(busy, 1, 1, 1, 1, 1, 1, 0, CU_STREAM_PER_THREAD, NULL, NULL));
    OK(cuLaunchKernel(busy, 1, 1, 1, 1024, 1, 1, 0, NULL, NULL, NULL));
    EXPECT(cuLaunchKernel(fill, 1, 1, 1, 512, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE); /* .maxntid */
    char blob[24] = { 0 };
    void *uargs[] = { blob };
    EXPECT(cuLaunchKernel(unknown, 1, 1, 1, 1, 1, 1, 0, NULL, uargs, NULL), CUDA_ERROR_NOT_SUPPORTED);
    height = 5; /* row 4 lies outside the 256-byte allocation */
    EXPECT(cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_ILLEGAL_ADDRESS);
    EXPECT(cuLaunchKernel(fill, 0, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree(p));
    *fill_out = fill;
}

static void test_graphs(CUfunction fill)
{
    CUgraph g, clone;
    CUgraphNode ms, kn, empty, found, from[4], to[4];
    CUgraphExec x;
    CUstream s;
    CUdeviceptr plain, pooled;
    uint32_t host[64];
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuMemAlloc(&plain, sizeof host));
    OK(cuMemAllocAsync(&pooled, sizeof host, s));
    OK(cuGraphCreate(&g, 0));
    CUDA_MEMSET_NODE_PARAMS mp = { .dst = plain, .value = 7, .elementSize = 4, .width = 64, .height = 1 };
    CUDA_MEMSET_NODE_PARAMS zero = mp;
    zero.width = 0;
    EXPECT(cuGraphAddMemsetNode(&ms, g, NULL, 0, &zero, NULL), CUDA_ERROR_INVALID_VALUE);
    CUDA_MEMSET_NODE_PARAMS onpool = mp;
    onpool.dst = pooled;
    bool bug = getenv("SIMCUDA_MEMSET_BUG") && strcmp(getenv("SIMCUDA_MEMSET_BUG"), "1") == 0;
    CUgraphNode pn;
    EXPECT(cuGraphAddMemsetNode(&pn, g, NULL, 0, &onpool, NULL), bug ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
    if (!bug) OK(cuGraphDestroyNode(pn));
    OK(cuGraphAddMemsetNode(&ms, g, NULL, 0, &mp, NULL));
    unsigned long long dst = plain, pitch = 16, width = 2, height = 4;
    unsigned value = 9;
    void *args[] = { &dst, &pitch, &width, &height, &value };
    CUDA_KERNEL_NODE_PARAMS kp = { .func = fill, .gridDimX = 1, .gridDimY = 1, .gridDimZ = 1,
                                   .blockDimX = 32, .blockDimY = 1, .blockDimZ = 1, .kernelParams = args };
    OK(cuGraphAddKernelNode(&kn, g, &ms, 1, &kp));
    value = 1000; /* the node keeps its own copy */
    CUgraphNodeParams gp = { .type = CU_GRAPH_NODE_TYPE_EMPTY };
    OK(cuGraphAddNode(&empty, g, &kn, NULL, 1, &gp));
    CUgraphNodeType type;
    OK(cuGraphNodeGetType(kn, &type));
    TRUE(type == CU_GRAPH_NODE_TYPE_KERNEL);
    size_t n = 4;
    OK(cuGraphGetEdges(g, from, to, NULL, &n));
    TRUE(n == 2 && from[0] == ms && to[0] == kn && from[1] == kn && to[1] == empty);
    OK(cuGraphInstantiate(&x, g, 0));
    mp.value = 8; /* after instantiation: only the graph changes */
    OK(cuGraphMemsetNodeSetParams(ms, &mp));
    OK(cuGraphLaunch(x, s));
    OK(cuStreamSynchronize(s));
    OK(cuMemcpyDtoH(host, plain, sizeof host));
    TRUE(host[0] == 9 && host[1] == 9 && host[2] == 7 && host[4] == 9 && host[63] == 7);
    CUDA_MEMSET_NODE_PARAMS back;
    OK(cuGraphMemsetNodeGetParams(ms, &back));
    TRUE(back.value == 8);
    OK(cuGraphExecMemsetNodeSetParams(x, ms, &mp, NULL));
    OK(cuGraphLaunch(x, s));
    OK(cuStreamSynchronize(s));
    OK(cuMemcpyDtoH(host, plain, sizeof host));
    TRUE(host[63] == 8);

    OK(cuGraphClone(&clone, g));
    OK(cuGraphNodeFindInClone(&found, ms, clone));
    mp.value = 3;
    OK(cuGraphMemsetNodeSetParams(found, &mp));
    CUgraphExecUpdateResultInfo info;
    OK(cuGraphExecUpdate(x, clone, &info));
    TRUE(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS);
    OK(cuGraphLaunch(x, s));
    OK(cuStreamSynchronize(s));
    OK(cuMemcpyDtoH(host, plain, sizeof host));
    TRUE(host[63] == 3);
    OK(cuGraphAddEmptyNode(&empty, clone, NULL, 0));
    EXPECT(cuGraphExecUpdate(x, clone, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    TRUE(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);

    OK(cuMemFree(plain)); /* the exec graph now writes freed memory */
    EXPECT(cuGraphLaunch(x, s), CUDA_ERROR_ILLEGAL_ADDRESS);
    OK(cuGraphExecDestroy(x));
    OK(cuGraphDestroy(clone));
    OK(cuGraphDestroy(g));
    OK(cuMemFreeAsync(pooled, s));
    OK(cuStreamDestroy(s));
}

/* ---- pinned host memory, managed memory, host and managed pools ------------------- */

/* The race checker's stand-in for host loads and stores, and the counts of
 * the driver's own pinned and managed allocations (exported by the simulator). */
void simcuda_host_access(const void *p, size_t bytes, int write);
long long simcuda_host_allocations(int managed);
long long simcuda_host_bytes(int managed);

/* SIMCUDA_HOST_MEM=1M and SIMCUDA_MANAGED_MEM=2M (set by main): allocations
 * past the cap fail, the live bytes and the allocations made are counted. */
static void test_host_memory_caps(void)
{
    void *h, *h2;
    CUdeviceptr m, m2;
    long long made = simcuda_host_allocations(0), made_managed = simcuda_host_allocations(1);
    TRUE(simcuda_host_bytes(0) == 0 && simcuda_host_bytes(1) == 0);
    OK(cuMemHostAlloc(&h, 768 << 10, 0));
    EXPECT(cuMemAllocHost(&h2, 512 << 10), CUDA_ERROR_OUT_OF_MEMORY);
    OK(cuMemAllocHost(&h2, 256 << 10));
    TRUE(simcuda_host_bytes(0) == 1 << 20 && simcuda_host_allocations(0) == made + 2);
    OK(cuMemAllocManaged(&m, 2 << 20, CU_MEM_ATTACH_GLOBAL)); /* the caps are apart */
    EXPECT(cuMemAllocManaged(&m2, 1, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
    TRUE(simcuda_host_bytes(1) == 2 << 20 && simcuda_host_allocations(1) == made_managed + 1);
    OK(cuMemFreeHost(h));
    OK(cuMemAllocHost(&h, 512 << 10));
    OK(cuMemFreeHost(h));
    OK(cuMemFreeHost(h2));
    OK(cuMemFree(m));
    TRUE(simcuda_host_bytes(0) == 0 && simcuda_host_bytes(1) == 0);
    TRUE(simcuda_host_allocations(0) == made + 3 && simcuda_host_allocations(1) == made_managed + 1);
}

/* The pointer attributes that tell pinned, managed and pool memory apart, for
 * a pointer into memory of device 0. */
static void expect_attributes(CUdeviceptr ptr, unsigned type, bool managed, CUmemoryPool pool, CUdeviceptr start,
                              size_t size)
{
    unsigned mem_type = 0;
    bool is_managed = !managed, mapped = false;
    CUdeviceptr dp = 0, range_start = 1;
    void *hp = NULL;
    CUmemoryPool mp = (CUmemoryPool)(uintptr_t)1;
    int ordinal = -1;
    size_t range_size = 0;
    CUpointer_attribute attrs[] = { CU_POINTER_ATTRIBUTE_MEMORY_TYPE,    CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                    CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER,
                                    CU_POINTER_ATTRIBUTE_MAPPED,         CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
                                    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                    CU_POINTER_ATTRIBUTE_RANGE_SIZE };
    void *data[] = { &mem_type, &is_managed, &dp, &hp, &mapped, &mp, &ordinal, &range_start, &range_size };
    OK(cuPointerGetAttributes(9, attrs, data, ptr));
    TRUE(mem_type == type);
    TRUE(is_managed == managed);
    TRUE(dp == ptr && hp == (void *)(uintptr_t)ptr);
    TRUE(mapped);
    TRUE(mp == pool);
    TRUE(ordinal == 0);
    TRUE(range_start == start);
    TRUE(range_size == size);
}

static void test_pinned_memory(void)
{
    void *h, *h2;
    unsigned char stack[16];
    unsigned flags;
    size_t free0, free1, total;
    CUdeviceptr d, p;
    OK(cuMemGetInfo(&free0, &total));
    EXPECT(cuMemAllocHost(&h, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAllocHost(NULL, 16), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemHostAlloc(&h, 0, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemHostAlloc(NULL, 16, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemHostAlloc(&h, 16, 0x08), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAllocHost(&h, 4096));
    OK(cuMemHostAlloc(&h2, 8192, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    OK(cuMemGetInfo(&free1, &total));
    TRUE(free1 == free0); /* the host's memory, not the device's */
    OK(cuMemHostGetFlags(&flags, h));
    TRUE(flags == CU_MEMHOSTALLOC_DEVICEMAP);
    OK(cuMemHostGetFlags(&flags, (char *)h2 + 10));
    TRUE(flags == (CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    EXPECT(cuMemHostGetFlags(&flags, stack), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemHostGetDevicePointer(&d, h2, 0));
    TRUE(d == (CUdeviceptr)(uintptr_t)h2);
    OK(cuMemHostGetDevicePointer(&d, (char *)h2 + 100, 0));
    TRUE(d == (CUdeviceptr)(uintptr_t)h2 + 100);
    EXPECT(cuMemHostGetDevicePointer(&d, h2, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemHostGetDevicePointer(&d, stack, 0), CUDA_ERROR_INVALID_VALUE);
    expect_attributes(d, CU_MEMORYTYPE_HOST, false, NULL, (CUdeviceptr)(uintptr_t)h2, 8192);
    /* device operations take it as device memory and as host memory */
    OK(cuMemsetD8((CUdeviceptr)(uintptr_t)h2, 0x5a, 8192));
    TRUE(((unsigned char *)h2)[8191] == 0x5a);
    OK(cuMemAlloc(&p, 4096));
    OK(cuMemcpyHtoD(p, h2, 4096));
    OK(cuMemsetD8((CUdeviceptr)(uintptr_t)h, 0, 4096));
    OK(cuMemcpyDtoD((CUdeviceptr)(uintptr_t)h, p, 4096));
    TRUE(((unsigned char *)h)[4095] == 0x5a);
    OK(cuMemsetD8(p, 0x11, 4096));
    OK(cuMemcpy((CUdeviceptr)(uintptr_t)h2, p, 4096));
    OK(cuMemcpyDtoHAsync(h, p, 4096, NULL));
    OK(cuCtxSynchronize());
    TRUE(((unsigned char *)h)[0] == 0x11 && ((unsigned char *)h2)[0] == 0x11);
    EXPECT(cuMemFree((CUdeviceptr)(uintptr_t)h), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemFreeHost((char *)h + 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemFreeHost(stack), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemFreeHost((void *)(uintptr_t)p), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFreeHost(h));
    EXPECT(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFreeHost(h2));
    OK(cuMemFree(p));
}

static void test_managed_memory(void)
{
    CUdeviceptr m, p;
    CUstream s;
    unsigned flags;
    int v, rm = -5, pl = -5, acc[3];
    CUmemLocationType t;
    CUmemLocation dev0 = { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, host = { CU_MEM_LOCATION_TYPE_HOST, 0 };
    CUmemLocation bad = { CU_MEM_LOCATION_TYPE_DEVICE, 99 };
    EXPECT(cuMemAllocManaged(&m, 0, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAllocManaged(&m, 16, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAllocManaged(&m, 16, CU_MEM_ATTACH_SINGLE), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAllocManaged(NULL, 16, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAllocManaged(&m, 65536, CU_MEM_ATTACH_GLOBAL));
    expect_attributes(m + 16, CU_MEMORYTYPE_DEVICE, true, NULL, m, 65536);
    OK(cuMemHostGetFlags(&flags, (void *)(uintptr_t)m));
    TRUE(flags == 2);
    OK(cuMemRangeGetAttribute(&v, 4, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, m, 65536));
    TRUE(v == CU_DEVICE_INVALID);
    OK(cuMemRangeGetAttribute(&v, 4, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m, 65536));
    TRUE(v == CU_DEVICE_INVALID);
    OK(cuMemRangeGetAttribute(&v, 4, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, 65536));
    TRUE(v == 0);
    OK(cuMemAdvise(m, 65536, CU_MEM_ADVISE_SET_READ_MOSTLY, dev0));
    OK(cuMemAdvise(m, 4096, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, dev0));
    EXPECT(cuMemAdvise(m, 4096, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, bad), CUDA_ERROR_INVALID_DEVICE);
    OK(cuMemAdvise(m, 65536, CU_MEM_ADVISE_SET_ACCESSED_BY, dev0));
    EXPECT(cuMemAdvise(m, 65537, CU_MEM_ADVISE_SET_READ_MOSTLY, dev0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAdvise(m, 0, CU_MEM_ADVISE_SET_READ_MOSTLY, dev0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAdvise(m, 16, (CUmem_advise)99, dev0), CUDA_ERROR_INVALID_VALUE);
    void *data[] = { &rm, &pl, acc };
    size_t sizes[] = { 4, 4, sizeof acc };
    CUmem_range_attribute attrs[] = { CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION,
                                      CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY };
    OK(cuMemRangeGetAttributes(data, sizes, attrs, 3, m, 65536));
    TRUE(rm == 1 && pl == 0 && acc[0] == 0 && acc[1] == CU_DEVICE_INVALID && acc[2] == CU_DEVICE_INVALID);
    EXPECT(cuMemRangeGetAttribute(&v, 8, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, 16), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemRangeGetAttribute(&v, 4, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, 0), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAdvise(m, 65536, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host));
    OK(cuMemRangeGetAttribute(&v, 4, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, m, 16));
    TRUE(v == CU_DEVICE_CPU);
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuMemPrefetchAsync(m, 65536, host, 0, s));
    OK(cuMemRangeGetAttribute(&v, 4, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m, 65536));
    TRUE(v == CU_DEVICE_CPU);
    OK(cuMemPrefetchAsync(m, 4096, dev0, 0, s));
    OK(cuMemRangeGetAttribute(&v, 4, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m, 65536));
    TRUE(v == 0);
    OK(cuMemRangeGetAttribute(&t, sizeof t, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE, m, 65536));
    TRUE(t == CU_MEM_LOCATION_TYPE_DEVICE);
    EXPECT(cuMemPrefetchAsync(m, 4096, dev0, 1, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPrefetchAsync(m, 4096, bad, 0, s), CUDA_ERROR_INVALID_DEVICE);
    OK(cuStreamAttachMemAsync(s, m, 0, CU_MEM_ATTACH_SINGLE));
    OK(cuStreamAttachMemAsync(s, m, 65536, CU_MEM_ATTACH_GLOBAL));
    OK(cuStreamAttachMemAsync(NULL, m, 0, CU_MEM_ATTACH_HOST));
    EXPECT(cuStreamAttachMemAsync(NULL, m, 0, CU_MEM_ATTACH_SINGLE), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuStreamAttachMemAsync(s, m + 256, 0, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuStreamAttachMemAsync(s, m, 0, 8), CUDA_ERROR_INVALID_VALUE);
    /* none of that on other memory */
    OK(cuMemAlloc(&p, 4096));
    EXPECT(cuMemAdvise(p, 4096, CU_MEM_ADVISE_SET_READ_MOSTLY, dev0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPrefetchAsync(p, 4096, dev0, 0, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuStreamAttachMemAsync(s, p, 0, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemRangeGetAttribute(&v, 4, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, p, 4096), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemHostGetFlags(&flags, (void *)(uintptr_t)p), CUDA_ERROR_INVALID_VALUE);
    /* device operations */
    OK(cuMemsetD32Async(m, 7, 16384, s));
    OK(cuMemcpyDtoDAsync(p, m, 4096, s));
    OK(cuStreamSynchronize(s));
    simcuda_host_access((void *)(uintptr_t)m, 65536, 1);
    TRUE(((unsigned *)(uintptr_t)m)[16383] == 7);
    EXPECT(cuMemFreeHost((void *)(uintptr_t)m), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree(m));
    OK(cuMemFree(p));
    OK(cuStreamDestroy(s));
}

static void test_host_and_managed_pools(void)
{
    CUmemoryPool hp, mp, dflt, cur, dev_dflt, managed_dflt, other;
    CUstream s;
    CUdeviceptr b, c, d;
    unsigned flags;
    int v;
    size_t free0, free1, total;
    unsigned char buf[1000];
    CUmemAccess_flags f;
    CUipcMemHandle ipc;
    CUmemLocation dev0 = { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, host = { CU_MEM_LOCATION_TYPE_HOST, 0 };
    CUmemPoolProps props = { .allocType = CU_MEM_ALLOCATION_TYPE_PINNED, .location = { CU_MEM_LOCATION_TYPE_HOST, 7 },
                             .handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR };
    EXPECT(cuMemPoolCreate(&hp, &props), CUDA_ERROR_INVALID_VALUE);
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    OK(cuMemPoolCreate(&hp, &props));
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuMemGetInfo(&free0, &total));
    OK(cuMemAllocFromPoolAsync(&b, 1000, hp, s));
    OK(cuMemGetInfo(&free1, &total));
    TRUE(free1 == free0);
    expect_attributes(b + 10, CU_MEMORYTYPE_HOST, false, hp, 0, 1000);
    EXPECT(cuMemHostGetDevicePointer(&d, (void *)(uintptr_t)b, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemHostGetFlags(&flags, (void *)(uintptr_t)b), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuIpcGetMemHandle(&ipc, b), CUDA_ERROR_INVALID_VALUE);
    /* the host has it; a device once granted */
    OK(cuMemPoolGetAccess(&f, hp, &host));
    TRUE(f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    OK(cuMemPoolGetAccess(&f, hp, &dev0));
    TRUE(f == CU_MEM_ACCESS_FLAGS_PROT_NONE);
    EXPECT(cuMemsetD8Async(b, 1, 1000, s), CUDA_ERROR_INVALID_VALUE);
    set_pool_access(hp, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    OK(cuMemsetD8Async(b, 1, 1000, s));
    OK(cuMemcpyDtoHAsync(buf, b, 1000, s));
    OK(cuStreamSynchronize(s));
    simcuda_host_access((void *)(uintptr_t)b, 1000, 1);
    TRUE(buf[999] == 1 && ((unsigned char *)(uintptr_t)b)[0] == 1);
    OK(cuMemFreeAsync(b, s));
    OK(cuStreamSynchronize(s));
    OK(cuMemPoolDestroy(hp));
    /* managed pools: on a device or nowhere in particular, never exportable */
    props = (CUmemPoolProps){ .allocType = CU_MEM_ALLOCATION_TYPE_MANAGED, .location = host };
    EXPECT(cuMemPoolCreate(&mp, &props), CUDA_ERROR_INVALID_VALUE);
    props.location = (CUmemLocation){ CU_MEM_LOCATION_TYPE_NONE, 0 };
    OK(cuMemPoolCreate(&mp, &props));
    OK(cuMemPoolDestroy(mp));
    props.location = dev0;
    props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    EXPECT(cuMemPoolCreate(&mp, &props), CUDA_ERROR_INVALID_VALUE);
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    OK(cuMemPoolCreate(&mp, &props));
    OK(cuMemAllocFromPoolAsync(&c, 4096, mp, s));
    expect_attributes(c + 8, CU_MEMORYTYPE_DEVICE, true, mp, c, 4096);
    EXPECT(cuMemAdvise(c, 4096, CU_MEM_ADVISE_SET_READ_MOSTLY, dev0), CUDA_ERROR_NOT_SUPPORTED);
    EXPECT(cuStreamAttachMemAsync(s, c, 0, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemHostGetFlags(&flags, (void *)(uintptr_t)c), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemPrefetchAsync(c, 4096, dev0, 0, s));
    OK(cuMemRangeGetAttribute(&v, 4, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, c, 4096));
    TRUE(v == 0);
    OK(cuMemsetD8Async(c, 3, 4096, s));
    OK(cuMemFreeAsync(c, s));
    OK(cuStreamSynchronize(s));
    OK(cuMemPoolDestroy(mp));
    /* default and current pools by location and allocation type (CUDA 13) */
    OK(cuMemGetDefaultMemPool(&dflt, &host, CU_MEM_ALLOCATION_TYPE_PINNED));
    OK(cuMemGetMemPool(&cur, &host, CU_MEM_ALLOCATION_TYPE_PINNED));
    TRUE(cur == dflt);
    EXPECT(cuMemPoolDestroy(dflt), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemGetDefaultMemPool(&dev_dflt, &dev0, CU_MEM_ALLOCATION_TYPE_PINNED));
    OK(cuDeviceGetDefaultMemPool(&other, 0));
    TRUE(dev_dflt == other);
    OK(cuMemGetDefaultMemPool(&managed_dflt, &dev0, CU_MEM_ALLOCATION_TYPE_MANAGED));
    TRUE(managed_dflt != dev_dflt && managed_dflt != dflt);
    EXPECT(cuMemGetMemPool(&cur, &host, CU_MEM_ALLOCATION_TYPE_MANAGED), CUDA_ERROR_INVALID_VALUE);
    props = (CUmemPoolProps){ .allocType = CU_MEM_ALLOCATION_TYPE_PINNED, .location = host };
    OK(cuMemPoolCreate(&hp, &props));
    EXPECT(cuMemSetMemPool(&dev0, CU_MEM_ALLOCATION_TYPE_PINNED, hp), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuDeviceSetMemPool(0, hp), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemSetMemPool(&host, CU_MEM_ALLOCATION_TYPE_PINNED, hp));
    OK(cuMemGetMemPool(&cur, &host, CU_MEM_ALLOCATION_TYPE_PINNED));
    TRUE(cur == hp);
    OK(cuMemPoolDestroy(hp));
    OK(cuMemGetMemPool(&cur, &host, CU_MEM_ALLOCATION_TYPE_PINNED));
    TRUE(cur == dflt);
    OK(cuStreamDestroy(s));
}

/* ---- host accesses and the race checker ------------------------------------------ */

static struct {
    CUstream s;
    CUevent e;
    CUdeviceptr dev;
    void *pinned;
    CUdeviceptr managed;
    CUmemoryPool host_pool;
} hr;

/* Runs f in a child process: its exit status, 3 when the race checker stopped it. */
static int in_child(void (*f)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        failures = 0;
        f();
        _exit(failures ? 1 : 0);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

/* the device writes pinned memory, the host reads it without waiting */
static void race_read_after_copy(void)
{
    OK(cuMemcpyDtoHAsync(hr.pinned, hr.dev, 4096, hr.s));
    simcuda_host_access(hr.pinned, 4096, 0);
}

static void sync_read_after_copy(void)
{
    OK(cuMemcpyDtoHAsync(hr.pinned, hr.dev, 4096, hr.s));
    OK(cuStreamSynchronize(hr.s));
    simcuda_host_access(hr.pinned, 4096, 0);
}

/* the device reads pinned memory, the host overwrites it without waiting */
static void race_write_after_read(void)
{
    OK(cuMemcpyHtoDAsync(hr.dev, hr.pinned, 4096, hr.s));
    simcuda_host_access((char *)hr.pinned + 100, 8, 1);
}

/* reads do not conflict; an event the host waited for orders the write */
static void sync_write_after_read(void)
{
    OK(cuMemcpyHtoDAsync(hr.dev, hr.pinned, 4096, hr.s));
    simcuda_host_access(hr.pinned, 4096, 0);
    OK(cuEventRecord(hr.e, hr.s));
    OK(cuEventSynchronize(hr.e));
    simcuda_host_access(hr.pinned, 4096, 1);
}

/* a memset of managed memory, then a host read without waiting */
static void race_managed(void)
{
    OK(cuMemsetD8Async(hr.managed, 1, 4096, hr.s));
    simcuda_host_access((void *)(uintptr_t)hr.managed, 1, 0);
}

static void sync_managed(void)
{
    OK(cuMemsetD8Async(hr.managed, 1, 4096, hr.s));
    while (cuStreamQuery(hr.s) == CUDA_ERROR_NOT_READY) {
    }
    simcuda_host_access((void *)(uintptr_t)hr.managed, 1, 0);
}

/* a host pool's block touched by the host before its allocation is known done */
static void race_host_pool_block(void)
{
    CUdeviceptr b;
    OK(cuMemAllocFromPoolAsync(&b, 256, hr.host_pool, hr.s));
    simcuda_host_access((void *)(uintptr_t)b, 256, 1);
}

static void sync_host_pool_block(void)
{
    CUdeviceptr b;
    OK(cuMemAllocFromPoolAsync(&b, 256, hr.host_pool, hr.s));
    OK(cuMemsetD8Async(b, 0, 256, hr.s));
    OK(cuCtxSynchronize());
    simcuda_host_access((void *)(uintptr_t)b, 256, 1);
    OK(cuMemFreeAsync(b, hr.s));
}

/* a prefetch reads the range: a host write after it must wait too */
static void race_after_prefetch(void)
{
    CUmemLocation dev0 = { CU_MEM_LOCATION_TYPE_DEVICE, 0 };
    OK(cuMemPrefetchAsync(hr.managed, 4096, dev0, 0, hr.s));
    simcuda_host_access((void *)(uintptr_t)hr.managed, 4096, 1);
}

static void test_host_races(void)
{
    CUmemPoolProps props = { .allocType = CU_MEM_ALLOCATION_TYPE_PINNED, .location = { CU_MEM_LOCATION_TYPE_HOST, 0 } };
    OK(cuStreamCreate(&hr.s, CU_STREAM_NON_BLOCKING));
    OK(cuEventCreate(&hr.e, 0));
    OK(cuMemPoolCreate(&hr.host_pool, &props));
    set_pool_access(hr.host_pool, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    OK(cuMemAllocAsync(&hr.dev, 4096, hr.s));
    OK(cuMemAllocHost(&hr.pinned, 4096));
    OK(cuMemAllocManaged(&hr.managed, 4096, CU_MEM_ATTACH_GLOBAL));
    OK(cuStreamSynchronize(hr.s));
    TRUE(in_child(race_read_after_copy) == 3);
    TRUE(in_child(sync_read_after_copy) == 0);
    TRUE(in_child(race_write_after_read) == 3);
    TRUE(in_child(sync_write_after_read) == 0);
    TRUE(in_child(race_managed) == 3);
    TRUE(in_child(sync_managed) == 0);
    TRUE(in_child(race_host_pool_block) == 3);
    TRUE(in_child(sync_host_pool_block) == 0);
    TRUE(in_child(race_after_prefetch) == 3);
    /* the synchronized twins pass here too */
    sync_read_after_copy();
    sync_write_after_read();
    sync_managed();
    sync_host_pool_block();
    OK(cuStreamSynchronize(hr.s));
    OK(cuMemFreeAsync(hr.dev, hr.s));
    OK(cuStreamSynchronize(hr.s));
    OK(cuMemFreeHost(hr.pinned));
    OK(cuMemFree(hr.managed));
    OK(cuMemPoolDestroy(hr.host_pool));
    OK(cuEventDestroy(hr.e));
    OK(cuStreamDestroy(hr.s));
}

static void test_proc_address(void)
{
    void *fn;
    CUdriverProcAddressQueryResult st;
    OK(cuGetProcAddress("cuMemAlloc", &fn, 12000, 0, &st));
    TRUE(fn == (void *)cuMemAlloc && st == CU_GET_PROC_ADDRESS_SUCCESS);
    void *legacy;
    OK(cuGetProcAddress("cuMemAlloc", &legacy, 2000, 0, &st));
    TRUE(legacy && legacy != fn);
    OK(cuGetProcAddress("cuCtxCreate", &fn, 13000, 0, &st));
    TRUE(fn == (void *)cuCtxCreate_v4);
    OK(cuGetProcAddress("cuGetProcAddress", &fn, 12000, 0, &st));
    TRUE(fn == (void *)cuGetProcAddress_v2);
    OK(cuGetProcAddress("cuGetProcAddress", &legacy, 11030, 0, &st));
    TRUE(legacy && legacy != fn);
    OK(cuGetProcAddress("cuGraphAddNode", &fn, 12030, 0, &st));
    TRUE(fn == (void *)cuGraphAddNode_v2);
    OK(cuGetProcAddress("cuGraphAddNode", &legacy, 12020, 0, &st));
    TRUE(legacy != fn);
    OK(cuGetProcAddress("cuStreamSynchronize", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    TRUE(fn != (void *)cuStreamSynchronize);
    OK(cuGetProcAddress("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    TRUE(fn == (void *)cuMemAlloc);
    EXPECT(cuGetProcAddress("cuNoSuchThing", &fn, 12000, 0, &st), CUDA_ERROR_NOT_FOUND);
    TRUE(fn == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    EXPECT(cuGetProcAddress("cuMemAllocAsync", &fn, 11000, 0, &st), CUDA_ERROR_NOT_FOUND);
    TRUE(fn == NULL && st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    OK(cuGetProcAddress("cuMemAllocHost", &fn, 13000, 0, &st));
    TRUE(fn == (void *)cuMemAllocHost_v2);
    OK(cuGetProcAddress("cuMemAdvise", &fn, 13000, 0, &st));
    TRUE(fn == (void *)cuMemAdvise_v2);
    OK(cuGetProcAddress("cuMemAdvise", &legacy, 8000, 0, &st));
    TRUE(legacy && legacy != fn);
    OK(cuGetProcAddress("cuMemPrefetchAsync", &fn, 13000, 0, &st));
    TRUE(fn == (void *)cuMemPrefetchAsync_v2);
    OK(cuGetProcAddress("cuMemPrefetchAsync", &legacy, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    TRUE(legacy && legacy != fn);
    OK(cuGetProcAddress("cuMemHostGetDevicePointer", &fn, 13000, 0, &st));
    TRUE(fn == (void *)cuMemHostGetDevicePointer_v2);
    OK(cuGetProcAddress("cuMemGetMemPool", &fn, 13000, 0, &st));
    TRUE(fn == (void *)cuMemGetMemPool);
    EXPECT(cuGetProcAddress("cuMemGetMemPool", &fn, 12090, 0, &st), CUDA_ERROR_NOT_FOUND);
    OK(cuGetProcAddress("cuStreamAttachMemAsync", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    TRUE(fn && fn != (void *)cuStreamAttachMemAsync);
}

static void test_contexts(void)
{
    CUcontext ctx, other, cur;
    CUdeviceptr p;
    size_t free0, free1, total;
    OK(cuCtxCreate(&ctx, NULL, 0, 1));
    OK(cuCtxGetCurrent(&cur));
    TRUE(cur == ctx);
    CUdevice dev;
    OK(cuCtxGetDevice(&dev));
    TRUE(dev == 1);
    OK(cuMemGetInfo(&free0, &total));
    OK(cuMemAlloc(&p, 1 << 20));
    OK(cuDevicePrimaryCtxRetain(&other, 0));
    OK(cuCtxEnablePeerAccess(other, 0));
    EXPECT(cuCtxEnablePeerAccess(other, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
    OK(cuCtxDisablePeerAccess(other));
    EXPECT(cuCtxDisablePeerAccess(other), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
    OK(cuDevicePrimaryCtxRelease(0));
    OK(cuCtxDestroy(ctx));
    OK(cuCtxGetCurrent(&cur));
    TRUE(cur != ctx);
    EXPECT(cuCtxPushCurrent(ctx), CUDA_ERROR_INVALID_CONTEXT);
    OK(cuCtxCreate(&ctx, NULL, 0, 1));
    OK(cuMemGetInfo(&free1, &total));
    TRUE(free1 == free0); /* the destroyed context's memory is gone */
    OK(cuCtxDestroy(ctx));
}

int main(int argc, char **argv)
{
    CUcontext primary;
    if (argc == 3 && strcmp(argv[1], "--ipc-child") == 0) return ipc_child(atoi(argv[2]));
    CUfunction fill;
    setenv("SIMCUDA_EVENT_DELAY", "2", 1);
    setenv("SIMCUDA_MEM", "64M", 1);
    setenv("SIMCUDA_HOST_MEM", "1M", 1);
    setenv("SIMCUDA_MANAGED_MEM", "2M", 1);
    test_init_and_devices();
    CUdeviceptr p;
    EXPECT(cuMemAlloc(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
    OK(cuDevicePrimaryCtxRetain(&primary, 0));
    OK(cuCtxSetCurrent(primary));
    test_plain_memory();
    test_pools();
    test_ipc();
    test_events();
    test_capture();
    test_capture_threads(primary);
    test_kernels(&fill);
    test_graphs(fill);
    test_pinned_memory();
    test_managed_memory();
    test_host_and_managed_pools();
    test_host_memory_caps();
    test_host_races();
    test_proc_address();
    test_contexts();
    OK(cuCtxSetCurrent(primary));
    OK(cuDevicePrimaryCtxRelease(0));
    EXPECT(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    printf("selftest: %s (%d failure%s)\n", failures ? "FAILED" : "passed", failures, failures == 1 ? "" : "s");
    return failures != 0;
}
