/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The exporter's side of legacy IPC on pooled memory (ipc.c tells the
 * whole design): the blocks this process made handles for, its pools'
 * descriptors, its socket and the thread (cupool-ipc) that answers
 * importers on it, and what becomes of an exported block the program frees
 * while another process has it open.  The exports and the server share
 * one table (the server answers from it, counts its opens and hands its
 * parked blocks back), so they share a file.  All its state is guarded by
 * cupool_ipc_lock (ipc.c): the server thread takes it to answer a
 * connection and to hand a parked block back (a driver call in the block's
 * context); a context's teardown takes it to hand back the parked blocks of
 * that context before its state goes.
 *
 * The exporter holds at most a quarter of its descriptor limit in
 * connections, closes one that asks nothing for IPC_IDLE_S, and, out of
 * descriptors, turns connections away at once (the opener gets
 * CUDA_ERROR_OPERATING_SYSTEM) instead of letting them wait or spinning on
 * its listening socket.
 */
#define _GNU_SOURCE
#include "ipc_wire.h"
#include "ipc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* How often, at most, the server thread looks whether it is alone. */
#define IPC_ALONE_MS 250
/* How long an exporter keeps a connection that holds no block open and
 * asks nothing, in seconds. */
#define IPC_IDLE_S 5

/* ---- the exports and the server's connections -------------------------------- */

typedef struct {
    uint8_t tag[16];
    cupool_origin_t origin;
    CUmemPoolPtrExportData data;
    uint64_t pool_key;
    int opens;  /* live connections of importers */
    int parked; /* the program freed it; held until opens is 0 */
} export_t;

/* A block an importer holds open through its connection, and how often. */
typedef struct {
    uint8_t tag[16];
    int count;
} held_t;

typedef struct {
    int fd;
    size_t got;               /* bytes of req received so far */
    ipc_request_t req;
    held_t *held;             /* blocks the importer holds open */
    int nheld, held_cap;
    long long idle_since_ms;  /* when it last held nothing, or asked something */
} conn_t;

static export_t *exports;
static int nexports, exports_cap;
static conn_t *conns;
static int nconns, conns_cap;
static int pool_fds[CUPOOL_MAX_DEVICES * CUPOOL_POOLS_PER_DEVICE]; /* by pool key; -1 = not exported yet */
static int listen_fd = -1, wake_fds[2] = {-1, -1};
static int spare_fd = -1;      /* /dev/null, given up to turn a connection away when out of descriptors */
static int max_conns;          /* a quarter of the descriptor limit */
static int serving;            /* the socket and its thread are up */
static int serve_failed;       /* they could not be made: said once, and every export fails */
static pid_t server_pid;       /* the process that made the socket: only it removes it */
static uint8_t server_id[8];
static char socket_path[IPC_PATH_CAP];

static export_t *export_by_tag(const uint8_t tag[16])
{
    for (int i = 0; i < nexports; i++)
        if (memcmp(exports[i].tag, tag, 16) == 0) return &exports[i];
    return NULL;
}

static export_t *export_by_ptr(CUdeviceptr ptr)
{
    for (int i = 0; i < nexports; i++)
        if (exports[i].origin.ptr == ptr) return &exports[i];
    return NULL;
}

static void export_remove(export_t *e)
{
    *e = exports[--nexports];
}

/* Hands a parked block back to its pool, in its context; cupool_ipc_lock
 * held.  The program freed it, and its own work on it was complete then
 * (cupool_ipc_owner_frees synchronized): the legacy stream will do. */
static void release_parked(export_t *e)
{
    CUPOOL_ASSERT_HELD(&cupool_ipc_lock);
    cupool_context_t *c = e->origin.owner;
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    int pushed = cupool_enter_context(c->ctx);
    CUresult r = real_cuMemFreeAsync(e->origin.ptr, CU_STREAM_LEGACY);
    cupool_leave_context(pushed);
    cupool_relaxed_end(previous);
    if (r != CUDA_SUCCESS)
        cupool_message(CUPOOL_MSG_WARN, "cannot hand back a block another process had open (%s)", cupool_result_name(r));
    export_remove(e);
}

static long long mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Closes connection i: every block it held open is closed with it. */
static void conn_close(int i)
{
    conn_t *k = &conns[i];
    close(k->fd);
    for (int h = 0; h < k->nheld; h++) {
        export_t *e = export_by_tag(k->held[h].tag);
        if (e && (e->opens -= k->held[h].count) <= 0 && e->parked) release_parked(e);
    }
    free(k->held);
    conns[i] = conns[--nconns];
}

