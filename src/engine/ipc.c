/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Legacy CUDA IPC on pooled memory (CUPOOL_IPC, ipc.h).  The driver
 * refuses cuIpcGetMemHandle on pool memory, so cupool answers it itself for
 * the blocks of its exportable pools (created with a POSIX file-descriptor
 * handle type, devices.c):
 *
 *   - the exporter's handle names this process's IPC socket (a Unix socket
 *     in CUPOOL_IPC_DIR, 0600, named by the user, the pid and 8 random
 *     bytes, made in a private directory and renamed into place) and the block (16 random bytes, its tag), so a handle that is
 *     stale or forged names nothing and fails instead of mapping other
 *     memory;
 *   - the importer, under cupool too, connects, checks that the socket
 *     belongs to its own user (SO_PEERCRED) and asks for the tag; the
 *     exporter checks the importer's user the same way and answers with the
 *     pool's file descriptor (SCM_RIGHTS) and the block's export data
 *     (cuMemPoolExportPointer); the importer imports the pool (once per
 *     exporter pool), grants its device access and imports the pointer.
 *
 * A path socket, not an abstract one: abstract sockets belong to a network
 * namespace, and containers that share the IPC namespace (and so
 * /dev/shm) often do not share the network one.
 *
 * An importing process keeps one connection to each exporter it has
 * blocks of open, whatever their number, and says on it which blocks it
 * opens and closes; the exporter counts a block open for as long as the
 * connection lives: the last cuIpcCloseMemHandle of that exporter's blocks
 * closes it, and so does the end of the importing process, however it ends.
 * The importer's imported pool of an exporter's pool goes with the last
 * block it has open from it.  The exporter holds at most a quarter of its
 * descriptor limit in connections, closes one that asks nothing for
 * IPC_IDLE_S, and, out of descriptors, turns connections away at once
 * (the opener gets CUDA_ERROR_OPERATING_SYSTEM) instead of letting them
 * wait or spinning on its listening socket.  A block the
 * program frees while another process has it open stays out of its pool
 * (parked) until the last of them closes it; then the server thread hands
 * it back.  Natively that free is undefined; here neither process crashes
 * and the memory is never handed to another allocation while it is open.
 *
 * One lock (ipc_lock) guards everything here.  The server thread takes it
 * to answer a connection and to hand a parked block back (a driver call in
 * the block's context); a context's teardown takes it to hand back the
 * parked blocks of that context before its state goes.
 */
#define _GNU_SOURCE
#include "state.h"
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

/* H2: requests say open or close and carry a sequence number (one
 * connection per exporter); a handle of an H1 cupool is none of ours. */
#define IPC_MAGIC "cupoolH2"
#define IPC_SOCKET_PREFIX "cupool-ipc."
/* What an open answers for a handle that names nothing it can reach: a
 * forged one, one whose block is gone, one of a process that has ended. */
#define IPC_BAD_HANDLE CUDA_ERROR_INVALID_VALUE
/* How long an open waits for the exporter's answer, in seconds. */
#define IPC_ANSWER_S 10
/* How often, at most, the server thread looks whether it is alone. */
#define IPC_ALONE_MS 250
/* How long an exporter keeps a connection that holds no block open and
 * asks nothing, in seconds. */
#define IPC_IDLE_S 5

/* The 64 bytes of a CUipcMemHandle cupool makes. */
typedef struct {
    char magic[8];
    uint32_t uid, pid;    /* the exporter's user, and its pid as it sees itself (names the socket) */
    uint8_t server[8];    /* random, per exporting process (names the socket) */
    uint8_t tag[16];      /* random, per exported block */
    uint64_t size;        /* the block's, for the importer's log */
    uint8_t unused[16];
} ipc_handle_t;
_Static_assert(sizeof(ipc_handle_t) == sizeof(CUipcMemHandle), "a cupool handle fills a CUipcMemHandle");

/* What an importer says on its connection: open a block (answered with an
 * ipc_reply_t and the pool's descriptor) or close one (not answered). */
enum { IPC_OPEN = 1, IPC_CLOSE = 2 };
typedef struct {
    char magic[8];
    uint32_t op;
    uint32_t unused;
    uint64_t seq; /* echoed by the reply: an answer that came too late is told from the next */
    uint8_t tag[16];
} ipc_request_t;

typedef struct {
    int32_t status; /* CUresult */
    uint32_t unused;
    uint64_t seq;
    uint64_t pool_key; /* names the pool among the exporter's: device * CUPOOL_POOLS_PER_DEVICE + index */
    CUmemPoolPtrExportData data;
} ipc_reply_t;

/* ---- the exporter's side ---------------------------------------------------- */

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

static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t ipc_once = PTHREAD_ONCE_INIT;
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
static char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)];

