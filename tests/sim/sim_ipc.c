/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuMemAlloc memory other processes can map, and legacy CUDA IPC
 * (cuIpcGetMemHandle, cuIpcOpenMemHandle, cuIpcCloseMemHandle) across real
 * processes.  Each cuMemAlloc allocation is a file /dev/shm/simcuda.UID.PID.ID
 * mapped MAP_SHARED; its IPC handle names that file, so another process of the
 * same user opens and maps the same bytes.  The file is removed when the
 * allocation is freed (cuMemFree, context teardown) and, for those still live,
 * when the process exits (a destructor, and the race checker before its
 * _exit); files of processes that died by a signal are swept by the next
 * process that allocates.  When /dev/shm cannot take a file, the allocation is
 * anonymous memory and its handle opens nowhere (CUDA_ERROR_INVALID_VALUE).
 *
 * What the driver answers, as the CUDA documentation of legacy IPC describes:
 * a handle of any pointer inside a cuMemAlloc allocation names the whole
 * allocation (pool memory: CUDA_ERROR_INVALID_VALUE, as measured); opening it
 * in another process maps it and returns its base, and opening it again there
 * returns the same pointer and counts a reference that cuIpcCloseMemHandle
 * drops; the process that made a handle cannot open it
 * (CUDA_ERROR_INVALID_CONTEXT); a forged handle, or one whose memory was freed
 * or whose process is gone, is CUDA_ERROR_INVALID_VALUE.
 */
#include "sim.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define SHM_DIR "/dev/shm"

static sim_vec owned;  /* plain allocations with a file, this process's to remove */
static sim_vec opened; /* IPC mappings this process opened */
static bool swept;

size_t sim_page_round(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t r = (n + page - 1) / page * page;
    return r < n ? 0 : r;
}

static void shm_path(char *out, size_t len, unsigned uid, long pid, unsigned long long id)
{
    snprintf(out, len, SHM_DIR "/simcuda.%u.%ld.%llu", uid, pid, id);
}

/* Removes the files of this user's processes that are gone without removing
 * theirs (a signal killed them). */
static void sweep_stale_files(void)
{
    DIR *dir = opendir(SHM_DIR);
    if (!dir) return;
    char prefix[32];
    int plen = snprintf(prefix, sizeof prefix, "simcuda.%u.", (unsigned)getuid());
    for (struct dirent *e; (e = readdir(dir)) != NULL;) {
        if (strncmp(e->d_name, prefix, (size_t)plen) != 0) continue;
        char *end;
        long pid = strtol(e->d_name + plen, &end, 10);
        if (*end != '.' || pid <= 0) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        unlinkat(dirfd(dir), e->d_name, 0);
    }
    closedir(dir);
}

/* A new /dev/shm file of len bytes, mapped; MAP_FAILED when there is none. */
static void *shm_file_map(size_t len, pid_t pid, unsigned long long id)
{
    if (!swept) {
        swept = true;
        sweep_stale_files();
    }
    char path[96];
    shm_path(path, sizeof path, (unsigned)getuid(), (long)pid, id);
    int fd = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) return MAP_FAILED;
    void *host = MAP_FAILED;
    struct statvfs fs;
    /* tmpfs takes pages when they are first touched: a file larger than the
     * room left would end in SIGBUS later, not in an error now. */
    if (fstatvfs(fd, &fs) == 0 && (unsigned long long)fs.f_bavail * fs.f_frsize >= len &&
        ftruncate(fd, (off_t)len) == 0)
        host = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (host == MAP_FAILED) unlink(path);
    return host;
}

sim_alloc *sim_plain_map(size_t size, CUcontext ctx)
{
    size_t len = sim_page_round(size);
    if (len == 0) return NULL;
    unsigned long long id = sim_next_id();
    pid_t pid = getpid();
    void *host = shm_file_map(len, pid, id);
    if (host == MAP_FAILED) {
        pid = 0;
        host = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (host == MAP_FAILED) return NULL;
    }
    sim_alloc *a = sim_alloc_register((uintptr_t)host, size, ctx, ctx->device, SIM_ALLOC_PLAIN, NULL, host);
    if (a && pid && !sim_vec_push(&owned, a)) {
        sim_alloc_unregister(a);
        a = NULL;
    }
    if (!a) {
        if (pid) {
            char path[96];
            shm_path(path, sizeof path, (unsigned)getuid(), (long)pid, id);
            unlink(path);
        }
        munmap(host, len);
        return NULL;
    }
    a->file_pid = pid;
    a->file_id = id;
    a->map_size = len;
    return a;
}

/* A child forked with the allocation leaves its file to the parent. */
void sim_plain_unmap(sim_alloc *a)
{
    if (a->file_pid) {
        sim_vec_remove(&owned, a);
        if (a->file_pid == getpid()) {
            char path[96];
            shm_path(path, sizeof path, (unsigned)getuid(), (long)a->file_pid, a->file_id);
            unlink(path);
        }
    }
    munmap(a->host_block, a->map_size);
    sim_alloc_unregister(a);
}