static held_t *held_by_tag(conn_t *k, const uint8_t tag[16])
{
    for (int h = 0; h < k->nheld; h++)
        if (memcmp(k->held[h].tag, tag, 16) == 0) return &k->held[h];
    return NULL;
}

/* Answers an open; 0 when the connection stays usable.  cupool_ipc_lock
 * held. */
static int answer_open(conn_t *k)
{
    CUPOOL_ASSERT_HELD(&cupool_ipc_lock);
    ipc_reply_t reply;
    memset(&reply, 0, sizeof reply);
    reply.seq = k->req.seq;
    export_t *e = export_by_tag(k->req.tag);
    held_t *h = held_by_tag(k, k->req.tag);
    if (e && !e->parked && !h && cupool_ipc_grow((void **)&k->held, k->nheld, &k->held_cap, sizeof *k->held) == 0) {
        h = &k->held[k->nheld++];
        memcpy(h->tag, k->req.tag, 16);
        h->count = 0;
    }
    if (!e || e->parked || !h) {
        reply.status = !e || e->parked ? IPC_BAD_HANDLE : CUDA_ERROR_OUT_OF_MEMORY;
        return cupool_ipc_send_with_fd(k->fd, &reply, sizeof reply, -1);
    }
    reply.status = CUDA_SUCCESS;
    reply.pool_key = e->pool_key;
    reply.data = e->data;
    if (cupool_ipc_send_with_fd(k->fd, &reply, sizeof reply, pool_fds[e->pool_key]) != 0) {
        if (h->count == 0) *h = k->held[--k->nheld];
        return -1;
    }
    h->count++;
    e->opens++;
    return 0;
}

/* A close: the block is one open fewer (a parked one goes back with its
 * last).  cupool_ipc_lock held. */
static void answer_close(conn_t *k)
{
    CUPOOL_ASSERT_HELD(&cupool_ipc_lock);
    held_t *h = held_by_tag(k, k->req.tag);
    if (!h) return;
    export_t *e = export_by_tag(k->req.tag);
    if (--h->count == 0) *h = k->held[--k->nheld];
    if (e && --e->opens == 0 && e->parked) release_parked(e);
}

/* Reads and answers what connection i asked; 0 while it stays open.
 * cupool_ipc_lock held; the socket does not block. */
static int serve_conn(int i)
{
    CUPOOL_ASSERT_HELD(&cupool_ipc_lock);
    conn_t *k = &conns[i];
    for (;;) {
        ssize_t n = recv(k->fd, (char *)&k->req + k->got, sizeof k->req - k->got, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
        if (n <= 0) return -1; /* its end, or an error */
        k->got += (size_t)n;
        if (k->got < sizeof k->req) continue;
        k->got = 0;
        if (memcmp(k->req.magic, IPC_MAGIC, 8) != 0) return -1;
        if (k->req.op == IPC_OPEN) {
            if (answer_open(k) != 0) return -1;
        } else if (k->req.op == IPC_CLOSE) {
            answer_close(k);
        } else {
            return -1;
        }
        k->idle_since_ms = mono_ms();
    }
}

/* A new connection, or none: beyond max_conns, or with no descriptor left,
 * it is closed at once, so the opener fails at once instead of waiting.
 * cupool_ipc_lock held. */
static void accept_one(void)
{
    CUPOOL_ASSERT_HELD(&cupool_ipc_lock);
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE) && spare_fd >= 0) {
        /* The listening socket stays readable while a connection waits:
         * without taking it, the thread would wake at once, for ever. */
        close(spare_fd);
        fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) close(fd);
        spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        cupool_message_once(CUPOOL_MSG_WARN, "out of file descriptors: turning away processes opening IPC handles");
        return;
    }
    if (fd < 0) return;
    if (nconns >= max_conns || !cupool_ipc_same_user(fd) ||
        cupool_ipc_grow((void **)&conns, nconns, &conns_cap, sizeof *conns) != 0) {
        if (nconns >= max_conns)
            cupool_message_once(CUPOOL_MSG_WARN, "%d processes have IPC handles of this one open: turning more away",
                                nconns);
        close(fd);
        return;
    }
    memset(&conns[nconns], 0, sizeof conns[nconns]);
    conns[nconns].fd = fd;
    conns[nconns].idle_since_ms = mono_ms();
    nconns++;
}