/* ---- the importer's side ---------------------------------------------------- */

/* The connection to one exporter, shared by every block of it open here
 * and by the opens in flight (users); it closes when they are all gone.
 * io is held across a request and its answer, never with ipc_lock. */
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

/* Grows an array of `size`-byte items to hold one more; 0 on success. */
static int grow(void **items, int count, int *cap, size_t size)
{
    if (count < *cap) return 0;
    int want = *cap ? *cap * 2 : 8;
    void *p = realloc(*items, (size_t)want * size);
    if (!p) return -1;
    *items = p;
    *cap = want;
    return 0;
}

static int same_user(int fd)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == geteuid();
}

/* Room for one passed file descriptor. */
typedef union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
} fd_control_t;

/* A message of one buffer, with room for one file descriptor in ctl. */
static struct msghdr message(struct iovec *iov, fd_control_t *ctl)
{
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = iov;
    m.msg_iovlen = 1;
    memset(ctl, 0, sizeof *ctl);
    m.msg_control = ctl->buf;
    m.msg_controllen = sizeof ctl->buf;
    return m;
}

static int send_with_fd(int fd, const void *buf, size_t len, int passed)
{
    struct iovec iov = {(void *)buf, len};
    fd_control_t ctl;
    struct msghdr m = message(&iov, &ctl);
    if (passed < 0) {
        m.msg_control = NULL;
        m.msg_controllen = 0;
    } else {
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &passed, sizeof passed);
    }
    ssize_t n;
    do n = sendmsg(fd, &m, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)len ? 0 : -1;
}

/* Receives exactly len bytes and the file descriptor passed with them
 * (-1 if none); 0 on success. */
static int recv_with_fd(int fd, void *buf, size_t len, int *passed)
{
    struct iovec iov = {buf, len};
    fd_control_t ctl;
    struct msghdr m = message(&iov, &ctl);
    ssize_t n;
    do n = recvmsg(fd, &m, MSG_WAITALL | MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    *passed = -1;
    /* Nothing received (the wait ran out): no control message to read. */
    for (struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&m) : NULL; c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int)))
            memcpy(passed, CMSG_DATA(c), sizeof *passed);
    if (n == (ssize_t)len) return 0;
    if (*passed >= 0) close(*passed);
    *passed = -1;
    /* errno says why: EAGAIN when the wait ran out, else the connection
     * ended (or broke off in the middle of a message). */
    if (n >= 0) errno = ECONNRESET;
    return -1;
}

static const char *ipc_dir(void)
{
    const char *dir = cupool_option_string(CUPOOL_OPT_IPC_DIR);
    return dir && *dir ? dir : "/dev/shm";
}

/* The address of the socket at path (shorter than sun_path: socket_name). */
static struct sockaddr_un socket_address(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, path, strlen(path) + 1);
    return a;
}

