/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Legacy CUDA IPC on pooled memory (CUPOOL_IPC, ipc.h).  The driver
 * refuses cuIpcGetMemHandle on pool memory, so cupool answers it itself for
 * the blocks of its exportable pools (created with a POSIX file-descriptor
 * handle type, devices.c):
 *
 *   - the exporter's handle names this process's IPC socket (a Unix socket
 *     in CUPOOL_IPC_DIR, 0600, named by the user, the pid and 8 random
 *     bytes, made in a private directory and renamed into place) and the
 *     block (16 random bytes, its tag), so a handle that is stale or forged
 *     names nothing and fails instead of mapping other memory;
 *   - the importer, under cupool too, connects, checks that the socket
 *     belongs to its own user (SO_PEERCRED) and asks for the tag; the
 *     exporter checks the importer's user the same way and answers with the
 *     pool's file descriptor (SCM_RIGHTS) and the block's export data
 *     (cuMemPoolExportPointer); the importer imports the pool (once per
 *     exporter pool), grants its device access and imports the pointer.
 *
 * An importing process keeps one connection to each exporter it has
 * blocks of open, whatever their number, and says on it which blocks it
 * opens and closes; the exporter counts a block open for as long as the
 * connection lives: the last cuIpcCloseMemHandle of that exporter's blocks
 * closes it, and so does the end of the importing process, however it ends.
 * The importer's imported pool of an exporter's pool goes with the last
 * block it has open from it.  A block the program frees while another
 * process has it open stays out of its pool (parked) until the last of
 * them closes it; then the server thread hands it back.  Natively that
 * free is undefined; here neither process crashes and the memory is never
 * handed to another allocation while it is open.
 *
 * The files: ipc_wire.c (with ipc_wire.h, these files' own header) holds
 * the handle, the messages and the socket helpers both sides use;
 * ipc_export.c the exporter's side: its exports, its socket and the server
 * thread that answers on it; this file the importer's side, and the lock
 * (cupool_ipc_lock) that guards both sides' state, with the fork handlers
 * that take it.
 */
#define _GNU_SOURCE
#include "ipc_wire.h"
#include "ipc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* How long an open waits for the exporter's answer, in seconds. */
#define IPC_ANSWER_S 10

/* ---- the importer's side ----------------------------------------------------- */

/* The connection to one exporter, shared by every block of it open here
 * and by the opens in flight (users); it closes when they are all gone.
 * io is held across a request and its answer, never with cupool_ipc_lock. */
typedef struct peer {
    uint8_t server[8];
    uint32_t uid, pid;
    int fd;   /* -1 until the first open connects */
    int users;
    uint64_t seq;
    pthread_mutex_t io;
} peer_t;

typedef struct {
    CUdeviceptr ptr;
    uint8_t server[8], tag[16];
    uint64_t pool_key;
    int refs;
    peer_t *peer;
    CUcontext ctx;
} import_t;

typedef struct {
    uint8_t server[8];
    uint64_t pool_key;
    CUmemoryPool pool;
    uint64_t access; /* bit d: device d was granted access */
    int blocks;      /* imported blocks of it open here: the pool goes with the last */
} imported_pool_t;

static import_t *imports;
static int nimports, imports_cap;
static imported_pool_t *ipools;
static int nipools, ipools_cap;
static peer_t **peers;
static int npeers, peers_cap;

/* ---- the lock, and fork ------------------------------------------------------ */

pthread_mutex_t cupool_ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t ipc_once = PTHREAD_ONCE_INIT;

/* A child made by fork() has none of its parent's exports or imports, nor
 * its server thread: it closes its copies and never removes the parent's
 * socket.  (A child that execs starts afresh: every descriptor here is
 * close-on-exec.) */
static void fork_prepare(void)
{
    pthread_mutex_lock(&cupool_ipc_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&cupool_ipc_lock);
}

static void fork_child(void)
{
    cupool_ipc_exporter_fork_child();
    for (int i = 0; i < npeers; i++) {
        if (peers[i]->fd >= 0) close(peers[i]->fd);
        free(peers[i]);
    }
    npeers = 0;
    nimports = nipools = 0;
    pthread_mutex_init(&cupool_ipc_lock, NULL);
}

static void ipc_init(void)
{
    cupool_ipc_exporter_init();
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void cupool_ipc_init(void)
{
    pthread_once(&ipc_once, ipc_init);
}

/* ---- importing --------------------------------------------------------------- */

int cupool_ipc_is_ours(const CUipcMemHandle *handle)
{
    return memcmp(handle->reserved, IPC_MAGIC, 8) == 0;
}

static import_t *import_by_ptr(CUdeviceptr ptr)
{
    for (int i = 0; i < nimports; i++)
        if (imports[i].ptr == ptr) return &imports[i];
    return NULL;
}

/* The connection to the exporter of h, made on first use (peer->io held);
 * 0 when there is one. */
static CUresult peer_connect(peer_t *peer)
{
    if (peer->fd >= 0) return CUDA_SUCCESS;
    char path[IPC_PATH_CAP];
    if (cupool_ipc_socket_name(path, sizeof path, peer->uid, peer->pid, peer->server) != 0) return IPC_BAD_HANDLE;
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return CUDA_ERROR_OPERATING_SYSTEM;
    /* An exporter that does not answer (stopped, or stuck) fails the open
     * instead of hanging the program: the limits bound the connect (a full
     * queue), the request and the wait for each answer. */
    struct timeval limit = {.tv_sec = IPC_ANSWER_S};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    struct sockaddr_un a = cupool_ipc_socket_address(path);
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0 || !cupool_ipc_same_user(s)) {
        close(s);
        return IPC_BAD_HANDLE;
    }
    peer->fd = s;
    return CUDA_SUCCESS;
}

/* Asks the exporter for the block (peer->io held); on success *reply and
 * *pool_fd hold the answer.  An answer to an earlier request that ran out
 * of time is passed over (its seq is older). */
static CUresult ask_exporter(peer_t *peer, const ipc_handle_t *h, ipc_reply_t *reply, int *pool_fd)
{
    *pool_fd = -1;
    CUresult r = peer_connect(peer);
    if (r != CUDA_SUCCESS) return r;
    ipc_request_t req;
    memset(&req, 0, sizeof req);
    memcpy(req.magic, IPC_MAGIC, 8);
    req.op = IPC_OPEN;
    req.seq = ++peer->seq;
    memcpy(req.tag, h->tag, sizeof req.tag);
    if (cupool_ipc_send_with_fd(peer->fd, &req, sizeof req, -1) != 0) goto lost;
    for (;;) {
        int n = cupool_ipc_recv_with_fd(peer->fd, reply, sizeof *reply, pool_fd);
        if (n != 0) {
            /* Out of time: a stopped exporter (the connection is kept, its
             * late answer will be passed over); or the end of the
             * connection: an exporter that turned this process away, or
             * is gone. */
            if (errno == EAGAIN || errno == EWOULDBLOCK) return IPC_BAD_HANDLE;
            goto lost;
        }
        if (reply->seq == req.seq) break;
        if (*pool_fd >= 0) close(*pool_fd);
        *pool_fd = -1;
    }
    if (reply->status != CUDA_SUCCESS || *pool_fd < 0) {
        if (*pool_fd >= 0) close(*pool_fd);
        *pool_fd = -1;
        return reply->status != CUDA_SUCCESS ? (CUresult)reply->status : IPC_BAD_HANDLE;
    }
    return CUDA_SUCCESS;
lost:
    /* The connection ended: whatever this process had open through it the
     * exporter counts closed already. */
    close(peer->fd);
    peer->fd = -1;
    cupool_message_once(CUPOOL_MSG_WARN, "an exporting process closed its IPC connection; its handles fail here");
    return CUDA_ERROR_OPERATING_SYSTEM;
}

/* The peer of the exporter of h, made if need be, with one more user;
 * cupool_ipc_lock held; NULL when out of memory. */
static peer_t *peer_use(const ipc_handle_t *h)
{
    CUPOOL_ASSERT_HELD(&cupool_ipc_lock);
    for (int i = 0; i < npeers; i++)
        if (memcmp(peers[i]->server, h->server, 8) == 0 && peers[i]->pid == h->pid) {
            peers[i]->users++;
            return peers[i];
        }
    if (cupool_ipc_grow((void **)&peers, npeers, &peers_cap, sizeof *peers) != 0) return NULL;
    peer_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    memcpy(p->server, h->server, 8);
    p->uid = h->uid;
    p->pid = h->pid;
    p->fd = -1;
    p->users = 1;
    pthread_mutex_init(&p->io, NULL);
    peers[npeers++] = p;
    return p;
}

/* One user fewer; the last closes the connection.  cupool_ipc_lock held. */
static void peer_drop(peer_t *p)
{
    CUPOOL_ASSERT_HELD(&cupool_ipc_lock);
    if (--p->users > 0) return;
    for (int i = 0; i < npeers; i++)
        if (peers[i] == p) peers[i] = peers[--npeers];
    if (p->fd >= 0) close(p->fd);
    pthread_mutex_destroy(&p->io);
    free(p);
}

/* The imported pool of the exporter's pool, imported on first use and
 * granted access for device `ordinal`, one block more counted on it;
 * cupool_ipc_lock held. */
static CUresult imported_pool(const ipc_handle_t *h, const ipc_reply_t *reply, int pool_fd, int ordinal,
                              CUmemoryPool *out)
{
    CUPOOL_ASSERT_HELD(&cupool_ipc_lock);
    imported_pool_t *p = NULL;
    for (int i = 0; i < nipools && !p; i++)
        if (memcmp(ipools[i].server, h->server, 8) == 0 && ipools[i].pool_key == reply->pool_key) p = &ipools[i];
    if (!p) {
        if (cupool_ipc_grow((void **)&ipools, nipools, &ipools_cap, sizeof *ipools) != 0)
            return CUDA_ERROR_OUT_OF_MEMORY;
        CUmemoryPool pool;
        CUresult r = real_cuMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)pool_fd,
                                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (r != CUDA_SUCCESS) return r;
        p = &ipools[nipools++];
        memset(p, 0, sizeof *p);
        memcpy(p->server, h->server, 8);
        p->pool_key = reply->pool_key;
        p->pool = pool;
    }
    if (ordinal >= 0 && ordinal < 64 && !(p->access & (1ull << ordinal))) {
        CUmemAccessDesc d;
        memset(&d, 0, sizeof d);
        d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        d.location.id = ordinal;
        d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        CUresult r = real_cuMemPoolSetAccess(p->pool, &d, 1);
        if (r != CUDA_SUCCESS) {
            if (p->blocks == 0) {
                real_cuMemPoolDestroy(p->pool);
                *p = ipools[--nipools];
            }
            return r;
        }
        p->access |= 1ull << ordinal;
    }
    p->blocks++;
    *out = p->pool;
    return CUDA_SUCCESS;
}