static void *serve(void *unused)
{
    (void)unused;
    struct pollfd *fds = NULL;
    int cap = 0;
    for (;;) {
        pthread_mutex_lock(&cupool_ipc_lock);
        if (!serving) break;
        if (nconns + 2 > cap) {
            struct pollfd *p = realloc(fds, (size_t)(nconns + 16) * sizeof *p);
            if (p) {
                fds = p;
                cap = nconns + 16;
            }
        }
        int n = nconns + 2 <= cap ? nconns + 2 : (cap >= 2 ? cap : 0);
        if (n == 0) break;
        /* A connection that holds nothing open and asks nothing for
         * IPC_IDLE_S is closed: it is no importer of cupool's. */
        long long now = mono_ms();
        for (int i = nconns - 1; i >= 0; i--)
            if (conns[i].nheld == 0 && now - conns[i].idle_since_ms >= IPC_IDLE_S * 1000ll) conn_close(i);
        n = nconns + 2 <= n ? nconns + 2 : n;
        fds[0] = (struct pollfd){.fd = wake_fds[0], .events = POLLIN};
        fds[1] = (struct pollfd){.fd = listen_fd, .events = POLLIN};
        for (int i = 2; i < n; i++) fds[i] = (struct pollfd){.fd = conns[i - 2].fd, .events = POLLIN};
        pthread_mutex_unlock(&cupool_ipc_lock);

        /* Woken at least every IPC_ALONE_MS to see whether the program's
         * threads have all ended (this thread must then end, or the
         * process never would) and to close idle connections. */
        int polled = poll(fds, (nfds_t)n, IPC_ALONE_MS);
        int failed = polled < 0 && errno != EINTR;
        if (polled == 0 && cupool_threads_alone()) {
            free(fds);
            return NULL;
        }

        pthread_mutex_lock(&cupool_ipc_lock);
        if (failed) break;
        if (polled < 0) {
            pthread_mutex_unlock(&cupool_ipc_lock);
            continue;
        }
        if (!serving) break;
        if (fds[0].revents) {
            char drain[16];
            while (read(wake_fds[0], drain, sizeof drain) > 0) {
            }
        }
        /* Each connection is found by its descriptor: conn_close() moves
         * the last one into the slot it frees. */
        for (int i = n - 1; i >= 2; i--) {
            if (!fds[i].revents) continue;
            int at = -1;
            for (int j = 0; j < nconns; j++)
                if (conns[j].fd == fds[i].fd) at = j;
            if (at >= 0 && serve_conn(at) != 0) conn_close(at);
        }
        if (fds[1].revents & POLLIN) accept_one();
        pthread_mutex_unlock(&cupool_ipc_lock);
    }
    pthread_mutex_unlock(&cupool_ipc_lock);
    free(fds);
    return NULL;
}

/* ---- set-up, fork, and the importer's question ------------------------------- */

void cupool_ipc_exporter_init(void)
{
    for (size_t i = 0; i < CUPOOL_ARRAY_SIZE(pool_fds); i++) pool_fds[i] = -1;
}

/* The parent's socket stays the parent's: the child forgets it without
 * removing it. */
void cupool_ipc_exporter_fork_child(void)
{
    for (int i = 0; i < nconns; i++) {
        close(conns[i].fd);
        free(conns[i].held);
    }
    if (spare_fd >= 0) close(spare_fd);
    spare_fd = -1;
    for (size_t i = 0; i < CUPOOL_ARRAY_SIZE(pool_fds); i++) {
        if (pool_fds[i] >= 0) close(pool_fds[i]);
        pool_fds[i] = -1;
    }
    if (listen_fd >= 0) close(listen_fd);
    for (int i = 0; i < 2; i++)
        if (wake_fds[i] >= 0) close(wake_fds[i]);
    listen_fd = wake_fds[0] = wake_fds[1] = -1;
    nconns = nexports = 0;
    serving = serve_failed = 0;
    server_pid = 0;
    socket_path[0] = 0;
}

int cupool_ipc_own_server(const uint8_t server[8])
{
    CUPOOL_ASSERT_HELD(&cupool_ipc_lock);
    return serving && memcmp(server, server_id, 8) == 0;
}

/* ---- the socket and its thread ----------------------------------------------- */

/* Removes sockets of this user in the directory that nobody listens on any
 * more (their process ended without removing them); a socket that answers
 * stays, whoever's namespace it lives in.  The connect() never waits: a
 * stopped exporter whose queue is full would hold it for ever, and with it
 * cupool_ipc_lock (every export, free of an exported block, context
 * teardown and exit of this process); such a socket (EAGAIN) is not stale
 * and stays. */