static int socket_name(char *out, size_t cap, uint32_t uid, uint32_t pid, const uint8_t server[8])
{
    char hex[17];
    for (int i = 0; i < 8; i++) snprintf(hex + 2 * i, 3, "%02x", server[i]);
    int n = snprintf(out, cap, "%s/%s%u.%u.%s", ipc_dir(), IPC_SOCKET_PREFIX, uid, pid, hex);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

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

/* Hands a parked block back to its pool, in its context; ipc_lock held.
 * The program freed it, and its own work on it was complete then
 * (cupool_ipc_owner_frees synchronized): the legacy stream will do. */
static void release_parked(export_t *e)
{
    CUPOOL_ASSERT_HELD(&ipc_lock);
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

/* Answers an open; 0 when the connection stays usable.  ipc_lock held. */
static int answer_open(conn_t *k)
{
    CUPOOL_ASSERT_HELD(&ipc_lock);
    ipc_reply_t reply;
    memset(&reply, 0, sizeof reply);
    reply.seq = k->req.seq;
    export_t *e = export_by_tag(k->req.tag);
    held_t *h = held_by_tag(k, k->req.tag);
    if (e && !e->parked && !h && grow((void **)&k->held, k->nheld, &k->held_cap, sizeof *k->held) == 0) {
        h = &k->held[k->nheld++];
        memcpy(h->tag, k->req.tag, 16);
        h->count = 0;
    }
    if (!e || e->parked || !h) {
        reply.status = !e || e->parked ? IPC_BAD_HANDLE : CUDA_ERROR_OUT_OF_MEMORY;
        return send_with_fd(k->fd, &reply, sizeof reply, -1);
    }
    reply.status = CUDA_SUCCESS;
    reply.pool_key = e->pool_key;
    reply.data = e->data;
    if (send_with_fd(k->fd, &reply, sizeof reply, pool_fds[e->pool_key]) != 0) {
        if (h->count == 0) *h = k->held[--k->nheld];
        return -1;
    }
    h->count++;
    e->opens++;
    return 0;
}

/* A close: the block is one open fewer (a parked one goes back with its
 * last).  ipc_lock held. */
static void answer_close(conn_t *k)
{
    CUPOOL_ASSERT_HELD(&ipc_lock);
    held_t *h = held_by_tag(k, k->req.tag);
    if (!h) return;
    export_t *e = export_by_tag(k->req.tag);
    if (--h->count == 0) *h = k->held[--k->nheld];
    if (e && --e->opens == 0 && e->parked) release_parked(e);
}

/* Reads and answers what connection i asked; 0 while it stays open.
 * ipc_lock held; the socket does not block. */
static int serve_conn(int i)
{
    CUPOOL_ASSERT_HELD(&ipc_lock);
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
 * ipc_lock held. */
static void accept_one(void)
{
    CUPOOL_ASSERT_HELD(&ipc_lock);
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
    if (nconns >= max_conns || !same_user(fd) || grow((void **)&conns, nconns, &conns_cap, sizeof *conns) != 0) {
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
        pthread_mutex_lock(&ipc_lock);
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
        pthread_mutex_unlock(&ipc_lock);

        /* Woken at least every IPC_ALONE_MS to see whether the program's
         * threads have all ended (this thread must then end, or the
         * process never would) and to close idle connections. */
        int polled = poll(fds, (nfds_t)n, IPC_ALONE_MS);
        int failed = polled < 0 && errno != EINTR;
        if (polled == 0 && cupool_threads_alone()) {
            free(fds);
            return NULL;
        }

        pthread_mutex_lock(&ipc_lock);
        if (failed) break;
        if (polled < 0) {
            pthread_mutex_unlock(&ipc_lock);
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
        pthread_mutex_unlock(&ipc_lock);
    }
    pthread_mutex_unlock(&ipc_lock);
    free(fds);
    return NULL;
}

/* A child made by fork() has none of its parent's exports or imports, nor
 * its server thread: it closes its copies and never removes the parent's
 * socket.  (A child that execs starts afresh: every descriptor here is
 * close-on-exec.) */
static void fork_prepare(void)
{
    pthread_mutex_lock(&ipc_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&ipc_lock);
}

static void fork_child(void)
{
    for (int i = 0; i < nconns; i++) {
        close(conns[i].fd);
        free(conns[i].held);
    }
    for (int i = 0; i < npeers; i++) {
        if (peers[i]->fd >= 0) close(peers[i]->fd);
        free(peers[i]);
    }
    npeers = 0;
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
    nconns = nexports = nimports = nipools = 0;
    serving = serve_failed = 0;
    server_pid = 0;
    socket_path[0] = 0;
    pthread_mutex_init(&ipc_lock, NULL);
}

static void ipc_init(void)
{
    for (size_t i = 0; i < CUPOOL_ARRAY_SIZE(pool_fds); i++) pool_fds[i] = -1;
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* Removes sockets of this user in the directory that nobody listens on any
 * more (their process ended without removing them); a socket that answers
 * stays, whoever's namespace it lives in.  The connect() never waits: a
 * stopped exporter whose queue is full would hold it for ever, and with it
 * ipc_lock (every export, free of an exported block, context teardown and
 * exit of this process); such a socket (EAGAIN) is not stale and stays. */
static void remove_stale_sockets(void)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s%u.", IPC_SOCKET_PREFIX, (unsigned)geteuid());
    const char *dir = ipc_dir();
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
        struct sockaddr_un a = socket_address(path);
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
    int n = snprintf(dir, sizeof dir, "%s/.cupool-ipc.%u.XXXXXX", ipc_dir(), (unsigned)geteuid());
    if (n < 0 || (size_t)n + 3 > sizeof dir) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (!mkdtemp(dir)) return -1;
    int r = chmod(dir, 0700);
    snprintf(tmp, sizeof tmp, "%s/s", dir);
    struct sockaddr_un a = socket_address(tmp);
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

/* Makes the socket and starts its thread; ipc_lock held.  0 on success.
 * A failure is said once and stands: every later export fails at once. */
static int serve_try(void);
static int serve_start(void)
{
    CUPOOL_ASSERT_HELD(&ipc_lock);
    if (serving) return 0;
    if (serve_failed) return -1;
    if (serve_try() == 0) return 0;
    serve_failed = 1;
    return -1;
}

static int serve_try(void)
{
    if (getrandom(server_id, sizeof server_id, 0) != (ssize_t)sizeof server_id) return -1;
    if (socket_name(socket_path, sizeof socket_path, (uint32_t)geteuid(), (uint32_t)getpid(), server_id) != 0) {
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
    pthread_once(&ipc_once, ipc_init);
    pthread_mutex_lock(&ipc_lock);
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
        if (grow((void **)&exports, nexports, &exports_cap, sizeof *exports) != 0) goto out;
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
    pthread_mutex_unlock(&ipc_lock);
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
    pthread_mutex_lock(&ipc_lock);
    export_t *e = export_by_ptr(o->ptr);
    int parked = 0;
    if (e && e->opens > 0) {
        e->parked = parked = 1;
        e->origin = *o;
    } else if (e) {
        export_remove(e);
    }
    pthread_mutex_unlock(&ipc_lock);
    return parked;
}

void cupool_ipc_forget_context(cupool_context_t *c)
{
    pthread_mutex_lock(&ipc_lock);
    for (int i = nexports - 1; i >= 0; i--) {
        export_t *e = &exports[i];
        if (e->origin.owner != c) continue;
        /* The context is current (its teardown) and synchronized. */
        if (e->parked) real_cuMemFreeAsync(e->origin.ptr, CU_STREAM_LEGACY);
        export_remove(e);
    }
    pthread_mutex_unlock(&ipc_lock);
}

void cupool_ipc_stop(void)
{
    pthread_mutex_lock(&ipc_lock);
    if (serving && server_pid == getpid()) {
        unlink(socket_path);
        serving = 0;
        wake_server();
    }
    pthread_mutex_unlock(&ipc_lock);
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
    char path[sizeof socket_path];
    if (socket_name(path, sizeof path, peer->uid, peer->pid, peer->server) != 0) return IPC_BAD_HANDLE;
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return CUDA_ERROR_OPERATING_SYSTEM;
    /* An exporter that does not answer (stopped, or stuck) fails the open
     * instead of hanging the program: the limits bound the connect (a full
     * queue), the request and the wait for each answer. */
    struct timeval limit = {.tv_sec = IPC_ANSWER_S};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    struct sockaddr_un a = socket_address(path);
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0 || !same_user(s)) {
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
    if (send_with_fd(peer->fd, &req, sizeof req, -1) != 0) goto lost;
    for (;;) {
        int n = recv_with_fd(peer->fd, reply, sizeof *reply, pool_fd);
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
 * ipc_lock held; NULL when out of memory. */
static peer_t *peer_use(const ipc_handle_t *h)
{
    CUPOOL_ASSERT_HELD(&ipc_lock);
    for (int i = 0; i < npeers; i++)
        if (memcmp(peers[i]->server, h->server, 8) == 0 && peers[i]->pid == h->pid) {
            peers[i]->users++;
            return peers[i];
        }
    if (grow((void **)&peers, npeers, &peers_cap, sizeof *peers) != 0) return NULL;
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

/* One user fewer; the last closes the connection.  ipc_lock held. */
static void peer_drop(peer_t *p)
{
    CUPOOL_ASSERT_HELD(&ipc_lock);
    if (--p->users > 0) return;
    for (int i = 0; i < npeers; i++)
        if (peers[i] == p) peers[i] = peers[--npeers];
    if (p->fd >= 0) close(p->fd);
    pthread_mutex_destroy(&p->io);
    free(p);
}

/* The imported pool of the exporter's pool, imported on first use and
 * granted access for device `ordinal`, one block more counted on it;
 * ipc_lock held. */
static CUresult imported_pool(const ipc_handle_t *h, const ipc_reply_t *reply, int pool_fd, int ordinal,
                              CUmemoryPool *out)
{
    CUPOOL_ASSERT_HELD(&ipc_lock);
    imported_pool_t *p = NULL;
    for (int i = 0; i < nipools && !p; i++)
        if (memcmp(ipools[i].server, h->server, 8) == 0 && ipools[i].pool_key == reply->pool_key) p = &ipools[i];
    if (!p) {
        if (grow((void **)&ipools, nipools, &ipools_cap, sizeof *ipools) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
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
 * ipc_lock; NULL when it stays).  ipc_lock held. */
static CUmemoryPool imported_pool_drop(const uint8_t server[8], uint64_t pool_key)
{
    CUPOOL_ASSERT_HELD(&ipc_lock);
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
 * pointer, as the driver documents; ipc_lock held. */
static int reopen(const ipc_handle_t *h, CUcontext ctx, CUdeviceptr *dptr)
{
    CUPOOL_ASSERT_HELD(&ipc_lock);
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
        if (send_with_fd(peer->fd, &req, sizeof req, -1) != 0) {
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
    pthread_once(&ipc_once, ipc_init);
    pthread_mutex_lock(&ipc_lock);
    CUresult r;
    /* The driver refuses a process's own handles. */
    if (serving && memcmp(h.server, server_id, 8) == 0) {
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
    /* The exporter is asked without ipc_lock: two processes opening each
     * other's handles at once must not wait for each other's server. */
    pthread_mutex_unlock(&ipc_lock);
    int pool_fd = -1;
    ipc_reply_t reply;
    pthread_mutex_lock(&peer->io);
    r = ask_exporter(peer, &h, &reply, &pool_fd);
    pthread_mutex_unlock(&peer->io);
    pthread_mutex_lock(&ipc_lock);
    if (r != CUDA_SUCCESS) {
        peer_drop(peer);
        goto out;
    }
    int again = reopen(&h, ctx, dptr);
    if (again || grow((void **)&imports, nimports, &imports_cap, sizeof *imports) != 0) {
        /* Another thread opened it meanwhile (or no room to record it):
         * the exporter counts this open once more, and is told. */
        r = again ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
        close(pool_fd);
        pthread_mutex_unlock(&ipc_lock);
        say_closed(peer, h.tag);
        pthread_mutex_lock(&ipc_lock);
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
        pthread_mutex_unlock(&ipc_lock);
        say_closed(peer, h.tag);
        pthread_mutex_lock(&ipc_lock);
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
    pthread_mutex_unlock(&ipc_lock);
    return r;
}

int cupool_ipc_close(CUdeviceptr ptr, CUresult *result)
{
    pthread_mutex_lock(&ipc_lock);
    import_t *im = import_by_ptr(ptr);
    if (!im) {
        pthread_mutex_unlock(&ipc_lock);
        return 0;
    }
    *result = CUDA_SUCCESS;
    if (--im->refs > 0) {
        pthread_mutex_unlock(&ipc_lock);
        return 1;
    }
    import_t gone = *im;
    *im = imports[--nimports];
    pthread_mutex_unlock(&ipc_lock);
    /* Unmapped once this process's work on it is done; then the exporter
     * learns it is closed and may hand it to another.  The wait for that
     * work is made without ipc_lock, which the server thread and every
     * export and free of an exported block need meanwhile. */
    int pushed = cupool_enter_context(gone.ctx);
    real_cuCtxSynchronize();
    *result = real_cuMemFreeAsync(ptr, CU_STREAM_LEGACY);
    real_cuStreamSynchronize(CU_STREAM_LEGACY);
    pthread_mutex_lock(&ipc_lock);
    CUmemoryPool pool = imported_pool_drop(gone.server, gone.pool_key);
    pthread_mutex_unlock(&ipc_lock);
    /* The imported pool (and the descriptor the driver keeps for it) goes
     * with its last block here. */
    if (pool) real_cuMemPoolDestroy(pool);
    cupool_leave_context(pushed);
    say_closed(gone.peer, gone.tag);
    pthread_mutex_lock(&ipc_lock);
    peer_drop(gone.peer);
    pthread_mutex_unlock(&ipc_lock);
    return 1;
}
