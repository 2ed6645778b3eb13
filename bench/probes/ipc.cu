/* SPDX-License-Identifier: Apache-2.0 */
/* ipc.cu: what sharing memory between processes does on this driver, for
 * cupool's transparent IPC.
 *
 *   nvcc -O2 -o ipc bench/probes/ipc.cu -lcuda
 *   ./ipc
 *
 * Answers, natively (no cupool):
 *   - legacy IPC on cuMemAlloc memory: a handle of the base and of an interior
 *     pointer, what the other process's pointer is, data both ways, a handle
 *     opened twice, cuIpcCloseMemHandle;
 *   - legacy IPC on pool memory (cuIpcGetMemHandle's error);
 *   - an exportable pool (POSIX file descriptor) sent over a Unix socket with
 *     SCM_RIGHTS, the pointer through cuMemPoolExportPointer/ImportPointer:
 *     whether the importer must be granted access, data both ways, importing
 *     twice, freeing the import;
 *   - what an allocation pair costs from an exportable pool against a plain one.
 * Fork happens before either process touches CUDA. */
#include "driver_probe.h"
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int sock_send(int s, const void *buf, size_t len, int fd)
{
    struct iovec iov = {(void *)buf, len};
    char ctl[CMSG_SPACE(sizeof(int))];
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    if (fd >= 0) {
        memset(ctl, 0, sizeof ctl);
        m.msg_control = ctl;
        m.msg_controllen = sizeof ctl;
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    return sendmsg(s, &m, 0) == (ssize_t)len ? 0 : -1;
}

static int sock_recv(int s, void *buf, size_t len, int *fd)
{
    struct iovec iov = {buf, len};
    char ctl[CMSG_SPACE(sizeof(int))];
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    if (recvmsg(s, &m, MSG_WAITALL) != (ssize_t)len) return -1;
    if (fd) {
        *fd = -1;
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        if (c && c->cmsg_type == SCM_RIGHTS) memcpy(fd, CMSG_DATA(c), sizeof *fd);
    }
    return 0;
}

static const char *name_of(CUresult r)
{
    const char *n = "?";
    cuGetErrorName(r, &n);
    return n;
}

static unsigned read_word(CUdeviceptr p)
{
    unsigned v = 0;
    CUresult r = cuMemcpyDtoH(&v, p, sizeof v);
    if (r != CUDA_SUCCESS) printf("    read -> %s\n", name_of(r));
    return v;
}

struct msg {
    CUipcMemHandle base, interior;
    CUmemPoolPtrExportData exp, exp_interior;
};

static void child(int s)
{
    CUdevice dev;
    probe_context(&dev);
    struct msg m;
    int fd = -1;
    if (sock_recv(s, &m, sizeof m, &fd)) exit(3);
    printf("[child] legacy handle of cuMemAlloc memory:\n");
    CUdeviceptr p = 0, p2 = 0, pi = 0;
    CUresult r = cuIpcOpenMemHandle(&p, m.base, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    printf("  open -> %s, reads 0x%x\n", name_of(r), r ? 0 : read_word(p));
    r = cuIpcOpenMemHandle(&p2, m.base, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    printf("  open twice -> %s, same pointer %s\n", name_of(r), p2 == p ? "yes" : "no");
    r = cuIpcOpenMemHandle(&pi, m.interior, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    printf("  interior handle open -> %s, pointer - base = %lld, reads 0x%x\n", name_of(r), (long long)(pi - p),
           r ? 0 : read_word(pi));
    if (p) CK(cuMemsetD32(p, 0x5678, 1));
    r = cuIpcOpenMemHandle(&p2, m.base, 0);
    printf("  open with flags 0 -> %s\n", name_of(r));
    printf("  close -> %s", name_of(cuIpcCloseMemHandle(p)));
    printf(", close again -> %s", name_of(cuIpcCloseMemHandle(p)));
    printf(", close interior -> %s\n", name_of(pi ? cuIpcCloseMemHandle(pi) : CUDA_ERROR_INVALID_VALUE));
    CUipcMemHandle forged;
    memset(&forged, 0x5a, sizeof forged);
    r = cuIpcOpenMemHandle(&p2, forged, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    printf("  forged handle -> %s\n", name_of(r));

    printf("[child] exportable pool, fd %d:\n", fd);
    CUmemoryPool pool;
    r = cuMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    printf("  import pool -> %s\n", name_of(r));
    if (r) exit(4);
    CUmemAccess_flags fl = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    r = cuMemPoolGetAccess(&fl, pool, &loc);
    printf("  access of device 0 -> %s, flags %d\n", name_of(r), (int)fl);
    CUdeviceptr q = 0, q2 = 0, qi = 0;
    r = cuMemPoolImportPointer(&q, pool, &m.exp);
    printf("  import pointer -> %s\n", name_of(r));
    unsigned v = 0;
    r = cuMemcpyDtoH(&v, q, sizeof v);
    printf("  read before access granted -> %s 0x%x\n", name_of(r), v);
    CUmemAccessDesc d = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    r = cuMemPoolSetAccess(pool, &d, 1);
    printf("  grant RW -> %s, reads 0x%x\n", name_of(r), read_word(q));
    r = cuMemPoolImportPointer(&q2, pool, &m.exp);
    printf("  import twice -> %s, same pointer %s\n", name_of(r), q2 == q ? "yes" : "no");
    r = cuMemPoolImportPointer(&qi, pool, &m.exp_interior);
    printf("  import of an interior export -> %s, pointer - base = %lld\n", name_of(r), (long long)(qi - q));
    CK(cuMemsetD32(q, 0x9abc, 1));
    CK(cuCtxSynchronize());
    char ok = 1;
    sock_send(s, &ok, 1, -1);
    /* wait for the parent's read, then free the imports */
    sock_recv(s, &ok, 1, NULL);
    CUstream st;
    CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    printf("  cuMemFreeAsync(import) -> %s", name_of(cuMemFreeAsync(q, st)));
    if (q2 && q2 != q) printf(", second -> %s", name_of(cuMemFreeAsync(q2, st)));
    printf(", cuMemFree(import again) -> %s\n", name_of(cuMemFree(q)));
    CK(cuStreamSynchronize(st));
    sock_send(s, &ok, 1, -1);
    exit(0);
}

static double pool_pair_us(CUmemoryPool pool, CUstream s, size_t size)
{
    double t[300];
    CUdeviceptr d;
    CK(cuMemAllocFromPoolAsync(&d, size, pool, s));
    CK(cuMemFreeAsync(d, s));
    for (int i = 0; i < 300; i++) {
        double t0 = now_ns();
        CK(cuMemAllocFromPoolAsync(&d, size, pool, s));
        CK(cuMemFreeAsync(d, s));
        t[i] = now_ns() - t0;
    }
    return median(t, 300) / 1e3;
}

int main(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 1;
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        child(sv[1]);
    }
    close(sv[1]);
    int s = sv[0];
    CUdevice dev;
    probe_context(&dev);
    char name[128];
    CK(cuDeviceGetName(name, sizeof name, dev));
    printf("device: %s\n", name);
    struct msg m;
    CUdeviceptr plain;
    CK(cuMemAlloc(&plain, 1 << 20));
    CK(cuMemsetD32(plain, 0x1234, 1 << 18));
    CK(cuIpcGetMemHandle(&m.base, plain));
    CUresult r = cuIpcGetMemHandle(&m.interior, plain + 4096);
    printf("[parent] cuIpcGetMemHandle(interior) -> %s\n", name_of(r));
    double t[200];
    for (int i = 0; i < 200; i++) {
        double t0 = now_ns();
        cuIpcGetMemHandle(&m.base, plain);
        t[i] = now_ns() - t0;
    }
    printf("[parent] cuIpcGetMemHandle costs %.2f us\n", median(t, 200) / 1e3);

    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev;
    props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemoryPool xpool;
    double t0 = now_ns();
    CK(cuMemPoolCreate(&xpool, &props));
    printf("[parent] exportable pool created in %.1f us\n", (now_ns() - t0) / 1e3);
    cuuint64_t keep = UINT64_MAX;
    CK(cuMemPoolSetAttribute(xpool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
    CUmemoryPool ppool = probe_pool(dev);
    CUstream st;
    CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    CUdeviceptr x;
    CK(cuMemAllocFromPoolAsync(&x, 1 << 20, xpool, st));
    CK(cuMemsetD32Async(x, 0x1234, 1 << 18, st));
    CK(cuStreamSynchronize(st));
    r = cuIpcGetMemHandle(&m.interior, x);
    printf("[parent] cuIpcGetMemHandle(pool memory) -> %s\n", name_of(r));
    CK(cuIpcGetMemHandle(&m.interior, plain + 4096));
    CK(cuMemPoolExportPointer(&m.exp, x));
    r = cuMemPoolExportPointer(&m.exp_interior, x + 4096);
    printf("[parent] cuMemPoolExportPointer(interior) -> %s\n", name_of(r));
    int fd = -1;
    CK(cuMemPoolExportToShareableHandle(&fd, xpool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    for (int i = 0; i < 200; i++) {
        double a = now_ns();
        cuMemPoolExportPointer(&m.exp, x);
        t[i] = now_ns() - a;
    }
    printf("[parent] cuMemPoolExportPointer costs %.2f us\n", median(t, 200) / 1e3);
    sock_send(s, &m, sizeof m, fd);
    char ok;
    sock_recv(s, &ok, 1, NULL);
    printf("[parent] reads back: legacy 0x%x, pool 0x%x\n", read_word(plain), read_word(x));
    sock_send(s, &ok, 1, -1);
    sock_recv(s, &ok, 1, NULL);
    int status = 0;
    waitpid(pid, &status, 0);
    printf("[parent] child exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    CK(cuMemFreeAsync(x, st));
    CK(cuStreamSynchronize(st));
    for (int round = 0; round < 3; round++)
        printf("[parent] pair cost 4 KiB / 1 MiB / 64 MiB: plain pool %.3f %.3f %.3f us, exportable pool %.3f %.3f %.3f us\n",
               pool_pair_us(ppool, st, 4096), pool_pair_us(ppool, st, 1 << 20), pool_pair_us(ppool, st, 64 << 20),
               pool_pair_us(xpool, st, 4096), pool_pair_us(xpool, st, 1 << 20), pool_pair_us(xpool, st, 64 << 20));
    /* First touch of fresh pool memory: a new 64 MiB each time (trim between). */
    for (int which = 0; which < 2; which++) {
        CUmemoryPool p = which ? xpool : ppool;
        double g[10];
        for (int i = 0; i < 10; i++) {
            CK(cuStreamSynchronize(st));
            CK(cuMemPoolTrimTo(p, 0));
            double a = now_ns();
            CK(cuMemAllocFromPoolAsync(&x, 64 << 20, p, st));
            CK(cuStreamSynchronize(st));
            g[i] = now_ns() - a;
            CK(cuMemFreeAsync(x, st));
        }
        printf("[parent] growing a %s pool by 64 MiB: %.1f us\n", which ? "exportable" : "plain", median(g, 10) / 1e3);
    }
    return 0;
}