void sim_shm_cleanup(void)
{
    SIM_LOCKED;
    pid_t self = getpid();
    for (size_t i = 0; i < owned.len; i++) {
        const sim_alloc *a = owned.items[i];
        if (a->file_pid != self) continue;
        char path[96];
        shm_path(path, sizeof path, (unsigned)getuid(), (long)a->file_pid, a->file_id);
        unlink(path);
    }
}

__attribute__((destructor)) static void shm_cleanup_at_exit(void)
{
    sim_shm_cleanup();
}

/* ---- legacy IPC ------------------------------------------------------------------- */

typedef struct {
    char magic[8];
    uint32_t uid;
    int32_t pid;         /* the process that made the allocation */
    uint64_t id;         /* its file's number; 0: anonymous memory, which no other process can map */
    uint64_t base, size; /* the allocation, in that process */
    int32_t device;
} sim_ipc_payload;

static const char ipc_magic[8] = "SIMIPC2";

SIM_API CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr)
{
    SIM_BEGIN;
    if (!handle) return CUDA_ERROR_INVALID_VALUE;
    const sim_alloc *a = sim_alloc_find((uintptr_t)dptr);
    /* Measured: pool memory cannot be exported through legacy IPC. */
    if (!a || a->kind != SIM_ALLOC_PLAIN) return CUDA_ERROR_INVALID_VALUE;
    sim_ipc_payload payload = { .uid = (uint32_t)getuid(),
                                .pid = a->file_pid ? a->file_pid : getpid(),
                                .id = a->file_pid ? a->file_id : 0,
                                .base = a->base,
                                .size = a->size,
                                .device = a->device };
    memcpy(payload.magic, ipc_magic, sizeof ipc_magic);
    memset(handle, 0, sizeof *handle);
    memcpy(handle->reserved, &payload, sizeof payload);
    return CUDA_SUCCESS;
}

static sim_alloc *opened_find(const sim_ipc_payload *p)
{
    for (size_t i = 0; i < opened.len; i++) {
        sim_alloc *a = opened.items[i];
        if (a->file_pid == p->pid && a->file_id == p->id) return a;
    }
    return NULL;
}

/* Maps the file a handle names; MAP_FAILED when it is gone or not that allocation's. */
static void *ipc_map(const sim_ipc_payload *p, size_t len)
{
    char path[96];
    shm_path(path, sizeof path, p->uid, (long)p->pid, (unsigned long long)p->id);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return MAP_FAILED;
    void *host = MAP_FAILED;
    struct stat st;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size == len)
        host = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return host;
}

SIM_API CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
    SIM_BEGIN;
    sim_ipc_payload payload;
    CUcontext ctx;
    if (!pdptr || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_current_ctx(&ctx));
    memcpy(&payload, handle.reserved, sizeof payload);
    if (memcmp(payload.magic, ipc_magic, sizeof ipc_magic) != 0) return CUDA_ERROR_INVALID_VALUE;
    if (payload.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT; /* the driver opens other processes' only */
    sim_alloc *a = opened_find(&payload);
    if (a) {
        a->refs++;
        *pdptr = (CUdeviceptr)a->base;
        return CUDA_SUCCESS;
    }
    size_t len = sim_page_round(payload.size);
    if (payload.id == 0 || payload.pid <= 0 || payload.uid != (uint32_t)getuid() || len == 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* A file its dead process left behind is the sweep's, not memory to open. */
    if (kill(payload.pid, 0) != 0 && errno == ESRCH) return CUDA_ERROR_INVALID_VALUE;
    void *host = ipc_map(&payload, len);
    if (host == MAP_FAILED) return CUDA_ERROR_INVALID_VALUE;
    int device = payload.device >= 0 && payload.device < sim.device_count ? payload.device : ctx->device;
    a = sim_alloc_register((uintptr_t)host, payload.size, ctx, device, SIM_ALLOC_IPC, NULL, host);
    if (a && !sim_vec_push(&opened, a)) {
        sim_alloc_unregister(a);
        a = NULL;
    }
    if (!a) {
        munmap(host, len);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->file_pid = payload.pid;
    a->file_id = payload.id;
    a->map_size = len;
    a->refs = 1;
    *pdptr = (CUdeviceptr)a->base;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
    return cuIpcOpenMemHandle_v2(pdptr, handle, flags);
}

void sim_ipc_release(sim_alloc *a)
{
    sim_vec_remove(&opened, a);
    munmap(a->host_block, a->map_size);
    sim_alloc_unregister(a);
}

SIM_API CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    SIM_BEGIN;
    sim_alloc *a = sim_alloc_find((uintptr_t)dptr);
    if (!a || a->kind != SIM_ALLOC_IPC || a->base != (uintptr_t)dptr) return CUDA_ERROR_INVALID_VALUE;
    if (--a->refs == 0) sim_ipc_release(a);
    return CUDA_SUCCESS;
}