static void remove_stale_sockets(void)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s%u.", IPC_SOCKET_PREFIX, (unsigned)geteuid());
    const char *dir = cupool_ipc_dir();
    char path[sizeof socket_path];
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return;
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return;
    }
    struct dirent *ent;
    while ((ent = readdir(d))) {
        if (strncmp(ent->d_name, prefix, strlen(prefix)) != 0) continue;
        int n = snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
        if (n <= 0 || (size_t)n >= sizeof path) continue;
        struct stat st;
        if (lstat(path, &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_uid != geteuid()) continue;
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (s < 0) break;
        struct sockaddr_un a = cupool_ipc_socket_address(path);
        if (connect(s, (struct sockaddr *)&a, sizeof a) != 0 && errno == ECONNREFUSED) unlink(path);
        close(s);
    }
    closedir(d);
}

/* Binds listen_fd at socket_path, owner-only (0600) and listening from its
 * first moment there: nobody else may even connect, and another process's
 * sweep never finds it refusing connections (it would remove it as
 * stale).  The socket is made in a private directory (0700) of the same
 * file system, made 0600 and listening there and renamed into place.  (A
 * umask of 077 around bind would do the first too, but the umask belongs
 * to the whole process: another thread's files made meanwhile would get
 * mode 0600.)  0 on success, else errno says why. */
static int bind_private(void)
{
    char dir[sizeof socket_path], tmp[sizeof socket_path];
    int n = snprintf(dir, sizeof dir, "%s/.cupool-ipc.%u.XXXXXX", cupool_ipc_dir(), (unsigned)geteuid());
    if (n < 0 || (size_t)n + 3 > sizeof dir) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (!mkdtemp(dir)) return -1;
    int r = chmod(dir, 0700);
    snprintf(tmp, sizeof tmp, "%s/s", dir);
    struct sockaddr_un a = cupool_ipc_socket_address(tmp);
    if (r == 0) r = bind(listen_fd, (struct sockaddr *)&a, sizeof a);
    if (r == 0 && (chmod(tmp, 0600) != 0 || listen(listen_fd, 64) != 0 || rename(tmp, socket_path) != 0)) {
        int err = errno;
        unlink(tmp);
        errno = err;
        r = -1;
    }
    int err = errno;
    rmdir(dir);
    errno = err;
    return r;
}

/* Makes the socket and starts its thread; cupool_ipc_lock held.  0 on success.
 * A failure is said once and stands: every later export fails at once. */
static int serve_try(void);
static int serve_start(void)
{
    CUPOOL_ASSERT_HELD(&cupool_ipc_lock);
    if (serving) return 0;
    if (serve_failed) return -1;
    if (serve_try() == 0) return 0;
    serve_failed = 1;
    return -1;
}