/* One imported block fewer of the pool; the pool, with its descriptor,
 * goes with the last (returned, for the caller to destroy without
 * cupool_ipc_lock; NULL when it stays).  cupool_ipc_lock held. */
static CUmemoryPool imported_pool_drop(const uint8_t server[8], uint64_t pool_key)
{
    CUPOOL_ASSERT_HELD(&cupool_ipc_lock);
    for (int i = 0; i < nipools; i++) {
        imported_pool_t *p = &ipools[i];
        if (memcmp(p->server, server, 8) != 0 || p->pool_key != pool_key) continue;
        if (--p->blocks > 0) return NULL;
        CUmemoryPool pool = p->pool;
        *p = ipools[--nipools];
        return pool;
    }
    return NULL;
}

/* A handle this context has open already: one more reference, and the same
 * pointer, as the driver documents; cupool_ipc_lock held. */
static int reopen(const ipc_handle_t *h, CUcontext ctx, CUdeviceptr *dptr)
{
    CUPOOL_ASSERT_HELD(&cupool_ipc_lock);
    for (int i = 0; i < nimports; i++) {
        import_t *im = &imports[i];
        if (memcmp(im->server, h->server, 8) == 0 && memcmp(im->tag, h->tag, 16) == 0 && im->ctx == ctx) {
            im->refs++;
            *dptr = im->ptr;
            return 1;
        }
    }
    return 0;
}

/* Tells the exporter the block is closed here (peer->io taken). */
static void say_closed(peer_t *peer, const uint8_t tag[16])
{
    pthread_mutex_lock(&peer->io);
    if (peer->fd >= 0) {
        ipc_request_t req;
        memset(&req, 0, sizeof req);
        memcpy(req.magic, IPC_MAGIC, 8);
        req.op = IPC_CLOSE;
        memcpy(req.tag, tag, 16);
        if (cupool_ipc_send_with_fd(peer->fd, &req, sizeof req, -1) != 0) {
            close(peer->fd);
            peer->fd = -1;
        }
    }
    pthread_mutex_unlock(&peer->io);
}

CUresult cupool_ipc_open(CUdeviceptr *dptr, const CUipcMemHandle *handle, unsigned int flags, size_t *size, int *device_out)
{
    ipc_handle_t h;
    memcpy(&h, handle, sizeof h);
    *size = (size_t)h.size;
    if (!dptr || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) return CUDA_ERROR_INVALID_VALUE;
    CUcontext ctx = NULL;
    CUdevice device = -1;
    if (real_cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) return CUDA_ERROR_INVALID_CONTEXT;
    if (real_cuCtxGetDevice(&device) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
    *device_out = (int)device;
    if (h.uid != (uint32_t)geteuid()) return IPC_BAD_HANDLE;
    *dptr = 0;
    cupool_ipc_init();
    pthread_mutex_lock(&cupool_ipc_lock);
    CUresult r;
    /* The driver refuses a process's own handles. */
    if (cupool_ipc_own_server(h.server)) {
        r = CUDA_ERROR_INVALID_CONTEXT;
        goto out;
    }
    if (reopen(&h, ctx, dptr)) {
        r = CUDA_SUCCESS;
        goto out;
    }
    peer_t *peer = peer_use(&h);
    if (!peer) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    /* The exporter is asked without cupool_ipc_lock: two processes opening
     * each other's handles at once must not wait for each other's server. */
    pthread_mutex_unlock(&cupool_ipc_lock);
    int pool_fd = -1;
    ipc_reply_t reply;
    pthread_mutex_lock(&peer->io);
    r = ask_exporter(peer, &h, &reply, &pool_fd);
    pthread_mutex_unlock(&peer->io);
    pthread_mutex_lock(&cupool_ipc_lock);
    if (r != CUDA_SUCCESS) {
        peer_drop(peer);
        goto out;
    }
    int again = reopen(&h, ctx, dptr);
    if (again || cupool_ipc_grow((void **)&imports, nimports, &imports_cap, sizeof *imports) != 0) {
        /* Another thread opened it meanwhile (or no room to record it):
         * the exporter counts this open once more, and is told. */
        r = again ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
        close(pool_fd);
        pthread_mutex_unlock(&cupool_ipc_lock);
        say_closed(peer, h.tag);
        pthread_mutex_lock(&cupool_ipc_lock);
        peer_drop(peer);
        goto out;
    }
    CUmemoryPool pool;
    r = imported_pool(&h, &reply, pool_fd, (int)device, &pool);
    close(pool_fd);
    CUdeviceptr ptr = 0;
    if (r == CUDA_SUCCESS) {
        r = real_cuMemPoolImportPointer(&ptr, pool, &reply.data);
        if (r != CUDA_SUCCESS) {
            CUmemoryPool gone = imported_pool_drop(h.server, reply.pool_key);
            if (gone) real_cuMemPoolDestroy(gone);
        }
    }
    if (r != CUDA_SUCCESS) {
        pthread_mutex_unlock(&cupool_ipc_lock);
        say_closed(peer, h.tag);
        pthread_mutex_lock(&cupool_ipc_lock);
        peer_drop(peer);
        goto out;
    }
    import_t *im = &imports[nimports++];
    memset(im, 0, sizeof *im);
    im->ptr = ptr;
    memcpy(im->server, h.server, 8);
    memcpy(im->tag, h.tag, 16);
    im->pool_key = reply.pool_key;
    im->refs = 1;
    im->peer = peer;
    im->ctx = ctx;
    *dptr = ptr;
out:
    pthread_mutex_unlock(&cupool_ipc_lock);
    return r;
}

int cupool_ipc_close(CUdeviceptr ptr, CUresult *result)
{
    pthread_mutex_lock(&cupool_ipc_lock);
    import_t *im = import_by_ptr(ptr);
    if (!im) {
        pthread_mutex_unlock(&cupool_ipc_lock);
        return 0;
    }
    *result = CUDA_SUCCESS;
    if (--im->refs > 0) {
        pthread_mutex_unlock(&cupool_ipc_lock);
        return 1;
    }
    import_t gone = *im;
    *im = imports[--nimports];
    pthread_mutex_unlock(&cupool_ipc_lock);
    /* Unmapped once this process's work on it is done; then the exporter
     * learns it is closed and may hand it to another.  The wait for that
     * work is made without cupool_ipc_lock, which the server thread and
     * every export and free of an exported block need meanwhile. */
    int pushed = cupool_enter_context(gone.ctx);
    real_cuCtxSynchronize();
    *result = real_cuMemFreeAsync(ptr, CU_STREAM_LEGACY);
    real_cuStreamSynchronize(CU_STREAM_LEGACY);
    pthread_mutex_lock(&cupool_ipc_lock);
    CUmemoryPool pool = imported_pool_drop(gone.server, gone.pool_key);
    pthread_mutex_unlock(&cupool_ipc_lock);
    /* The imported pool (and the descriptor the driver keeps for it) goes
     * with its last block here. */
    if (pool) real_cuMemPoolDestroy(pool);
    cupool_leave_context(pushed);
    say_closed(gone.peer, gone.tag);
    pthread_mutex_lock(&cupool_ipc_lock);
    peer_drop(gone.peer);
    pthread_mutex_unlock(&cupool_ipc_lock);
    return 1;
}