static int serve_try(void)
{
    if (getrandom(server_id, sizeof server_id, 0) != (ssize_t)sizeof server_id) return -1;
    if (cupool_ipc_socket_name(socket_path, sizeof socket_path, (uint32_t)geteuid(), (uint32_t)getpid(),
                               server_id) != 0) {
        cupool_message(CUPOOL_MSG_WARN, "CUPOOL_IPC_DIR is too long for a socket path");
        return -1;
    }
    remove_stale_sockets();
    listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (listen_fd < 0) return -1;
    int bound = bind_private();
    if (bound != 0 ||
        pipe2(wake_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        cupool_message(CUPOOL_MSG_WARN, "cannot make the IPC socket %s (%s); cuIpcGetMemHandle fails on pooled memory",
                       socket_path, strerror(errno));
        if (bound == 0) unlink(socket_path);
        close(listen_fd);
        listen_fd = -1;
        socket_path[0] = 0;
        return -1;
    }
    struct rlimit lim;
    max_conns = getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY ? (int)(lim.rlim_cur / 4) : 1024;
    if (max_conns < 4) max_conns = 4;
    spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    server_pid = getpid();
    serving = 1;
    if (cupool_thread_start(serve, "cupool-ipc") != 0) {
        serving = 0;
        unlink(socket_path);
        close(listen_fd);
        close(wake_fds[0]);
        close(wake_fds[1]);
        listen_fd = wake_fds[0] = wake_fds[1] = -1;
        cupool_message(CUPOOL_MSG_WARN, "cannot start the IPC thread");
        return -1;
    }
    return 0;
}

static void wake_server(void)
{
    if (wake_fds[1] >= 0) {
        ssize_t w = write(wake_fds[1], "x", 1);
        (void)w;
    }
}

/* ---- exporting --------------------------------------------------------------- */

CUresult cupool_ipc_export(CUipcMemHandle *handle, const cupool_origin_t *o)
{
    cupool_device_t *dev = o->owner->device;
    int index = -1;
    for (int i = 0; i < dev->npools; i++)
        if (dev->pools[i] == o->pool) index = i;
    if (index < 0 || !dev->exportable) return CUDA_ERROR_INVALID_VALUE;
    cupool_ipc_init();
    pthread_mutex_lock(&cupool_ipc_lock);
    CUresult r = CUDA_ERROR_OPERATING_SYSTEM;
    if (serve_start() != 0) goto out;
    export_t *e = export_by_ptr(o->ptr);
    if (!e) {
        uint64_t pool_key = (uint64_t)dev->ordinal * CUPOOL_POOLS_PER_DEVICE + (uint64_t)index;
        int *fd = &pool_fds[pool_key];
        if (*fd < 0) {
            r = real_cuMemPoolExportToShareableHandle(fd, o->pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
            if (r != CUDA_SUCCESS) {
                *fd = -1;
                goto out;
            }
            fcntl(*fd, F_SETFD, FD_CLOEXEC); /* kept from the programs this one execs */
        }
        CUmemPoolPtrExportData data;
        r = real_cuMemPoolExportPointer(&data, o->ptr);
        if (r != CUDA_SUCCESS) goto out;
        r = CUDA_ERROR_OUT_OF_MEMORY;
        if (cupool_ipc_grow((void **)&exports, nexports, &exports_cap, sizeof *exports) != 0) goto out;
        e = &exports[nexports];
        memset(e, 0, sizeof *e);
        r = CUDA_ERROR_OPERATING_SYSTEM;
        if (getrandom(e->tag, sizeof e->tag, 0) != (ssize_t)sizeof e->tag) goto out;
        e->origin = *o;
        e->data = data;
        e->pool_key = pool_key;
        nexports++;
        if (cupool_origin_mark_exported(o->ptr) != 0) {
            /* Freed meanwhile by another thread: no handle for it. */
            nexports--;
            r = CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
    }
    ipc_handle_t h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, IPC_MAGIC, 8);
    h.uid = (uint32_t)geteuid();
    h.pid = (uint32_t)server_pid;
    memcpy(h.server, server_id, sizeof h.server);
    memcpy(h.tag, e->tag, sizeof h.tag);
    h.size = e->origin.size;
    memcpy(handle, &h, sizeof h);
    r = CUDA_SUCCESS;
out:
    pthread_mutex_unlock(&cupool_ipc_lock);
    return r;
}

int cupool_ipc_owner_frees(const cupool_origin_t *o)
{
    /* The program's own work on the block ends before anything is decided:
     * natively cuMemFree waits for it too, and a parked block goes back to
     * its pool from the server thread with no stream to order it after.
     * (Not while a capture is in progress, which a context-wide
     * synchronization would break.) */
    if (!cupool_capturing()) real_cuCtxSynchronize();
    pthread_mutex_lock(&cupool_ipc_lock);
    export_t *e = export_by_ptr(o->ptr);
    int parked = 0;
    if (e && e->opens > 0) {
        e->parked = parked = 1;
        e->origin = *o;
    } else if (e) {
        export_remove(e);
    }
    pthread_mutex_unlock(&cupool_ipc_lock);
    return parked;
}

void cupool_ipc_forget_context(cupool_context_t *c)
{
    pthread_mutex_lock(&cupool_ipc_lock);
    for (int i = nexports - 1; i >= 0; i--) {
        export_t *e = &exports[i];
        if (e->origin.owner != c) continue;
        /* The context is current (its teardown) and synchronized. */
        if (e->parked) real_cuMemFreeAsync(e->origin.ptr, CU_STREAM_LEGACY);
        export_remove(e);
    }
    pthread_mutex_unlock(&cupool_ipc_lock);
}

void cupool_ipc_stop(void)
{
    pthread_mutex_lock(&cupool_ipc_lock);
    if (serving && server_pid == getpid()) {
        unlink(socket_path);
        serving = 0;
        wake_server();
    }
    pthread_mutex_unlock(&cupool_ipc_lock);
}
